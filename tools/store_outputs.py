"""Store each guide's outputs in notebooks/NAME.ipynb from the site build's execution.

`make execute` builds the site (myst-nb, `cache` mode, into the jupyter-cache conf.py names),
then runs this: each stored notebook takes its code cells' outputs and execution counts from the
notebook the build executed, so the outputs a reader sees on GitHub and in Colab come from the
same engine and the same execution that the site shows and that `make test` compares them with
(tests/site/test_outputs.py). A guide whose code changed is executed once, by the build; one
that did not is read back from the cache, executed zero times.

    python tools/store_outputs.py [--cache DIR] [--notebooks notebooks] [NAME ...]

A guide missing from the cache (its execution failed, or the build never ran) or whose stored
code differs from its guide's (run `make sync`) is named, and no notebook is written.
"""

import argparse
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests")]
from guides import execution_cache, guide_names  # noqa: E402  (tools/)
from support.compare_outputs import executed_notebooks  # noqa: E402  (tests/)


def merged_streams(outputs):
    """Outputs with each run of stream outputs of one name joined into one, as a reader sees
    them: how a kernel's writes were split into messages varies from run to run."""
    merged = []
    for output in outputs:
        last = merged[-1] if merged else None
        if output.output_type == "stream" and last and last.output_type == "stream":
            if last.name == output.name:
                last.text += output.text
                continue
        merged.append(output)
    return merged


def stored_from(stored, executed):
    """`stored` with its code cells' outputs (streams merged) and execution counts taken from
    `executed`; every other field (tags, metadata, markdown) left as it is. Raises if their code
    differs."""
    mine = [c for c in stored.cells if c.cell_type == "code"]
    theirs = [c for c in executed.cells if c.cell_type == "code"]
    if [c.source for c in mine] != [c.source for c in theirs]:
        raise ValueError("its code differs from the executed guide's: run `make sync` first")
    for cell, run in zip(mine, theirs):
        cell.outputs = merged_streams(run.outputs)
        cell.execution_count = run.execution_count
    return stored


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=str(execution_cache()))
    parser.add_argument("--notebooks", default=str(ROOT / "notebooks"), help="NAME.ipynb's folder")
    parser.add_argument("names", nargs="*", help="guides (default: every guide)")
    args = parser.parse_args(argv)
    names = args.names or guide_names(ROOT / "docs")
    executed = executed_notebooks(args.cache)
    missing = [name for name in names if name not in executed]
    if missing:
        print(f"error: no execution of {', '.join(missing)} in {args.cache}: the build failed "
              "there (see its log) or did not run", file=sys.stderr)  # fmt: skip
        return 1
    notebooks, failed = {}, []
    for name in names:
        path = Path(args.notebooks) / f"{name}.ipynb"
        try:
            notebooks[path] = stored_from(nbformat.read(path, as_version=4), executed[name])
        except ValueError as e:
            failed.append(f"{name}: {e}")
    if failed:
        print("error: nothing written;\n" + "\n".join(failed), file=sys.stderr)
        return 1
    for path, notebook in notebooks.items():
        nbformat.write(notebook, path)
    print(f"stored the outputs of {len(notebooks)} guides from {args.cache}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
