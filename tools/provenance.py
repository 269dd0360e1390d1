"""Where a tool's record comes from: the provenance that the tools' records share.

- `of_this_run(tool, argv, step)`: the block every measurement record carries (the versions of
  `PACKAGES`, Python, the date, the command and the step measured), as tools/measure_tpu.py,
  tools/measure_step.py and tools/measure_offload.py write it.
- `where(device)`: the chip and the platform of a JAX device; `peak_flops(device)` and
  `bytes_limit(device, compile_only)`: what the chip can do and what it gives one program.
- `versions()`, `python()`, `today()`, `command(tool, argv)` and `machine()` each alone, for a
  report that records some of them (tools/run_guides_on_host.py).

Nothing here imports JAX: the functions of a device read the device they are given, and
`peak_flops` and `bytes_limit` import `guide_helpers.roofline` (the repository root on the path)
only when they are called.
"""

import importlib.metadata
import os
import platform
import sys
from datetime import date

PACKAGES = ("jax", "jaxlib", "libtpu", "flax", "optax", "numpy")
# JAX's device kinds, as `guide_helpers.roofline.CHIPS` names the chips
CHIP_NAMES = {"TPU v5 lite": "TPU v5e", "TPU v5": "TPU v5p"}
# What a chip gives one program (its memory_stats' bytes_limit, read on a v5e), for a run that
# only compiles and so has no memory_stats to read
HBM_LIMIT = {"TPU v5 lite": int(15.75 * 2**30)}


def versions(packages=PACKAGES):
    """{package: its installed version, or None where it is not installed}."""
    found = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def python():
    return platform.python_version()


def today():
    return date.today().isoformat()


def command(tool, argv=None):
    """The command line that ran `tool` (a path from the repository root) with `argv`, or with
    this process's arguments when `argv` is None or empty."""
    return " ".join(["python", tool, *(argv or sys.argv[1:])])


def machine():
    """The kind of machine: its architecture and CPU cores."""
    return f"{platform.machine()}, {os.cpu_count()} cores"


def of_this_run(tool, argv, step):
    """The provenance every measurement record shares: versions, Python, date, the command and
    the step."""
    return {
        "versions": versions(),
        "python": python(),
        "date": today(),
        "command": command(tool, argv),
        "step": step,
    }


def where(device):
    """The chip (JAX's device kind) and the platform a record was made on."""
    return {"chip": device.device_kind, "platform": device.platform}


def peak_flops(device):
    """The chip's peak FLOP/s from `roofline.CHIPS`, or None for a chip it does not list."""
    from guide_helpers.roofline import CHIPS

    name = CHIP_NAMES.get(device.device_kind)
    return CHIPS[name].flops if name else None


def bytes_limit(device, compile_only=False):
    """What the chip gives one program: its memory_stats' bytes_limit where it runs (None where
    the platform says nothing); for a run that only compiles, `HBM_LIMIT`, else the chip's HBM
    from `roofline.CHIPS` (None for a chip it does not list)."""
    if not compile_only:
        return (device.memory_stats() or {}).get("bytes_limit")
    from guide_helpers.roofline import CHIPS

    name = CHIP_NAMES.get(device.device_kind)
    return HBM_LIMIT.get(device.device_kind) or (name and CHIPS[name].hbm_bytes)
