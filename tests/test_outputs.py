"""Every stored output of notebooks/*.ipynb is what the code prints now: nbval, strict.

The test build (the `site` fixture) executes each guide once and keeps the executed notebooks
in a jupyter-cache. Each stored notebook is compared, cell by cell, with that execution, using
nbval's own comparison (`IPyNbCell.compare_outputs`), its stream merging, its cell options
(tags and comments) and the sanitizer file tests/nbval_sanitize.cfg, as `pytest --nbval
--nbval-sanitize-with tests/nbval_sanitize.cfg` would, without executing every guide again.
"""

import copy
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from conftest import EXECUTED, NOTEBOOKS, ROOT, guide_names
from nbval.plugin import (
    IPyNbCell,
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
    nocolors,
)

SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
# What nbval leaves out of the comparison when nbdime is off (IPyNbFile.skip_compare).
SKIP_COMPARE = (
    "metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
    "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg",
)  # fmt: skip


class OutputComparison:
    """nbval's comparison of one cell's outputs, with nbval's own methods, outside a kernel."""

    compare_outputs = IPyNbCell.compare_outputs
    format_output_compare = IPyNbCell.format_output_compare
    sanitize = IPyNbCell.sanitize
    colors = nocolors
    # nbval asks pytest for an assertion diff first; without one it prints both outputs.
    ihook = SimpleNamespace(pytest_assertrepr_compare=lambda **_: [])
    config = None

    def __init__(self, patterns):
        self.parent = SimpleNamespace(skip_compare=SKIP_COMPARE, sanitize_patterns=patterns)
        self.comparison_traceback = []

    def differences(self, executed, stored):
        """nbval's report of how `executed` differs from `stored`, or "" if they agree."""
        same = self.compare_outputs(
            coalesce_streams(copy.deepcopy(executed)), coalesce_streams(copy.deepcopy(stored))
        )
        return "" if same else "\n".join(self.comparison_traceback)


def sanitize_patterns():
    return dict(get_sanitize_patterns(SANITIZE.read_text()))


def cell_options(cell):
    """nbval's options for a cell, from its tags and its comment markers."""
    options = dict(find_metadata_tags(cell.metadata))
    options.update(dict(find_comment_markers(cell.source)))
    return options


def executed_notebooks():
    """{guide name: the notebook the test build executed}, read from its jupyter-cache."""
    from jupyter_cache import get_cache

    if not EXECUTED.exists():
        return {}
    cache = get_cache(str(EXECUTED))
    # Only a guide that executed without an error is cached; its record names its md file.
    return {
        re.sub(r"\.md$", "", Path(record.uri).name): cache.get_cache_bundle(record.pk).nb
        for record in cache.list_cache_records()
    }


def stale_cells(stored, executed, patterns):
    """[(cell number, report)] for each code cell whose stored outputs differ from the run."""
    stored_code = [c for c in stored.cells if c.cell_type == "code"]
    executed_code = [c for c in executed.cells if c.cell_type == "code"]
    assert [c.source for c in stored_code] == [c.source for c in executed_code], (
        "the stored notebook's code differs from its guide's: run `make sync`"
    )
    problems = []
    for number, (ref, new) in enumerate(zip(stored_code, executed_code)):
        options = cell_options(ref)
        if options.get("skip"):
            problems.append((number, "is tagged to be skipped: every cell must run"))
        elif options.get("check", True):
            report = OutputComparison(patterns).differences(new.outputs, ref.outputs)
            if report:
                problems.append((number, "outputs differ:\n" + report))
    return problems


@pytest.fixture(scope="module")
def executed(site):
    return executed_notebooks()


@pytest.mark.parametrize("name", guide_names())
def test_stored_outputs_are_what_the_code_prints_now(executed, name):
    assert name in executed, (
        f"the build did not execute {name} successfully; see tests/test_build.py's failure"
    )
    stored = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    problems = stale_cells(stored, executed[name], sanitize_patterns())
    report = "\n\n".join(f"notebooks/{name}.ipynb, code cell {n}: {p}" for n, p in problems)
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
