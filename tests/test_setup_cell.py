"""Each guide's device-setup cell, run where it can and cannot work.

The cell asks JAX for 8 emulated CPU devices, which only takes effect before JAX starts its
backend. Run after something else started JAX with one device, it must stop at once with a
message that says what to do, not fail later, deep inside a sharded computation.
"""

import os
import re
import sys

from conftest import run

# tools/, on sys.path through conftest: every guide's cell 2, which tests/test_site.py checks
from shared_cells import SETUP_CELL


def clean_env():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"  # the same answer on a machine with an accelerator
    return env


def test_setup_cell_after_jax_started_says_what_to_do():
    started_first = "import jax\nprint('started with', jax.device_count(), 'device')\n"
    result = run([sys.executable, "-c", started_first + SETUP_CELL], 300, env=clean_env())
    out = result.stdout
    assert result.returncode == 1, out
    assert "started with 1 device" in out, out
    last = out.strip().splitlines()[-1]
    assert re.match(r"RuntimeError: This guide needs 8 devices, found 1\b", last), out
    assert "Restart the kernel" in last and "before any other cell uses jax" in last, out


def test_setup_cell_in_a_fresh_process_makes_eight_devices():
    result = run([sys.executable, "-c", SETUP_CELL], 300, env=clean_env())
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "8 devices, platform cpu", result.stdout
