"""guide_helpers.child: a child Python's errors and warnings, read alike on every Python.

Python 3.13 (Colab's) colours a traceback when FORCE_COLOR is set, as it is in a Jupyter kernel,
and prints a warning's source line under it; both broke pages that read a child's stderr.
"""

import os
import subprocess
from pathlib import Path

import pytest

from guide_helpers import child

COLOURED = "\x1b[1;35mValueError\x1b[0m: \x1b[35mdevices per node: {0: 4, 1: 2}\x1b[0m"
GLOG = "E1205 21:11:39.123456   4242 pjrt_client.cc:88] ExecutePrepare failed: Buffer deleted"
RAISE = "raise ValueError('devices per node: {0: 4, 1: 2}')"


def test_raised_reads_a_coloured_traceback_and_leaves_other_lines():
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1', COLOURED, "done"]
    assert child.raised(lines) == [("ValueError", "devices per node: {0: 4, 1: 2}")]
    assert child.raised("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory") == [
        ("jax.errors.JaxRuntimeError", "RESOURCE_EXHAUSTED: Out of memory")
    ]
    assert child.plain(GLOG) == "ExecutePrepare failed: Buffer deleted"


def test_a_child_of_a_kernel_prints_plain_text(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # what ipykernel sets
    result = child.run_python("-c", RAISE, timeout=60)
    assert result.returncode == 1 and "\x1b" not in result.stderr, result.stderr
    assert child.raised(result.stderr) == [("ValueError", "devices per node: {0: 4, 1: 2}")]


@pytest.fixture
def python313():
    python = os.environ.get("PORTABILITY_PYTHON", "")
    if not Path(python).is_file():
        pytest.fail("PORTABILITY_PYTHON names no Python: run the tests with `make test`")
    return python


def test_colabs_python_colours_a_kernels_child_unless_told_not_to(python313, monkeypatch):
    """The failure this module exists for, on the real Python 3.13: coloured by default in a
    kernel's environment, plain with `child.environ()`, read by `raised` either way."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    runs = {
        how: subprocess.run(
            [python313, "-c", RAISE], capture_output=True, text=True, timeout=60, env=env
        )
        for how, env in (("inherited", dict(os.environ)), ("plain", child.environ()))
    }
    assert "\x1b[" in runs["inherited"].stderr.splitlines()[-1], runs["inherited"].stderr
    assert "\x1b" not in runs["plain"].stderr, runs["plain"].stderr
    for run in runs.values():
        assert child.raised(run.stderr) == [("ValueError", "devices per node: {0: 4, 1: 2}")]


def test_warnings_of_records_the_warning_not_the_text_around_it():
    code = "import warnings\nwarnings.warn('use jax.shard_map', DeprecationWarning)\nprint('x')"
    assert child.warnings_of(code, timeout=60) == [("DeprecationWarning", "use jax.shard_map")]
    with pytest.raises(RuntimeError, match="ValueError: devices per node"):
        child.warnings_of(RAISE, timeout=60)
