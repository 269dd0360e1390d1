"""Each guide's device-setup cell, run where it can and cannot work.

The cell sets XLA_FLAGS for 8 emulated CPU devices, which only takes effect before JAX starts.
Run after something else started JAX with one device, it must stop at once with a message that
says what to do, not fail later, deep inside a sharded computation.
"""

import os
import re
import sys

import nbformat
import pytest
from conftest import NOTEBOOKS, guide_names, run

FLAG = "--xla_force_host_platform_device_count="


def setup_cell(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and FLAG in c.source]
    assert cells, f"{name}: no setup cell sets {FLAG}"
    return cells[0]  # the first; a later one may set the flag for child processes


def clean_env():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"  # the same answer on a machine with an accelerator
    return env


@pytest.mark.parametrize("name", guide_names())
def test_setup_cell_after_jax_started_says_what_to_do(name):
    started_first = "import jax\nprint('started with', jax.device_count(), 'device')\n"
    result = run([sys.executable, "-c", started_first + setup_cell(name)], 300, env=clean_env())
    out = result.stdout
    assert result.returncode == 1, out
    assert "started with 1 device" in out, out
    last = out.strip().splitlines()[-1]
    assert re.match(r"RuntimeError: This guide needs 8 (CPU )?devices, found 1\b", last), out
    assert "Restart the kernel" in last and "before any other cell imports jax" in last, out


@pytest.mark.parametrize("name", guide_names())
def test_setup_cell_in_a_fresh_process_makes_eight_devices(name):
    result = run([sys.executable, "-c", setup_cell(name)], 300, env=clean_env())
    assert result.returncode == 0, result.stdout
    assert "8 devices, platform cpu" in result.stdout, result.stdout
