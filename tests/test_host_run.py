"""tools/run_guides_on_host.py: a guide run on a TPU host, as a reader would, checked here.

No TPU is at hand in CI; what can be proved without one is: the kernel starts and runs where
the host allows no network sockets (a network namespace with loopback down, as on the TPU hosts
lent to this project), and the comparison takes out only what the host adds, by name.
"""

import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import IN_CI, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import run_guides_on_host as host  # noqa: E402

from guide_helpers.devices import Accelerators, fallback_line  # noqa: E402

NO_SOCKETS = """
import json, sys
sys.path.insert(0, "tools")
import run_guides_on_host as host
nb = host.execute(sys.argv[1], sys.argv[2], 60)
print(json.dumps([host.sockets_allowed(), nb.cells[0].outputs[0]["text"]]))
"""


def test_a_notebook_runs_in_a_kernel_where_no_socket_can_be_bound(tmp_path):
    if not shutil.which("unshare") or subprocess.run(["unshare", "--net", "true"]).returncode:
        if IN_CI:
            pytest.fail("unshare --net is needed to take the network away (util-linux, root)")
        pytest.skip("cannot make a network namespace here")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(notebook, tmp_path / "tiny.ipynb")
    command = ["unshare", "--net", sys.executable, "-c", NO_SOCKETS]
    result = subprocess.run(
        [*command, str(tmp_path / "tiny.ipynb"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == '[false, "42\\n"]', result.stdout


THP = (
    "/usr/lib/python3/site-packages/jax/_src/cloud_tpu_init.py:86: UserWarning: Transparent "
    "hugepages are not enabled. TPU runtime startup and shutdown time should be ...\n"
    "  warnings.warn(\n"
)


def stream(name, text):
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_only_the_fallback_line_and_jaxs_named_warning_are_taken_out():
    line = fallback_line(Accelerators("TPU", "TPU v5e", 1), 8) + "\n"
    setup = nbformat.v4.new_code_cell("")
    setup.outputs = [stream("stderr", THP), stream("stdout", line + "8 devices, platform cpu\n")]
    other = nbformat.v4.new_code_cell("")
    other.outputs = [stream("stderr", "UserWarning: something else\n")]
    notebook = nbformat.v4.new_notebook(cells=[setup, other])
    removed = host.take_out_what_the_host_adds(notebook)
    assert removed == {"setup cell's fallback line": 1, "JAX's warning: transparent hugepages": 1}
    assert [o.text for o in setup.outputs] == ["8 devices, platform cpu\n"]
    assert [o.text for o in other.outputs] == ["UserWarning: something else\n"]


def test_a_guide_that_starts_processes_is_not_run_without_sockets():
    result = host.run_guide("multi_host", "/nonexistent", 60, can_launch=False)
    assert result["status"] == "not run" and "allows no network sockets" in result["why"]
    assert not host.launches_processes("shard_map")
