"""Which docs/*.md files are guides: those with a jupytext header (the index page has none).

Shared by tools/bench.py, tools/shared_cells.py and tests/conftest.py; the Makefile's GUIDES
applies the same rule with grep.
"""

import re
from pathlib import Path


def guide_names(docs):
    return sorted(
        p.stem for p in Path(docs).glob("*.md") if re.search(r"^jupytext:", p.read_text(), re.M)
    )
