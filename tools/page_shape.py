"""The shape of the guides' code cells: how long the lesson cells are and how much of them checks.

The one measure that tests/site/test_site.py holds the pages to and that a contributor runs to see
where a page stands (`python3 tools/page_shape.py`, from the committed notebooks):

- The two shared cells (the Colab install cell and the device setup cell) are left out.
- A *check cell* is a collapsed code cell (tagged `hide-input`) whose first line is a comment
  that starts with `# Check`: the bookkeeping behind the visible cell before it.
- Every other visible code cell is a *lesson cell*. Its length counts every line, blank ones
  too (what a reader scrolls past); its *check lines* are its `assert` statements (each line of
  them) and the lines of its `if ON_CPU:` blocks (exact figures of the CPU backend).
"""

import ast
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from guides import guide_names

ROOT = Path(__file__).resolve().parent.parent
SHARED = 2  # the install cell and the setup cell open every guide
CHECK = re.compile(r"# Check\b")


@dataclass(frozen=True)
class Cell:
    source: str
    hidden: bool  # tagged hide-input: collapsed on the site

    @property
    def lines(self):
        """Every line of the cell, blank ones too."""
        return len(self.source.splitlines())

    @property
    def is_check(self):
        return self.hidden and bool(CHECK.match(self.source))

    @property
    def asserts(self):
        """The assert statements: one per `assert` that starts a line (magics and all)."""
        return sum(1 for line in self.source.splitlines() if line.lstrip().startswith("assert "))

    @property
    def check_lines(self):
        """Lines of asserts and of `if ON_CPU:` blocks, counted once each."""
        lines = set()
        try:
            tree = ast.parse(self.source)
        except SyntaxError:  # a cell magic (%%to_workdir): its script's own asserts
            return self.asserts
        for node in ast.walk(tree):
            on_cpu = isinstance(node, ast.If) and getattr(node.test, "id", None) == "ON_CPU"
            if isinstance(node, ast.Assert) or on_cpu:
                lines |= set(range(node.lineno, node.end_lineno + 1))
        text = self.source.splitlines()
        return sum(1 for n in lines if text[n - 1].strip())


def cells(name, notebooks=ROOT / "notebooks"):
    """A guide's code cells after the two shared ones, from its committed notebook."""
    nb = json.loads((Path(notebooks) / f"{name}.ipynb").read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"][SHARED:]
    return [
        Cell("".join(c["source"]), "hide-input" in c["metadata"].get("tags", [])) for c in code
    ]


def lesson_cells(name, notebooks=ROOT / "notebooks"):
    return [c for c in cells(name, notebooks) if not c.hidden]


def summary(names, notebooks=ROOT / "notebooks"):
    """{median, largest, over_40, check_share} over the lesson cells of the named guides."""
    lessons = [c for name in names for c in lesson_cells(name, notebooks)]
    sizes = [c.lines for c in lessons]
    return {
        "lesson cells": len(sizes),
        "median": statistics.median(sizes),
        "largest": max(sizes),
        "over 40": sum(n > 40 for n in sizes),
        "check share": sum(c.check_lines for c in lessons) / sum(sizes),
    }


def main():
    names = guide_names(ROOT / "docs")
    print(f"{'guide':26}{'cells':>6}{'median':>8}{'largest':>8}{'checks':>8}")
    for name in names:
        s = summary([name])
        print(
            f"{name:26}{s['lesson cells']:>6}{s['median']:>8}{s['largest']:>8}"
            f"{s['check share']:>8.1%}"
        )
    s = summary(names)
    print(
        f"{'all':26}{s['lesson cells']:>6}{s['median']:>8}{s['largest']:>8}"
        f"{s['check share']:>8.1%}   over 40 lines: {s['over 40']}"
    )


if __name__ == "__main__":
    sys.exit(main())
