"""What a step did when it ran: a `jax.profiler` trace and a device memory profile, read in Python.

- `read_trace(log_dir)`: the XLA operations of the trace that
  `jax.profiler.trace(log_dir, create_perfetto_trace=True)` wrote (its `perfetto_trace.json.gz`,
  the file Perfetto opens), one `Event` per operation run on a device: which device, which
  instruction of which program, when and for how long, and which run (call) of the program.
- `label_instructions(compiled, scopes)`: for each instruction of a compiled program, what it
  is (`"matmul"`, a collective's kind, or `"other"`) and the first of `scopes` its JAX name
  mentions (a Flax module name, a `jax.named_scope`), to join a trace with its program.
- `timings(events, labels)`: microseconds per (device, label), summed over the events.
- `runs(events, module, device)`: when each call of a program ran on one device, first operation
  to last, and `idle(spans)`: how long the device waited between those calls, the time a step
  loop leaves it without work.
- `memory_profile(raw)`: the samples of `jax.profiler.device_memory_profile()`, a gzipped pprof
  protocol buffer, decoded here (no pprof tool needed): bytes, kind and device of every live
  buffer, with the Python functions that allocated it.
"""

import collections
import gzip
import json
import re
from pathlib import Path
from typing import NamedTuple

from guide_helpers import hlo


class Event(NamedTuple):
    device: int  # the device ordinal the operation ran on
    op: str  # the HLO instruction (a fusion, a dot, an all-reduce, ...)
    module: str  # the program, e.g. "jit_train_step"
    start: float  # microseconds from the start of the trace
    duration: float  # microseconds
    run: str  # one call of the program: the events of one step share it


def read_trace(log_dir):
    """The XLA operations in the newest perfetto trace under `log_dir`, in start order."""
    traces = Path(log_dir).glob("**/perfetto_trace.json.gz")
    found = sorted(traces, key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(
            f"no perfetto_trace.json.gz under {log_dir}: capture with "
            "jax.profiler.trace(log_dir, create_perfetto_trace=True)"
        )
    with gzip.open(found[-1]) as f:
        trace = json.load(f)
    events = []
    for e in trace["traceEvents"]:
        args = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in args and "device_ordinal" in args:
            events.append(
                Event(
                    int(args["device_ordinal"]),
                    args["hlo_op"],
                    args.get("hlo_module", ""),
                    float(e["ts"]),
                    float(e["dur"]),
                    args.get("run_id", ""),
                )
            )
    return sorted(events, key=lambda e: (e.start, e.device))


def label_instructions(compiled, scopes=()):
    """{instruction name: (what, scope)}: "matmul" for a dot or a fusion that holds one, the
    kind of a collective, else "other"; the first of `scopes` found in its JAX name, else ""."""
    program = hlo.parse(compiled if isinstance(compiled, str) else compiled.as_text())
    labels = {}
    for ins in program.instructions:
        kind = ins.op.removesuffix("-start")
        if kind in hlo.COLLECTIVE_KINDS:
            what = kind
        elif ins.op == "dot" or any(
            "dot" in hlo.ops_within(program, c) for c in re.findall(r"calls=%([\w.-]+)", ins.attrs)
        ):
            what = "matmul"
        else:
            what = "other"
        name = hlo.op_name_of(ins, default="")
        # a module's name is a path component; a named scope may sit inside jvp(...) or
        # transpose(jvp(...)) in the backward pass
        scope = next(
            (s for s in scopes if re.search(rf"(^|[/(]){re.escape(s)}([/)]|$)", name)), ""
        )
        labels[ins.name] = (what, scope)
    return labels


def timings(events, label):
    """{(device, label(event)): microseconds}, summed over `events`."""
    total = collections.Counter()
    for e in events:
        total[e.device, label(e)] += e.duration
    return dict(total)


class Span(NamedTuple):
    start: float  # microseconds from the start of the trace
    end: float


def runs(events, module, device=0):
    """One `Span` per call of the program `module` on `device`, from its first operation's start
    to its last one's end, in start order."""
    spans = {}
    for e in events:
        if e.device == device and e.module == module:
            start, end = spans.get(e.run, (e.start, e.start + e.duration))
            spans[e.run] = (min(start, e.start), max(end, e.start + e.duration))
    if not spans:
        found = sorted({e.module for e in events if e.device == device})
        raise ValueError(f"no run of {module!r} on device {device} in the trace; it ran {found}")
    return sorted(Span(*s) for s in spans.values())


def idle(spans):
    """Microseconds between consecutive spans, each gap counted when the next starts after the
    last one ended: the time the device had nothing of these calls to run."""
    gaps, end = [], None
    for start, stop in sorted(spans):
        if end is not None and start > end:
            gaps.append(start - end)
        end = stop if end is None else max(end, stop)
    return gaps


class Sample(NamedTuple):
    kind: str  # "buffer" (an array's memory on a device) or "executable"
    device: str  # "cpu:3"; "" for an executable
    count: int
    nbytes: int
    functions: tuple  # the Python functions on the stack that allocated it, innermost first


def _varint(buf, i):
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(buf):
    """(field number, value) of a protocol buffer message: ints and bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            size, i = _varint(buf, i)
            value, i = buf[i : i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i : i + size], i + size
        else:
            raise ValueError(f"unsupported protocol buffer wire type {wire}")
        yield number, value


def _ints(value):
    """A repeated int field: packed (bytes) or one value."""
    if isinstance(value, int):
        return [value]
    out, i = [], 0
    while i < len(value):
        v, i = _varint(value, i)
        out.append(v)
    return out


def memory_profile(raw):
    """The samples of a device memory profile (pprof's Profile message, gzipped)."""
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    top = list(_fields(data))
    strings = [v.decode() for n, v in top if n == 6]
    functions = {}
    for n, v in top:
        if n == 5:  # Function: id 1, name 2
            f = dict(_fields(v))
            functions[f.get(1, 0)] = strings[f.get(2, 0)]
    locations = {}
    for n, v in top:
        if n == 4:  # Location: id 1, line 4 (Line: function_id 1)
            fields = list(_fields(v))
            ids = [i for k, i in fields if k == 1]
            lines = [dict(_fields(x)).get(1, 0) for k, x in fields if k == 4]
            locations[ids[0] if ids else 0] = [functions.get(f, "") for f in lines]
    samples = []
    for n, v in top:
        if n != 2:  # Sample: location_id 1, value 2, label 3 (key 1, str 2)
            continue
        where, values, labels = [], [], {}
        for k, x in _fields(v):
            if k == 1:
                where += _ints(x)
            elif k == 2:
                values += _ints(x)
            elif k == 3:
                label = dict(_fields(x))
                labels[strings[label.get(1, 0)]] = strings[label.get(2, 0)]
        names = tuple(f for loc in where for f in locations.get(loc, []))
        samples.append(
            Sample(labels.get("kind", ""), labels.get("device", ""), values[0], values[1], names)
        )
    return samples
