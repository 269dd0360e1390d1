"""nbval's strict comparison of stored outputs with an execution, outside a kernel.

Used by tests/site/test_outputs.py (the stored notebooks against the test build) and by
tests/site/test_portability.py (the same, against an execution under a second CPU profile): one
comparison, nbval's own (`IPyNbCell.compare_outputs`), with its stream merging, its cell options
(tags and comments) and the sanitizer file tests/support/nbval_sanitize.cfg.
"""

import copy
import re
from pathlib import Path
from types import SimpleNamespace

from nbval.plugin import (
    IPyNbCell,
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
    nocolors,
)

ROOT = Path(__file__).resolve().parents[2]
SANITIZE = ROOT / "tests" / "support" / "nbval_sanitize.cfg"
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


def executed_notebooks(cache_path):
    """{guide name: the notebook a build executed}, read from its jupyter-cache."""
    from jupyter_cache import get_cache

    if not Path(cache_path).exists():
        return {}
    cache = get_cache(str(cache_path))
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


def stale_report(name, problems):
    """The problems of one guide as one message: the notebook, each code cell, nbval's report."""
    return "\n\n".join(f"notebooks/{name}.ipynb, code cell {n}: {p}" for n, p in problems)
