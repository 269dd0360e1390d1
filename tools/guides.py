"""Which docs/*.md files are guides: those with a jupytext header (the index page has none).

The one place that decides it: tools/bench.py, tools/shared_cells.py, tools/store_outputs.py,
tools/run_guides_on_host.py and tests/conftest.py import it, and the Makefile's GUIDES runs it
(`python3 tools/guides.py` prints the names).
"""

import re
from pathlib import Path


def guide_names(docs):
    return sorted(
        p.stem for p in Path(docs).glob("*.md") if re.search(r"^jupytext:", p.read_text(), re.M)
    )


if __name__ == "__main__":
    print(" ".join(guide_names(Path(__file__).resolve().parent.parent / "docs")))
