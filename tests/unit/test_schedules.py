"""guide_helpers.schedules: GPipe, 1F1B and ZB-H1 played by hand, a deadlock refused, the table,
and the schedules played as events in time with sends."""

from functools import partial

import numpy as np
import pytest

from guide_helpers import schedules


def gpipe(stage, micro, repeats):
    forwards = [("F", m, 0) for m in range(micro)]
    return forwards + [("B", m, 0) for m in reversed(range(micro))]


def one_f_one_b(stage, micro, repeats, stages=2):
    warm = min(stages - stage - 1, micro)
    order = [("F", m, 0) for m in range(warm)]
    for m in range(micro):
        order += ([("F", warm + m, 0)] if warm + m < micro else []) + [("B", m, 0)]
    return order


def zb_h1(stage, micro, repeats, stages=2):
    """1F1B's F and B; stage s runs each W s backwards late, the ones it still owes at the end."""
    order, owed = [], [("W", m, 0) for m in range(micro)]
    for w in one_f_one_b(stage, micro, repeats, stages):
        order.append(w)
        if w[0] == "B" and sum(x[0] == "B" for x in order) > stage:
            order.append(owed.pop(0))
    return order + owed


def test_gpipe_on_two_stages_by_hand():
    # stage 0: F0 F1 .  .  B1 B0 ; stage 1: .  F0 F1 B1 B0 .
    timeline = schedules.play(gpipe, 2, stages=2)
    assert [now[0] for now in timeline] == [
        ("F", 0, 0), ("F", 1, 0), None, None, ("B", 1, 0), ("B", 0, 0)
    ]  # fmt: skip
    assert [now[1] for now in timeline] == [
        None, ("F", 0, 0), ("F", 1, 0), ("B", 1, 0), ("B", 0, 0), None
    ]  # fmt: skip
    assert schedules.simulate(gpipe, 2, stages=2) == (6, 4, 2)


def test_one_f_one_b_holds_at_most_the_stages():
    ticks, idle, held = schedules.simulate(one_f_one_b, 8, stages=2)
    assert (ticks, idle, held) == (2 * (8 + 1), 2 * 2 * 1, 2)
    assert schedules.simulate(gpipe, 8, stages=2)[2] == 8


def test_interleaved_gpipe_visits_both_runs_of_layers():
    def circular(stage, micro, repeats):
        forwards = [("F", m, r) for r in range(repeats) for m in range(micro)]
        return forwards + [("B", m, r) for _, m, r in reversed(forwards)]

    ticks, idle, _ = schedules.simulate(circular, 2, repeats=2, stages=2)
    assert (ticks, idle) == (2 * (2 * 2 + 1), 2 * 2 * 1)


def test_a_schedule_that_cannot_go_on_is_refused_with_the_tick():
    def backward_first(stage, micro, repeats):
        return [("B", 0, 0), ("F", 0, 0)]

    with pytest.raises(ValueError, match="waits forever at tick 0"):
        schedules.play(backward_first, 1, stages=2)


def test_table_codes_kind_micro_batch_and_repeat():
    kinds, micros, repeats = schedules.table(gpipe, 2, stages=2)
    assert kinds.dtype == np.int32 and kinds.shape == (6, 2)
    assert kinds[:, 1].tolist() == [0, 1, 1, 2, 2, 0]
    assert micros[:, 0].tolist() == [0, 1, 0, 0, 1, 0] and not repeats.any()


def when(timeline, stages):
    """{(kind, virtual stage, micro-batch): tick}, failing if a piece runs twice."""
    ticks = {}
    for t, now in enumerate(timeline):
        for s, w in enumerate(now):
            if w:
                key = (w[0], w[2] * stages + s, w[1])
                assert key not in ticks, f"{key} runs twice"
                ticks[key] = t
    return ticks


@pytest.mark.parametrize("stages, micro", [(2, 2), (2, 8), (4, 4), (4, 16), (5, 7)])
def test_zb_h1_keeps_every_dependency(stages, micro):
    ticks = when(schedules.play(partial(zb_h1, stages=stages), micro, stages=stages), stages)
    assert len(ticks) == 3 * stages * micro  # every F, B and W, once
    for k in range(stages):
        for m in range(micro):
            assert ticks["F", k, m] < ticks["B", k, m] < ticks["W", k, m]
            if k > 0:  # the forward waits for the previous stage's, the input gradient
                assert ticks["F", k - 1, m] < ticks["F", k, m]  # goes back a stage at a time
            if k < stages - 1:
                assert ticks["B", k + 1, m] < ticks["B", k, m]


@pytest.mark.parametrize("stages, micro", [(2, 8), (4, 4), (4, 16), (5, 7)])
def test_zb_h1_has_a_third_of_1f1b_bubble_and_holds_as_much(stages, micro):
    zb = schedules.simulate(partial(zb_h1, stages=stages), micro, stages=stages)
    ours = partial(one_f_one_b, stages=stages)
    assert zb[:2] == (3 * micro + stages - 1, stages * (stages - 1))
    fused = schedules.timed(ours, micro, stages=stages, compute={"F": 1, "B": 2})
    assert fused == (3 * (micro + stages - 1), 0)  # 1F1B, its backward B and W in one piece
    assert zb[2] == schedules.simulate(ours, micro, stages=stages)[2] == stages


def test_a_micro_batch_is_held_until_its_weight_gradient():
    def late_weights(stage, micro, repeats):  # 1F1B's order, every W left to the end
        return one_f_one_b(stage, micro, repeats) + [("W", m, 0) for m in range(micro)]

    assert schedules.simulate(one_f_one_b, 6, stages=2)[2] == 2
    assert schedules.simulate(late_weights, 6, stages=2)[2] == 6


def test_a_weight_gradient_before_its_backward_is_refused():
    def weights_first(stage, micro, repeats):
        return [("F", 0, 0), ("W", 0, 0), ("B", 0, 0)]

    with pytest.raises(ValueError, match="waits forever at tick 2"):
        schedules.play(weights_first, 1, stages=2)
    with pytest.raises(ValueError, match="waits forever"):
        schedules.timed(weights_first, 1, stages=2, compute=1.0)


@pytest.mark.parametrize("stages, micro", [(2, 3), (4, 8), (3, 5)])
def test_timed_without_sends_is_play(stages, micro):
    for schedule in (gpipe, partial(one_f_one_b, stages=stages), partial(zb_h1, stages=stages)):
        length = len(schedules.play(schedule, micro, stages=stages))
        assert schedules.timed(schedule, micro, stages=stages, compute=1) == (length, 0)


def test_timed_gpipe_with_sends_by_hand():
    # stage 0: F0 0-1, F1 1-2; stage 1: F0 1.5-2.5, F1 2.5-3.5, B1 3.5-4.5, B0 4.5-5.5;
    # stage 0: B1 from 5 (4.5 + the send), B0 from 6: the step ends at 7, 6 without sends.
    assert schedules.timed(gpipe, 2, stages=2, compute=1.0, send=0.5) == (7.0, 1.0)
    step, exposed = schedules.timed(gpipe, 2, stages=2, compute={"F": 1.0, "B": 2.0}, send=0.5)
    assert (step, exposed) == (10.0, 1.0)  # B1, B0: 3.5-7.5 on stage 1, 6-10 on stage 0


def test_plain_1f1b_exposes_sends_in_its_steady_state():
    # The round trip from stage 0 to the last stage and back, 2 (stages - 1) sends, has no
    # slack and recurs every `stages` micro-batches; ZB-H1's late W's leave slack for it.
    send = 1e-3
    for stages in (2, 4):
        ours = partial(one_f_one_b, stages=stages)
        exposed = [
            schedules.timed(ours, m, stages=stages, compute=1.0, send=send)[1] / send
            for m in (16, 32)
        ]
        assert round(exposed[1] - exposed[0], 6) == 16 * 2 * (stages - 1) / stages
    four = partial(one_f_one_b, stages=4)
    assert round(schedules.timed(four, 16, stages=4, compute=1.0, send=send)[1] / send) == 28
    zb = [
        schedules.timed(partial(zb_h1, stages=4), m, stages=4, compute=1.0, send=send)[1] / send
        for m in (16, 32)
    ]
    assert round(zb[0], 6) == round(zb[1], 6) == 12


def test_table_codes_the_weight_gradient():
    kinds, micros, _ = schedules.table(zb_h1, 2, stages=2)
    assert sorted(kinds[kinds > 0].tolist()) == [1] * 4 + [2] * 4 + [3] * 4
    assert kinds[:, 0].tolist().index(3) > kinds[:, 0].tolist().index(2)


def test_timed_sends_only_between_devices():
    def both_runs(stage, micro, repeats):  # one device holds virtual stages 0 and 1
        return [("F", 0, 0), ("F", 0, 1), ("B", 0, 1), ("B", 0, 0)]

    assert schedules.timed(both_runs, 1, repeats=2, stages=1, compute=1.0, send=5.0) == (4.0, 0)
    step, exposed = schedules.timed(gpipe, 1, repeats=1, stages=2, compute=1.0, send=5.0)
    assert (step, exposed) == (14.0, 10.0)  # the forward down and the gradient back: 2 sends
