"""Exercises: a reader's answer compiled on the page's devices and graded against a reference.

A page defines `build(answer) -> (compiled, args)`: the program its answer makes (a
`jax.stages.Compiled`) and arguments to call it with. `Exercise(title, reference).grade(answer,
build)` builds both, runs both once and checks four things of the answer's program against the
reference's:

- value: every output within `atol` of the reference's (plus `rtol` of its size);
- shardings: of every argument and output, as the compiled program has them;
- collectives: the multiset of (kind, shape, pass, group size, where), weighted by runs per step;
- memory: XLA's peak bound per device (`guide_helpers.hlo.memory`) at most `memory_limit`
  bytes (by default the reference's).

What differs comes back as hints, such as "extra: 4 x all-gather f32[8,1024] forward in the
layer loop, group of 4, per step". An answer whose program cannot be built or run fails one
check, "builds", whose hint is the error's first line. A `Grade` prints one line per check and
is true when all pass.
"""

import collections
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import PartitionSpec

from guide_helpers.hlo import arrays, collectives, memory, shape_bytes
from guide_helpers.layouts import make_rules
from guide_helpers.tables import mib
from guide_helpers.transformer import logical_rules

MAX_LINES = 6  # of one check's hints; the rest are counted


class Check(NamedTuple):
    name: str  # "value", "shardings", "collectives", "memory"
    passed: bool
    hints: tuple  # lines saying what differs from the reference (empty if it passed)
    summary: str  # one line: what was checked


class Grade:
    """The result of grading one answer: its checks, in order."""

    def __init__(self, title, checks):
        self.title, self.checks = title, list(checks)

    @property
    def passed(self):
        return all(c.passed for c in self.checks)

    def __bool__(self):
        return self.passed

    def check(self, name):
        return next(c for c in self.checks if c.name == name)

    def hints(self):
        return [h for c in self.checks for h in c.hints]

    def __str__(self):
        verdict = "passed" if self.passed else "not yet"
        lines = [f"{self.title}: {verdict}"]
        for c in self.checks:
            lines.append(f"  {'ok ' if c.passed else 'no '} {c.name:12} {c.summary}")
            shown = c.hints[:MAX_LINES]
            lines += [f"      {h}" for h in shown]
            if len(c.hints) > len(shown):
                lines.append(f"      ... and {len(c.hints) - len(shown)} more")
        return "\n".join(lines)

    def __repr__(self):
        return str(self)

    def _repr_pretty_(self, printer, cycle):
        printer.text(str(self))


def _leaf_name(path):
    """A readable name for a pytree path: "params/layers/W1" (a box's `.value` left out)."""
    parts = []
    for key in path:
        name = getattr(key, "name", getattr(key, "key", getattr(key, "idx", key)))
        if name not in ("value", "raw_value"):
            parts.append(str(name))
    return "/".join(parts) or "(the whole value)"


def _named(tree):
    return {_leaf_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _spec(sharding, ndim):
    """A sharding as its PartitionSpec, one entry per axis: "P(None, 'model')"."""
    spec = getattr(sharding, "spec", None)
    if spec is None:
        return "replicated" if sharding.is_fully_replicated else str(sharding)
    entries = tuple(spec) + (None,) * (ndim - len(spec))
    return "P(" + ", ".join(map(repr, entries)) + ")"


def _mesh_text(tree):
    """ "data=2 x model=4": the mesh of the first NamedSharding in a tree of shardings."""
    mesh = next((s.mesh for s in jax.tree.leaves(tree) if hasattr(s, "mesh")), None)
    return " x ".join(f"{k}={v}" for k, v in mesh.shape.items()) if mesh else "no mesh"


class Run(NamedTuple):
    compiled: object
    outputs: object  # the outputs of one call, on the host
    shardings: dict  # {"argument NAME" or "output NAME": spec text}
    mesh: str  # the mesh's axes and sizes
    collectives: collections.Counter
    peak: int


def _rename(key, names):
    """A leaf's name, its leading position i replaced by names[i]: "0/params" -> "state/params"."""
    first, _, rest = key.partition("/")
    if first.isdigit() and int(first) < len(names):
        first = names[int(first)]
    elif first == _leaf_name(()):
        first = names[0] if names else "output"
    return "/".join(filter(None, (first, rest)))


def _specs(side, shardings, values, names=()):
    """{"SIDE NAME": spec}; a leading position i is replaced by names[i], if given."""
    ndims = _named(jax.tree.map(lambda a: a.ndim, values))
    return {
        f"{side} {_rename(k, names)}": _spec(s, ndims[k]) for k, s in _named(shardings).items()
    }


def run(build, answer, names=((), ())):
    """Build the answer's program, call it once and read what the checks compare; `names`,
    (argument names, output names), name them in the hints."""
    compiled, args = build(answer)
    shardings = _specs("argument", compiled.input_shardings[0], args, names[0])  # before donation
    mesh = _mesh_text(compiled.input_shardings[0])
    outputs = compiled(*args)
    shardings |= _specs("output", compiled.output_shardings, outputs, names[1])
    counts = collections.Counter()
    for c in collectives(compiled):
        counts[c.kind, c.shape, c.direction, c.group, c.where] += c.per_step
    peak = memory(compiled).peak_bound
    return Run(compiled, jax.device_get(outputs), shardings, mesh, counts, peak)


def _collective_hint(key, n):
    """ "extra: 4 x all-gather f32[8,1024] forward in the layer loop, group of 4, per step"
    (n > 0: the answer has them and the reference has not; n < 0: the reverse, "missing")."""
    kind, shape, direction, group, where = key
    if len(arrays(shape)) > 3:  # a combined tuple: its size, not its members
        shape = f"(a tuple of {len(arrays(shape))} arrays, {shape_bytes(shape):,} bytes)"
    place = {"loop": "in the layer loop", "entry": "outside loops"}.get(where, "in a subroutine")
    what = "extra" if n > 0 else "missing"
    return f"{what}: {abs(n)} x {kind} {shape} {direction} {place}, group of {group}, per step"


class Exercise:
    """A task, its reference answer, and what an answer's program must match."""

    def __init__(
        self,
        title,
        reference,
        *,
        atol=1e-5,
        rtol=1e-5,
        memory_limit=None,
        arguments=(),
        outputs=(),
        compared=None,
    ):
        """`arguments`, `outputs`: what the hints call the program's arguments and outputs;
        `compared`: the positions of the outputs the value check compares (all if None)."""
        self.title, self.reference, self.names = title, reference, (arguments, outputs)
        self.compared = compared
        self.atol, self.rtol, self.memory_limit = atol, rtol, memory_limit
        self._references = {}  # one reference run per build function

    def reference_run(self, build):
        if build not in self._references:
            self._references[build] = run(build, self.reference, self.names)
        return self._references[build]

    def grade(self, answer, build):
        ref = self.reference_run(build)
        try:
            got = run(build, answer, self.names)
        except Exception as error:  # the answer's own mistake: say it, as a failed check
            first = (str(error).strip().splitlines() or [""])[0]
            hint = f"{type(error).__name__}: {first}"
            return Grade(self.title, [Check("builds", False, (hint,), "the answer's program")])
        limit = self.memory_limit if self.memory_limit is not None else ref.peak
        return Grade(
            self.title,
            [
                self._value(got, ref),
                self._shardings(got, ref),
                self._collectives(got, ref),
                Check(
                    "memory",
                    got.peak <= limit,
                    () if got.peak <= limit else (f"{mib(got.peak - limit)} over the limit",),
                    f"peak bound {mib(got.peak)} per device, limit {mib(limit)}",
                ),
            ],
        )

    def _close(self, mine, theirs):
        """Within atol + rtol x the reference's largest magnitude, element by element: sums in
        another order differ by a few ulps of the array's scale, not of each element."""
        mine, theirs = np.asarray(mine, np.float64), np.asarray(theirs, np.float64)
        scale = float(np.abs(theirs).max()) if theirs.size else 0.0
        return bool(np.all(np.abs(mine - theirs) <= self.atol + self.rtol * scale))

    def _value(self, got, ref):
        names = self.names[1]
        if self.compared is None:
            mine, theirs, what = got.outputs, ref.outputs, "every output"
        else:  # {output's name: output}, so that hints name it
            label = [names[i] if i < len(names) else f"output {i}" for i in self.compared]
            mine = dict(zip(label, (got.outputs[i] for i in self.compared)))
            theirs = dict(zip(label, (ref.outputs[i] for i in self.compared)))
            what, names = ", ".join(label), ()
        mine, theirs = _named(mine), _named(theirs)
        if mine.keys() != theirs.keys() or any(
            np.shape(mine[k]) != np.shape(theirs[k]) for k in mine
        ):
            return Check("value", False, ("the outputs' structure or shapes differ",), what)
        far = [k for k in theirs if not self._close(mine[k], theirs[k])]
        hints = tuple(f"{_rename(k, names)}: differs from the reference" for k in far)
        bound = f"{self.atol:g} + {self.rtol:g} x its largest magnitude"
        return Check("value", not far, hints, f"{what} within {bound} of the reference")

    def _shardings(self, got, ref):
        # Arrays that differ alike (a weight and its optimizer moments) make one hint.
        alike = collections.defaultdict(list)
        for k, v in ref.shardings.items():
            if got.shardings.get(k) != v:
                last = k.rsplit("/", 1)[-1]  # an output that differs as its argument does, too
                alike[last, got.shardings.get(k, "missing"), v].append(k)
        hints = [] if got.mesh == ref.mesh else [f"mesh {got.mesh}, expected {ref.mesh}"]
        for (_, mine, theirs), keys in alike.items():
            more = f" (and {len(keys) - 1} alike)" if len(keys) > 1 else ""
            hints.append(f"{keys[0]}{more}: {mine}, expected {theirs}")
        summary = f"{len(ref.shardings)} arguments and outputs"
        return Check("shardings", not hints, tuple(hints), summary)

    def _collectives(self, got, ref):
        difference = collections.Counter(got.collectives)
        difference.subtract(ref.collectives)
        hints = tuple(_collective_hint(k, n) for k, n in sorted(difference.items()) if n)
        total = sum(ref.collectives.values())
        summary = f"{total} per step in the reference, {sum(got.collectives.values())} here"
        return Check("collectives", not hints, hints, summary)


# The site's exercises, with their reference answers. Each page shows its own worked solutions;
# the answers live here so that a page's answer cell does not show them.

_GRADIENTS = dict(arguments=("params", "x", "target"), outputs=("loss", "grads"))
_TRAIN_MLP = dict(arguments=("state", "x", "target"), outputs=("state", "loss"), compared=(1,))
_TRAIN_TRANSFORMER = dict(arguments=("state", "tokens"), outputs=("state", "loss"), compared=(1,))

# The main guide (scale_up_a_flax_model): rules for its logical model on the 2x4 mesh.
ALL_DATA = Exercise(
    "data parallelism on all 8 devices", make_rules(batch=("data", "model")), **_GRADIENTS
)
FSDP_TENSOR = Exercise(
    "FSDP x tensor", make_rules(batch="data", embed="data", hidden="model"), **_GRADIENTS
)

# Choose a layout: (mesh shape, rules) for the same model's train step.
EIGHTH_OF_THE_STATE = Exercise(
    "an eighth of the state, no activation sums",
    ((8, 1), make_rules(batch="data", embed="data")),
    **_TRAIN_MLP,
)
TENSOR_ON_EIGHT = Exercise(
    "tensor parallelism on all 8 devices", ((1, 8), make_rules(hidden="model")), **_TRAIN_MLP
)

# The transformer guide: (mesh shape, rules) for the transformer's train step.
MLP_ONLY_TENSOR = Exercise(
    "only the MLP split over 'model'",
    ((2, 4), logical_rules(batch="data", hidden="model")),
    **_TRAIN_TRANSFORMER,
)
HEADS_ON_EIGHT = Exercise(
    "heads, MLP and vocabulary over 8 devices",
    ((1, 8), logical_rules(heads="model", hidden="model", vocab="model")),
    **_TRAIN_TRANSFORMER,
)

# Generate text: the key/value cache's layout, cache[layer, batch, context, kv_heads, head_dim],
# for the page's one-token decode step on the 2 x 4 mesh.
CACHE_AN_EIGHTH = Exercise(
    "the cache split over all 8 devices",
    PartitionSpec(None, "data", None, "model"),
    arguments=("params", "token", "cache", "position"),
    outputs=("logits", "cache"),
    compared=(0,),
)
