"""guide_helpers.onechip, tools/measure_tpu.py and the measurements on record.

No chip is needed: the step is compiled for JAX's CPU (and, by the tool, for a v5e chip with
libtpu), and the recorded measurements are read, not made. The last test re-derives the
estimator's predictions from the record and fails if `guide_helpers.plan` drifts from it.
"""

import json
import subprocess
import sys

import jax
import pytest
from conftest import ROOT

from guide_helpers import compiled as gc
from guide_helpers import figures, onechip, plan, roofline

TINY = plan.Config(vocab=512, embed=128, heads=2, hidden=512, layers=2, seq=64, batch=4)
V5E = roofline.CHIPS["TPU v5e"]


@pytest.mark.parametrize("remat, micro", [("none", 1), ("dots", 1), ("block", 2)])
def test_the_steps_products_are_the_formulas(remat, micro):
    run = onechip.Run(TINY, remat, micro)
    program = onechip.compile_for(run, jax.devices("cpu")[0])
    assert gc.matmul_flops(program) == plan.flops(TINY, onechip.ONE_CHIP, remat)
    state = onechip.predicted(run, V5E).memory
    assert gc.memory(program).arguments == state["state"] + state["tokens"] + 4  # Adam's count


def test_a_run_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="remat must be one of"):
        onechip.Run(TINY, "all")
    with pytest.raises(ValueError, match="does not split into 3 micro-batches"):
        onechip.Run(TINY, "none", 3)


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
        assert r["compiled_bytes"]["temp_size_in_bytes"] == gc.memory(program).temp
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


def test_a_chart_of_ranges_is_white_and_has_one_row_each():
    chart = figures.ranges_chart([("a", 1.1, (1.0, 1.2)), ("b", 3.0, (1.0, 1.2))])
    assert chart.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    assert [t.get_text() for t in chart.axes[0].get_yticklabels()] == ["a", "b"]


def test_the_estimator_holds_every_recorded_step_it_applies_to():
    """From the record alone: the range calibrated on the chip's steps is at most 1.3 times wide
    and holds each step that fills the chip and is not score-bound, in the record and in the
    first record, which it never saw; the memory formula is an upper bound of the compiler."""
    provenance, records = onechip.load(onechip.RECORDED_V5E)
    assert provenance["chip"] == "TPU v5 lite" and len(records) == 14
    assert "tools/measure_tpu.py" in provenance["command"] and provenance["versions"]["libtpu"]
    low, high = onechip.mfu_range(V5E)
    assert high / low <= 1.3
    _, first = onechip.load(onechip.FIRST_V5E)
    for name, steps, applying in (("record", records, 12), ("first record", first, 5)):
        applies = [(run, r) for run, r in steps if onechip.fills(run)]
        applies = [(run, r) for run, r in applies if not onechip.score_bound(run, V5E)]
        assert len(applies) == applying, name
        assert all(onechip.inside(run, r, V5E) for run, r in applies), name
    for run, r in records:
        e = onechip.predicted(run, V5E)
        # the model's FLOPs behind the recorded MFU are plan.model_flops
        assert onechip.mfu(run, r, V5E) == pytest.approx(r["mfu"], abs=1e-3)
        assert r["matmul_flops"] == e.flops  # read from the chip's program
        b = r["compiled_bytes"]
        peak = sum(b[f] for f in ("argument_size_in_bytes", "output_size_in_bytes"))
        peak += b["temp_size_in_bytes"] - b["alias_size_in_bytes"]
        assert e.peak > peak  # the formula over the chip's compile, never under


def test_the_sequence_sweep_is_outside_the_range_exactly_where_the_scores_bind():
    """The sweep (16,384 tokens a step, 512 to 16,384 a sequence), which calibrated nothing: a
    step is outside the FLOP-based range exactly when its scores bind (3 inside, 5 outside), and
    each outside is slower than the range and than moving its scores. In the main record the one
    score-bound step is the 4,096-token one; the threshold lies between the highest ratio inside
    and the lowest outside."""
    provenance, sweep = onechip.load(onechip.SEQUENCE_V5E)
    assert provenance["chip"] == "TPU v5 lite" and "--grid sequence" in provenance["command"]
    assert {run.config.batch * run.config.seq for run, _ in sweep} == {16384}
    ran = [(run, r) for run, r in sweep if "measured_ms_median" in r]
    bound = [onechip.score_bound(run, V5E) for run, _ in ran]
    assert bound.count(False) == 3 and bound.count(True) == 5
    for run, r in ran:
        assert onechip.fills(run) and onechip.inside(run, r, V5E) != onechip.score_bound(run, V5E)
        if onechip.score_bound(run, V5E):
            seconds = r["measured_ms_median"] / 1e3
            assert seconds > onechip.time_range(run, V5E)[1]
            assert seconds >= onechip.score_seconds(run, V5E)
    _, records = onechip.load(onechip.RECORDED_V5E)
    big = [(run, r) for run, r in records if onechip.fills(run)]
    bound = [run for run, _ in big if onechip.score_bound(run, V5E)]
    assert [(run.config.seq, run.config.embed) for run in bound] == [(4096, 1024)]

    def ratio(run):
        return onechip.score_seconds(run, V5E) / onechip.predicted(run, V5E).time.model

    inside = [ratio(run) for run, r in big + ran if onechip.inside(run, r, V5E)]
    outside = [ratio(run) for run, r in big + ran if not onechip.inside(run, r, V5E)]
    assert max(inside) < onechip.SCORE_BOUND < min(outside)


def test_a_configuration_the_compiler_refuses_is_recorded_as_refused():
    _, sweep = onechip.load(onechip.SEQUENCE_V5E)
    refused = [(run, r) for run, r in sweep if not r["fits"]]
    assert [(run.config.embed, run.config.seq) for run, _ in refused] == [(2048, 8192)]
    assert "RESOURCE_EXHAUSTED" in refused[0][1]["refused"] and "peak_GB" not in refused[0][1]


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
