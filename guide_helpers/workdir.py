"""A page's scratch directory, for the scripts and files a guide writes as it runs.

`make_workdir(prefix)` creates a temporary directory that is removed when the kernel exits (a
page removes it earlier, in its last cell, and can check that it is gone) and, in IPython, the
cell magic `%%to_workdir NAME`, which writes the rest of its cell to that directory's NAME.
`%%writefile` would do the same but print the directory, whose name changes from run to run.
"""

import atexit
import os
import shutil
import tempfile


def to_workdir(directory, name, cell):
    """Write `cell` to directory/name; print the file's name and lines, not the directory."""
    with open(os.path.join(directory, name), "w") as f:
        f.write(cell)
    print(f"wrote {name}, {len(cell.splitlines())} lines")


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
            lambda line, cell: to_workdir(path, line.strip(), cell), "cell", "to_workdir"
        )
    return path
