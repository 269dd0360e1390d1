"""The device check of every guide's setup cell.

A guide needs 8 devices (16 for the 8B plan). A CPU host emulates them. A host with that many
accelerators uses them. A runtime with fewer, such as Colab's one-chip TPU v5e-1 or a one-GPU
runtime, runs the guide on emulated CPU devices instead, and says so in one line. The choice is
made before JAX starts its backends, from what the host shows without starting them: the
TPU chips on the PCI bus (as JAX itself finds them), the NVIDIA GPUs' device files, and whether
JAX's plugin for them is installed. Once the backends have started, `jax_platforms` can no
longer change and the cell stops with what to do: restart the kernel.
"""

import contextlib
import glob
import importlib.util
import os
import re
from pathlib import Path
from typing import NamedTuple

import jax

RESTART = (
    "JAX had already started its backends before this cell chose the devices, so the "
    "setting cannot take effect. Restart the kernel (in Colab: Runtime > Restart session) "
    "and run this cell before any other cell uses jax."
)
# Where 8 real devices are to be had since Colab retired its 8-device TPU runtime (September 2025,
# googlecolab/colabtools#5566): Kaggle's TPU v5e-8 runtime, or a Cloud TPU VM of 8 chips.
WHERE_EIGHT = "Kaggle's TPU v5e-8 runtime or a Cloud TPU VM (v5litepod-8, v6e-8)"

# TPU chips as JAX finds them on the PCI bus: Google's vendor id, then a device id per
# generation (jax/_src/hardware_utils.py). JAX shows each TensorCore of a v3 and of a TPU7x chip
# as a device of its own; v4 and v5p fuse a chip's two cores into one device (megacore), and v5e
# and v6e chips have one core.
GOOGLE = "0x1ae0"
TPU_CHIPS = {  # PCI device id: (name, JAX devices per chip)
    "0x0027": ("TPU v3", 2),
    "0x005e": ("TPU v4", 1),
    "0x0062": ("TPU v5p", 1),
    "0x0063": ("TPU v5e", 1),
    "0x006f": ("TPU v6e", 1),
    "0x0076": ("TPU7x", 2),
}
PCI = "/sys/bus/pci/devices"
NVIDIA_GPU = re.compile(r"nvidia\d+$")  # /dev/nvidia0, /dev/nvidia1, ... one per GPU
# JAX's plugin for each kind, without which JAX runs on the CPU whatever the host has.
PLUGINS = {"TPU": ("libtpu",), "GPU": ("jax_cuda12_plugin", "jax_cuda13_plugin")}


class Accelerators(NamedTuple):
    kind: str  # "TPU", "GPU", or "" when JAX would find none
    name: str  # e.g. "TPU v5e", "NVIDIA GPU"
    devices: int  # the devices JAX would show


NONE = Accelerators("", "", 0)


def _tpu_chips(pci=PCI):
    """(name, JAX devices) of the TPU chips on the PCI bus under `pci`."""
    chips = []
    for vendor in sorted(glob.glob(f"{pci}/*/vendor")):
        folder = Path(vendor).parent
        if Path(vendor).read_text().strip() == GOOGLE and (folder / "device").exists():
            chip = TPU_CHIPS.get((folder / "device").read_text().strip())
            chips += [chip] if chip else []
    return chips


def _tpu_chips_opened(dev="/dev"):
    """How many TPU chips this machine may open, by their device files: /dev/accelN (TPU v2 to
    v4, v5p) or a numbered /dev/vfio/N group (v5e, v6e); None when /dev shows neither. A
    sandbox can show every chip of the host on the PCI bus and hand over fewer (seen on a TPU
    v5e host lent to this project: 4 chips on the bus, one /dev/vfio group, one JAX device)."""
    accel = glob.glob(f"{dev}/accel[0-9]*")
    vfio = [f for f in glob.glob(f"{dev}/vfio/*") if Path(f).name.isdigit()]
    return len(accel) + len(vfio) or None


def _nvidia_gpus(dev="/dev", visible=None):
    """How many NVIDIA GPUs this process may use: device files, limited by CUDA_VISIBLE_DEVICES."""
    found = len([f for f in os.listdir(dev) if NVIDIA_GPU.match(f)]) if os.path.isdir(dev) else 0
    if visible is None:
        return found
    return min(found, len([d for d in visible.split(",") if d.strip()]))


def _plugin_installed(kind):
    return any(importlib.util.find_spec(name) is not None for name in PLUGINS[kind])


def accelerators(pci=PCI, dev="/dev", environ=None, installed=_plugin_installed):
    """The accelerators JAX would use here, found without starting JAX's backends.

    JAX_PLATFORMS, when set, is the user's choice: only the platform it names first counts."""
    environ = os.environ if environ is None else environ
    wanted = environ.get("JAX_PLATFORMS", "").split(",")[0].strip().lower()
    chips = _tpu_chips(pci)[: _tpu_chips_opened(dev)]
    if chips and installed("TPU") and wanted in ("", "tpu"):
        return Accelerators("TPU", chips[0][0], sum(devices for _, devices in chips))
    gpus = _nvidia_gpus(dev, environ.get("CUDA_VISIBLE_DEVICES"))
    if gpus and installed("GPU") and wanted in ("", "cuda", "gpu"):
        return Accelerators("GPU", "NVIDIA GPU", gpus)
    return NONE


def fallback_line(found, needed):
    """The one line a setup cell prints when it runs a guide on emulated CPU devices."""
    return (
        f"Found {found.devices} {found.name} device(s), fewer than the {needed} this guide "
        f"needs: it runs on {needed} emulated CPU devices instead. For {needed} real devices: "
        f"{WHERE_EIGHT}."
    )


# That line, whatever the host found: what a comparison of outputs across hosts takes out.
FALLBACK_LINE = re.compile(
    r"^Found \d+ .+ device\(s\), fewer than the \d+ this guide needs: it runs on \d+ emulated "
    r"CPU devices instead\. .*\n",
    re.M,
)


def _fix(devices, needed):
    platform = devices[0].platform
    if platform == "cpu":
        return RESTART
    return (
        f"This runtime has {len(devices)} {platform.upper()} device(s). With JAX_PLATFORMS "
        f"unset, this cell runs the guide on {needed} emulated CPU devices; for {needed} real "
        f"ones, use {WHERE_EIGHT}."
    )


@contextlib.contextmanager
def require_devices(needed, platform=None, found=None):
    """Run the device setting inside; afterwards, stop with what to do if there are too few.

    On a runtime with fewer accelerators than `needed` (`found`, by default `accelerators()`),
    first make JAX's default platform the CPU, before its backends start, and print one line
    that says so. `platform="cpu"` counts JAX's CPU devices, for a guide that compiles for them
    on any host, which needs no fallback.

    `jax.config.update("jax_num_cpu_devices", n)` raises once JAX has started its backends
    with another count; that error, too, becomes the message that says how to recover.
    """
    found = accelerators() if found is None else found
    fall_back = platform is None and 0 < found.devices < needed
    if fall_back:
        jax.config.update("jax_platforms", "cpu")  # takes effect only before backends start
    try:
        yield
    except RuntimeError as error:
        if "before backends are initialized" not in str(error):
            raise
        found = len(jax.devices(platform))
        message = f"This guide needs {needed} devices, found {found}. {RESTART}"
        raise RuntimeError(message) from error
    devices = jax.devices(platform)
    if fall_back and devices[0].platform != "cpu":
        message = f"This guide needs {needed} devices, found {len(devices)}. {RESTART}"
        raise RuntimeError(message)
    if len(devices) < needed:
        message = f"This guide needs {needed} devices, found {len(devices)}. "
        raise RuntimeError(message + _fix(devices, needed))
    if fall_back:
        print(fallback_line(found, needed))
    print(f"{len(devices)} devices, platform {devices[0].platform}")
