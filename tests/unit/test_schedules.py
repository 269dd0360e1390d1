"""guide_helpers.schedules: GPipe and 1F1B played by hand, a deadlock refused, the table."""

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
