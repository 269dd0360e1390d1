"""guide_helpers.devices: require_devices and what it tells a reader with too few devices."""

from types import SimpleNamespace

import pytest

from guide_helpers import require_devices


def test_require_devices_names_the_fix_for_too_few_accelerators(monkeypatch):
    one_gpu = [SimpleNamespace(platform="gpu")]
    monkeypatch.setattr("guide_helpers.devices.jax.devices", lambda backend=None: one_gpu)
    with pytest.raises(RuntimeError, match=r"needs 8 devices, found 1\. This runtime has 1 GPU"):
        with require_devices(8):
            pass


def test_require_devices_on_cpu_counts_the_cpu_devices_of_a_gpu_host(monkeypatch, capsys):
    gpu, cpu = SimpleNamespace(platform="gpu"), SimpleNamespace(platform="cpu")
    host = {None: [gpu] * 8, "cpu": [cpu] * 16}
    monkeypatch.setattr("guide_helpers.devices.jax.devices", lambda backend=None: host[backend])
    with require_devices(16, platform="cpu"):
        pass
    assert capsys.readouterr().out == "16 devices, platform cpu\n"
    with pytest.raises(RuntimeError, match=r"needs 16 devices, found 8\. This runtime has 8 GPU"):
        with require_devices(16):
            pass


def test_require_devices_passes_other_errors_through_and_prints_the_count(capsys):
    with pytest.raises(RuntimeError, match="unrelated"):
        with require_devices(8):
            raise RuntimeError("unrelated")
    with require_devices(8):
        pass
    assert capsys.readouterr().out == "8 devices, platform cpu\n"
