"""Every stored output of notebooks/*.ipynb is what the code prints now: nbval, strict.

The test build (the `site` fixture) executes each guide once and keeps the executed notebooks
in a jupyter-cache. Each stored notebook is compared, cell by cell, with that execution, using
nbval's own comparison (`IPyNbCell.compare_outputs`), its stream merging, its cell options
(tags and comments) and the sanitizer file tests/support/nbval_sanitize.cfg, as `pytest --nbval
--nbval-sanitize-with tests/support/nbval_sanitize.cfg` would, without executing every guide again.
"""

import nbformat
import pytest
from conftest import EXECUTED, NOTEBOOKS, guide_names
from support.compare_outputs import (
    executed_notebooks,
    sanitize_patterns,
    stale_cells,
    stale_report,
)


@pytest.fixture(scope="module")
def executed(site):
    return executed_notebooks(EXECUTED)


@pytest.mark.parametrize("name", guide_names())
def test_stored_outputs_are_what_the_code_prints_now(executed, name):
    assert name in executed, (
        f"the build did not execute {name} successfully; see tests/site/test_build.py's failure"
    )
    stored = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    problems = stale_cells(stored, executed[name], sanitize_patterns())
    report = stale_report(name, problems)
    assert not problems, (
        f"{report}\n\nThe stored outputs are stale: re-execute the notebook (`make execute`) "
        "and commit it."
    )


def test_the_comparison_catches_a_changed_output_and_honours_the_sanitizer():
    """nbval's comparison as used above: a changed number fails, a masked timing passes."""

    def cell(text, tags=()):
        return nbformat.v4.new_code_cell(
            "print(6 * 7)",
            metadata={"tags": list(tags)},
            outputs=[nbformat.v4.new_output("stream", name="stdout", text=text)],
        )

    patterns = sanitize_patterns()
    stored, executed = nbformat.v4.new_notebook(), nbformat.v4.new_notebook()
    stored.cells, executed.cells = [cell("42\n")], [cell("41\n")]
    ((number, report),) = stale_cells(stored, executed, patterns)
    assert number == 0 and "42" in report and "41" in report

    timing = "{} ms ± 1 ms per loop (mean ± std. dev. of 3 runs, 3 loops each)\n"
    stored.cells, executed.cells = [cell(timing.format(35))], [cell(timing.format(61))]
    assert stale_cells(stored, executed, patterns) == []

    stored.cells = [cell("42\n", tags=["nbval-ignore-output"])]
    executed.cells = [cell("41\n")]
    assert stale_cells(stored, executed, patterns) == []

    stored.cells = [cell("42\n", tags=["nbval-skip"])]
    assert "skipped" in stale_cells(stored, executed, patterns)[0][1]

    stored.cells, executed.cells = [cell("42\n")], [cell("4")]
    executed.cells[0].outputs.append(nbformat.v4.new_output("stream", name="stdout", text="2\n"))
    assert stale_cells(stored, executed, patterns) == []  # streams merged, as nbval does
