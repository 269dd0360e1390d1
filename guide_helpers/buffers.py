"""What fills a compiled program's memory, buffer by buffer, read from XLA's buffer assignment.

XLA places every array a program makes (each instruction's output, a "value") in an allocation
before the program runs: an argument's own, an output's, or the shared scratch ("temp") heap
where values that are not alive at the same time share bytes. Asked to, the compiler writes that
plan to files (`compiler_options={"xla_dump_to": DIRECTORY}`, one compile's program in each
directory): `*after_optimizations-buffer-assignment.txt` (each allocation, its size, the values
in it with their offsets), `*-buffer-assignment-values.txt` (each value's users) and the program
itself with each instruction's JAX operation (`op_name`) and source line (`stack_frame_id`, in
the file's tables). The TPU compiler writes them before it checks the total against the chip's
HBM, so a program it refuses (`RESOURCE_EXHAUSTED: ... HLO temporaries (X) exceeds available HBM
(Y)`) is explained by the same files: X is `Listing.total`, in GiB.

- `compile_listing(lowered, vocab, seq, kinds)`: compile (or be refused), read the dump, and
  return a `Listing`: `buffers` (every array, largest first), `by_kind`, `total`, `fits(limit)`,
  the compiled program or the refusal's first line.
- `plan(builder, fields, topology)`: the TPU compiler's plan alone, from a child Python stopped
  once the plan is written (a TPU program's machine code takes tens of seconds more);
  `lowered_llama` builds `guide_helpers.llama_family`'s step for it.
- `read_dump(directory, ...)`: the `Listing` of a directory a compile dumped to.
- `argument_kinds(arguments, kinds)`: [(argument path as the program names it, kind)], from a
  pytree prefix of the arguments, e.g. `(("parameters", "optimizer state"), "batch")`.
- `refused_bytes(message)`: (needed, available) bytes of the TPU compiler's one-line refusal.
- `show(listing, top)`: one line per buffer, then the bytes of each kind.

A `Buffer` is one array: an argument's or an output's allocation, or a value of the temp heap,
with its size, kind, shape, instruction, JAX operation and source line. Values of the heap share
bytes over time, so the buffers' sizes add up to more than the memory; `by_kind` charges each
byte of every allocation to the kind of the largest value that ever occupies it, and adds up to
`total` exactly. `total` counts every allocation in the main memory (on a TPU, HBM; not its
on-chip VMEM and SMEM): what the TPU compiler checks against the chip's HBM, and, on the CPU,
`hlo.memory(compiled).peak_bound` plus a few bytes of constants and per-thread scalars. Each
buffer has a kind, the first that applies:

- an argument's allocation: its kind from `kinds` (by the argument's path), else "arguments";
- "logits": an array with a `vocab`-sized dimension that is not a parameter's shape;
- "attention scores": an array with two `seq`-sized dimensions (scores, probabilities, masks);
- "gradients": a parameter's shape (its dimensions, any order), made in the backward pass
  (autodiff's transpose: `transpose(` in its op_name);
- "saved activations": made in the forward pass and read by the backward pass;
- "scratch": anything else in the temp heap; "outputs": an output's own allocation.

Tested on CPU programs and on TPU programs compiled or planned here with libtpu
(tests/unit/test_buffers.py, tests/tools/test_measure_step.py, the tpu_compiler guide).
"""

import glob
import heapq
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp

from guide_helpers import hlo

KINDS = (
    "parameters", "optimizer state", "batch", "arguments", "gradients", "saved activations",
    "attention scores", "logits", "scratch", "outputs",
)  # fmt: skip
GIB = 2**30

_ALLOCATION = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
_VALUE = re.compile(
    r"^ value: <(\d+) ([^\s{]+)(\{[\d,]*\})? @\d+> \(size=(\d+),offset=(\d+)\): (.*)$"
)
_USED = re.compile(r"^<(\d+) ")
_REFUSED = re.compile(
    r"HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"
)
_FRAME = re.compile(r"^(\d+) \{(.*)\}$")


class Buffer(NamedTuple):
    nbytes: int  # its bytes in memory (in a TPU's tiles); an argument's: its allocation's
    kind: str  # one of KINDS
    shape: str  # without its memory layout, e.g. "f32[8,128]"
    instruction: str  # the HLO instruction that makes it (an argument: its parameter)
    op_name: str  # the JAX operation it was made from (XLA's metadata), or the argument's path
    source: str  # "file.py:line" of the Python line that made it, "" if the program has none


class Listing(NamedTuple):
    buffers: list  # Buffer, every array the program holds, largest first
    by_kind: dict  # {kind: bytes}, largest first, adding up to `total` (see the module's doc)
    total: int  # bytes of every allocation in the device's main memory
    compiled: object  # the compiled program, or None if it was refused or only planned
    refused: str  # the compiler's refusal, its first line ("" if it did not refuse)

    def fits(self, limit):
        """Whether the program fits `limit` bytes: not refused, and its total within it."""
        return not self.refused and self.total <= limit


def refused_bytes(message):
    """(needed, available) bytes of the TPU compiler's refusal, "... HLO temporaries (18.42G)
    exceeds available HBM (15.75G)" (XLA prints GiB as G), rounded as the message rounds; None
    if the message says no such thing."""
    found = _REFUSED.search(message)
    if not found:
        return None
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    return tuple(round(float(found[i]) * units[found[i + 1]]) for i in (1, 3))


def argument_kinds(arguments, kinds):
    """[(path, kind)] of every array in `arguments` (the tuple a step is called with), in
    order: its path as the program names the argument, less the function's own name for it
    (`keystr`: "[0]['embed_tokens']"), and its kind from `kinds`, a pytree prefix of
    `arguments` whose leaves are kind names, e.g. `(("parameters", "optimizer state"),
    "batch")` for `step((params, opt_state), batch)`."""
    paths = [
        jax.tree_util.keystr(tuple(path[1:]))
        for path, _ in jax.tree_util.tree_flatten_with_path(arguments)[0]
    ]
    spread = jax.tree.map(lambda kind, sub: jax.tree.map(lambda _: kind, sub), kinds, arguments)
    return list(zip(paths, jax.tree.leaves(spread), strict=True))


def _dumped(directory):
    """(buffer assignment, values, HLO text) of the last module dumped to `directory`."""
    found = sorted(
        glob.glob(os.path.join(directory, "*after_optimizations-buffer-assignment.txt"))
    )
    if not found:
        raise FileNotFoundError(f"no buffer assignment in {directory}: was it compiled there?")
    assignment = found[-1]
    stem = assignment.removesuffix("-buffer-assignment.txt")
    texts = [Path(stem + suffix) for suffix in ("-buffer-assignment-values.txt", ".txt")]
    return Path(assignment).read_text(), *(p.read_text() if p.exists() else "" for p in texts)


def _sources(text):
    """{stack_frame_id: "file.py:line"} from the frame tables at the top of a dumped program."""
    tables, table = {}, None
    for line in text.splitlines():
        if line in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            table = tables.setdefault(line, {})
        elif line.startswith(("%", "ENTRY", "HloModule")) or not line:
            table = None if line else table
        elif table is not None and (row := _FRAME.match(line)):
            table[int(row[1])] = row[2]
        elif table is not None and (row := re.match(r"^(\d+) \"(.*)\"$", line)):
            table[int(row[1])] = row[2]
    files, locations = tables.get("FileNames", {}), tables.get("FileLocations", {})
    sources = {}
    for frame, fields in tables.get("StackFrames", {}).items():
        location = locations.get(int(re.search(r"file_location_id=(\d+)", fields)[1]), "")
        file_id, line = re.search(r"file_name_id=(\d+).*?\bline=(\d+)", location).groups()
        sources[frame] = f"{Path(files.get(int(file_id), '?')).name}:{line}"
    return sources


def _users(values_text):
    """{value id: [names of the instructions that read it]} from the values file."""
    users, current, reading = {}, None, False
    for line in values_text.splitlines():
        if used := _USED.match(line):
            current, reading = int(used[1]), False
            users[current] = []
        elif line == " uses:":
            reading = True
        elif line.startswith(" from instruction:") or line == " positions:":
            reading = False
        elif reading and current is not None and line.startswith("  ") and "(none)" not in line:
            users[current].append(line.strip().split(",")[0])
    return users


def _dims(shape):
    return sorted(hlo.arrays(shape)[0][1]) if hlo.arrays(shape) else []


def read_dump(directory, vocab=None, seq=None, kinds=(), compiled=None, refused=""):
    """The `Listing` of the program a compile dumped to `directory`; `kinds` as
    `argument_kinds` returns it ([(path, kind)] in argument order), `vocab` and `seq` the sizes
    that mark logits and attention scores."""
    assignment, values_text, text = _dumped(directory)
    program = hlo.parse(text)
    named = {i.name: i for i in program.instructions}
    sources, users = _sources(text), _users(values_text)
    allocations = []  # (size, parameter number or None, is temp, is output, [values])
    for line in assignment.splitlines():
        if found := _ALLOCATION.match(line):
            size, rest = int(found[2]), found[3]
            if re.search(r"\bcolor [1-9]", rest):  # not the main memory (a TPU's VMEM, SMEM)
                allocations.append(None)
                continue
            parameter = re.search(r"\bparameter (\d+)", rest)
            allocations.append((size, parameter and int(parameter[1]), "preallocated-temp" in rest,
                                "output" in rest or "live-out" in rest, []))  # fmt: skip
        elif (value := _VALUE.match(line)) and allocations and allocations[-1] is not None:
            vid, name, index, size, offset, shape = value.groups()
            allocations[-1][4].append((int(vid), name, int(size), int(offset), shape))

    def op_name(name):
        ins = named.get(name)
        return hlo.op_name_of(ins, default="") if ins else ""

    def source(name):
        ins = named.get(name)
        frame = ins and re.search(r"stack_frame_id=(\d+)", ins.attrs)
        return sources.get(int(frame[1]), "") if frame else ""

    # the entry's parameters, in number order, matched to the arguments' paths in order
    parameters = {
        int(i.operands[0]): i
        for i in program.instructions
        if i.op == "parameter" and i.computation == program.entry
    }
    kind_of_parameter, at = {}, 0
    for number in sorted(parameters):
        path = re.sub(r"^[A-Za-z_]\w*", "", op_name(parameters[number].name))
        for j in range(at, len(kinds)):
            if kinds[j][0] == path:
                kind_of_parameter[number], at = kinds[j][1], j + 1
                break
    weights = [n for n, k in kind_of_parameter.items() if k == "parameters"] or parameters
    parameter_dims = [d for n in weights if (d := _dims(parameters[n].shape))]  # no scalars

    def kind(vid, name, shape):
        dims = _dims(shape)
        backward = "transpose(" in op_name(name)
        if vocab and vocab in dims and dims not in parameter_dims:
            return "logits"
        if seq and dims.count(seq) >= 2:
            return "attention scores"
        if dims in parameter_dims and backward:
            return "gradients"
        if not backward and any("transpose(" in op_name(u) for u in users.get(vid, ())):
            return "saved activations"
        return "scratch"

    buffers, charged = [], {}
    for allocation in allocations:
        if allocation is None or not allocation[4]:
            continue
        size, parameter, temp, output, held = allocation
        if not temp:  # an argument's or an output's own allocation: one buffer
            vid, name, _, _, shape = max(held, key=lambda v: v[2])
            if parameter is not None:  # the argument's own value (others may reuse its bytes)
                own = getattr(parameters.get(parameter), "name", None)
                vid, name, _, _, shape = next((v for v in held if v[1] == own), held[0])
                what = kind_of_parameter.get(parameter, "arguments")
            else:
                what = "outputs"
            found = [(vid, name, size, 0, shape, what)]
        else:
            found = [(*value, kind(value[0], value[1], value[4])) for value in held]
        for vid, name, nbytes, _, shape, what in found:
            plain = hlo._strip_layout(shape)
            buffers.append(Buffer(nbytes, what, plain, name, op_name(name), source(name)))
        for what, nbytes in _charge(found, size).items():
            charged[what] = charged.get(what, 0) + nbytes
    buffers.sort(key=lambda b: (-b.nbytes, b.instruction))
    total = sum(a[0] for a in allocations if a is not None)
    charged = dict(sorted(charged.items(), key=lambda item: (-item[1], item[0])))
    return Listing(buffers, charged, total, compiled, refused)


def _charge(values, size):
    """{kind: bytes} of an allocation of `size` bytes: each byte charged to the kind of the
    largest value that ever occupies it (the first made, of equals), a byte none occupies to
    "scratch". `values` as (id, name, size, offset, shape, kind)."""
    edges = sorted({0, size} | {v[3] for v in values} | {v[3] + v[2] for v in values})
    starting = {}
    for v in values:
        starting.setdefault(v[3], []).append(v)
    active, charged = [], {}
    for at, end in zip(edges, edges[1:]):
        for v in starting.get(at, ()):
            heapq.heappush(active, (-v[2], v[0], v[3] + v[2], v[5]))
        while active and active[0][2] <= at:  # ended before this stretch
            heapq.heappop(active)
        what = active[0][3] if active else "scratch"
        charged[what] = charged.get(what, 0) + end - at
    return charged


def compile_listing(lowered, vocab=None, seq=None, kinds=(), options=None, directory=None):
    """Compile `lowered` (`jax.jit(f).lower(...)`) with its buffer assignment dumped, and
    return its `Listing`, also when the compiler refuses it for lack of memory (a
    `RESOURCE_EXHAUSTED` error; any other error is raised). `kinds` as `argument_kinds`
    returns it; `options`, more compiler options; `directory`, where the dump goes (a
    temporary directory, removed after, if None)."""
    with tempfile.TemporaryDirectory() as scratch:
        where = directory or scratch
        try:
            compiled = lowered.compile(compiler_options={**(options or {}), "xla_dump_to": where})
            refused = ""
        except jax.errors.JaxRuntimeError as error:
            if "RESOURCE_EXHAUSTED" not in str(error):
                raise
            compiled, refused = None, str(error).splitlines()[0]
        return read_dump(where, vocab, seq, kinds, compiled, refused)


_CHILD = """
import importlib, json, sys
from guide_helpers.tpu import topology
module, name = sys.argv[1].split(":")
build = getattr(importlib.import_module(module), name)
lowered, kinds = build(json.loads(sys.argv[2]), topology(sys.argv[3])[0])
print("kinds", json.dumps(kinds), flush=True)
try:
    lowered.compile(compiler_options={"xla_dump_to": sys.argv[4]})
except Exception as error:
    print("refused", json.dumps(str(error).splitlines()[0]), flush=True)
"""
_PLANNED = "*after_optimizations_after_buffer_assignment.txt"  # written after the plan's files


def _said(child, what):
    """What the child printed after `what` on a line of its own, read from its output."""
    for line in child.stdout:
        if line.startswith(what + " "):
            return json.loads(line[len(what) + 1 :])
    return None


def plan(builder, fields, topology="v5e:2x2", vocab=None, seq=None, timeout=300):
    """The TPU compiler's memory plan of a program, without waiting for its machine code: a
    child Python compiles it for one chip of `topology` and is stopped as soon as the compiler
    has written its buffer assignment (the plan takes seconds, the code after it far longer).
    `builder` is "module:function", called in the child as `function(fields, chip)` and
    returning `(lowered, kinds)` (`lowered_llama`). The `Listing` has no compiled program;
    `refused` is the compiler's refusal if it refused, and a program it did not refuse by then
    has passed the check the refusal comes from, on the same total."""
    with tempfile.TemporaryDirectory() as where, tempfile.TemporaryFile("w+") as errors:
        command = [sys.executable, "-c", _CHILD, builder, json.dumps(fields), topology, where]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True)
        try:  # the child's pipe closed and the child reaped however this ends
            kinds = [tuple(k) for k in _said(child, "kinds") or ()]
            start = time.monotonic()
            while not glob.glob(os.path.join(where, _PLANNED)) and child.poll() is None:
                if time.monotonic() - start > timeout:
                    raise TimeoutError(f"no memory plan from the compiler in {timeout} s")
                time.sleep(0.05)
            refused = ""
            if child.poll() is not None:  # it ended: refused (or failed) before its code
                refused = _said(child, "refused") or ""
                if "RESOURCE_EXHAUSTED" not in refused:
                    errors.seek(0)
                    raise RuntimeError(f"the compiler failed: {refused or errors.read()[-3000:]}")
        finally:
            child.kill()
            child.wait()
            child.stdout.close()
        return read_dump(where, vocab, seq, kinds, None, refused)


def lowered_llama(fields, chip):
    """`guide_helpers.llama_family`'s train step for `LlamaConfig(**fields)`, lowered for `chip`
    from shapes alone, and its arguments' kinds (`argument_kinds`): a `plan` builder."""
    from guide_helpers.llama_family import LlamaConfig, abstract_state, jitted

    config = LlamaConfig(**fields)
    mesh = jax.make_mesh((1,), ("data",), (jax.sharding.AxisType.Auto,), devices=[chip])
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def placed(a):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=whole)

    state = jax.tree.map(placed, abstract_state(config))
    tokens = jax.ShapeDtypeStruct((config.batch, config.seq + 1), jnp.int32, sharding=whole)
    kinds = argument_kinds((state, tokens), (("parameters", "optimizer state"), "batch"))
    with jax.set_mesh(mesh):
        return jitted(config).lower(state, tokens), kinds


def show(listing, top=6):
    """Print the `top` largest buffers, then the bytes of each kind."""
    for b in listing.buffers[:top]:
        where = f"  {b.source}" if b.source else ""
        print(f"{b.nbytes / GIB:6.2f} GiB  {b.kind:17} {b.shape:24} {b.op_name[-48:]}{where}")
    print("by kind:", {k: f"{v / GIB:.2f} GiB" for k, v in listing.by_kind.items()})
    print(
        f"total {listing.total / GIB:.2f} GiB"
        + (f"; refused: {listing.refused}" if listing.refused else "")
    )
