"""Pipeline schedules played tick by tick: what each device runs, and what that costs.

A schedule is a function `(stage, micro, repeats) -> [(kind, micro_batch, repeat), ...]`: the
order in which the device of stage `stage` runs forwards ("F") and backwards ("B") of `micro`
micro-batches, each through `repeats` runs of layers (virtual stage `repeat x stages + stage`,
the interleaved placement; 1 repeat: one run of layers a device). The pipeline pages write
their schedules; this module plays them:

- `play`: tick by tick, every device running the next piece of work on its list once what it
  needs is done (a forward: the previous virtual stage's forward; a backward: its own forward and
  the next virtual stage's backward). Each piece takes one tick.
- `simulate`: the ticks, the idle device-ticks (the bubble) and the most micro-batches any device
  holds between a forward and its backward.
- `table`: the timeline as integer arrays that a `shard_map` body indexes by tick and stage.
"""

import numpy as np

KINDS = {"F": 1, "B": 2}  # table's codes; 0 is idle


def play(schedule, micro, repeats=1, stages=4):
    """A list of ticks, each [(kind, micro-batch, repeat) or None for every device].

    Raises ValueError, naming the tick and what each device waits on, when no device can go on.
    """
    todo = {s: list(schedule(s, micro, repeats)) for s in range(stages)}
    done, timeline, last = set(), [], stages * repeats - 1
    while any(todo.values()):
        now = [None] * stages
        for s, order in todo.items():
            if not order:
                continue
            kind, m, r = order[0]
            k = r * stages + s  # the virtual stage: which run of layers
            ready = {
                "F": k == 0 or ("F", k - 1, m) in done,
                "B": ("F", k, m) in done and (k == last or ("B", k + 1, m) in done),
            }[kind]
            now[s] = order.pop(0) if ready else None
        if not any(now):
            waiting = {s: order[0] for s, order in todo.items() if order}
            raise ValueError(f"the schedule waits forever at tick {len(timeline)}: {waiting}")
        done |= {(w[0], w[2] * stages + s, w[1]) for s, w in enumerate(now) if w}
        timeline.append(now)
    return timeline


def simulate(schedule, micro, repeats=1, stages=4):
    """(ticks, idle device-ticks, most micro-batch runs any device holds) of a schedule."""
    timeline = play(schedule, micro, repeats, stages)
    steps = [[{"F": 1, "B": -1}[w[0]] if w else 0 for w in now] for now in timeline]
    idle = sum(w is None for now in timeline for w in now)
    return len(timeline), idle, int(np.cumsum(steps, axis=0).max())


def table(schedule, micro, repeats=1, stages=4):
    """The timeline as int32 arrays [tick, stage]: kind (0 idle, 1 F, 2 B), micro-batch, repeat."""
    rows = [
        [(KINDS[w[0]], w[1], w[2]) if w else (0, 0, 0) for w in now]
        for now in play(schedule, micro, repeats, stages)
    ]
    return np.array(rows, dtype=np.int32).transpose(2, 0, 1)
