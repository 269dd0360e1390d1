"""The site's transformer trained on one chip: the step that tools/measure_tpu.py times on a real
TPU and that the pages compile for one with libtpu, from one source.

The step is the measured one: `guide_helpers.transformer.Transformer` on a 1-device mesh with
`logical_rules()` (nothing split), f32 parameters and Adam moments (`optax.adamw(1e-4)`), the
parameters cast to bf16 inside the loss, `jax.value_and_grad` of `next_token_loss`, the state
donated. `remat` recomputes each block in the backward pass ("block"), or keeps its matrix
products' outputs ("dots"); `micro_batches` accumulates the gradient over slices of the batch in
f32 with `jax.lax.scan`.

- `Run`: one configuration, a `plan.Config` with its remat policy and micro-batches.
- `compile_for(run, device)`: the step compiled from shapes alone for `device` (a TPU chip of
  `guide_helpers.tpu.topology`, or any JAX device).
- `timed_steps(run, device, steps)`: run it on `device` with real arrays: seconds per step.
- `load(path)`: a file of measurements (tools/measure_tpu.py's): its provenance and, for each
  configuration, its `Run` and what was recorded.
- `predicted(run, chip)`: what `plan.estimate` says of a run on one chip; `fills(run)`: whether
  a run is big enough for the estimator's whole-step MFU to apply (`FILLS`).
- `work_at_peak(run, chip)`, `fit_time(steps, chip)`, `TimeModel`, `time_model_prices(run,
  chip)`: a step's time as its matrix products, Adam's update and its attention scores'
  traffic, each at a fitted fraction of the chip's peak rate, fitted on measured steps of both
  model families (the site's transformer and `guide_helpers.llama_family`, `LLAMA_V5E`);
  `measured(paths)`: the steps measured in record files, each configuration once.

The records also read a Llama-shaped step (`guide_helpers.llama_family`, recorded by
tools/measure_step.py) as a `Run` of a `plan.Config` with `gated=True`, its key/value heads and
`tied`: the memory and FLOPs formulas apply to it as they are.
"""

import json
import re
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from guide_helpers.plan import REMAT, UPDATE_BYTES, Config, Layout, estimate, flops, model_flops
from guide_helpers.transformer import Transformer, logical_rules, next_token_loss, residual

POLICIES = {
    "none": None,
    "block": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
OPTIMIZER = optax.adamw(1e-4)
# The measurements on record, one file per session on a chip (guide_helpers/measured/README.md).
MEASURED = Path(__file__).parent / "measured"
# tools/measure_tpu.py on one TPU v5e chip: 14 configurations over width, depth, sequence, batch,
# remat and micro-batches
RECORDED_V5E = MEASURED / "tpu_v5e_2026-12-06.jsonl"
# The first record, made by another session before the tool: 6 configurations, all measured again
# in RECORDED_V5E (the same shapes): a repeat of the same steps, to compare the two sessions
FIRST_V5E = MEASURED / "tpu_v5e_2026-12-05.jsonl"
# tools/measure_tpu.py --grid sequence on one TPU v5e chip: 16,384 tokens a step at 512 to 16,384
# tokens a sequence, so that only the attention scores grow; none of it calibrates the MFU range
SEQUENCE_V5E = MEASURED / "tpu_v5e_2026-12-06_sequence.jsonl"
# tools/measure_step.py on tools/steps/llama_family.py (`guide_helpers.llama_family`, a second
# model family) on one TPU v5e chip, 2026-12-07: 14 configurations in five calls, the files in
# the order they were recorded; the first call's file (5 measured, 2 refused) comes first
LLAMA_V5E = tuple(
    MEASURED / f"tpu_v5e_llama_2026-12-07{suffix}.jsonl"
    for suffix in ("", "_none", "_2560", "_block", "_8192")
)
# tools/measure_step.py --compile-only v5e:2x2 here, with libtpu and no TPU, on the three
# configurations the chip's compiler refused: each refused again, with what fills its memory
# (`memory_by_kind`, `largest_buffers`, from `guide_helpers.buffers`)
REFUSED_V5E = tuple(
    MEASURED / f"libtpu_v5e_refused_2026-12-07_{name}.jsonl"
    for name in ("transformer", "llama_6l", "llama_1b")
)


@dataclass(frozen=True)
class Run:
    config: Config
    remat: str = "none"
    micro_batches: int = 1

    def __post_init__(self):
        if self.remat not in REMAT:
            raise ValueError(f"remat must be one of {REMAT}, not {self.remat!r}")
        if self.config.batch % self.micro_batches:
            raise ValueError(
                f"a batch of {self.config.batch} does not split into {self.micro_batches} "
                "micro-batches"
            )

    @property
    def name(self):
        c = self.config
        kv = "" if c.kv_heads is None else f" KV={c.kv_heads}"
        return (
            f"E={c.embed} F={c.hidden} L={c.layers} H={c.heads}{kv} V={c.vocab}"
            f"{' tied' if c.tied else ''} S={c.seq} B={c.batch} remat={self.remat} "
            f"micro={self.micro_batches}"
        )


def _model_of(config, seed=0):
    return Transformer(
        config.vocab, config.embed, config.heads, config.hidden, config.layers,
        rngs=nnx.Rngs(seed),
    )  # fmt: skip


def _forward_loss(graphdef, remat, params, tokens):
    """next_token_loss of the bf16 model; with remat, each block under jax.checkpoint."""
    bf16 = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
    model = nnx.merge(graphdef, bf16)
    if remat == "none":
        return next_token_loss(model, tokens)

    def block_fn(block, x):
        return block(x)

    checkpointed = nnx.remat(block_fn, policy=POLICIES[remat])
    x = residual(model.table[...][tokens[:, :-1]])
    for block in model.blocks:
        x = checkpointed(block, x)
    logits = model.norm(x) @ model.head[...]
    log_probs = jax.nn.log_softmax(logits)
    targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1], dtype=log_probs.dtype)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))


def _step_fn(graphdef, run):
    """(params, opt_state, tokens) -> (params, opt_state, loss) for `run`."""
    loss_of = partial(_forward_loss, graphdef, run.remat)

    def grads(params, tokens):
        if run.micro_batches == 1:
            return jax.value_and_grad(loss_of)(params, tokens)
        slices = tokens.reshape(run.micro_batches, -1, tokens.shape[-1])

        def add(total, piece):
            value, g = jax.value_and_grad(loss_of)(params, piece)
            return jax.tree.map(jnp.add, total, (value, g)), None

        zero = jax.tree.map(jnp.zeros_like, (jnp.zeros((), jnp.float32), params))
        (value, g), _ = jax.lax.scan(add, zero, slices)
        return value / run.micro_batches, jax.tree.map(lambda a: a / run.micro_batches, g)

    def step(params, opt_state, tokens):
        value, g = grads(params, tokens)
        updates, opt_state = OPTIMIZER.update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def _mesh(device):
    return jax.make_mesh((1,), ("data",), (jax.sharding.AxisType.Auto,), devices=[device])


def abstract_args(run, device):
    """(graphdef, params, opt_state, tokens) as ShapeDtypeStructs placed on `device`."""
    mesh = _mesh(device)
    whole = NamedSharding(mesh, P())
    with jax.set_mesh(mesh), nnx.logical_axis_rules(logical_rules()):
        graphdef, params = nnx.split(nnx.eval_shape(lambda: _model_of(run.config)), nnx.Param)
        params = nnx.to_pure_dict(params)
        opt_state = jax.eval_shape(OPTIMIZER.init, params)

    def placed(a):
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=whole)

    tokens = jax.ShapeDtypeStruct(
        (run.config.batch, run.config.seq + 1), jnp.int32, sharding=whole
    )
    return graphdef, jax.tree.map(placed, params), jax.tree.map(placed, opt_state), tokens


def jitted(run, graphdef):
    return jax.jit(_step_fn(graphdef, run), donate_argnums=(0, 1))


def compile_for(run, device):
    """The step compiled from shapes alone for `device`: nothing is allocated."""
    graphdef, params, opt_state, tokens = abstract_args(run, device)
    mesh = _mesh(device)
    with jax.set_mesh(mesh), nnx.logical_axis_rules(logical_rules()):
        return jitted(run, graphdef).lower(params, opt_state, tokens).compile()


def timed_steps(run, device, steps=10, warmup=2, seed=0):
    """Seconds of each of `steps` steps on `device` after `warmup` ones, each step's state fed
    to the next, the loss waited for."""
    mesh = _mesh(device)
    whole = NamedSharding(mesh, P())
    with jax.set_mesh(mesh), nnx.logical_axis_rules(logical_rules()):
        graphdef, params = nnx.split(_model_of(run.config, seed), nnx.Param)
        params = jax.device_put(nnx.to_pure_dict(params), whole)
        opt_state = jax.device_put(OPTIMIZER.init(params), whole)
        shape = (run.config.batch, run.config.seq + 1)
        tokens = jax.random.randint(jax.random.key(seed), shape, 0, run.config.vocab)
        tokens = jax.device_put(tokens, whole)
        step = jitted(run, graphdef)
        seconds = []
        for i in range(warmup + steps):
            start = time.perf_counter()
            params, opt_state, value = step(params, opt_state, tokens)
            jax.block_until_ready(value)
            if i >= warmup:
                seconds.append(time.perf_counter() - start)
    return seconds


def _run_of(record):
    """The Run a record describes: its "config" fields, or, in the first file, its name. A
    `llama_family.LlamaConfig`'s fields (kv_heads, tied and, unlike a `plan.Config`'s, remat)
    describe a gated MLP's step."""
    fields = record.get("config", {})
    if "config" in fields:  # tools/measure_step.py's record of the site's transformer
        return Run(Config(**fields["config"]), fields["remat"], fields["micro_batches"])
    if "remat" in fields:
        fields = dict(fields)
        remat = fields.pop("remat")
        return Run(Config(**fields, gated=True), remat)
    if "config" in record:
        return Run(Config(**record["config"]), record["remat"], record["micro_batches"])
    fields = dict(re.findall(r"(\w+)=(\w+)", record["what"]))
    config = Config(
        vocab=int(fields["V"]), embed=int(fields["E"]), heads=int(fields["H"]),
        hidden=int(fields["F"]), layers=int(fields["L"]), seq=int(fields["S"]),
        batch=int(fields["B"]),
    )  # fmt: skip
    return Run(config, fields.get("remat", "none"), int(fields.get("micro", 1)))


def compiled_peak(record):
    """A recorded program's peak bytes as its compiler counted them: arguments, outputs and
    scratch, less what the outputs reuse of the arguments (donated buffers)."""
    b = record["compiled_bytes"]
    parts = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes")
    return sum(b[f] for f in parts) - b["alias_size_in_bytes"]


def _is_step(record):
    """A configuration's line: the site's transformer's, or a Llama-shaped step's that ran or
    was refused (not one a budget skipped)."""
    llama = "remat" in record.get("config", {}) and "skipped" not in record
    return record["what"].startswith("transformer") or llama


def load(path):
    """(provenance, [(Run, record)]) of a measurements file: JSON lines, the provenance first,
    then one configuration a line; other lines (the first file's matmul, configurations a
    budget skipped) are left out."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    provenance = lines[0]["provenance"]
    return provenance, [(_run_of(r), r) for r in lines[1:] if _is_step(r)]


ONE_CHIP = Layout("one chip", 1, 1, 1, 1, 1, 1)
# Model FLOPs per step from which a step fills a chip (1 TFLOP: 5 ms of a v5e's peak). A smaller
# one is bound by launching its many small operations, not by its FLOPs, and the estimator's
# whole-step MFU, measured on large models, does not apply to it.
FILLS = 1e12


def predicted(run, chip, flash=False):
    """`plan.estimate` of `run` on one `chip`: its memory (scores held unless `flash`), FLOPs
    and step time."""
    return estimate(run.config, ONE_CHIP, chip, run.micro_batches, run.remat, flash=flash)


def fills(run):
    return model_flops(run.config, ONE_CHIP) >= FILLS


# HBM traffic per attention score that the step materializes (no flash kernel), in bytes, as
# counted from its fusions: forward, the f32 scores written and read twice (mask and max, then
# exp and sum) and the bf16 probabilities written and read by p @ v (4 + 4 + 4 + 2 + 2);
# backward, the f32 gradient of the probabilities written and read, the probabilities read, the
# bf16 gradient of the scores written and read by both products, the probabilities read again
# for v's gradient (4 + 4 + 2 + 2 + 2 + 2 + 2).
SCORE_TRAFFIC = {"forward": 16, "backward": 18}


def score_seconds(run, chip):
    """Seconds of HBM traffic for the attention scores one step materializes: every layer's, a
    forward pass, another where remat recomputes it, and the backward pass."""
    c = run.config
    scores = c.batch * c.heads * c.seq**2 * c.layers
    forwards = 1 if run.remat == "none" else 2
    per_score = forwards * SCORE_TRAFFIC["forward"] + SCORE_TRAFFIC["backward"]
    return scores * per_score / chip.hbm_bandwidth


# A threshold chosen from the chip's records: a step whose scores take more than this many times
# its model FLOPs' time at the peak to move is set by HBM, and no FLOP-based MFU applies to it.
# The highest ratio of a step inside the range is 1.19 (2,048 tokens, no remat), the lowest of a
# step outside 1.75 (the sequence sweep's 2,048 tokens with block remat).
SCORE_BOUND = 1.5


def score_bound(run, chip):
    """Whether moving the attention scores takes more than SCORE_BOUND times as long as the
    model's FLOPs at the chip's peak."""
    return score_seconds(run, chip) > SCORE_BOUND * model_flops(run.config, ONE_CHIP) / chip.flops


def mfu(run, record, chip):
    """The whole-step MFU of a recorded step: the model's FLOPs over its median and the peak."""
    return model_flops(run.config, ONE_CHIP) / (record["measured_ms_median"] / 1e3 * chip.flops)


def mfu_range(chip, path=RECORDED_V5E):
    """(lowest, highest) whole-step MFU of the chip's own recorded steps that fill it and are not
    score-bound: the calibration that, for one chip, replaces published runs' range."""
    _, records = load(path)
    seen = [mfu(run, r, chip) for run, r in records if fills(run) and not score_bound(run, chip)]
    return min(seen), max(seen)


def time_range(run, chip, mfus=None):
    """(fastest, slowest) seconds of `run`'s step on one `chip`: its model FLOPs at the highest
    and at the lowest whole-step MFU of `mfus` (by default `mfu_range(chip)`)."""
    low, high = mfus or mfu_range(chip)
    time = predicted(run, chip).time
    return time.at_mfu(high), time.at_mfu(low)


def inside(run, record, chip, mfus=None):
    """Whether a recorded step's median lies in `time_range` (its edges, themselves recorded
    steps, count as inside whatever the last bit of the arithmetic says)."""
    fast, slow = time_range(run, chip, mfus)
    return fast * (1 - 1e-9) <= record["measured_ms_median"] / 1e3 <= slow * (1 + 1e-9)


# The time model's test: fitted on the first session of each family on the chip, tested on every
# configuration recorded after it (the sequence sweep, the Llama family's four later calls)
FIRST_SESSIONS = (RECORDED_V5E, LLAMA_V5E[0])
LATER_SESSIONS = (SEQUENCE_V5E, *LLAMA_V5E[1:])


def measured(paths, leave_out=()):
    """[(Run, record)] of the steps measured in the files `paths`, each configuration once (the
    first time it ran), none of those in `leave_out` (Runs)."""
    seen, steps = set(leave_out), []
    for path in paths:
        for run, r in load(path)[1]:
            if "measured_ms_median" in r and run not in seen:
                seen.add(run)
                steps.append((run, r))
    return steps


# The time model: what each kind of work would take at the chip's peak rates, each weighted by a
# factor fitted on measured steps of both model families (`fit_time`).
def work_at_peak(run, chip):
    """Seconds of each kind of work in `run`'s step at `chip`'s peak rates: the matrix products
    (`plan.flops`, recomputation included) at its peak FLOP/s; Adam's update (`UPDATE_BYTES` per
    parameter, once a step) and the attention scores' traffic (`score_seconds`) at its HBM
    bandwidth. Norms, rotary embeddings, activations and the loss's softmax are not terms of
    their own: the fitted weights absorb them."""
    c = run.config
    return {
        "matrix products": flops(c, ONE_CHIP, run.remat) / chip.flops,
        "update": UPDATE_BYTES * c.params / chip.hbm_bandwidth,
        "scores": score_seconds(run, chip),
    }


# The time model prices a step whose scores' traffic takes at most this many times its matrix
# products' time at the peaks: the steps it is fitted on reach 1.38; the site's transformer at
# 4,096 tokens a sequence (1.78 and 2.14) runs 43% and 28% slower than the model.
PRICED_SCORES = 1.5


def time_model_prices(run, chip):
    """Whether the time model applies to `run`: it fills the chip (`fills`), and its scores'
    traffic at HBM's peak takes at most PRICED_SCORES times its matrix products at the peak."""
    seconds = work_at_peak(run, chip)
    return fills(run) and seconds["scores"] <= PRICED_SCORES * seconds["matrix products"]


@dataclass(frozen=True)
class TimeModel:
    """A step's seconds as sum(weights[kind] x work_at_peak(run, chip)[kind]): each weight is
    1 / the fraction of its peak rate that kind of work reaches. `low` and `high` are the lowest
    and highest measured / predicted ratios of the steps it was fitted on: its range."""

    weights: dict
    low: float
    high: float

    def seconds(self, run, chip):
        return sum(self.weights[kind] * s for kind, s in work_at_peak(run, chip).items())

    def time_range(self, run, chip):
        """(fastest, slowest) seconds of `run`'s step on one `chip`."""
        predicted = self.seconds(run, chip)
        return predicted * self.low, predicted * self.high

    def inside(self, run, record, chip):
        """Whether a recorded step's median lies in `time_range` (its edges, themselves fitted
        steps, count as inside whatever the last bit of the arithmetic says)."""
        fast, slow = self.time_range(run, chip)
        return fast * (1 - 1e-9) <= record["measured_ms_median"] / 1e3 <= slow * (1 + 1e-9)


def fit_time(steps, chip):
    """The TimeModel of measured steps [(Run, record)] (each one `time_model_prices`): the
    weights that make the least-squares relative error smallest, and the extremes of measured /
    predicted."""
    kinds = list(work_at_peak(steps[0][0], chip))
    seconds = [(work_at_peak(run, chip), r["measured_ms_median"] / 1e3) for run, r in steps]
    terms = np.array([[w[k] / measured for k in kinds] for w, measured in seconds])
    fitted, *_ = np.linalg.lstsq(terms, np.ones(len(steps)), rcond=None)
    if (fitted <= 0).any():
        raise ValueError(f"a weight came out negative or zero: {dict(zip(kinds, fitted))}")
    weights = dict(zip(kinds, map(float, fitted)))
    ratios = [m / sum(weights[k] * w[k] for k in kinds) for w, m in seconds]
    return TimeModel(weights, min(ratios), max(ratios))
