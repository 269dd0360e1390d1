"""A training plan's memory, FLOPs, bytes per link and step time, from formulas.

The plan page (docs/plan_an_8b_model.md) compiles Llama 3 8B's shapes (`guide_helpers.llama`)
and reads each figure from the program; this module predicts the same figures by hand, so
that a reader can price a model of their own without compiling it, and the page checks the two
against each other. Everything is per device and per train step.

- `Config`: the transformer's shapes (`guide_helpers.transformer`, or with grouped-query
  attention and a gated MLP `guide_helpers.llama` and `guide_helpers.llama_family`, whose
  embeddings may be tied), the global batch and the sequence length; `LLAMA_3_8B` is the page's
  model, `LLAMA_8B_LIKE` the site's transformer at its width, `LLAMA_3_2_1B` a tied one.
- `Layout`: how the mesh splits the weights, the batch and the activations, on nodes of
  `node_size` devices.
- `memory(...)`: bytes per device, part by part (state, gradients, saved activations, the
  attention scores and the logits of the one layer or loss being differentiated).
- `flops(...)`: matrix-product FLOPs per device, with what each remat policy recomputes.
- `traffic(...)`: bytes each device sends over NVLink and over the network.
- `estimate(...)`: all of it, and the roofline `StepTime` on a chip.

Mixed precision throughout: f32 master weights and f32 Adam moments (12 bytes per parameter),
a bf16 copy of the weights for the matrix products, f32 gradient accumulators. Two of its byte
counts are this site's programs', not the leanest practice, and `memory` takes others:
`GRADIENT_BYTES` (10: an f32 micro-batch gradient beside the f32 accumulator and the bf16
weights; frameworks that accumulate bf16 gradients into an f32 main gradient hold 6,
`LEAN_GRADIENT_BYTES`) and `LOGIT_BYTES` (14: the loss materializes f32 logits and their
gradient; a fused cross-entropy holds the bf16 logits only, `FUSED_LOGIT_BYTES`).

Communication: inside a node, a GPU's NVLink; for a TPU, pass the slice (`node`), whose links
`roofline.Slice.bandwidth` counts. Tensor parallelism's all-reduces are exposed (no collective
matmul). A deferred (HSDP) reduction hides only behind the last micro-batch's backward pass, the
one window where the summed gradients are being made; `Estimate.window` is that window.
"""

import math
from dataclasses import dataclass

from guide_helpers.hlo import ring
from guide_helpers.roofline import ADAM_STATE, BF16, F32, StepTime, adam_update_bytes

REMAT = ("none", "dots", "block")  # jax.checkpoint of nothing, of each block, dots saveable
# Per parameter, from roofline's one accounting of mixed-precision Adam, for the site's step
# (the f32 parameters cast to bf16 inside the loss): the state, f32 master weights and moments
STATE_BYTES = sum(ADAM_STATE.values())
# during the step: the f32 gradient accumulator, one micro-batch's f32 gradient, and the bf16
# copy of the weights the matrix products read
GRADIENT_BYTES = F32 + F32 + BF16
# Adam's update once per step, in HBM: it reads the master weight, mu, nu and the accumulated
# f32 gradient and writes the weight, mu and nu back (no bf16 copy is kept)
UPDATE_BYTES = adam_update_bytes(gradient=F32, copy=0)
# per attention score, in the one layer being differentiated, with attention that materializes
# its scores (XLA's on CPU): the causal mask (1 byte), scores and their exponentials (f32, 4
# each), the bf16 probabilities (2), and the f32 gradient of the scores (4)
SCORE_BYTES = 1 + 4 + 4 + 2 + 4
# per logit, in the loss: bf16 logits (2); f32 logits, log-probabilities and their gradient (4
# each)
LOGIT_BYTES = 2 + 4 + 4 + 4
# the leaner practice: a bf16 micro-batch gradient summed into an f32 main gradient; a fused
# cross-entropy that keeps the bf16 logits and never their f32 copies (a chunked loss keeps
# less still: a few f32 tiles of them, as the llama_pieces page reads from its program)
LEAN_GRADIENT_BYTES = F32 + BF16
FUSED_LOGIT_BYTES = 2


@dataclass(frozen=True)
class Config:
    vocab: int
    embed: int
    heads: int
    hidden: int
    layers: int
    seq: int
    batch: int  # sequences per step, all devices together
    kv_heads: int | None = None  # key/value heads (grouped-query attention); None: one per head
    gated: bool = False  # a gated MLP (Wgate, Wup, Wdown), as Llama's, not W1 and W2
    tied: bool = False  # the head is the embedding table transposed: one table, counted once

    @property
    def kv_width(self):
        """Columns of the keys' (and of the values') projection: kv_heads x head_dim."""
        return (self.kv_heads or self.heads) * (self.embed // self.heads)

    @property
    def mlp_in(self):
        """The MLP's matrices that read the block's input: W1, or Wgate and Wup."""
        return 2 if self.gated else 1

    @property
    def block_matrices(self):
        """Weights of a block's matrices: Wq and Wo E^2 each, Wk and Wv E x kv_width each (the
        site's fused Wqkv: 3 E^2), and the MLP's E x F matrices (2, or 3 when gated)."""
        return (
            2 * self.embed**2
            + 2 * self.embed * self.kv_width
            + (self.mlp_in + 1) * self.embed * self.hidden
        )

    @property
    def replicated(self):
        """The RMSNorm scales, 2 per block and 1 final: never split (no logical axis)."""
        return (2 * self.layers + 1) * self.embed

    @property
    def tables(self):
        """The embedding table and the head, vocab x embed each; one when they are tied."""
        return (1 if self.tied else 2) * self.vocab * self.embed

    @property
    def params(self):
        return self.tables + self.layers * self.block_matrices + self.replicated

    @property
    def matmul_params(self):
        """Weights a token's forward pass multiplies by: the blocks' matrices and the head (the
        table itself when tied); the table's lookup and the norms are no products."""
        return self.layers * self.block_matrices + self.vocab * self.embed


# Llama 3 8B: 8 key/value heads for 32 query heads, a gated MLP of 14,336; the plan page's model
# (`guide_helpers.llama` at these shapes), 8,030,261,248 parameters
LLAMA_3_8B = Config(
    vocab=128256, embed=4096, heads=32, hidden=14336, layers=32, seq=8192, batch=256,
    kv_heads=8, gated=True,
)  # fmt: skip
# Llama 3.2 1B: Llama 3's vocabulary, tied embeddings, 8 key/value heads for 32 query heads,
# 1,235,814,400 parameters (`guide_helpers.llama_family.LLAMA_3_2_1B`, at its sequence and batch)
LLAMA_3_2_1B = Config(
    vocab=128256, embed=2048, heads=32, hidden=8192, layers=16, seq=2048, batch=1,
    kv_heads=8, gated=True, tied=True,
)  # fmt: skip
# The site's own transformer at Llama 3 8B's width, depth, heads, vocabulary and sequence: every
# head its own keys and values, and a 2-matrix MLP of 21504 (= 1.5 x 14336) hidden units, the
# gated MLP's weights (8.84B parameters)
LLAMA_8B_LIKE = Config(
    vocab=128256, embed=4096, heads=32, hidden=21504, layers=32, seq=8192, batch=256
)


@dataclass(frozen=True)
class Layout:
    name: str
    devices: int  # in the mesh
    node_size: int  # devices per node
    param_shards: int  # devices that each weight matrix is split over (its FSDP x tensor group)
    fsdp_nodes: int  # nodes the FSDP part of that group spans (1: inside a node)
    tensor: int  # devices that split heads, hidden units and the vocabulary (1: none)
    batch_shards: int  # devices that split the batch
    # the gradients' cross-node reduction: once per step (True), or per micro-batch
    deferred: bool = False

    @property
    def fsdp(self):
        return self.param_shards // self.tensor


def layouts(nodes=2, node_size=8):
    """The page's three layouts on `nodes` nodes of `node_size` devices."""
    n = nodes * node_size
    return {
        "FSDP": Layout("FSDP", n, node_size, n, nodes, 1, n),
        "HSDP": Layout("HSDP", n, node_size, node_size, 1, 1, n, deferred=True),
        "FSDP x tensor": Layout("FSDP x tensor", n, node_size, n, nodes, node_size, nodes),
    }


def _sequences_per_device(config, layout, micro_batches):
    """Sequences in each device's share of one micro-batch (a tensor group shares them)."""
    per_step, extra = divmod(config.batch, micro_batches * layout.batch_shards)
    if extra or not per_step:
        raise ValueError(
            f"{config.batch} sequences do not split into {micro_batches} micro-batches over "
            f"{layout.batch_shards} batch shards; choose micro_batches dividing "
            f"{config.batch // layout.batch_shards}"
        )
    return per_step


def params_per_device(config, layout):
    return (config.params - config.replicated) / layout.param_shards + config.replicated


def activations_per_layer(config, layout, b, remat, flash=False):
    """Bytes a layer saves for the backward pass, per device (b sequences of `seq` tokens).

    - "block": only the block's input, x[b, seq, embed] in bf16; the rest is recomputed.
    - "dots": x and the outputs of the matrix products with no batch dimension: q, k and v
      (E + 2 kv_width), attention's output projection (E) and W1's (F; Wgate's and Wup's, 2 F),
      in bf16; the MLP's last product only feeds a sum.
    - "none": everything `jax.ad_checkpoint.print_saved_residuals` lists for one block: f32
      copies of the norms' work (6 E), bf16 activations (4 E + 2 kv_width) and MLP values (6 F,
      gated or not) per token, and 11 bytes per attention score (mask, scores, exponentials,
      probabilities); with `flash`, an attention kernel that saves no scores, only each row's
      f32 log-sum-exp.
    """
    E, F, S, t = config.embed, config.hidden, config.seq, layout.tensor
    kv = config.kv_width
    if remat == "block":
        return 2 * b * S * E
    if remat == "dots":
        return 2 * b * S * (E + (E + 2 * kv) // t + E + config.mlp_in * F // t)
    if remat == "none":
        per_token = 6 * 4 * E + 2 * (4 * E + 2 * kv) + 6 * 2 * F // t
        scores = 4 * S if flash else 11 * S * S  # per head and query
        return b * S * per_token + b * config.heads // t * scores
    raise ValueError(f"remat must be one of {REMAT}, not {remat!r}")


def memory(
    config, layout, micro_batches, remat, flash=False, gradient_bytes=None, logit_bytes=None
):
    """Bytes per device, part by part. `flash=True` drops the attention scores: an attention
    kernel that never materializes them (a GPU's flash attention) holds O(seq) instead.
    `gradient_bytes` and `logit_bytes` replace GRADIENT_BYTES and LOGIT_BYTES."""
    gradient_bytes = GRADIENT_BYTES if gradient_bytes is None else gradient_bytes
    logit_bytes = LOGIT_BYTES if logit_bytes is None else logit_bytes
    b = _sequences_per_device(config, layout, micro_batches)
    p, S, t = params_per_device(config, layout), config.seq, layout.tensor
    scores = 0 if flash else SCORE_BYTES * b * config.heads // t * S * S
    saved = config.layers * activations_per_layer(config, layout, b, remat, flash)
    return {
        "state": STATE_BYTES * p,
        "tokens": 4 * micro_batches * b * (S + 1),
        "gradients": gradient_bytes * p,
        "saved activations": saved,
        "attention scores": scores,
        "logits": logit_bytes * b * S * config.vocab // t,
    }


def flops(config, layout, remat):
    """Matrix-product FLOPs per device per step.

    Forward 2 and backward 4 FLOPs per matrix weight and token, and attention's two products
    (q k^T and p v) over the whole seq x seq square (XLA computes the masked half too):
    4 E S FLOPs per token and layer forward, twice that backward. Remat adds what it
    recomputes: "dots" the attention products (saved only without batch dimensions); "block"
    every forward product but the MLP's last (W2, Wdown), whose output the backward pass does
    not need.
    """
    E, F, S, L = config.embed, config.hidden, config.seq, config.layers
    tokens = config.batch * S / layout.devices
    attention = 4 * L * E * S * tokens  # one forward pass of attention's products
    base = 6 * config.matmul_params * tokens + 3 * attention
    extra = {
        "none": 0,
        "dots": attention,
        "block": 2 * L * (config.block_matrices - E * F) * tokens + attention,
    }[remat]
    return base + extra


def _forward_flops(config, layout):
    """Matrix-product FLOPs of one forward pass per device per step: 2 per matrix weight and
    token, and attention's two products over the whole square."""
    tokens = config.batch * config.seq / layout.devices
    attention = 4 * config.layers * config.embed * config.seq * tokens
    return 2 * config.matmul_params * tokens + attention


def model_flops(config, layout):
    """The FLOPs utilization counts: no remat, and attention's causal half only."""
    return flops(config, layout, "none") - 1.5 * 4 * config.layers * config.embed * config.seq * (
        config.batch * config.seq / layout.devices
    )


def traffic_parts(config, layout, micro_batches, remat, wire=2, reduce_passes=1):
    """Bytes each device sends per step, by what can hide them: {"fsdp": {link: bytes},
    "deferred": {"network": bytes}, "tensor": {"NVLink": bytes}} (see `traffic`)."""
    sharded = (config.params - config.replicated) / layout.tensor  # the FSDP group's whole array
    k = layout.fsdp // layout.fsdp_nodes  # FSDP devices per node
    m = layout.fsdp_nodes
    array = wire * sharded
    if m > 1:  # the gathers (and a reduce-scatter) in a flat ring; an all-reduce hierarchical
        flat = ring(k * m, array, 2 + (reduce_passes == 1))  # 1 hop in k leaves the node
        per_micro = {"NVLink": flat * (k - 1) / k, "network": flat / k}
        if reduce_passes == 2:
            per_micro["NVLink"] += ring(k, array, 2) if k > 1 else 0.0
            per_micro["network"] += ring(m, array / k, 2)
    else:
        per_micro = {"NVLink": ring(k, array, 2 + reduce_passes) if k > 1 else 0.0, "network": 0.0}
    parts = {
        "fsdp": {link: micro_batches * n for link, n in per_micro.items()},
        "deferred": {"network": 0.0},
        "tensor": {"NVLink": 0.0},
    }
    if layout.deferred:
        nodes = layout.devices // layout.node_size
        parts["deferred"]["network"] = ring(nodes, 4 * sharded / layout.fsdp, 2)
    if layout.tensor > 1:
        b = _sequences_per_device(config, layout, micro_batches)
        x = wire * b * config.seq * config.embed
        per_block = 4 + (2 if remat != "none" else 0)
        runs = micro_batches * config.layers * per_block
        parts["tensor"]["NVLink"] = runs * ring(layout.tensor, x, 2)
    return parts


def traffic(config, layout, micro_batches, remat, wire=2, reduce_passes=1):
    """Bytes each device sends per step over {"NVLink", "network"}, as rings.

    Per micro-batch, the FSDP group all-gathers the weights forward and again backward and
    reduces the gradients (`reduce_passes`: 1, a reduce-scatter; 2, an all-reduce as XLA's CPU
    backend emits). A group spanning nodes runs as NCCL runs it (`roofline.collective_on_links`):
    the gathers and a reduce-scatter as one flat ring of the group, a node's k NICs sharing its
    crossings; an all-reduce hierarchically, 1/k of each array per device on the network. A
    deferred (HSDP) step all-reduces the f32 gradient shard across nodes once. Tensor
    parallelism all-reduces x[b, seq, embed] twice per block forward and twice backward, and
    twice more where remat recomputes the forward. `wire` is the bytes of a value on the wire:
    2 for bf16, 4 for the f32 XLA's CPU sends.
    """
    return _per_link(traffic_parts(config, layout, micro_batches, remat, wire, reduce_passes))


def _per_link(parts):
    """`traffic_parts`' bytes summed over what can hide them: {"NVLink": ..., "network": ...}."""
    sent = {"NVLink": 0.0, "network": 0.0}
    for part in parts.values():
        for link, nbytes in part.items():
            sent[link] += nbytes
    return sent


@dataclass(frozen=True)
class Estimate:
    memory: dict  # bytes per device, part by part
    flops: float  # matrix-product FLOPs per device per step
    model_flops: float  # the FLOPs an MFU counts (no remat, causal attention)
    sent: dict  # bytes per device per step, {"NVLink": ..., "network": ...}
    time: StepTime
    tokens: int  # per step, all devices
    # seconds at the peak that a deferred cross-node reduction can hide behind: the last
    # micro-batch's backward pass (the whole compute when nothing is deferred)
    window: float = 0.0
    deferred: float = 0.0  # bytes of that reduction each device sends over the network

    @property
    def peak(self):
        return sum(self.memory.values())

    def fits(self, chip, headroom=0.0):
        """True if the peak leaves at least `headroom` (a fraction) of the chip's HBM free.

        The formula's peak is an upper bound (every part held at once), not the program's: on a
        TPU v5e it was 1.35 to 7.9 times the compiler's for every recorded step of two model
        families (docs/ground_truth_v5e.md). True promises a fit; False does not say a step is
        too big. Where a compiler for the target is at hand (a TPU's, `guide_helpers.tpu`), its
        `memory_analysis()` is the answer."""
        return self.peak <= (1 - headroom) * chip.hbm_bytes

    def tokens_per_second(self, seconds):
        return self.tokens / seconds

    def mfu(self, seconds, chip):
        """Model FLOPs utilization of a step that takes `seconds`."""
        return self.model_flops / (seconds * chip.flops)

    def network_breakeven(self, mfu=None):
        """Bytes/s per device of network below which the network traffic no longer hides: the
        per-micro-batch traffic against the whole compute, a deferred reduction against its
        window. At the peak by default; at a whole-step `mfu`, the step (and the window with
        it) takes the model's FLOPs at that fraction of the peak, as `StepTime.at_mfu` does."""
        t = self.time
        stretch = 1.0 if mfu is None else t.model / mfu / t.compute
        spread = self.sent["network"] - self.deferred
        needs = [spread / (t.compute * stretch)] if spread else [0.0]
        if self.deferred:
            needs.append(self.deferred / (self.window * stretch))
        return max(needs)


def estimate(
    config, layout, chip, micro_batches, remat, flash=True, wire=2, reduce_passes=1, node=None,
    gradient_bytes=None, logit_bytes=None,
):  # fmt: skip
    """Memory, FLOPs, bytes per link and the roofline step time of a plan on `chip`.

    Inside a node the bandwidth is a GPU's NVLink, or the TPU slice `node`'s rings
    (`roofline.Slice.bandwidth`): a TPU chip with traffic inside its slice needs `node`. Across
    nodes, the chip's share of the network. FSDP's traffic can hide behind the compute (the
    step waits for the slower link); tensor parallelism's all-reduces are exposed (no collective
    matmul); a deferred reduction hides only behind the last micro-batch's backward pass, and
    what overruns that window is exposed (`StepTime.deferred` and `window`). Adam's update
    (`UPDATE_BYTES` per parameter of the device's shard) is priced at HBM speed.
    """
    parts = traffic_parts(config, layout, micro_batches, remat, wire, reduce_passes)
    sent = _per_link(parts)  # the same parts, summed: `traffic` without computing them again
    if node is not None:
        inside = node.bandwidth()
    elif chip.is_gpu or not sent["NVLink"]:
        inside = chip.link_bandwidth
    else:
        raise ValueError(
            f"a {chip.name} slice's rings use several ICI links: pass node=roofline.Slice("
            f"chip, shape) so that its bandwidth counts them, not one link"
        )
    work, useful = flops(config, layout, remat), model_flops(config, layout)
    backward = (work - _forward_flops(config, layout)) / micro_batches
    window = backward / chip.flops if layout.deferred else work / chip.flops
    net = chip.network_bandwidth
    hidable = max(parts["fsdp"]["NVLink"] / inside, parts["fsdp"]["network"] / net)
    return Estimate(
        memory=memory(config, layout, micro_batches, remat, flash, gradient_bytes, logit_bytes),
        flops=work,
        model_flops=useful,
        sent=sent,
        time=StepTime(
            compute=work / chip.flops,
            communication=hidable,
            hbm=UPDATE_BYTES * params_per_device(config, layout) / chip.hbm_bandwidth,
            exposed=parts["tensor"]["NVLink"] / inside,
            model_compute=useful / chip.flops,
            deferred=parts["deferred"]["network"] / net,
            window=window if layout.deferred else 0.0,
        ),
        tokens=config.batch * config.seq,
        window=window,
        deferred=parts["deferred"]["network"],
    )


def fix(config, layout, chip, micro_batches, remat, headroom=0.1, **accounting):
    """The cheapest change that makes a plan fit with `headroom`, as (micro-batches, remat,
    layout), or None if nothing here does, by the formula's upper-bound peak (`Estimate.fits`:
    on a TPU, compile the plan instead). Tried in the order of what they cost: more
    micro-batches (smaller matrix products, the same FLOPs; under FSDP, a weight gather per
    micro-batch more), then a remat policy that recomputes more ("dots", then "block": more
    FLOPs), then the state sharded over every device (FSDP across nodes: weights over the network
    every micro-batch). It tries no other layout: not tensor, pipeline or context parallelism,
    ZeRO-1 or host offload. `accounting` (gradient_bytes, logit_bytes) goes to `estimate`."""
    whole = Layout(
        "FSDP over all devices", layout.devices, layout.node_size, layout.devices,
        math.ceil(layout.devices / layout.node_size), layout.tensor, layout.batch_shards,
    )  # fmt: skip
    per_device = config.batch // layout.batch_shards
    first = min(micro_batches, per_device)  # fewer devices' shares than asked: one sequence each
    counts = [d for d in range(first, per_device + 1) if per_device % d == 0]
    policies = REMAT[REMAT.index(remat) :] if remat != "block" else ("block",)
    policies = sorted(policies, key=("none", "dots", "block").index)
    candidates = [layout] + ([whole] if layout.param_shards < layout.devices else [])
    for candidate in candidates:
        for policy in policies:
            for count in counts:
                e = estimate(config, candidate, chip, count, policy, **accounting)
                if e.fits(chip, headroom):
                    return count, policy, candidate.name
    return None
