"""Pipeline schedules played tick by tick: what each device runs, and what that costs.

A schedule is a function `(stage, micro, repeats) -> [(kind, micro_batch, repeat), ...]`: the
order in which the device of stage `stage` runs forwards ("F") and backwards ("B") of `micro`
micro-batches, each through `repeats` runs of layers (virtual stage `repeat x stages + stage`,
the interleaved placement; 1 repeat: one run of layers a device). A schedule may split a
backward in two, as the zero-bubble schedules do: then "B" is the input's gradient, which the
previous virtual stage waits for, and "W" the weights' gradient, which nothing waits for. The
pipeline pages write their schedules; this module plays them:

- `play`: tick by tick, every device running the next piece of work on its list once what it
  needs is done (a forward: the previous virtual stage's forward; a backward: its own forward and
  the next virtual stage's backward; a weight gradient: its own backward). Each piece takes one
  tick.
- `simulate`: the ticks, the idle device-ticks (the bubble) and the most micro-batches any device
  holds between a forward and the end of its backward (its "W" where it has one).
- `timed`: the same lists as events in time, with a compute time per piece and a send time for
  every hand-over between devices: the step's time and how much of it is sends that nothing hid.
- `table`: the timeline as integer arrays that a `shard_map` body indexes by tick and stage.
"""

import numpy as np

KINDS = {"F": 1, "B": 2, "W": 3}  # table's codes; 0 is idle


def _orders(schedule, micro, repeats, stages):
    return {s: list(schedule(s, micro, repeats)) for s in range(stages)}


def _needs(kind, m, k, last):
    """What a piece on virtual stage k needs: [(kind, virtual stage, micro-batch)]."""
    if kind == "F":
        return [("F", k - 1, m)] if k > 0 else []
    if kind == "B":
        return [("F", k, m)] + ([("B", k + 1, m)] if k < last else [])
    if kind == "W":
        return [("B", k, m)]
    raise ValueError(f"unknown kind of work {kind!r}: F, B or W")


def play(schedule, micro, repeats=1, stages=4):
    """A list of ticks, each [(kind, micro-batch, repeat) or None for every device].

    Raises ValueError, naming the tick and what each device waits on, when no device can go on.
    """
    todo = _orders(schedule, micro, repeats, stages)
    done, timeline, last = set(), [], stages * repeats - 1
    while any(todo.values()):
        now = [None] * stages
        for s, order in todo.items():
            if not order:
                continue
            kind, m, r = order[0]
            ready = all(need in done for need in _needs(kind, m, r * stages + s, last))
            now[s] = order.pop(0) if ready else None
        if not any(now):
            waiting = {s: order[0] for s, order in todo.items() if order}
            raise ValueError(f"the schedule waits forever at tick {len(timeline)}: {waiting}")
        done |= {(w[0], w[2] * stages + s, w[1]) for s, w in enumerate(now) if w}
        timeline.append(now)
    return timeline


def simulate(schedule, micro, repeats=1, stages=4):
    """(ticks, idle device-ticks, most micro-batch runs any device holds) of a schedule.

    A device holds a micro-batch's run of layers from its forward to the end of its backward:
    its "W" where the schedule has one, else its "B".
    """
    orders = _orders(schedule, micro, repeats, stages)
    split = [{(m, r) for kind, m, r in orders[s] if kind == "W"} for s in range(stages)]
    timeline = play(schedule, micro, repeats, stages)

    def change(s, w):
        if w is None:
            return 0
        kind, m, r = w
        ends = "W" if (m, r) in split[s] else "B"
        return {"F": 1, ends: -1}.get(kind, 0)

    steps = [[change(s, w) for s, w in enumerate(now)] for now in timeline]
    idle = sum(w is None for now in timeline for w in now)
    return len(timeline), idle, int(np.cumsum(steps, axis=0).max())


def timed(schedule, micro, repeats=1, stages=4, *, compute, send=0.0):
    """(step time, exposed send time) of a schedule played as events in time.

    `compute` is the time of one piece of work, or a dict {kind: time}; `send` the time from the
    end of a piece on one device to the start of what needs it on another (a forward's output
    onward, an input gradient back). Every device runs its list in order, each piece as soon as
    the device is free and what it needs has arrived; sends overlap compute and one another. The
    exposed time is what the sends add to the step: its time minus the same play with `send=0`.
    With one time for every piece and `send=0` this is `play`, the tick a unit of time.
    """
    cost = compute if isinstance(compute, dict) else dict.fromkeys(KINDS, compute)

    def run(delay):
        todo, last = _orders(schedule, micro, repeats, stages), stages * repeats - 1
        ends, free = {}, [0.0] * stages  # ends[(kind, virtual stage, micro-batch)]
        while any(todo.values()):
            moved = False
            for s, order in todo.items():
                while order:
                    kind, m, r = order[0]
                    needs = _needs(kind, m, r * stages + s, last)
                    if any(need not in ends for need in needs):
                        break
                    arrive = [ends[n] + (delay if n[1] % stages != s else 0.0) for n in needs]
                    start = max([free[s], *arrive])
                    free[s] = ends[(kind, r * stages + s, m)] = start + cost[kind]
                    order.pop(0)
                    moved = True
            if not moved:
                waiting = {s: order[0] for s, order in todo.items() if order}
                raise ValueError(f"the schedule waits forever: {waiting}")
        return max(free)

    step = run(send)
    return step, step - run(0.0)


def table(schedule, micro, repeats=1, stages=4):
    """The timeline as int32 arrays [tick, stage]: kind (0 idle, 1 F, 2 B, 3 W), micro-batch,
    repeat."""
    rows = [
        [(KINDS[w[0]], w[1], w[2]) if w else (0, 0, 0) for w in now]
        for now in play(schedule, micro, repeats, stages)
    ]
    return np.array(rows, dtype=np.int32).transpose(2, 0, 1)
