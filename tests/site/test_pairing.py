"""Every docs/NAME.md guide and its notebooks/NAME.ipynb agree cell by cell.

`jupytext --test` and `--diff` exit 0 on a drifted pair, so this compares the cells itself:
type, source and tags, read-only. Fix a failure with `make sync` (then `make execute` if code
changed).
"""

import copy
import difflib

import jupytext
import nbformat
import pytest
from conftest import DOCS, NOTEBOOKS, guide_names


def cell_view(cell):
    return cell.cell_type, cell.source, sorted(cell.metadata.get("tags", []))


def pair_differences(md_nb, ipynb_nb):
    """Human-readable differences between two notebooks' cells; empty when they agree."""
    md_cells = [cell_view(c) for c in md_nb.cells]
    ipynb_cells = [cell_view(c) for c in ipynb_nb.cells]
    problems = []
    if len(md_cells) != len(ipynb_cells):
        problems.append(f"{len(md_cells)} cells in the md, {len(ipynb_cells)} in the ipynb")
    for i, (a, b) in enumerate(zip(md_cells, ipynb_cells)):
        if a == b:
            continue
        if a[0] != b[0]:
            problems.append(f"cell {i}: {a[0]} in the md, {b[0]} in the ipynb")
        if a[2] != b[2]:
            problems.append(f"cell {i}: tags {a[2]} in the md, {b[2]} in the ipynb")
        if a[1] != b[1]:
            diff = difflib.unified_diff(
                b[1].splitlines(), a[1].splitlines(), "ipynb", "md", lineterm="", n=1
            )
            problems.append(f"cell {i} source differs:\n" + "\n".join(diff))
        break  # after the first differing cell the rest are usually shifted
    return problems


@pytest.mark.parametrize("name", guide_names())
def test_guide_and_notebook_agree(name):
    md_path, ipynb_path = DOCS / f"{name}.md", NOTEBOOKS / f"{name}.ipynb"
    assert ipynb_path.exists(), f"{md_path} has no pair {ipynb_path}: run `make sync`"
    problems = pair_differences(jupytext.read(md_path), nbformat.read(ipynb_path, 4))
    assert not problems, (
        f"{md_path.name} and {ipynb_path.name} have drifted apart (run `make sync`):\n"
        + "\n".join(problems)
    )


def test_every_notebook_has_a_guide():
    orphans = sorted(
        p.name for p in NOTEBOOKS.glob("*.ipynb") if not (DOCS / f"{p.stem}.md").exists()
    )
    assert not orphans, f"notebooks without a docs/*.md source: {orphans}"


def test_the_check_catches_an_edit_in_the_md_alone():
    """The comparison itself: an edited code cell, a changed tag, a removed cell."""
    name = guide_names()[0]
    md_nb = jupytext.read(DOCS / f"{name}.md")
    ipynb_nb = copy.deepcopy(md_nb)  # a pair that agrees, whatever the committed files say
    assert pair_differences(md_nb, ipynb_nb) == []

    code = next(c for c in md_nb.cells if c.cell_type == "code")
    code.source += "\nprint('edited in the md only')"
    problems = pair_differences(md_nb, ipynb_nb)
    assert problems and "source differs" in problems[0] and "edited in the md only" in problems[0]

    code.source = code.source.rsplit("\n", 1)[0]
    code.metadata["tags"] = ["nbval-ignore-output"]
    assert "tags" in pair_differences(md_nb, ipynb_nb)[0]

    del md_nb.cells[-1]
    assert "cells in the md" in pair_differences(md_nb, ipynb_nb)[0]
