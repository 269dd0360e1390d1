"""The gates themselves: a failing cell, a deprecation warning, a changed output each fail.

Each test builds or checks a tiny throwaway guide, so it proves the machinery that guards the
real guides without executing them again.
"""

import json
import sys

from conftest import ROOT, run, sphinx_command

HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""


def write_site(src, pages):
    src.mkdir()
    toctree = "\n".join(pages)
    (src / "index.md").write_text(f"# Index\n\n```{{toctree}}\n{toctree}\n```\n")
    for name, code in pages.items():
        body = f"# {name}\n\n```{{code-cell}} ipython3\n{code}\n```\n"
        (src / f"{name}.md").write_text(HEADER + body)


def test_failing_cell_and_deprecation_warning_fail_the_build(tmp_path):
    src = tmp_path / "docs"
    write_site(
        src,
        {
            "broken_guide": "print('before')\n1 / 0",
            "warning_guide": (
                "import warnings\n"
                "warnings.warn('old_api is deprecated', DeprecationWarning, stacklevel=1)"
            ),
        },
    )
    result = run(sphinx_command(src, tmp_path / "html", tmp_path / "doctrees"), 600, cwd=ROOT)
    out = result.stdout
    assert result.returncode != 0, out
    # The failing cell: the guide, the cell's code and the traceback, in the console output.
    assert "broken_guide" in out and "Executing notebook failed" in out, out
    assert "ZeroDivisionError" in out and "1 / 0" in out, out
    # Stderr in a cell is a warning naming the guide and the cell, and -W makes it fatal.
    assert "warning_guide.md" in out and "stderr was found in the cell outputs" in out, out


def test_nbval_fails_on_a_stored_output_that_no_longer_matches(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "metadata": {},
                "source": "print(6 * 7)",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": "41\n"}],
            }
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "stale.ipynb"
    path.write_text(json.dumps(nb))
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--nbval",
        "--nbval-current-env", "--rootdir", str(tmp_path), str(path),
    ]  # fmt: skip
    result = run(cmd, 300, cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout and "41" in result.stdout and "42" in result.stdout


def test_sanitizer_masks_timings_and_only_timings():
    import re

    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text())
    timing = "35 ms ± 470 μs per loop (mean ± std. dev. of 5 runs, 5 loops each)"

    def sanitize(text):
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    assert sanitize(timing) == "TIMEIT"
    assert sanitize("loss 0.4064") == "loss 0.4064"
