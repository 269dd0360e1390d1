"""Each guide's device-setup cell, run where it can and cannot work.

The cell asks JAX for 8 emulated CPU devices, which only takes effect before JAX starts its
backend. Run after something else started JAX with one device, it must stop at once with a
message that says what to do, not fail later, deep inside a sharded computation. On a runtime
with fewer accelerators than a guide needs (Colab's one-chip TPU or one-GPU runtimes), it runs
the guide on emulated CPU devices and says so in one line; it decides from what the host shows
(PCI ids, /dev, JAX's plugins), faked here, before JAX starts its backends.
"""

import os
import re
import sys
from types import SimpleNamespace

import pytest
from conftest import run

# tools/, on sys.path through conftest: every guide's cell 2, which tests/site/test_site.py checks
from shared_cells import SETUP_CELL

import guide_helpers.devices as devices
from guide_helpers.devices import (
    FALLBACK_LINE,
    NONE,
    Accelerators,
    accelerators,
    fallback_line,
)


def clean_env(except_platforms=False):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    if not except_platforms:
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


# What the host shows, faked: PCI devices (vendor, device id) and /dev entries.
GVNIC = ("0x1ae0", "0x0042")  # Google's virtual NIC: Google's vendor id, but no TPU
V5E, V6E, V3, V4 = (
    ("0x1ae0", "0x0063"),
    ("0x1ae0", "0x006f"),
    ("0x1ae0", "0x0027"),
    ("0x1ae0", "0x005e"),
)
INTEL = ("0x8086", "0x1237")


def host(tmp_path, pci=(), dev=()):
    """A fake /sys/bus/pci/devices and /dev under tmp_path; returns their paths."""
    for i, (vendor, device) in enumerate(pci):
        folder = tmp_path / "pci" / f"0000:00:{i:02x}.0"
        folder.mkdir(parents=True)
        (folder / "vendor").write_text(vendor + "\n")
        (folder / "device").write_text(device + "\n")
    (tmp_path / "pci").mkdir(exist_ok=True)
    (tmp_path / "dev").mkdir()
    for name in dev:
        (tmp_path / "dev" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / name).write_text("")
    return str(tmp_path / "pci"), str(tmp_path / "dev")


@pytest.mark.parametrize(
    "runtime, pci, dev, environ, expected",
    [
        ("Colab CPU", [INTEL, GVNIC], [], {}, ("", 0)),
        ("Colab TPU v5e-1", [INTEL, GVNIC, V5E], [], {}, ("TPU v5e", 1)),
        ("Colab TPU v6e-1", [INTEL, V6E], [], {}, ("TPU v6e", 1)),
        ("Kaggle TPU v5e-8", [INTEL] + [V5E] * 8, [], {}, ("TPU v5e", 8)),
        ("TPU v3-8: 4 chips of 2 cores", [V3] * 4, [], {}, ("TPU v3", 8)),
        ("TPU v4-8: 4 megacore chips", [V4] * 4, [], {}, ("TPU v4", 4)),
        ("TPU v4-8, /dev/accel0-3", [V4] * 4, [f"accel{i}" for i in range(4)], {}, ("TPU v4", 4)),
        ("v5e host, 1 of 4 handed over", [V5E] * 4, ["vfio/3", "vfio/vfio"], {}, ("TPU v5e", 1)),
        ("TPU, JAX_PLATFORMS=cpu", [V5E], [], {"JAX_PLATFORMS": "cpu"}, ("", 0)),
        ("Colab GPU (T4)", [INTEL], ["nvidia0", "nvidiactl", "nvidia-uvm"], {}, ("NVIDIA GPU", 1)),
        ("8 GPUs", [], [f"nvidia{i}" for i in range(8)] + ["nvidiactl"], {}, ("NVIDIA GPU", 8)),
        (
            "8 GPUs, 2 visible",
            [],
            [f"nvidia{i}" for i in range(8)],
            {"CUDA_VISIBLE_DEVICES": "0,1"},
            ("NVIDIA GPU", 2),
        ),
    ],
)
def test_the_accelerators_are_found_without_starting_jax(
    runtime, pci, dev, environ, expected, tmp_path
):
    pci_path, dev_path = host(tmp_path, pci, dev)
    found = accelerators(pci_path, dev_path, environ, installed=lambda kind: True)
    assert (found.name, found.devices) == expected, runtime


def test_without_jaxs_plugin_an_accelerator_does_not_count(tmp_path):
    """JAX built for the CPU (no libtpu, no CUDA plugin) runs on the CPU whatever the host has."""
    pci_path, dev_path = host(tmp_path, [V5E], ["nvidia0"])
    assert accelerators(pci_path, dev_path, {}, installed=lambda kind: False) == NONE


# The setup cell in a fresh process, on a host whose accelerators are faked: `accelerators`
# answers as on that host, and the rest (JAX's own choice of platform, its device count) is real.
FAKE_HOST = """\
import guide_helpers.devices as devices
devices.accelerators = lambda: devices.Accelerators("TPU", "TPU v5e", {chips})
"""
AFTER = '\nprint("jax_platforms:", jax.config.jax_platforms)'


def setup_cell_on(chips, before=""):
    code = FAKE_HOST.format(chips=chips) + before + SETUP_CELL + AFTER
    return run([sys.executable, "-c", code], 300, env=clean_env(except_platforms=True))


def test_on_a_one_chip_runtime_the_setup_cell_falls_back_to_cpu_devices():
    result = setup_cell_on(1)
    assert result.returncode == 0, result.stdout
    fallback, counted, platforms = result.stdout.strip().splitlines()
    assert fallback == fallback_line(Accelerators("TPU", "TPU v5e", 1), 8), fallback
    assert FALLBACK_LINE.sub("", result.stdout) == "8 devices, platform cpu\njax_platforms: cpu\n"
    assert (
        fallback.startswith("Found 1 TPU v5e device(s), fewer than the 8") and "Kaggle" in fallback
    )
    assert counted == "8 devices, platform cpu" and platforms == "jax_platforms: cpu"


def test_with_enough_real_devices_the_setup_cell_changes_nothing():
    result = setup_cell_on(8)
    assert result.returncode == 0, result.stdout
    # This host has no TPU, so JAX itself picks the CPU: the cell did not choose for it.
    assert result.stdout.strip().splitlines() == ["8 devices, platform cpu", "jax_platforms: None"]


def test_on_a_one_chip_runtime_after_jax_started_the_cell_says_restart():
    started_first = "import jax\nprint('started with', jax.device_count(), 'device')\n"
    result = setup_cell_on(1, before=started_first)
    assert result.returncode == 1, result.stdout
    last = result.stdout.strip().splitlines()[-1]
    assert re.match(r"RuntimeError: This guide needs 8 devices, found 1\b", last), result.stdout
    assert "Restart the kernel" in last and "Found" not in result.stdout, result.stdout


def test_the_advice_names_runtimes_that_exist():
    """Colab's 8-device TPU runtime was retired in September 2025 (colabtools#5566)."""
    one_gpu = [SimpleNamespace(platform="gpu")]
    advice = fallback_line(Accelerators("GPU", "NVIDIA GPU", 1), 8) + devices._fix(one_gpu, 8)
    assert "v2-8" not in advice and advice.count("Kaggle's TPU v5e-8") == 2, advice
