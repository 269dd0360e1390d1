"""guide_helpers.onechip, tools/measure_tpu.py and the measurements on record.

No chip is needed: the step is compiled for JAX's CPU (and, by the tool, for a v5e chip with
libtpu), and the recorded measurements are read, not made. The last test re-derives the
estimator's predictions from the record and fails if `guide_helpers.plan` drifts from it.
"""

import jax
import pytest

from guide_helpers import hlo, onechip, plan, roofline

TINY = plan.Config(vocab=512, embed=128, heads=2, hidden=512, layers=2, seq=64, batch=4)
V5E = roofline.CHIPS["TPU v5e"]


@pytest.mark.parametrize("remat, micro", [("none", 1), ("dots", 1), ("block", 2)])
def test_the_steps_products_are_the_formulas(remat, micro):
    run = onechip.Run(TINY, remat, micro)
    program = onechip.compile_for(run, jax.devices("cpu")[0])
    assert hlo.matmul_flops(program) == plan.flops(TINY, onechip.ONE_CHIP, remat)
    state = onechip.predicted(run, V5E).memory
    assert hlo.memory(program).arguments == state["state"] + state["tokens"] + 4  # Adam's count


def test_a_run_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="remat must be one of"):
        onechip.Run(TINY, "all")
    with pytest.raises(ValueError, match="does not split into 3 micro-batches"):
        onechip.Run(TINY, "none", 3)


def test_the_estimator_holds_every_recorded_step_it_applies_to():
    """From the record alone: the range calibrated on the chip's steps is at most 1.3 times wide
    and holds each step that fills the chip and is not score-bound, in the record and in the
    first record (the same shapes timed again: a repeat, not a test); the memory formula is
    above the compiler's peak for all 14 programs."""
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
        assert e.peak > onechip.compiled_peak(r)  # the formula over the compiler, never under


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


def test_held_out_configurations_miss_the_range_only_at_its_edges():
    """Leave one configuration out, calibrate on the other eleven: a min/max range must miss its
    two extremes (the highest and the lowest MFU) and no other; each misses the nearer edge by
    under 10%. The first record repeats five of the shapes within 1%."""
    _, records = onechip.load(onechip.RECORDED_V5E)
    applies = [(run, r) for run, r in records if onechip.fills(run)]
    applies = [(run, r) for run, r in applies if not onechip.score_bound(run, V5E)]
    mfus = {run: onechip.mfu(run, r, V5E) for run, r in applies}
    outside = {}
    for run, r in applies:
        rest = [m for other, m in mfus.items() if other != run]
        if not onechip.inside(run, r, V5E, (min(rest), max(rest))):
            edge = max(rest) if mfus[run] > max(rest) else min(rest)
            outside[run] = edge / mfus[run] - 1
    assert len(applies) == 12
    assert set(outside) == {max(mfus, key=mfus.get), min(mfus, key=mfus.get)}
    assert all(abs(miss) < 0.1 for miss in outside.values())
    _, first = onechip.load(onechip.FIRST_V5E)
    now = {run: r["measured_ms_median"] for run, r in records}
    again = [now[run] / r["measured_ms_median"] - 1 for run, r in first if onechip.fills(run)]
    assert len(again) == 5 and max(map(abs, again)) < 0.01


def test_the_llama_family_s_records_are_plan_s_configs():
    """Each Llama-shaped record reads as a plan.Config (gated, its kv heads, tied or not) whose
    parameters, matrix-product FLOPs and model FLOPs are the record's; the budget's skipped
    configurations are left out, the refused ones kept."""
    steps = [pair for path in onechip.LLAMA_V5E for pair in onechip.load(path)[1]]
    assert len(steps) == 15 and sum(not r["fits"] for _, r in steps) == 3  # one refused twice
    for run, r in steps:
        assert run.config.gated and run.config.kv_heads == r["config"]["kv_heads"]
        assert round(run.config.params / 1e6, 1) == r["params_M"]
        if r["fits"]:
            assert r["matmul_flops"] == plan.flops(run.config, onechip.ONE_CHIP, run.remat)
            assert r["model_flops"] == plan.model_flops(run.config, onechip.ONE_CHIP)
    assert len({run for run, r in steps if r["fits"]}) == 12


def test_the_time_model_holds_both_families_held_out_configurations():
    """Fitted on each family's first session on the chip, the time model's range is at most 1.3
    times wide and holds every configuration recorded later that it prices (none of them a
    repeat of a fitted shape); the ones it does not price are named."""
    first = onechip.measured(onechip.FIRST_SESSIONS)
    later = onechip.measured(onechip.LATER_SESSIONS, leave_out=[run for run, _ in first])
    assert (len(first), len(later)) == (19, 14)
    fit = [(run, r) for run, r in first if onechip.time_model_prices(run, V5E)]
    model = onechip.fit_time(fit, V5E)
    assert len(fit) == 16 and model.high / model.low <= 1.3
    assert all(model.inside(run, r, V5E) for run, r in fit)
    held = [(run, r) for run, r in later if onechip.time_model_prices(run, V5E)]
    assert {run.config.gated for run, _ in held} == {False, True} and len(held) == 10
    for run, r in held:
        assert model.inside(run, r, V5E), run.name
    # not priced: long sequences, whose scores' traffic outweighs the matrix products
    for run, _ in later:
        if not onechip.time_model_prices(run, V5E):
            assert run.config.seq >= 4096 and onechip.fills(run)


def test_the_memory_formula_bounds_every_compiled_peak_of_both_families_from_above():
    """Above the compiler's peak for every recorded program, the site's and the Llama family's,
    and never within 1.3 times: an upper bound, not the figure (the compiler's is)."""
    steps = onechip.measured((onechip.RECORDED_V5E, onechip.SEQUENCE_V5E, *onechip.LLAMA_V5E))
    over = [onechip.predicted(run, V5E).peak / onechip.compiled_peak(r) for run, r in steps]
    assert len(over) == 33 and 1.3 < min(over)


def test_refused_records_name_the_chips_refusals():
    """The compile-only records load as the same Runs as the chip's refused ones, and each
    listing's kinds add up to the total its refusal names."""
    chip = {
        run: r
        for path in (onechip.RECORDED_V5E, onechip.SEQUENCE_V5E, *onechip.LLAMA_V5E)
        for run, r in onechip.load(path)[1]
        if not r["fits"]
    }
    here = {run: r for p in onechip.REFUSED_V5E for run, r in onechip.load(p)[1] if not r["fits"]}
    assert set(here) == set(chip) and len(here) == 3
    for run, r in here.items():
        assert r["refused"] == chip[run]["refused"]
        assert sum(r["memory_by_kind"].values()) == r["memory_total"]
