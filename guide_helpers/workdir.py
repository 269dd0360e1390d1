"""A page's scratch directory, for the scripts and files a guide writes as it runs.

`make_workdir(prefix)` creates a temporary directory that is removed when the kernel exits (a
page removes it earlier, in its last cell, and can check that it is gone) and, in IPython, the
cell magic `%%to_workdir NAME`, which writes the rest of its cell to that directory's NAME.
`%%to_workdir NAME --append` adds the cell to the end of NAME: a long script is written in parts,
each explained in turn. `%%writefile` would do the same but print the directory, whose name
changes from run to run.
"""

import atexit
import os
import shutil
import tempfile


def to_workdir(directory, line, cell):
    """Write `cell` to directory/NAME, or with `NAME --append` add it to the end of that file,
    two blank lines after what is there; print the file's name and lines, not the directory."""
    name, *flags = line.split()
    if flags not in ([], ["--append"]):
        raise ValueError(f"usage: %%to_workdir NAME [--append], not %%to_workdir {line}")
    path = os.path.join(directory, name)
    text = cell
    if flags:
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{name} does not exist yet: write its first part without --append"
            )
        with open(path) as f:
            text = f.read().rstrip("\n") + "\n\n\n" + cell
    with open(path, "w") as f:
        f.write(text)
    lines = len(text.splitlines())
    print(
        f"added {len(cell.splitlines())} lines to {name}, now {lines}"
        if flags
        else f"wrote {name}, {lines} lines"
    )


def make_workdir(prefix):
    """A new temporary directory, removed at exit; in IPython, `%%to_workdir NAME` writes there."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: the directory alone
        return path
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(
            lambda line, cell: to_workdir(path, line, cell), "cell", "to_workdir"
        )
    return path
