"""The multi_host guide's launcher bounds a hung or a failed child process in time.

The guide launches real processes with JAX's distributed runtime; a child that hangs must fail
its cell within the launch's timeout, with every process's output, and leave nothing running.
These tests run the guide's own launcher cells (taken from the stored notebook) on small scripts.
"""

import signal
import time

import nbformat
import pytest
from conftest import NOTEBOOKS

NOTEBOOK = NOTEBOOKS / "multi_host.ipynb"


@pytest.fixture
def launcher(tmp_path):
    """The guide's own launcher cells, run in a namespace whose WORKDIR is tmp_path."""
    nb = nbformat.read(NOTEBOOK, 4)
    cells = [
        c.source
        for c in nb.cells
        if c.cell_type == "code" and ("class LaunchError" in c.source or "def launch(" in c.source)
    ]
    assert len(cells) == 2
    namespace = {"WORKDIR": str(tmp_path)}
    imports = "import os, re, signal, socket, subprocess, sys, tempfile, time\n"
    exec(imports + "\n".join(cells), namespace)
    return namespace


def test_a_hung_child_fails_within_the_timeout(launcher, tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import time\nprint('started', flush=True)\ntime.sleep(3600)\n")
    started = time.monotonic()
    with pytest.raises(launcher["LaunchError"]) as info:
        launcher["launch"](str(script), 2, 1, timeout=3)
    assert time.monotonic() - started < 10
    assert info.value.returncodes == {0: -signal.SIGKILL, 1: -signal.SIGKILL}
    assert "not finished within 3 s" in str(info.value)
    assert "[p0] started" in str(info.value) and "[p1] started" in str(info.value)


def test_a_failed_child_stops_the_others_at_once(launcher, tmp_path):
    script = tmp_path / "fail_one.py"
    script.write_text(
        "import sys, time\n"
        "if '0' == sys.argv[sys.argv.index('--process-id') + 1]:\n"
        "    sys.exit('process 0 gives up')\n"
        "time.sleep(3600)\n"
    )
    started = time.monotonic()
    with pytest.raises(launcher["LaunchError"]) as info:
        launcher["launch"](str(script), 2, 1, timeout=60)
    assert time.monotonic() - started < 10
    assert info.value.returncodes == {0: 1, 1: -signal.SIGKILL}
    assert "[p0 stderr] process 0 gives up" in str(info.value)
