"""Measure host offload on one TPU chip: the site's transformer with its Adam moments or its
saved activations in host memory (`guide_helpers.offload`), against the step that keeps all of
it on the chip, and the host link itself.

On a TPU host, from the repository root, with requirements.txt installed:

    python tools/measure_offload.py --out guide_helpers/measured/tpu_v5e_offload_DATE.jsonl

For each configuration of the grid and each placement of `offload.WHERE`, a child process (so
that the chip's peak bytes in use are that step's own) compiles the step for the chip, records
its bytes per memory kind (`offload.bytes_by_kind`) and what its copies move
(`offload.transfers`), runs `--steps` steps after `--warmup` ones with real arrays and records
their median time, min and max, every step's loss and the chip's peak bytes in use. A step the
compiler refuses (RESOURCE_EXHAUSTED) is recorded as refused. Then the link: a 1 GiB array put
moved to pinned host memory and back by `jax.device_put` and by a jitted program's copies,
the median of 5 each, measured first. The first line is
the provenance (tools/provenance.py).

`--grid tiny --platform cpu` runs a small configuration on the CPU, for the tool's own test.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
LINK_BYTES = 2**30


def grid(name):
    from guide_helpers.onechip import Run
    from guide_helpers.plan import Config

    if name == "tiny":
        return [Run(Config(vocab=512, embed=128, heads=1, hidden=512, layers=2, seq=64, batch=4))]
    # 4 blocks fit the chip in every placement; 24 blocks' parameters, gradients and moments
    # (about 21 GB in f32) do not, unless the moments (11 GB) live on the host.
    return [Run(Config(32000, 2048, 16, 8192, layers, seq=1024, batch=2)) for layers in (4, 24)]


def measure_one(run, where, steps, warmup):
    """One placement's record, measured in this process."""
    import jax

    from guide_helpers import offload, onechip

    device = jax.devices()[0]
    record = {"what": f"{where}: {run.name}", "config": asdict(run.config), "where": where}
    start = time.perf_counter()
    try:
        program = offload.compile_for(run, where, device)
    except jax.errors.JaxRuntimeError as e:  # the compiler's own refusal is a result
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        return {**record, "fits": False, "refused": str(e).split("\n")[0]}
    record["compile_s"] = round(time.perf_counter() - start, 1)
    record["bytes_by_kind"] = offload.bytes_by_kind(program)
    record["transfers"] = offload.transfers(program)
    del program
    step, params, opt_state, tokens = offload.setup(run, where, device)
    seconds, losses = [], []
    with jax.set_mesh(onechip._mesh(device)):
        for i in range(warmup + steps):
            start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, tokens)
            losses.append(float(loss))
            if i >= warmup:
                seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    record.update({
        "fits": True,
        "measured_ms_median": round(median * 1e3, 2),
        "measured_ms_min_max": [round(min(seconds) * 1e3, 2), round(max(seconds) * 1e3, 2)],
        "losses": losses,
    })  # fmt: skip
    stats = device.memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        record["peak_bytes_in_use_GB"] = round(stats["peak_bytes_in_use"] / 1e9, 3)
        record["bytes_limit_GB"] = round(stats["bytes_limit"] / 1e9, 3)
    return record


def measure_link(repeat=5):
    """GB/s of a 1 GiB f32 array moved between the chip and pinned host memory: by
    `jax.device_put` (a new pinned buffer each time), and by a jitted program's copy (the
    transfers a step with offload makes), each way, the median of `repeat` after a warm-up."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    device = jax.devices()[0]
    mesh = jax.make_mesh((1,), ("data",), devices=[device])
    on_device = NamedSharding(mesh, P())
    on_host = NamedSharding(mesh, P(), memory_kind="pinned_host")
    x = jax.device_put(jnp.ones((LINK_BYTES // 4,), jnp.float32), on_device)
    h = jax.block_until_ready(jax.device_put(x, on_host))
    ways = {
        "device_put to host": lambda: jax.device_put(x, on_host),
        "device_put to device": lambda: jax.device_put(h, on_device),
        "program to host": jax.jit(lambda a: a, out_shardings=on_host).lower(x).compile(),
        "program to device": jax.jit(lambda a: a, out_shardings=on_device).lower(h).compile(),
        # the copy written into a host buffer given to the program (donated), as a step's
        # new moments are written into the old ones'
        "program into a given host buffer": jax.jit(
            lambda given, a: a, out_shardings=on_host, donate_argnums=0
        )
        .lower(h, x)
        .compile(),
    }
    arguments = {"program to host": (x,), "program to device": (h,)}
    record = {"what": "link", "bytes": LINK_BYTES}
    for name, move in ways.items():
        seconds = []
        for i in range(repeat + 1):  # the first, a warm-up, is not counted
            start = time.perf_counter()
            if name == "program into a given host buffer":
                h = jax.block_until_ready(move(h, x))
            else:
                jax.block_until_ready(move(*arguments.get(name, ())))
            if i:
                seconds.append(time.perf_counter() - start)
        record[f"{name} GB/s"] = round(LINK_BYTES / statistics.median(seconds) / 1e9, 2)
    return record


def child(argv, timeout):
    """Run this tool on one placement in a child process; its JSON record."""
    command = [sys.executable, str(Path(__file__).resolve()), *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="the JSON-lines file to write")
    parser.add_argument("--grid", choices=("chip", "tiny"), default="chip")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per placement")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--platform", default="tpu", help="the JAX platform to measure on")
    parser.add_argument("--one", nargs=2, metavar=("INDEX", "WHERE"), help=argparse.SUPPRESS)
    parser.add_argument("--link", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--about", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per child")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(TOOLS)]
    from provenance import bytes_limit, of_this_run, where  # tools/provenance.py

    if args.platform == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    if args.one:
        run = grid(args.grid)[int(args.one[0])]
        print(json.dumps(measure_one(run, args.one[1], args.steps, args.warmup)))
        return 0
    if args.link:
        print(json.dumps(measure_link()))
        return 0
    if args.about:
        import jax

        device = jax.devices()[0]
        print(json.dumps({**where(device), "bytes_limit": bytes_limit(device)}))
        return 0
    if not args.out:
        parser.error("--out is required")
    common = ["--grid", args.grid, "--platform", args.platform, "--steps", str(args.steps),
              "--warmup", str(args.warmup)]  # fmt: skip
    # This process never starts JAX's TPU backend: one process at a time may hold the chip, and
    # each child holds it in turn.
    about = child([*common, "--about"], args.timeout)
    if about["platform"] != args.platform:
        print(f"error: JAX sees {about['platform']} devices here, not {args.platform}; run this "
              "on a TPU host", file=sys.stderr)  # fmt: skip
        return 2
    from guide_helpers import offload

    step = "guide_helpers.offload (onechip's step: f32 Adam, bf16 compute, donated)"
    provenance = {**about, **of_this_run("tools/measure_offload.py", argv, step)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        f.write(json.dumps({"provenance": provenance}) + "\n")
        if args.platform != "cpu":
            record = child([*common, "--link"], args.timeout)
            f.write(json.dumps(record) + "\n")
            print(record, flush=True)
        for i, run in enumerate(grid(args.grid)):
            for where in offload.WHERE:
                record = child([*common, "--one", str(i), where], args.timeout)
                f.write(json.dumps(record) + "\n")
                f.flush()
                said = record.get("measured_ms_median", record.get("refused"))
                print(f"{record['what']}: {said}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
