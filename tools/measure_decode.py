"""Measure text generation on one TPU chip: the page generate_text's own cached forward pass, in
bf16, at Llama 3.2 1B's shapes (`guide_helpers.llama_family.LLAMA_3_2_1B`, random weights).

The code measured is the page's: its cells that define `empty_cache`, `attend` and `forward` are
read from docs/generate_text.md and run here (`page_code`), so that the record times what the
page teaches. On a TPU v5e host, from the repository root, with requirements.txt installed:

    python tools/measure_decode.py --budget 420 --out $OUT/decode_v5e.jsonl

It writes JSON lines: first `{"provenance": ...}` (tools/provenance.py), with the model's
configuration and, measured first, the chip's memory bandwidth (`hbm`: a jitted sum that reads
a 2 GiB bf16 array, and a jitted copy of it that reads and writes it, median of 10 each). Then:
- one `prefill` line per (batch, prompt): one jitted forward pass over the prompts that fills an
  empty cache as long as the prompt; its median time over `--repeats` calls after 2 of warm-up,
  `matmul_flops` (read from the program, `guide_helpers.hlo`) and `model_flops` (2 per matrix
  weight and token, the head included, and attention's causal half);
- one `decode` line per (batch, context): a `lax.fori_loop` of `--steps` one-token steps in one
  jitted program, the cache donated, from position context - steps; `measured_ms_median` is a
  step's (the loop's median over `--repeats` calls, divided by the steps). Beside it, one step
  compiled alone gives its `argument_bytes` (weights, cache, token: what a step must read) and
  `matmul_flops`.
A program the compiler refuses (RESOURCE_EXHAUSTED) is recorded with `fits: false` and the
message's first line; one not started before `--budget` seconds with `skipped: "budget"`.
`--grid tiny --platform cpu` runs a small model on the CPU, for the tool's own test.
"""

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = Path(__file__).resolve().parent
PAGE = ROOT / "docs" / "generate_text.md"
PAGE_FUNCTIONS = ("empty_cache", "attend", "forward")
HBM_BYTES = 2**31  # the bandwidth probe's array


def page_code(page=PAGE):
    """{name: function} of PAGE_FUNCTIONS, from the page's code cells that define them."""
    import jax
    import jax.numpy as jnp

    from guide_helpers import llama_family

    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", page.read_text(), re.S)
    wanted = [c for c in cells if any(f"def {name}(" in c for name in PAGE_FUNCTIONS)]
    namespace = {"jax": jax, "jnp": jnp, "lf": llama_family}
    for cell in wanted:
        exec(compile(cell, str(page), "exec"), namespace)  # noqa: S102  (the page's own code)
    missing = [name for name in PAGE_FUNCTIONS if name not in namespace]
    if missing:
        raise SystemExit(f"{page.name} no longer defines {', '.join(missing)}: update this tool")
    return {name: namespace[name] for name in PAGE_FUNCTIONS}


def grid(name):
    """(config, prefills [(batch, prompt)], decodes [(batch, context)], steps a decode loop)."""
    from dataclasses import replace

    from guide_helpers import llama_family

    if name == "tiny":
        config = llama_family.LlamaConfig(vocab=256, embed=64, heads=4, kv_heads=2, hidden=128,
                                          layers=2, seq=16, batch=2, tied=True)  # fmt: skip
        return config, [(2, 16)], [(2, 32), (4, 32)], 4
    config = replace(llama_family.LLAMA_3_2_1B, seq=1, batch=1)
    prefills = [(1, 2048), (4, 2048), (16, 512), (64, 128)]
    # 128 tokens of context: the batch where a step turns bound by FLOPs is within reach;
    # 1,024: the cache's bytes grow with the batch as fast as its FLOPs do.
    decodes = [(b, 128) for b in (1, 8, 32, 128, 256, 512, 1024)]
    decodes += [(b, 1024) for b in (1, 8, 32, 128, 256)]
    return config, prefills, decodes, 32


def bf16_params(config, seed=0):
    """The model's parameters in bf16, its layers stacked (one array per weight, as the page
    stacks them), made on the device."""
    import jax
    import jax.numpy as jnp

    from guide_helpers import llama_family

    def make(key):
        loaded = llama_family.init_params(config, key)
        stacked = {**loaded, "layers": jax.tree.map(lambda *w: jnp.stack(w), *loaded["layers"])}
        return jax.tree.map(lambda w: w.astype(jnp.bfloat16), stacked)

    return jax.jit(make)(jax.random.key(seed))


def timed(call, repeats, warmup=2):
    """(median, min, max) seconds of `call()` (which blocks until its result is ready)."""
    seconds = []
    for i in range(warmup + repeats):
        start = time.perf_counter()
        call()
        if i >= warmup:
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), min(seconds), max(seconds)


def hbm(repeats=10):
    """The chip's memory bandwidth, GB/s: a sum that reads HBM_BYTES, a copy that reads and
    writes them."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones(HBM_BYTES // 2, jnp.bfloat16)
    read = jax.jit(lambda a: jnp.sum(a, dtype=jnp.float32))
    copy = jax.jit(lambda a: a * 2)
    read_s = timed(lambda: read(x).block_until_ready(), repeats)[0]
    copy_s = timed(lambda: copy(x).block_until_ready(), repeats)[0]
    return {"read_GBps": round(HBM_BYTES / read_s / 1e9, 1),
            "copy_GBps": round(2 * HBM_BYTES / copy_s / 1e9, 1), "bytes": HBM_BYTES}  # fmt: skip


def prefill_flops(config, batch, prompt):
    """The FLOPs MFU counts in a prefill: 2 per layer's matrix weight and token, the head's for
    each prompt's last position only (the page's `forward` returns its logits alone), and
    attention's causal half (position t attends to t + 1 positions)."""
    layers_matrices = config.layers * config.layer_matrices * batch * prompt
    head = config.vocab * config.embed * batch
    attention = 2 * config.layers * config.heads * config.head_dim * batch * prompt * (prompt + 1)
    return 2 * (layers_matrices + head) + attention


def rounded(median_min_max, steps=1):
    median, low, high = (s / steps * 1e3 for s in median_min_max)
    return {"measured_ms_median": round(median, 4),
            "measured_ms_min_max": [round(low, 4), round(high, 4)]}  # fmt: skip


def refused(error):
    if "RESOURCE_EXHAUSTED" not in str(error):
        raise error
    return {"fits": False, "refused": str(error).split("\n")[0]}


def measure_prefill(code, config, params, batch, prompt, repeats):
    import jax
    import jax.numpy as jnp

    from guide_helpers import hlo

    def prefill(params, tokens):
        cache = code["empty_cache"](config, batch, prompt, jnp.bfloat16)
        logits, cache = code["forward"](config, params, tokens, cache, 0)
        return jnp.argmax(logits, -1), cache

    tokens = jax.random.randint(jax.random.key(1), (batch, prompt), 0, config.vocab)
    record = {"what": "prefill", "batch": batch, "prompt": prompt}
    try:
        start = time.perf_counter()
        program = jax.jit(prefill).lower(params, tokens).compile()
        record["compile_s"] = round(time.perf_counter() - start, 1)
        median_min_max = timed(lambda: jax.block_until_ready(program(params, tokens)), repeats)
    except jax.errors.JaxRuntimeError as error:
        return {**record, **refused(error)}
    return {**record, "fits": True, **rounded(median_min_max),
            "matmul_flops": hlo.matmul_flops(program),
            "model_flops": prefill_flops(config, batch, prompt)}  # fmt: skip


def measure_decode(code, config, params, batch, context, steps, repeats):
    import jax
    import jax.numpy as jnp

    from guide_helpers import hlo

    forward, start_at = code["forward"], context - steps

    def step(params, tokens, cache, position):
        logits, cache = forward(config, params, tokens, cache, position)
        return jnp.argmax(logits, -1)[:, None], cache

    def loop(params, tokens, cache):
        def one(i, carry):
            return step(params, *carry, start_at + i)

        return jax.lax.fori_loop(0, steps, one, (tokens, cache))

    record = {"what": "decode", "batch": batch, "context": context, "steps": steps}
    tokens = jnp.zeros((batch, 1), jnp.int32)
    try:
        cache = code["empty_cache"](config, batch, context, jnp.bfloat16)
        one = jax.jit(step, donate_argnums=2).lower(params, tokens, cache, jnp.int32(0)).compile()
        record["argument_bytes"] = one.memory_analysis().argument_size_in_bytes
        record["matmul_flops"] = hlo.matmul_flops(one)
        del one
        begin = time.perf_counter()
        program = jax.jit(loop, donate_argnums=2).lower(params, tokens, cache).compile()
        record["compile_s"] = round(time.perf_counter() - begin, 1)
        carry = [tokens, cache]

        def call():
            carry[:] = program(params, *carry)
            jax.block_until_ready(carry)

        median_min_max = timed(call, repeats)
    except jax.errors.JaxRuntimeError as error:
        return {**record, **refused(error)}
    return {**record, "fits": True, **rounded(median_min_max, steps)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grid", default="1b", choices=["1b", "tiny"])
    parser.add_argument("--platform", default="tpu", help="JAX's platform (cpu: the test's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, help="seconds after which nothing new starts")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(TOOLS)]
    import jax
    import provenance

    began = time.perf_counter()
    device = jax.devices()[0]
    if device.platform != args.platform:
        print(f"error: JAX sees {device.platform} devices here, not {args.platform}; run this "
              "on a TPU host", file=sys.stderr)  # fmt: skip
        return 2
    code = page_code()
    config, prefills, decodes, steps = grid(args.grid)
    head = {**provenance.of_this_run("tools/measure_decode.py", argv, "docs/generate_text.md"),
            **provenance.where(device), "config": vars(config), "decode_steps": steps,
            "repeats": args.repeats, "warmup": 2, "hbm": hbm(args.repeats * 2)}  # fmt: skip
    params = bf16_params(config)
    head["param_bytes"] = sum(w.nbytes for w in jax.tree.leaves(params))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as out:
        out.write(json.dumps({"provenance": head}) + "\n")
        jobs = [("prefill", b, n) for b, n in prefills] + [("decode", b, c) for b, c in decodes]
        for what, batch, length in jobs:
            if args.budget and time.perf_counter() - began > args.budget:
                record = {"what": what, "batch": batch, "length": length, "skipped": "budget"}
            elif what == "prefill":
                record = measure_prefill(code, config, params, batch, length, args.repeats)
            else:
                record = measure_decode(code, config, params, batch, length, steps, args.repeats)
            out.write(json.dumps(record) + "\n")
            out.flush()
            print(json.dumps(record), flush=True)


if __name__ == "__main__":
    sys.exit(main())
