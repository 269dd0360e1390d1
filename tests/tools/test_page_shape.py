"""tools/page_shape.py: which cells are lessons, which are checks, and what counts as checking."""

import nbformat
import page_shape  # tools/, on sys.path via conftest

INSTALL, SETUP = "# Colab only: ...", "import jax"
LESSON = """\
y = x @ W1

assert y.shape == (16, 1024)
if ON_CPU:
    print("exact")
    assert n == 3"""
CHECK = "# Check: the exact bytes.\nassert nbytes == 4096"


def notebook(tmp_path, cells):
    nb = nbformat.v4.new_notebook()
    for source, tags in cells:
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags}))
    nbformat.write(nb, tmp_path / "guide.ipynb")
    return tmp_path


def test_the_shared_cells_are_left_out_and_checks_are_told_from_lessons(tmp_path):
    cells = [(INSTALL, ["hide-input"]), (SETUP, []), (LESSON, []), (CHECK, ["hide-input"])]
    cells.append(("setup = 1\nassert setup", ["hide-input"]))  # scaffolding, not a check
    shown = page_shape.cells("guide", notebook(tmp_path, cells))
    assert [(c.hidden, c.is_check) for c in shown] == [(False, False), (True, True), (True, False)]
    lesson = shown[0]
    assert (lesson.lines, lesson.asserts, lesson.check_lines) == (6, 2, 4)  # blank lines count
    assert page_shape.lesson_cells("guide", tmp_path) == [lesson]


def test_a_script_cell_counts_its_asserts_and_the_summary_adds_up(tmp_path):
    script = "%%to_workdir job.py\nimport sys\n\nassert sys.argv\nprint(1)"
    cells = [(INSTALL, ["hide-input"]), (SETUP, []), (script, []), (LESSON, [])]
    summary = page_shape.summary(["guide"], notebook(tmp_path, cells))
    assert page_shape.cells("guide", tmp_path)[0].check_lines == 1
    assert summary == {
        "lesson cells": 2,
        "median": 5.5,
        "largest": 6,
        "over 40": 0,
        "check share": 5 / 11,
    }
