"""What a compiled step communicates and computes, read from the program XLA compiled.

`compiled` is what `jax.jit(f).lower(*args).compile()` returns. Its HLO text
(`compiled.as_text()`) is the program each device runs: computations (the entry, loop bodies,
reductions), each a list of instructions. Everything here is read from that text:

- `collectives(compiled)`: one `Collective` per collective instruction, with the shape it moves,
  the size of its device groups, where it sits (in a loop body, the entry computation, or
  elsewhere) and how many times it runs per step, following the loops' trip counts;
- `per_step(rows)`: {(kind, bytes, group size): runs per step}, the form a formula predicts;
- `mesh_axes(collective, mesh)`: the mesh axes its device groups run along, "data" or
  "model" or "data+model", with "pairs of" where a group holds part of an axis's devices;
  `by_axis(rows, mesh)`: {(kind, axes, direction): count} of a program's collectives;
- `sent_per_device(rows)`: bytes each device sends per step if every collective runs as a ring;
- `products(compiled)`: every matrix product, its operand dtypes and what XLA fused with it;
- `matmul_flops(compiled)`: FLOPs of every matrix product per step;
- `tiled_bytes(shape)`, `argument_shapes(compiled)`: memory in a TPU's tiled layouts;
- `ops_within(program, computation)`, `op_name_of(instruction)`: what a computation does, and
  the JAX operation an instruction was made from;
- `trip_counts(compiled)`, `instruction_count(compiled)`, `memory(compiled)`.

Where an instruction sits is decided by the computation it belongs to, not by its op name: XLA
keeps an op's name when it moves (hoists) the op out of a loop, so "while/body" in a name does
not mean the op runs in the loop.

Tested on: XLA's CPU programs (every guide, and tests/unit/test_hlo.py); TPU programs that
libtpu compiles here with no TPU attached (tests/unit/test_tpu.py, the tpu_compiler guide):
tiled memory layouts in shapes (`{1,0:T(8,128)}`), loops with no known_trip_count (counted from
their condition and their counter's start, a constant or a copy of one), async collectives as
chains of fusions (a start, the compute fusions that run while it is in flight, a done; counted
once, with `overlapped` matrix products), the `all-reduce-scatter` fusion that is the TPU's
reduce-scatter, and matrix products as `convolution`s; and on hand-written programs in the
forms XLA's GPU backend prints: async collectives (`all-reduce-start` with only its result as
shape, `all-gather-start` with (operand, result)), empty replica groups (`replica_groups={}`:
every device of the module), and cuBLAS matrix products (`custom-call`s to `__cublas$gemm` and
friends, read from their `backend_config`).
"""

import collections
import math
import re
from typing import NamedTuple

COLLECTIVE_KINDS = (
    "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
)  # fmt: skip
DTYPE_BYTES = {
    "pred": 1, "bool": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
    "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8,
}  # fmt: skip
# Ring cost model: an all-reduce is a reduce-scatter then an all-gather, so it sends twice.
RING_PASSES = {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1, "all-to-all": 1}

_HEADER = re.compile(r"^(ENTRY )?%(\S+) .*\{$")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%(?P<name>\S+) = (?P<shape>.+?) (?P<op>[a-z][\w-]*)\((?P<args>[^)]*)\)"
    r"(?P<attrs>.*)$"
)
_ARRAY = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\]")
_CALLS = re.compile(
    r"\b(calls|body|condition|to_apply|branch_computations|called_computations)="
    r"(\{[^}]*\}|%[\w.-]+)"
)
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CHAIN = re.compile(r'frontend_attributes=\{[^}]*\bchain_id="(\d+)"')
_ASYNC_TARGETS = {"AsyncCollectiveStart", "AsyncCollectiveDone"}
_COPIES = {"copy", "bitcast"}  # ops that pass a value on unchanged
_OP_NAME = re.compile(r'op_name="((?:[^"\\]|\\.)*)"')


class Instruction(NamedTuple):
    name: str
    computation: str
    shape: str
    op: str
    operands: tuple
    attrs: str


class Collective(NamedTuple):
    kind: str  # "all-reduce", "all-gather", ...
    shape: str  # the result's shape, e.g. "f32[8,256]", without its memory layout
    nbytes: int  # bytes of that result
    group: int  # devices in each replica group
    groups: str  # the replica groups as XLA prints them
    where: str  # "loop" (a loop body or what it calls), "entry", or "other"
    per_step: int  # times it runs per call of the compiled function
    operand: str  # the argument of the step it applies to directly, if any ("" otherwise)
    op_name: str  # the JAX operation it was made from (XLA's metadata)
    # the devices (partition ids) of each group; a collective-permute's (source, target) pairs
    device_groups: tuple = ()
    asynchronous: bool = False  # started, then waited for later: other work may run meanwhile
    overlapped: int = 0  # TPU: matrix products the program runs while it is in flight

    @property
    def direction(self):
        """ "backward" if autodiff's transpose made it (its op_name says `transpose(`), else
        "forward": the forward pass, or a step with no gradient at all."""
        return "backward" if "transpose(" in self.op_name else "forward"


def _strip_layout(shape):
    """An HLO shape without its memory layouts: `{1,0}` (CPU), `{1,0:T(8,128)S(1)}` (TPU)."""
    return re.sub(r"(?<=\])\{[^{}]*\}", "", shape)


def arrays(shape):
    """[(dtype, dims)] of an HLO shape, one array or a tuple of them."""
    return [(t, [int(d) for d in dims.split(",") if d]) for t, dims in _ARRAY.findall(shape)]


def shape_bytes(shape):
    """Bytes of an HLO shape such as "f32[8,256]" or "(f32[4], bf16[2,2])"."""
    return sum(DTYPE_BYTES[t] * math.prod(dims) for t, dims in arrays(shape))


_TILED = re.compile(r"\b([a-z]+\d*)\[([\d,]*)\](?:\{([\d,]*)(?::T\(([\d,]+)\))?[^}]*\})?")


def tiled_bytes(shape):
    """Bytes of an HLO shape in its memory layout: a TPU layout `{1,0:T(8,128)}` stores whole
    tiles, each dimension the tile covers (minor to major) rounded up to the tile's size; a
    scalar with `T(128)` takes 128 elements. Without tiles, `shape_bytes`."""
    total = 0
    for dtype, dims, minor_to_major, tile in _TILED.findall(shape):
        dims = [int(d) for d in dims.split(",") if d] or [1]
        order = [int(i) for i in minor_to_major.split(",") if i] or [0]
        for dim, size in zip(order, reversed(_ints(tile))):
            dims[dim] = -(-dims[dim] // size) * size
        total += DTYPE_BYTES[dtype] * math.prod(dims)
    return total


def argument_shapes(compiled):
    """The shapes, with their memory layouts, of a compiled function's arguments."""
    program = parse(compiled if isinstance(compiled, str) else compiled.as_text())
    entry = [i for i in program.instructions if i.computation == program.entry]
    return [i.shape for i in entry if i.op == "parameter"]


class Program(NamedTuple):
    entry: str
    instructions: list  # every Instruction, in program order
    calls: dict  # {computation: [(how, callee)]}, how is "body", "calls", ...
    trips: dict  # {while instruction name: known trip count}


def parse(text):
    """The computations of an HLO module's text: its instructions and what calls what."""
    instructions, calls, trips = [], collections.defaultdict(list), {}
    entry = current = None
    for line in text.splitlines():
        if header := _HEADER.match(line):
            current = header[2]
            entry = current if header[1] else entry
            continue
        if current is None or not (match := _INSTRUCTION.match(line)):
            continue
        args = tuple(a.strip().lstrip("%") for a in match["args"].split(",") if a.strip())
        ins = Instruction(
            match["name"], current, match["shape"], match["op"], args, match["attrs"]
        )
        instructions.append(ins)
        for how, callees in _CALLS.findall(ins.attrs):
            calls[current] += [(how, c) for c in re.findall(r"%([\w.-]+)", callees)]
            if how == "body" and (trip := _TRIP_COUNT.search(ins.attrs)):
                trips[ins.name] = int(trip[1])
    return Program(entry, instructions, dict(calls), trips)


def _through_copies(named, name):
    """The instruction `name` is a copy of (through `copy` and `bitcast`), or itself."""
    ins = named.get(name)
    while ins is not None and ins.op in _COPIES and len(ins.operands) == 1:
        ins = named.get(ins.operands[0])
    return ins


def _trip_count(program, loop):
    """A while loop's trip count: XLA's known_trip_count, else read from its condition, a
    `counter < N` compare of a tuple element with a constant, counted from that element's start
    in the loop's initial tuple: a constant, or a copy of one, as where XLA peeled the first
    iteration off the loop (a TPU program states no known_trip_count). None if neither is
    there, or if the start is not a constant."""
    if loop.name in program.trips:
        return program.trips[loop.name]
    condition = re.search(r"\bcondition=%([\w.-]+)", loop.attrs)[1]
    named = {i.name: i for i in program.instructions if i.computation == condition}
    for ins in named.values():
        if ins.op != "compare" or "direction=LT" not in ins.attrs or len(ins.operands) != 2:
            continue
        counter, bound = (named.get(a) for a in ins.operands)
        if not (counter and bound) or (counter.op, bound.op) != ("get-tuple-element", "constant"):
            continue
        index = int(re.search(r"index=(\d+)", counter.attrs)[1])
        outer = {i.name: i for i in program.instructions if i.computation == loop.computation}
        init = _through_copies(outer, loop.operands[0])
        if init is None or init.op != "tuple" or index >= len(init.operands):
            return None
        start = _through_copies(outer, init.operands[index])
        if start is None or start.op != "constant":
            return None
        return int(bound.operands[0]) - int(start.operands[0])
    return None


def _runs_per_step(program):
    """{computation: times it runs per step}; a loop body runs its trip count.

    A loop whose trip count the program does not state is counted once.
    """
    trip_of_body = {}
    for ins in program.instructions:
        if ins.op == "while" and (trips := _trip_count(program, ins)) is not None:
            body = re.search(r"\bbody=%([\w.-]+)", ins.attrs)[1]
            trip_of_body[body] = trips
    runs = collections.Counter()

    def visit(computation, times):
        runs[computation] += times
        for how, callee in program.calls.get(computation, ()):
            if how == "to_apply":  # a reduction's adder: not a separate run of the step
                continue
            factor = trip_of_body.get(callee, 1) if how == "body" else 1
            visit(callee, times * factor)

    visit(program.entry, 1)
    return runs


def _in_loops(program):
    """Every computation that a loop body is or calls, directly or not."""
    found, todo = set(), []
    for ins in program.instructions:
        if ins.op == "while":
            todo.append(re.search(r"\bbody=%([\w.-]+)", ins.attrs)[1])
    while todo:
        if (computation := todo.pop()) not in found:
            found.add(computation)
            todo.extend(callee for _, callee in program.calls.get(computation, ()))
    return found


def _iota(dims, perm=None):
    """Device ids as XLA's iota notation writes them: `[2,8]T(1,0)` is arange(16) laid out as
    2 x 8, then transposed; the result is flat, in the transposed order."""
    import numpy as np

    ids = np.arange(math.prod(dims)).reshape(dims)
    return ids.transpose(perm) if perm else ids


def _ints(text):
    return [int(v) for v in text.split(",") if v.strip()]


def device_groups(attrs, devices=None):
    """The device groups of a collective's attributes, as tuples of partition ids, in any of
    the notations XLA prints (explicit lists, iota `[4,2]<=[2,4]T(1,0)`, `mesh[...] {axes}`,
    `{}` for every device); a collective-permute's source_target_pairs as (source, target)."""
    if pairs := re.search(r"source_target_pairs=\{(\{[\d,{}]*\})\}", attrs):
        return tuple(tuple(_ints(p)) for p in re.findall(r"\{([\d,]*)\}", pairs[1]))
    if re.search(r"replica_groups=\{\}", attrs):
        if devices is None:
            raise ValueError("replica_groups={} needs the module's device count")
        return (tuple(range(devices)),)
    if groups := re.search(r"replica_groups=\{((?:\{[\d,]*\},?)+)\}", attrs):
        return tuple(tuple(_ints(g)) for g in re.findall(r"\{([\d,]*)\}", groups[1]))
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", attrs)
    if iota:
        ids = _iota(_ints(iota[3]), _ints(iota[4]) if iota[4] else None)
        return tuple(tuple(int(d) for d in g) for g in ids.reshape(int(iota[1]), int(iota[2])))
    mesh = re.search(
        r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))?"
        r" \{([^}]*)\}",
        attrs,
    )
    if mesh:
        sizes = dict((a, int(n)) for a, n in re.findall(r"'(\w+)'=(\d+)", mesh[1]))
        names, shape = list(sizes), list(sizes.values())
        if mesh[2]:
            ids = _iota(_ints(mesh[2]), _ints(mesh[3]) if mesh[3] else None).reshape(shape)
        else:
            ids = _iota(shape)
        axes = [names.index(a) for a in re.findall(r"'(\w+)'", mesh[4])]
        rest = [i for i in range(len(names)) if i not in axes]
        size = math.prod(shape[i] for i in axes)
        grouped = ids.transpose(rest + axes).reshape(-1, size)
        return tuple(tuple(int(d) for d in g) for g in grouped)
    raise ValueError(f"no device groups XLA's notations describe in {attrs[:200]!r}")


def _groups_text(attrs):
    groups = re.search(r"(?:replica_groups|source_target_pairs)=(.+?)(?=, [a-z_]+=|$)", attrs)
    return groups[1] if groups else ""


def _module_devices(text):
    """Devices of an HLO module: num_partitions x replica_count of its header (1 if absent)."""
    header = text.split("\n", 1)[0]
    counts = [re.search(rf"\b{k}=(\d+)", header) for k in ("num_partitions", "replica_count")]
    return math.prod(int(c[1]) for c in counts if c)


def collectives(compiled):
    """One Collective per collective instruction of a compiled function's program (or of its
    HLO text)."""
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    program, devices = parse(text), _module_devices(text)
    runs, in_loops = _runs_per_step(program), _in_loops(program)
    arguments = {
        ins.name: ins
        for ins in program.instructions
        if ins.op == "parameter" and ins.computation == program.entry
    }
    caller, roots, targets = {}, {}, collections.defaultdict(set)
    products = collections.Counter()  # matrix products (a TPU's `convolution`s) per computation
    for ins in program.instructions:
        for _, callees in _CALLS.findall(ins.attrs):
            caller.update((c, ins) for c in re.findall(r"%([\w.-]+)", callees))
        roots[ins.computation] = ins  # HLO prints a computation's ROOT last
        if target := re.search(r'custom_call_target="(\w+)"', ins.attrs):
            targets[ins.computation].add(target[1])
        products[ins.computation] += ins.op in ("convolution", "dot")
    # A TPU async collective is a chain (frontend attribute chain_id): a start fusion, the
    # compute fusions that run while it is in flight, each holding a copy of it, and a done.
    chains = collections.defaultdict(list)
    for ins in program.instructions:
        if ins.op in COLLECTIVE_KINDS and (chain := _CHAIN.search(ins.attrs)):
            chains[chain[1]].append(ins.computation)
    found = []
    for ins in program.instructions:
        kind = ins.op.removesuffix("-start")
        chain = _CHAIN.search(ins.attrs)
        if kind not in COLLECTIVE_KINDS or (
            chain and "AsyncCollectiveStart" not in targets[ins.computation]
        ):
            continue  # not a collective, or a copy in its chain: counted once, at its start
        overlapped = 0
        if chain:
            overlapped = sum(
                products[c] for c in chains[chain[1]] if not targets[c] & _ASYNC_TARGETS
            )
        # An async start's shape is (operand, result), but an all-reduce-start's is its result.
        async_pair = ins.op.endswith("-start") and kind != "all-reduce"
        shape = _strip_layout(_async_result(ins.shape) if async_pair else ins.shape)
        if kind == "all-reduce" and ins.computation.startswith("all-reduce-scatter"):
            # The TPU's reduce-scatter: a fusion of an all-reduce and the slice each device
            # keeps; what it delivers is the fusion's result, the device's shard.
            kind, shape = "reduce-scatter", _strip_layout(roots[ins.computation].shape)
        asynchronous = ins.op.endswith("-start") or (
            "AsyncCollectiveStart" in targets[ins.computation]
        )
        made_by = ins if _OP_NAME.search(ins.attrs) else caller.get(ins.computation, ins)
        where = (
            "loop" if ins.computation in in_loops
            else "entry" if ins.computation == program.entry
            else "other"
        )  # fmt: skip
        of_argument = next((arguments[a] for a in ins.operands if a in arguments), None)
        groups = device_groups(ins.attrs, devices)  # a permute's: its (source, target) pairs
        found.append(
            Collective(
                kind=kind,
                shape=shape,
                nbytes=shape_bytes(shape),
                group=2 if "source_target_pairs=" in ins.attrs else len(groups[0]),
                groups=_groups_text(ins.attrs),
                where=where,
                per_step=runs[ins.computation],
                operand=op_name_of(of_argument) if of_argument else "",
                op_name=op_name_of(made_by, default=""),
                device_groups=groups,
                asynchronous=asynchronous,
                overlapped=overlapped,
            )
        )
    return found


def _async_result(shape):
    """The result part of an async start's shape, "((operand), result)" or "(operand, result)"."""
    inner = shape.strip()[1:-1]
    depth, split = 0, None
    for i, ch in enumerate(inner):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            split = i
    return inner[split + 1 :].strip() if split is not None else shape


def op_name_of(ins, default=None):
    """The JAX operation XLA's metadata names for an instruction; `default` (its own name if
    None) when it has none."""
    match = _OP_NAME.search(ins.attrs)
    if match:
        return match[1].replace("\\'", "'")
    return ins.name if default is None else default


def per_step(rows):
    """{(kind, bytes, group size): runs per step}, summed over the rows."""
    counts = collections.Counter()
    for c in rows:
        counts[c.kind, c.nbytes, c.group] += c.per_step
    return counts


def ring(n, nbytes, passes=1):
    """Bytes one device sends in a ring of n devices: passes x (n - 1) / n of the array; with
    n None, the large-ring limit, the whole array each pass. The site's one ring formula:
    `roofline`'s times and thresholds and `plan`'s bytes per link are built on it."""
    return passes * (1.0 if n is None else (n - 1) / n) * nbytes


def mesh_axes(collective, mesh):
    """The axes of `mesh` along which the devices of each of `collective`'s groups differ, as
    "data", "data+model" or, when a group holds fewer devices than those axes have, "pairs of
    model" (2 of 4: a group of query heads' devices). The program's device (partition) ids
    number the mesh's devices in order: id i is `mesh.devices.flat[i]`'s place."""
    import numpy as np

    shape = tuple(mesh.shape.values())
    varying = set()
    for group in collective.device_groups:
        places = [np.unravel_index(i, shape) for i in group]  # each device's index per axis
        varying |= {a for a in range(len(shape)) if len({p[a] for p in places}) > 1}
    names = [name for a, name in enumerate(mesh.shape) if a in varying]
    axes = "+".join(names) or "none"
    size = math.prod(mesh.shape[n] for n in names)
    if collective.kind == "collective-permute" or collective.group == size:
        return axes
    return f"{'pairs' if collective.group == 2 else f'groups of {collective.group}'} of {axes}"


def by_axis(rows, mesh):
    """{(kind, mesh axes, pass): runs per step} of the collectives `rows`; the pass is
    "forward", "backward", or "unnamed" where XLA made the collective from no JAX operation
    (it moves an array between layouts, as an update's result into its parameter's)."""
    counts = collections.Counter()
    for c in rows:
        counts[c.kind, mesh_axes(c, mesh), c.direction if c.op_name else "unnamed"] += c.per_step
    return counts


def sent_per_device(rows):
    """Bytes each device sends per step if every collective runs as a ring.

    In a ring of n devices an all-gather or a reduce-scatter sends (n - 1) / n of the whole array
    from each device, an all-reduce twice that; a collective-permute sends what it holds. A
    reduce-scatter's result is one shard, so its whole array is n times its result.
    """
    total = 0.0
    for c in rows:
        whole = c.nbytes * c.group if c.kind == "reduce-scatter" else c.nbytes
        sent = ring(c.group, whole, RING_PASSES[c.kind]) if c.kind in RING_PASSES else whole
        total += c.per_step * sent
    return total


def show_collectives(rows):
    """Print one line per collective: kind, shape, where it sits, which pass, group, runs."""
    if not rows:
        print("  no collectives")
    for c in rows:
        print(
            f"  {c.kind:18} {c.shape:30} {c.where:5} {c.direction:8} group of {c.group}"
            f"  x{c.per_step} per step"
        )


_GEMM_TARGET = re.compile(r'custom_call_target="__cublas\$\w*gemm\w*"', re.I)
_GEMM_CONTRACTING = re.compile(r'"lhs_contracting_dimensions":\[([^\]]*)\]')


_DIM_LABELS = re.compile(r"dim_labels=([\w]+)_([\w]+)->([\w]+)")
_WINDOW = re.compile(r"window=\{([^}]*)\}")


def _window(attrs):
    """{field: [per spatial dimension]} of a convolution's window: size, stride, pad (lo, hi),
    lhs_dilate, rhs_dilate; the defaults where a field is absent."""
    found = _WINDOW.search(attrs)
    fields = dict(f.split("=", 1) for f in found[1].split()) if found else {}
    size = [int(w) for w in fields.get("size", "").split("x") if w]

    def each(name, default, read=int):
        given = fields.get(name)
        return [read(v) for v in given.split("x")] if given else [default] * len(size)

    pads = each("pad", (0, 0), read=lambda p: tuple(int(v) for v in p.split("_")))
    return {
        "size": size,
        "stride": each("stride", 1),
        "pad": pads,
        "lhs_dilate": each("lhs_dilate", 1),
        "rhs_dilate": each("rhs_dilate", 1),
    }


def _real_products(n, out, size, stride, pad, lhs_dilate, rhs_dilate):
    """Over all `out` output positions of one spatial dimension, how many window taps land on
    one of the input's n elements (not on padding, nor on the holes `lhs_dilate` puts between
    them)."""
    real = 0
    for o in range(out):
        for j in range(size):
            at = o * stride + j * rhs_dilate - pad[0]
            real += at >= 0 and at % lhs_dilate == 0 and at // lhs_dilate < n
    return real


def _convolution_flops(ins, lhs, out):
    """2 x the products a TPU `convolution` computes: every output element, times its input
    features, times the window taps that land on real input elements. A TPU writes a batched
    product (attention's per-head scores) as a convolution whose window spans the batch over a
    dilated input, one real element per window, or over padding: counted by their window size,
    such products would count several times over."""
    lhs_labels, _, out_labels = _DIM_LABELS.search(ins.attrs).groups()
    features = math.prod(n for n, label in zip(lhs, lhs_labels) if label == "f")
    w = _window(ins.attrs)
    spatial_out = [out[out_labels.index(str(i))] for i in range(len(w["size"]))]
    spatial_in = [lhs[lhs_labels.index(str(i))] for i in range(len(w["size"]))]
    taps = math.prod(
        _real_products(n, o, s, t, p, ld, rd)
        for n, o, s, t, p, ld, rd in zip(
            spatial_in, spatial_out, w["size"], w["stride"], w["pad"], w["lhs_dilate"],
            w["rhs_dilate"],
        )
    )  # fmt: skip
    return 2 * math.prod(out) // math.prod(spatial_out) * features * taps


def _contracted(ins, lhs):
    """How many products each output element of a dot or a cuBLAS gemm sums: the lhs
    contracting dimensions."""
    if ins.op == "dot":
        dims = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)[1]
    else:
        dims = _GEMM_CONTRACTING.search(ins.attrs)[1].replace('"', "")
    return math.prod(lhs[int(d)] for d in dims.split(",") if d.strip())


def ops_within(program, computation):
    """The ops of a computation and of the computations it calls with `calls=` (fusions,
    nested), "fusion" itself left out."""
    ops, seen, todo = set(), set(), [computation]
    while todo:
        if (c := todo.pop()) not in seen:
            seen.add(c)
            ops |= {i.op for i in program.instructions if i.computation == c}
            todo += [callee for how, callee in program.calls.get(c, ()) if how == "calls"]
    return ops - {"fusion"}


class Product(NamedTuple):
    op: str  # "dot" (CPU), "convolution" (TPU), "custom-call" (a cuBLAS gemm)
    operands: tuple  # the dtypes it multiplies, ("bf16", "bf16")
    fused: tuple  # the other operations XLA fused with it, sorted; () if it is not in a fusion
    flops: int  # 2 x output elements x contracted size, times its runs per step


_NOT_WORK = {"parameter", "constant", "bitcast", "get-tuple-element", "tuple", "copy"}


def products(compiled):
    """Every matrix product of the program that runs: a `dot`, a TPU's `convolution` or a
    cuBLAS gemm custom-call, with its operand dtypes and what it is fused with."""
    program = parse(compiled if isinstance(compiled, str) else compiled.as_text())
    runs = _runs_per_step(program)
    shapes = {ins.name: ins.shape for ins in program.instructions}
    fusions = {  # the computations that fusion instructions call
        callee
        for ins in program.instructions
        if ins.op == "fusion"
        for callee in re.findall(r"\bcalls=%([\w.-]+)", ins.attrs)
    }
    found = []
    for ins in program.instructions:
        gemm = ins.op == "custom-call" and _GEMM_TARGET.search(ins.attrs)
        if not (ins.op in ("dot", "convolution") or gemm) or not runs[ins.computation]:
            continue
        operands = [arrays(shapes[a])[0] for a in ins.operands[:2]]
        _, out = arrays(ins.shape)[0]  # a gemm's result is (output, workspace)
        if ins.op == "convolution":
            flops = runs[ins.computation] * _convolution_flops(ins, operands[0][1], out)
        else:
            flops = runs[ins.computation] * 2 * math.prod(out) * _contracted(ins, operands[0][1])
        fused = ()
        if ins.computation in fusions:
            fused = tuple(sorted(ops_within(program, ins.computation) - _NOT_WORK - {ins.op}))
        found.append(Product(ins.op, tuple(t for t, _ in operands), fused, flops))
    return found


def matmul_flops(compiled):
    """FLOPs of every matrix product per step (a `dot`, a TPU's `convolution`, or a cuBLAS
    gemm custom-call): 2 x output elements x contracted size, times its runs."""
    return sum(p.flops for p in products(compiled))


def trip_counts(compiled):
    """The known trip count of every loop in the program, in program order."""
    program = parse(compiled.as_text())
    return [program.trips[i.name] for i in program.instructions if i.name in program.trips]


def instruction_count(compiled):
    """Instructions in the compiled program: a measure of its size."""
    return len(parse(compiled.as_text()).instructions)


class Memory(NamedTuple):
    arguments: int
    outputs: int
    temp: int
    aliased: int  # output bytes that reuse (donated) argument buffers

    @property
    def peak_bound(self):
        """An upper bound of what the step holds at once: arguments, outputs and scratch,
        with donated buffers counted once."""
        return self.arguments + self.outputs + self.temp - self.aliased


def memory(compiled):
    """Per-device bytes of a compiled function, from XLA's memory analysis."""
    m = compiled.memory_analysis()
    return Memory(
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.temp_size_in_bytes,
        m.alias_size_in_bytes,
    )
