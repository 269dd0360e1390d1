"""tools/measure_tpu.py: what it records, on the CPU and for a v5e chip with libtpu, and what it
says where it cannot run."""

import json
import subprocess
import sys

import jax
import pytest
from conftest import ROOT

from guide_helpers import hlo, onechip, plan, roofline

TINY = plan.Config(vocab=512, embed=128, heads=2, hidden=512, layers=2, seq=64, batch=4)
V5E = roofline.CHIPS["TPU v5e"]


def tool(tmp_path, *args):
    out = tmp_path / "measured.jsonl"
    command = [sys.executable, str(ROOT / "tools" / "measure_tpu.py"), "--grid", "tiny", *args]
    result = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return onechip.load(out), [json.loads(line) for line in out.read_text().splitlines()]


def test_the_tool_records_a_run_with_its_provenance(tmp_path):
    (provenance, records), _ = tool(tmp_path, "--platform", "cpu", "--steps", "2", "--warmup", "1")
    assert provenance["platform"] == "cpu" and provenance["versions"]["jax"] == jax.__version__
    assert "tools/measure_tpu.py" in provenance["command"] and provenance["date"]
    assert [run.remat for run, _ in records] == ["none", "block"]
    for run, r in records:
        program = onechip.compile_for(run, jax.devices("cpu")[0])
        assert r["compiled_bytes"]["temp_size_in_bytes"] == hlo.memory(program).temp
        assert r["matmul_flops"] == plan.flops(run.config, onechip.ONE_CHIP, run.remat)
        low, high = r["measured_ms_min_max"]
        assert low <= r["measured_ms_median"] <= high and r["mfu"] is None  # no CPU peak


def test_the_tool_plans_a_run_with_the_tpu_compiler(tmp_path):
    (provenance, records), _ = tool(tmp_path, "--compile-only")
    assert provenance["chip"] == "TPU v5 lite" and provenance["peak_flops"] == V5E.flops
    assert all(r["fits"] and "measured_ms_median" not in r for _, r in records)


def test_the_tool_says_where_to_run_it(tmp_path):
    command = [sys.executable, str(ROOT / "tools" / "measure_tpu.py"), "--out", "x.jsonl"]
    env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 2 and "run this on a TPU host" in result.stderr


def test_the_tool_records_a_compilers_refusal_and_raises_anything_else(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("measure_tpu", ROOT / "tools" / "measure_tpu.py")
    measure_tpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure_tpu)
    run, device = measure_tpu.grid("tiny")[0], jax.devices("cpu")[0]

    def refuse(message):
        def compile_for(run, device):
            raise jax.errors.JaxRuntimeError(message)

        monkeypatch.setattr(onechip, "compile_for", compile_for)

    refuse("RESOURCE_EXHAUSTED: Ran out of memory on HBM\nmore")
    record = measure_tpu.measure(run, device, 2, 1, None, None)
    assert not record["fits"]
    assert record["refused"] == "RESOURCE_EXHAUSTED: Ran out of memory on HBM"
    refuse("INTERNAL: something else")
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        measure_tpu.measure(run, device, 2, 1, None, None)
