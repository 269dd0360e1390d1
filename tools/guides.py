"""Which docs/*.md files are guides: those with a jupytext header (the index page has none).

The one place that decides it: tools/bench.py, tools/shared_cells.py, tools/store_outputs.py,
tools/run_guides_on_host.py and tests/conftest.py import it, and the Makefile's GUIDES runs it
(`python3 tools/guides.py` prints the names). It also reads, for the same readers, the one
execution cache that conf.py names (`python3 tools/guides.py --cache` prints its path).
"""

import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def guide_names(docs):
    return sorted(
        p.stem for p in Path(docs).glob("*.md") if re.search(r"^jupytext:", p.read_text(), re.M)
    )


def execution_cache():
    """conf.py's nb_execution_cache_path: the jupyter-cache that the site's build, `make execute`
    (tools/store_outputs.py) and the tests' build (tests/conftest.py) all use."""
    return Path(runpy.run_path(str(ROOT / "conf.py"))["nb_execution_cache_path"])


if __name__ == "__main__":
    if sys.argv[1:] == ["--cache"]:
        print(execution_cache())
    else:
        print(" ".join(guide_names(ROOT / "docs")))
