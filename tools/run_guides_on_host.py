"""Execute every guide on this host as a reader would, and compare it with its stored outputs.

Made for a TPU host (a TPU v5e VM, or a runtime like Colab's one-chip TPU): from the repository
root, with requirements.txt installed,

    python tools/run_guides_on_host.py --report host_run.json

- First it reports what JAX sees here, in a child process: the platform, device kind and count.
- Then it runs each guide's notebook (notebooks/NAME.ipynb) top to bottom in a fresh kernel,
  one at a time (one process at a time may hold a TPU), in notebooks/ as Jupyter would. The
  kernel talks over the ipc transport with ipykernel's IOPub pipe off, so that a host that
  allows no network sockets, not even loopback, still runs it.
- A guide that starts several JAX processes (`guide_helpers.launch`) needs sockets for
  `jax.distributed`; on a host that allows none it is not run, and the report says why.
- Each code cell's outputs are compared with the stored ones by the project's own nbval comparison
  (tests/support/compare_outputs.py, tests/support/nbval_sanitize.cfg), after two things the host
  adds are taken out, each named and counted in the report: the setup cell's line that says it fell
  back to emulated CPU devices (`guide_helpers.devices.FALLBACK_LINE`), and JAX's own warnings on a
  TPU host (HOST_WARNINGS). Anything else that differs is reported with nbval's diff.

The exit status is 0 only if every guide that ran reproduced its stored outputs.
"""

import argparse
import copy
import json
import platform
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from jupyter_client import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tests")]
from guides import guide_names  # noqa: E402  (tools/)
from provenance import command, python, today  # noqa: E402  (tools/)
from support.compare_outputs import sanitize_patterns, stale_cells  # noqa: E402  (tests/)

from guide_helpers.devices import FALLBACK_LINE  # noqa: E402

# Warnings JAX itself prints on a TPU host, at import, whatever the platform chosen: (name,
# what it means, a pattern for the whole stderr output it makes).
HOST_WARNINGS = [
    (
        "transparent hugepages",
        "jax/_src/cloud_tpu_init.py warns on TPU v5e and newer when the host's transparent "
        "hugepages setting is not 'always'; it is about TPU runtime start-up time, not results",
        re.compile(
            r"\A(?:\S+cloud_tpu_init\.py:\d+: UserWarning: Transparent hugepages are not "
            r"enabled\..*\n(?:\s+warnings\.warn\(\n)?)+\Z"
        ),
    ),
]
# Start ipykernel with its IOPub pipe off: the pipe binds a TCP socket on 127.0.0.1, and where
# the host refuses that socket family, libzmq aborts the kernel. ipykernel's app asks for the
# pipe by keyword (pipe=True), so the thread's class is replaced by one that never makes it.
KERNEL = """
from ipykernel import iostream, kernelapp
class IOPubThread(iostream.IOPubThread):
    def __init__(self, socket, pipe=False, **kwargs):
        super().__init__(socket, pipe=False, **kwargs)
kernelapp.IOPubThread = IOPubThread
kernelapp.launch_new_instance()
"""
WHAT_JAX_SEES = """
import json, jax
d = jax.devices()
print(json.dumps({"platform": d[0].platform, "device_kind": d[0].device_kind, "devices": len(d),
                  "jax": jax.__version__}))
"""


def sockets_allowed():
    """Whether a TCP connection over loopback works here (jax.distributed needs one)."""
    try:
        with socket.create_server(("127.0.0.1", 0)) as server:
            socket.create_connection(server.getsockname(), timeout=5).close()
        return True
    except OSError:
        return False


def launches_processes(name):
    """Whether the guide starts several JAX processes (they meet over TCP: jax.distributed)."""
    return "guide_helpers.launch import" in (ROOT / "docs" / f"{name}.md").read_text()


def what_jax_sees():
    child = subprocess.run(
        [sys.executable, "-c", WHAT_JAX_SEES], capture_output=True, text=True, timeout=300
    )
    if child.returncode != 0:
        return {"error": child.stderr[-2000:]}
    return json.loads(child.stdout.strip().splitlines()[-1])


def execute(path, folder, timeout):
    """The notebook at `path`, executed in a fresh kernel (ipc, IOPub pipe off) in its folder;
    the kernel is shut down afterwards, whatever happened, so that it holds no chip."""
    notebook = nbformat.read(path, 4)
    manager = KernelManager(transport="ipc", ip=str(Path(folder) / f"kernel-{Path(path).stem}"))
    # The command comes from the kernel spec (jupyter_client ignores a kernel_cmd set here).
    manager.kernel_spec.argv = [sys.executable, "-c", KERNEL, "-f", "{connection_file}"]
    client = NotebookClient(
        notebook,
        km=manager,
        timeout=timeout,
        record_timing=False,
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    try:
        client.execute()
    finally:
        if manager.has_kernel:
            manager.shutdown_kernel(now=True)
    return notebook


def take_out_what_the_host_adds(notebook):
    """Remove the fallback line and JAX's named host warnings; {what: how many} removed."""
    removed = {}
    for cell in (c for c in notebook.cells if c.cell_type == "code"):
        kept = []
        for output in cell.outputs:
            if output.get("output_type") == "stream":
                text, count = FALLBACK_LINE.subn("", output.text)
                if count:
                    removed["setup cell's fallback line"] = count
                    output.text = text
                name = next(
                    (n for n, _, p in HOST_WARNINGS if output.name == "stderr" and p.match(text)),
                    None,
                )
                if name:
                    key = f"JAX's warning: {name}"
                    removed[key] = removed.get(key, 0) + 1
                    continue
                if not output.text:
                    continue
            kept.append(output)
        cell.outputs = kept
    return removed


def run_guide(name, folder, timeout, can_launch):
    if launches_processes(name) and not can_launch:
        return {
            "status": "not run",
            "why": "it starts several JAX processes that meet over TCP (jax.distributed), and "
            "this host allows no network sockets",
        }
    start = time.monotonic()
    try:
        executed = execute(ROOT / "notebooks" / f"{name}.ipynb", folder, timeout)
    except Exception as error:  # a failing cell, a dead kernel, a timeout: named, with its trace
        return {
            "status": "failed",
            "seconds": round(time.monotonic() - start),
            "error": str(error),
        }
    removed = take_out_what_the_host_adds(executed)
    stored = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", 4)
    problems = stale_cells(stored, copy.deepcopy(executed), sanitize_patterns())
    return {
        "status": "differs" if problems else "identical",
        "seconds": round(time.monotonic() - start),
        "taken out": removed,
        "problems": [f"code cell {n}: {p}" for n, p in problems],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("guides", nargs="*", help="guide names (default: every guide)")
    parser.add_argument("--report", default="host_run.json", help="the JSON report to write")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args(argv)
    names = args.guides or guide_names(ROOT / "docs")
    report = {
        "date": today(),
        "command": command("tools/run_guides_on_host.py", argv),
        "python": python(),
        "host": platform.node(),
        "jax sees": what_jax_sees(),
        "sockets": sockets_allowed(),
        "guides": {},
    }
    print(json.dumps({k: v for k, v in report.items() if k != "guides"}), flush=True)
    with tempfile.TemporaryDirectory(prefix="guides_") as folder:
        for name in names:
            result = run_guide(name, folder, args.timeout, report["sockets"])
            report["guides"][name] = result
            extra = result.get("why") or result.get("taken out") or ""
            print(f"{name}: {result['status']} {result.get('seconds', '')} s {extra}", flush=True)
            for problem in result.get("problems", []) + [result.get("error", "")]:
                print(problem[-3000:]) if problem else None
            Path(args.report).write_text(json.dumps(report, indent=1) + "\n")
    bad = [n for n, r in report["guides"].items() if r["status"] in ("failed", "differs")]
    print(f"{len(names) - len(bad)} of {len(names)} guides ran identical or could not run here")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
