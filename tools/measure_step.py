"""Measure your own training step on one TPU chip, or compile it for one without a TPU.

A step file is a Python file (or an importable module) with two functions. `configurations()`
returns the list of configurations to measure, each with a `name` (a dataclass is recorded
field by field); `configurations(SET)` is called instead when `--set SET` is given. `build(config)`
returns `(step, arguments, model_flops)`: `step(state, batch) -> (state, loss)`, jitted with
its state donated (`jax.jit(f, donate_argnums=0)`); `arguments(abstract)`, the `(state, batch)`
to call it with, as `jax.ShapeDtypeStruct`s when `abstract` is True (`jax.eval_shape` gives
them) and as arrays when False; and the model's FLOPs per step, for the MFU. The tool calls
both under a one-device mesh (`jax.set_mesh`, axis "data"), places the arguments on that chip,
compiles the step once and times that compiled program. Two ship with it:
tools/steps/transformer.py (the site's transformer, `guide_helpers.onechip`'s step) and
tools/steps/llama_family.py (`guide_helpers.llama_family`, a Llama-shaped decoder).
`--step FILE.py`, `--step MODULE` or `--step MODULE:BUILD` (a build function of another name).

On a TPU v5e host, from the repository root (issue 61's run: 14 configurations, 5 to 6
minutes; `--budget 360` records any configuration not started by 6 minutes as skipped):

    python tools/measure_step.py --step tools/steps/llama_family.py --budget 360 \\
        --out $OUT/llama_v5e.jsonl

It writes JSON lines: first `{"provenance": ...}` (tools/provenance.py: chip, platform,
versions, Python, date, command, the step file), then one line per configuration, with the
fields of tools/measure_tpu.py where they apply: `compile_s`, `compiled_GB` and `compiled_bytes`
(`memory_analysis()`), `peak_GB` (arguments + outputs + scratch - aliased), `xla_flops`
(`cost_analysis()`), `matmul_flops` (read from the program, `guide_helpers.hlo`),
`model_flops`, `measured_ms_median` and `measured_ms_min_max` over `--steps` steps after
`--warmup`, `mfu` (model FLOPs over the median and `roofline.CHIPS`' peak), the first and last
loss, and `memory_stats()`' peak. A program the compiler refuses (RESOURCE_EXHAUSTED) is recorded
with `fits: false`, `refused` (the message's first line) and `compiler_message` (all of it),
and the run goes on. Such a record, and one whose compiled peak passes the chip's limit, also
says what fills the memory, read from the compiler's buffer assignment (`guide_helpers.buffers`,
dumped by every compile here): `memory_total` (bytes of every allocation in main memory, the
total a TPU's refusal names in GiB), `memory_by_kind` ({kind: bytes}, adding up to it: the
state's parameters and optimizer state, the batch, logits, attention scores, gradients, saved
activations, scratch) and `largest_buffers` (the 10 largest arrays: bytes, kind, shape, the JAX
operation and the source line that made each). `--compile-only TOPOLOGY` (default v5e:2x2)
compiles for one chip of that slice with libtpu (`guide_helpers.tpu.topology`) and runs
nothing. `--platform cpu --set tiny` runs small configurations on the CPU, for the tool's own
tests (no MFU: no CPU peak here).
"""

import argparse
import dataclasses
import importlib
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
MESSAGE_CHARS = 20000  # of a refusal's message, kept in the record
LARGEST = 10  # buffers listed in a record of a step that does not fit


def load_step(spec):
    """(configurations, build) of `spec`: a file ending in .py, a module, or MODULE:BUILD."""
    name, _, build_name = spec.partition(":") if not spec.endswith(".py") else (spec, "", "")
    if name.endswith(".py"):
        path = Path(name).resolve()
        module_spec = importlib.util.spec_from_file_location(f"step_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(name)
    return module.configurations, getattr(module, build_name or "build")


def describe(config):
    """A configuration as recorded: its dataclass fields, else its repr."""
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    return repr(config)


def _refusal(e):
    message = str(e)
    if "RESOURCE_EXHAUSTED" not in message:
        raise e
    lines = [line for line in message.splitlines() if line.strip()]
    return {"fits": False, "refused": lines[0], "compiler_message": message[:MESSAGE_CHARS]}


def _sizes(config):
    """(vocab, seq) of a configuration, or of the model configuration it holds, else None."""
    for c in (config, getattr(config, "config", None)):
        if hasattr(c, "vocab") and hasattr(c, "seq"):
            return c.vocab, c.seq
    return None, None


def what_fills(dump, config, abstract, top=LARGEST):
    """`memory_by_kind` and `largest_buffers` of the program a compile dumped to `dump`
    (`guide_helpers.buffers`): the state's kinds when it is (parameters, optimizer state)."""
    from guide_helpers import buffers

    try:
        kinds = buffers.argument_kinds(abstract, (("parameters", "optimizer state"), "batch"))
    except (ValueError, TypeError):  # a state of another form: its arrays are "arguments"
        kinds = ()
    listing = buffers.read_dump(dump, *_sizes(config), kinds)
    largest = [
        {"bytes": b.nbytes, "kind": b.kind, "shape": b.shape, "op_name": b.op_name,
         "source": b.source}
        for b in listing.buffers[:top]
    ]  # fmt: skip
    return {"memory_total": listing.total, "memory_by_kind": listing.by_kind,
            "largest_buffers": largest}  # fmt: skip


def measure(config, build, device, steps, warmup, peak_flops, limit):
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from measure_tpu import peak_in_use  # the chip's peak, as tools/measure_tpu.py records it

    from guide_helpers import hlo

    record = {"what": config.name, "config": describe(config)}
    if hasattr(config, "params"):
        record["params_M"] = round(config.params / 1e6, 1)
    mesh = jax.make_mesh((1,), ("data",), (jax.sharding.AxisType.Auto,), devices=[device])
    whole = NamedSharding(mesh, P())
    with jax.set_mesh(mesh):
        step, arguments, model_flops = build(config)
    if not hasattr(step, "lower"):
        step = jax.jit(step, donate_argnums=0)

    def placed(a):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=whole)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as dump, jax.set_mesh(mesh):
        abstract = jax.tree.map(placed, arguments(True))
        try:  # the compiler's buffer assignment dumped, read only if the step does not fit
            program = step.lower(*abstract).compile(compiler_options={"xla_dump_to": dump})
        except jax.errors.JaxRuntimeError as e:  # the compiler's refusal is a result: record it
            refused = {"compile_s": round(time.perf_counter() - start, 1), **_refusal(e)}
            return {**record, **refused, **what_fills(dump, config, abstract)}
        compile_s = round(time.perf_counter() - start, 1)
        memory = hlo.memory(program)
        over = limit and memory.peak_bound > limit
        fills = what_fills(dump, config, abstract) if over else {}
    record["compile_s"] = compile_s
    compiled = {
        "argument_size_in_bytes": memory.arguments,
        "output_size_in_bytes": memory.outputs,
        "temp_size_in_bytes": memory.temp,
        "alias_size_in_bytes": memory.aliased,
    }
    record.update({
        "compiled_GB": {f: round(v / 1e9, 3) for f, v in compiled.items()},
        "compiled_bytes": compiled,
        "peak_GB": round(memory.peak_bound / 1e9, 3),
        "xla_flops": int(program.cost_analysis()["flops"]),
        "matmul_flops": hlo.matmul_flops(program),
        "model_flops": int(model_flops),
        "fits": not over,
        **fills,
    })  # fmt: skip
    if not record["fits"] or not steps:
        return record
    before = (device.memory_stats() or {}).get("peak_bytes_in_use", 0)
    seconds, losses = [], []
    try:
        with jax.set_mesh(mesh):
            state, batch = jax.device_put(arguments(False), whole)
            for i in range(warmup + steps):
                start = time.perf_counter()
                state, loss = program(state, batch)
                losses.append(float(jax.block_until_ready(loss)))
                if i >= warmup:
                    seconds.append(time.perf_counter() - start)
    except jax.errors.JaxRuntimeError as e:  # out of memory on the chip itself
        return {**record, **_refusal(e), "refused_when": "running"}
    finally:
        state = batch = program = None
    median = statistics.median(seconds)
    record.update({
        "steps": steps,
        "warmup": warmup,
        "measured_ms_median": round(median * 1e3, 2),
        "measured_ms_min_max": [round(min(seconds) * 1e3, 2), round(max(seconds) * 1e3, 2)],
        "mfu": round(model_flops / (median * peak_flops), 3) if peak_flops else None,
        "loss_first_last": [round(losses[0], 4), round(losses[-1], 4)],
    })  # fmt: skip
    record.update(peak_in_use(device, before))
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", required=True, help="FILE.py, MODULE or MODULE:BUILD")
    parser.add_argument("--out", required=True, help="the JSON-lines file to write")
    parser.add_argument("--set", help="call configurations(SET) instead of configurations()")
    parser.add_argument("--only", help="only the configurations whose name contains this")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--platform", default="tpu", help="the JAX platform to measure on")
    parser.add_argument(
        "--compile-only", nargs="?", const="v5e:2x2", metavar="TOPOLOGY",
        help="no TPU: compile for one chip of this slice with libtpu (default v5e:2x2)",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, help="seconds: record the configurations left after it skipped"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    sys.path[:0] = [str(ROOT), str(TOOLS)]
    if args.platform == "cpu" and not args.compile_only:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from provenance import bytes_limit, of_this_run, peak_flops, where  # tools/provenance.py

    configurations, build = load_step(args.step)
    runs = configurations(args.set) if args.set else configurations()
    runs = [c for c in runs if not args.only or args.only in c.name]
    if args.compile_only:
        from guide_helpers.tpu import topology

        devices = topology(args.compile_only)[:1]  # one chip: libtpu refuses a 1x1 slice
        args.steps = 0
    else:
        devices = jax.devices()
        if devices[0].platform != args.platform:
            print(f"error: JAX sees {devices[0].platform} devices here, not {args.platform}; "
                  "run this on a TPU host, or pass --compile-only", file=sys.stderr)  # fmt: skip
            return 2
    device = devices[0]
    limit = bytes_limit(device, bool(args.compile_only))  # compiling only: no memory_stats
    peak = peak_flops(device)
    provenance = {
        **where(device),
        "devices": len(devices),
        "compile_only": args.compile_only,
        "bytes_limit": limit,
        "peak_flops": peak,
        "steps": args.steps,
        "warmup": args.warmup,
        **of_this_run("tools/measure_step.py", argv, args.step),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(json.dumps({"provenance": provenance}) + "\n")
        for i, config in enumerate(runs):
            if args.budget and time.perf_counter() - started > args.budget:
                record = {"what": config.name, "config": describe(config), "skipped": "budget"}
            else:
                record = measure(config, build, device, args.steps, args.warmup, peak, limit)
            f.write(json.dumps(record) + "\n")
            f.flush()
            if "measured_ms_median" in record:
                said = f"{record['measured_ms_median']} ms, MFU {record['mfu']}"
            elif "skipped" in record:
                said = "skipped (budget)"
            else:
                said = "fits" if record["fits"] else "does not fit"
            said += f", peak bound {record['peak_GB']} GB" if "peak_GB" in record else ""
            said += f", compiled in {record['compile_s']} s" if "compile_s" in record else ""
            elapsed = time.perf_counter() - started
            print(f"[{i + 1}/{len(runs)} {elapsed:.0f} s] {config.name}: {said} "
                  f"{record.get('refused', '')}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
