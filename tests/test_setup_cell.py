"""Each guide's device-setup cell, run where it can and cannot work.

The cell asks JAX for 8 emulated CPU devices, which only takes effect before JAX starts its
backend. Run after something else started JAX with one device, it must stop at once with a
message that says what to do, not fail later, deep inside a sharded computation.
"""

import os
import re
import sys

import nbformat
from conftest import NOTEBOOKS, guide_names, run

SETUP = 'jax.config.update("jax_num_cpu_devices", 8)'


def setup_cell(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    cells = [c.source for c in nb.cells if c.cell_type == "code" and SETUP in c.source]
    assert cells, f"{name}: no setup cell sets {SETUP}"
    return cells[0]


def clean_env():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"  # the same answer on a machine with an accelerator
    return env


def test_every_guide_has_the_same_setup_cell():
    """One setup cell for the site, written by `make sync` (tools/shared_cells.py): checking it
    once below checks it for every guide."""
    import shared_cells  # tools/, on sys.path through conftest

    for name in guide_names():
        assert setup_cell(name) == shared_cells.SETUP_CELL, (
            f"{name}: the device setup cell is not tools/shared_cells.py's SETUP_CELL "
            "(run `make sync`)"
        )


def test_setup_cell_after_jax_started_says_what_to_do():
    started_first = "import jax\nprint('started with', jax.device_count(), 'device')\n"
    cell = setup_cell(guide_names()[0])
    result = run([sys.executable, "-c", started_first + cell], 300, env=clean_env())
    out = result.stdout
    assert result.returncode == 1, out
    assert "started with 1 device" in out, out
    last = out.strip().splitlines()[-1]
    assert re.match(r"RuntimeError: This guide needs 8 devices, found 1\b", last), out
    assert "Restart the kernel" in last and "before any other cell uses jax" in last, out


def test_setup_cell_in_a_fresh_process_makes_eight_devices():
    result = run([sys.executable, "-c", setup_cell(guide_names()[0])], 300, env=clean_env())
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "8 devices, platform cpu", result.stdout
