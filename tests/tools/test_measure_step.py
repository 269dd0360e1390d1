"""tools/measure_step.py: any step file's configurations, measured on the CPU, compiled for a v5e
chip with libtpu, and a compiler's refusal recorded."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import pytest
from conftest import ROOT

from guide_helpers import buffers, hlo, onechip, plan, roofline
from guide_helpers.llama_family import LlamaConfig

TOOL = ROOT / "tools" / "measure_step.py"
STEPS = ROOT / "tools" / "steps"


def tool(tmp_path, *args, env=None):
    out = tmp_path / "measured.jsonl"
    command = [sys.executable, str(TOOL), *args, "--out", str(out)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return lines[0]["provenance"], lines[1:]


def load_tool():
    spec = importlib.util.spec_from_file_location("measure_step", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tool_measures_a_step_file_with_its_provenance(tmp_path):
    step = str(STEPS / "llama_family.py")
    args = ("--step", step, "--set", "tiny", "--platform", "cpu", "--steps", "2", "--warmup", "1")
    provenance, records = tool(tmp_path, *args)
    assert provenance["platform"] == "cpu" and provenance["versions"]["jax"] == jax.__version__
    assert "tools/measure_step.py" in provenance["command"] and provenance["step"] == step
    assert provenance["date"] and provenance["steps"] == 2
    assert [r["config"]["tied"] for r in records] == [True, False]
    for r in records:
        config = LlamaConfig(**r["config"])
        assert r["what"] == config.name and r["fits"] and r["compile_s"] > 0
        assert r["matmul_flops"] == config.matmul_flops() <= r["xla_flops"]
        assert r["model_flops"] == config.model_flops()
        b = r["compiled_bytes"]
        assert b["temp_size_in_bytes"] > 0 and b["alias_size_in_bytes"] > 0  # state donated
        low, high = r["measured_ms_min_max"]
        assert low <= r["measured_ms_median"] <= high and r["mfu"] is None  # no CPU peak
        first, last = r["loss_first_last"]
        assert last < first  # 3 steps of AdamW on the same tokens


def test_the_transformer_step_file_is_onechips_step(tmp_path):
    args = ("--step", str(STEPS / "transformer.py"), "--set", "tiny", "--platform", "cpu")
    _, records = tool(tmp_path, *args, "--steps", "0")  # compile only, on the CPU
    runs = [onechip.Run(plan.Config(**r["config"]["config"]), r["config"]["remat"],
                        r["config"]["micro_batches"]) for r in records]  # fmt: skip
    assert [run.remat for run in runs] == ["none", "block"]
    program = onechip.compile_for(runs[0], jax.devices("cpu")[0])
    assert records[0]["compiled_bytes"]["temp_size_in_bytes"] == hlo.memory(program).temp
    for run, r in zip(runs, records):
        assert r["matmul_flops"] == plan.flops(run.config, onechip.ONE_CHIP, run.remat)
        assert "measured_ms_median" not in r


def test_a_compilers_refusal_is_recorded_and_the_run_goes_on(tmp_path):
    args = ("--step", str(STEPS / "llama_family.py"), "--set", "too_big")
    provenance, [record] = tool(tmp_path, *args, "--compile-only", "v5e:2x2")
    assert provenance["chip"] == "TPU v5 lite" and provenance["compile_only"] == "v5e:2x2"
    assert provenance["peak_flops"] == roofline.CHIPS["TPU v5e"].flops
    assert not record["fits"] and record["refused"].startswith("RESOURCE_EXHAUSTED")
    assert "exceeds available HBM (15.75G)" in record["compiler_message"]
    assert "measured_ms_median" not in record and "peak_GB" not in record
    # what fills the memory: the total the message names (in GiB), by kind
    needed, _ = buffers.refused_bytes(record["refused"])
    assert abs(record["memory_total"] - needed) < 0.006 * 2**30
    assert sum(record["memory_by_kind"].values()) == record["memory_total"]
    assert {"parameters", "optimizer state", "attention scores"} <= set(record["memory_by_kind"])
    largest = record["largest_buffers"]  # 8 x 4,096 x 4,096 scores a head, and the logits
    assert largest[0]["kind"] == "attention scores" and "logits" in {b["kind"] for b in largest}
    assert largest[0]["source"].startswith("llama_family.py:")


def test_only_the_compilers_refusal_is_recorded():
    measure_step = load_tool()
    said = measure_step._refusal(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: HBM\nmore"))
    assert said["refused"] == "RESOURCE_EXHAUSTED: HBM"
    assert said["compiler_message"].endswith("more")
    with pytest.raises(jax.errors.JaxRuntimeError, match="INTERNAL"):
        measure_step._refusal(jax.errors.JaxRuntimeError("INTERNAL: something else"))


def test_a_step_is_found_by_path_module_or_module_and_function(tmp_path, monkeypatch):
    measure_step = load_tool()
    (tmp_path / "my_steps.py").write_text(
        "def configurations():\n    return ['a']\n\n\n"
        "def build(config):\n    return 'build'\n\n\n"
        "def other(config):\n    return 'other'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for spec, name in [(str(tmp_path / "my_steps.py"), "build"), ("my_steps", "build"),
                       ("my_steps:other", "other")]:  # fmt: skip
        configurations, build = measure_step.load_step(spec)
        assert configurations() == ["a"] and build(None) == name


def test_the_tool_says_where_to_run_it(tmp_path):
    command = [sys.executable, str(TOOL), "--step", str(STEPS / "llama_family.py"), "--out", "x"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env)
    assert result.returncode == 2 and "run this on a TPU host" in result.stderr


def test_the_chips_list_varies_what_issue_61_asks_and_keeps_a_budget(tmp_path):
    measure_step = load_tool()
    configurations, _ = measure_step.load_step(str(STEPS / "llama_family.py"))
    chosen = configurations()
    assert len(chosen) >= 12 + 2 and len({c.name for c in chosen}) == len(chosen)
    assert {c.remat for c in chosen} == {"none", "dots", "block"}
    assert {(c.vocab, c.tied) for c in chosen} >= {(32000, False), (128256, True), (128256, False)}
    for field in ("embed", "layers", "kv_heads", "seq", "batch"):
        assert len({getattr(c, field) for c in chosen}) >= 3, field
    args = ("--step", str(STEPS / "llama_family.py"), "--set", "tiny", "--platform", "cpu")
    _, records = tool(tmp_path, *args, "--budget", "1e-9")  # spent before the first one
    assert [r["skipped"] for r in records] == ["budget", "budget"]


def test_a_step_over_the_limit_says_what_fills_its_memory():
    measure_step = load_tool()
    configurations, build = measure_step.load_step(str(STEPS / "llama_family.py"))
    config = configurations("tiny")[1]  # untied: the head is a table of its own
    device = jax.devices("cpu")[0]
    record = measure_step.measure(config, build, device, 0, 0, None, limit=1)
    assert not record["fits"] and "measured_ms_median" not in record
    by_kind, total = record["memory_by_kind"], record["memory_total"]
    assert sum(by_kind.values()) == total >= record["compiled_bytes"]["temp_size_in_bytes"]
    assert by_kind["parameters"] == 4 * config.params  # f32, each in its own allocation
    assert by_kind["optimizer state"] == 8 * config.params + 4  # AdamW's two moments, a count
    assert by_kind["batch"] == 4 * config.batch * (config.seq + 1)
    largest = record["largest_buffers"]
    assert len(largest) == measure_step.LARGEST
    assert [b["bytes"] for b in largest] == sorted((b["bytes"] for b in largest), reverse=True)
    logits = f"f32[{config.batch},{config.seq},{config.vocab}]"
    assert any(b["kind"] == "logits" and b["shape"] == logits for b in largest)
    json.dumps(record)  # recorded as it is
