"""tools/run_guides_on_host.py: a guide run on a TPU host, as a reader would, checked here.

No TPU is at hand in CI; what can be proved without one is: the kernel starts and runs where
the host refuses internet sockets (as the TPU hosts lent to this project do), opening none, and
the comparison takes out only what the host adds, by name.
"""

import os
import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import IN_CI, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import run_guides_on_host as host  # noqa: E402

from guide_helpers.devices import Accelerators, fallback_line  # noqa: E402

# A host that refuses internet sockets, as the TPU hosts lent to this project do (their
# sandbox answers EAFNOSUPPORT): socket() made to fail for AF_INET and AF_INET6, each attempt
# written to the file $REFUSED_SOCKETS. There, libzmq aborts a kernel that binds TCP.
REFUSE_INET = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int socket(int domain, int type, int protocol) {
    static int (*real)(int, int, int);
    if (domain == AF_INET || domain == AF_INET6) {
        const char *log = getenv("REFUSED_SOCKETS");
        FILE *f = log ? fopen(log, "a") : NULL;
        if (f) {
            fprintf(f, "process %d, family %d\\n", getpid(), domain);
            fclose(f);
        }
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (!real) real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
    return real(domain, type, protocol);
}
"""
NO_SOCKETS = """
import json, os, sys
from pathlib import Path
sys.path.insert(0, "tools")
import run_guides_on_host as host
nb = host.execute(sys.argv[1], sys.argv[2], 60)
log = Path(os.environ["REFUSED_SOCKETS"])
tried = log.read_text() if log.exists() else ""
print(json.dumps([tried, host.sockets_allowed(), nb.cells[0].outputs[0]["text"]]))
"""


def test_a_notebook_runs_in_a_kernel_that_opens_no_internet_socket(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        if IN_CI:
            pytest.fail("a C compiler (cc) is needed to make a host that refuses sockets")
        pytest.skip("no C compiler here")
    (tmp_path / "refuse_inet.c").write_text(REFUSE_INET)
    shim = tmp_path / "refuse_inet.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", shim, tmp_path / "refuse_inet.c", "-ldl"], check=True
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(notebook, tmp_path / "tiny.ipynb")
    log = tmp_path / "refused.txt"
    result = subprocess.run(
        [sys.executable, "-c", NO_SOCKETS, str(tmp_path / "tiny.ipynb"), str(tmp_path)],
        env={**os.environ, "LD_PRELOAD": str(shim), "REFUSED_SOCKETS": str(log)},
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    # Nothing tried an internet socket while the notebook ran; then the probe's one is refused.
    assert result.stdout.strip().splitlines()[-1] == '["", false, "42\\n"]', result.stdout


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
