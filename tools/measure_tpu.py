"""Measure the site's transformer on one TPU chip: the ground truth for `guide_helpers.plan`.

On a TPU host (a TPU v5e VM, or Colab's v5e-1), from the repository root, with requirements.txt
installed:

    python tools/measure_tpu.py --out guide_helpers/measured/tpu_v5e_DATE.jsonl

For each configuration of `grid("full")` (`guide_helpers.onechip.Run`: width, depth, heads,
sequence, batch, remat none/dots/block, micro-batches), it compiles the train step for the chip
and records the compiled memory breakdown (`memory_analysis()`), XLA's FLOPs (`cost_analysis()`)
and the matrix-product FLOPs read from the program; then it runs the step with real arrays and
records the median (and min, max) of `--steps` steps after `--warmup` ones, the chip's peak
bytes in use (`memory_stats()`: a process-wide maximum, so the largest of the configurations
run so far) and the MFU: the model's FLOPs (`plan.model_flops`: no remat, causal attention)
over the median step and the chip's peak FLOP/s (`roofline.CHIPS`). A configuration that does
not fit the chip is recorded as such, not run. The first line of the file is its provenance
(tools/provenance.py): chip, JAX, libtpu, flax, optax and numpy versions, Python, date and
command.

To measure a step of your own (another model, another optimizer), write a step file for
tools/measure_step.py, which records the same fields for any step.

`--compile-only` needs no TPU: it compiles the grid for one chip of a v5e slice with libtpu
(`guide_helpers.tpu.topology`) and records what the compiler says, to plan a run.

7 min 25 s on a v5e on 2026-12-06, 5 to 22 s of each configuration compiling
(guide_helpers/measured/tpu_v5e_2026-12-06.jsonl). `--grid sequence` keeps 16,384 tokens a step
and grows the sequence, to find where the attention scores bind (7 min 14 s,
tpu_v5e_2026-12-06_sequence.jsonl). A configuration the compiler refuses (RESOURCE_EXHAUSTED)
is recorded as refused. `--grid tiny --platform cpu` runs two small
configurations on the CPU, for the tool's own test (no MFU there: the CPU has no peak here).
"""

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent


def grid(name):
    from guide_helpers.onechip import Run
    from guide_helpers.plan import Config

    def run(embed, hidden, layers, seq, batch, remat="none", micro=1, heads=None, vocab=32000):
        config = Config(vocab, embed, heads or embed // 128, hidden, layers, seq, batch)
        return Run(config, remat, micro)

    if name == "tiny":
        return [run(128, 512, 2, 64, 4, vocab=512), run(128, 512, 2, 64, 4, "block", 2, vocab=512)]
    if name == "sequence":
        # 16,384 tokens a step at every length, so the matrix products stay the same and only
        # the attention scores (sequence squared) grow: where moving them binds the step.
        return [
            *(run(1024, 4096, 8, seq, 16384 // seq, "block") for seq in (512, 1024, 2048, 4096)),
            run(1024, 4096, 8, 1024, 16),
            run(1024, 4096, 8, 4096, 4),
            run(1024, 4096, 8, 8192, 2, "block"),
            run(2048, 8192, 4, 8192, 2, "block"),
            run(1024, 4096, 8, 16384, 1, "block"),
        ]
    return [
        # In the order of their compiled peaks (--compile-only), smallest first: the chip's
        # peak bytes in use is a maximum over the process, so each configuration's own peak
        # shows where it rises (the record's "peak_raised").
        run(256, 1024, 4, 128, 16, heads=4, vocab=1000),  # small: overhead, not the chip, binds
        run(2048, 8192, 4, 1024, 2),
        run(2048, 8192, 4, 2048, 4, "block"),
        run(1024, 4096, 8, 4096, 4, "block"),
        run(4096, 16384, 1, 2048, 1),
        run(2048, 8192, 4, 2048, 2),
        run(2048, 8192, 4, 2048, 4, "dots"),
        run(3072, 12288, 2, 2048, 2),
        run(2048, 8192, 4, 2048, 8, "dots", 4),
        run(2048, 8192, 4, 2048, 8, "block", 2),
        run(2048, 8192, 8, 2048, 1),
        run(2048, 8192, 12, 1024, 2, "block"),
        run(4096, 21504, 1, 4096, 1),
        run(1024, 4096, 8, 2048, 8),
    ]


def measure(run, device, steps, warmup, peak_flops, limit):
    import jax

    from guide_helpers import hlo, onechip, plan

    start = time.perf_counter()
    try:
        program = onechip.compile_for(run, device)
    except jax.errors.JaxRuntimeError as e:  # the compiler's own refusal is a result: record it
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        said = str(e).split("\n")[0]
        return {"what": "transformer " + run.name, "config": asdict(run.config),
                "remat": run.remat, "micro_batches": run.micro_batches, "fits": False,
                "refused": said}  # fmt: skip
    compile_s = time.perf_counter() - start
    m = program.memory_analysis()
    fields = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
    compiled = {f: getattr(m, f) for f in (*fields, "alias_size_in_bytes")}
    model_flops = plan.model_flops(run.config, onechip.ONE_CHIP)
    record = {
        "what": "transformer " + run.name,
        "config": asdict(run.config),
        "remat": run.remat,
        "micro_batches": run.micro_batches,
        "params_M": round(run.config.params / 1e6, 1),
        "compile_s": round(compile_s, 1),
        "compiled_GB": {f: round(v / 1e9, 3) for f, v in compiled.items()},
        "compiled_bytes": compiled,
        "xla_flops": int(program.cost_analysis()["flops"]),
        "matmul_flops": hlo.matmul_flops(program),
        "model_flops": int(model_flops),
    }
    peak_bound = hlo.memory(program).peak_bound
    record["peak_GB"] = round(peak_bound / 1e9, 3)  # arguments + outputs + scratch - aliased
    del program
    record["fits"] = not limit or peak_bound <= limit
    if not record["fits"] or not steps:
        return record
    before = (device.memory_stats() or {}).get("peak_bytes_in_use", 0)
    seconds = onechip.timed_steps(run, device, steps=steps, warmup=warmup)
    median = statistics.median(seconds)
    record.update({
        "measured_ms_median": round(median * 1e3, 2),
        "measured_ms_min_max": [round(min(seconds) * 1e3, 2), round(max(seconds) * 1e3, 2)],
        "mfu": round(model_flops / (median * peak_flops), 3) if peak_flops else None,
    })  # fmt: skip
    record.update(peak_in_use(device, before))
    return record


def peak_in_use(device, before):
    """The chip's peak bytes in use after a configuration's steps (memory_stats), where the
    platform reports it. The peak is the process's: this configuration's own only where it rose
    above `before`."""
    stats = device.memory_stats() or {}
    if "peak_bytes_in_use" not in stats:
        return {}
    return {
        "peak_bytes_in_use_GB": round(stats["peak_bytes_in_use"] / 1e9, 3),
        "bytes_limit_GB": round(stats["bytes_limit"] / 1e9, 3),
        "peak_raised": stats["peak_bytes_in_use"] > before,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the JSON-lines file to write")
    parser.add_argument("--grid", choices=("full", "sequence", "tiny"), default="full")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--platform", default="tpu", help="the JAX platform to measure on")
    parser.add_argument("--compile-only", action="store_true", help="no TPU: compile for one")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(TOOLS)]
    if args.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    from provenance import bytes_limit, of_this_run, peak_flops, where  # tools/provenance.py

    if args.compile_only:
        from guide_helpers.tpu import topology

        devices = topology("v5e:2x2")[:1]  # one chip: libtpu refuses a 1x1 slice
        args.steps = 0
    else:
        devices = jax.devices()
        if devices[0].platform != args.platform:
            print(f"error: JAX sees {devices[0].platform} devices here, not {args.platform}; "
                  "run this on a TPU host, or pass --compile-only", file=sys.stderr)  # fmt: skip
            return 2
    device = devices[0]
    limit = bytes_limit(device, args.compile_only)  # v5e's 15.75 GiB when compiling only
    peak = peak_flops(device)
    provenance = {
        **where(device),
        "devices": len(devices),
        "bytes_limit": limit,
        "peak_flops": peak,
        **of_this_run(
            "tools/measure_tpu.py",
            argv,
            "guide_helpers.onechip (the site's transformer, f32 Adam, bf16 compute, donated)",
        ),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = grid(args.grid)
    with out.open("w") as f:
        f.write(json.dumps({"provenance": provenance}) + "\n")
        for i, run in enumerate(runs):
            record = measure(run, device, args.steps, args.warmup, peak, limit)
            f.write(json.dumps(record) + "\n")
            f.flush()
            if "measured_ms_median" in record:
                said = f"{record['measured_ms_median']} ms, MFU {record['mfu']}"
            else:
                said = "fits" if record["fits"] else "does not fit"
            said += f", peak bound {record['peak_GB']} GB" if "peak_GB" in record else ""
            print(f"[{i + 1}/{len(runs)}] {run.name}: {said} {record.get('refused', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
