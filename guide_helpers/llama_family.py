"""A whole trainable Llama-shaped decoder, the second model family the one-chip tools measure.

Written as Llama checkpoints lay out their weights, independently of the site's transformer
(`guide_helpers.transformer`, `guide_helpers.llama`): `embed_tokens[vocab, embed]`; per layer
`input_layernorm`, `q_proj[embed, heads x head_dim]`, `k_proj` and `v_proj[embed, kv_heads x
head_dim]`, `o_proj[heads x head_dim, embed]`, `post_attention_layernorm`, `gate_proj` and
`up_proj[embed, hidden]`, `down_proj[hidden, embed]`; a final `norm`; and `lm_head[embed,
vocab]`, or, with `tied=True`, the logits read from `embed_tokens` transposed (one table, counted
once). RMSNorm and rotary embeddings (RoPE, base `ROPE_THETA`) run in f32; grouped-query
attention shares each key/value head among heads // kv_heads query heads; the MLP is SwiGLU.

- `LlamaConfig`: the shapes, the batch, `tied` and the remat policy ("none", "dots": keep the
  matrix products' outputs, "block": recompute each layer in the backward pass); `params` (exact)
  and `model_flops()` (6 x matrix weights x tokens, the tied head counted, plus causal
  attention); `matmul_flops()` adds what remat recomputes, as the compiled program counts.
- `LLAMA_3_2_1B`: Llama 3.2 1B's shapes, 1,235,814,400 parameters.
- `init(config, seed)`: f32 parameters (a dict of arrays) and their AdamW state.
- `train_step(config)`: (state, tokens) -> (state, loss), state = (params, AdamW state), the
  parameters cast to bf16 for the forward and backward passes, f32 logits in the loss; jit it
  with `donate_argnums=0` (`jitted`).
"""

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import optax

REMAT = ("none", "dots", "block")
POLICIES = {
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "block": jax.checkpoint_policies.nothing_saveable,
}
ROPE_THETA = 500_000.0  # Llama 3's rotary base
EPS = 1e-5  # RMSNorm's
OPTIMIZER = optax.adamw(1e-4)


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int
    embed: int
    heads: int
    kv_heads: int
    hidden: int
    layers: int
    seq: int
    batch: int
    tied: bool = False
    remat: str = "none"

    def __post_init__(self):
        if self.remat not in REMAT:
            raise ValueError(f"remat must be one of {REMAT}, not {self.remat!r}")
        if self.embed % self.heads or self.heads % self.kv_heads:
            raise ValueError("embed must split into heads, and heads into groups of kv_heads")

    @property
    def head_dim(self):
        return self.embed // self.heads

    @property
    def name(self):
        return (
            f"E={self.embed} F={self.hidden} L={self.layers} H={self.heads} KV={self.kv_heads} "
            f"V={self.vocab}{' tied' if self.tied else ''} S={self.seq} B={self.batch} "
            f"remat={self.remat}"
        )

    @property
    def layer_matrices(self):
        """Weights of one layer's matrices: q and o (embed^2 each), k and v (embed x kv_heads x
        head_dim each), gate, up and down (embed x hidden each)."""
        E, kv = self.embed, self.kv_heads * self.head_dim
        return 2 * E * E + 2 * E * kv + 3 * E * self.hidden

    @property
    def params(self):
        """Every parameter, the tied table once: the table, the head unless tied, the layers'
        matrices and their two RMSNorm scales, and the final norm's."""
        tables = (1 if self.tied else 2) * self.vocab * self.embed
        return tables + self.layers * (self.layer_matrices + 2 * self.embed) + self.embed

    @property
    def matmul_params(self):
        """Weights a token's forward pass multiplies by: the layers' matrices and the head (the
        table itself when tied); the lookup and the norms are no products."""
        return self.layers * self.layer_matrices + self.vocab * self.embed

    @property
    def tokens(self):
        return self.batch * self.seq

    def attention_flops(self):
        """One forward pass of attention's two products (q k^T, p v) over the whole square."""
        return 4 * self.layers * self.heads * self.head_dim * self.seq * self.tokens

    def model_flops(self):
        """The FLOPs MFU counts per step: 6 per matrix weight and token, the head included, and
        attention's causal half forward and backward; no remat."""
        return 6 * self.matmul_params * self.tokens + 1.5 * self.attention_flops()

    def matmul_flops(self):
        """The matrix products' FLOPs the compiled step runs: the whole attention square
        (nothing skips the masked half), and what remat recomputes: "dots" attention's
        products, "block" every forward product of a layer but down_proj's."""
        attention = self.attention_flops()
        extra = {
            "none": 0,
            "dots": attention,
            "block": 2 * self.layers * (self.layer_matrices - self.embed * self.hidden)
            * self.tokens + attention,
        }[self.remat]  # fmt: skip
        return 6 * self.matmul_params * self.tokens + 3 * attention + extra


# Llama 3.2 1B's shapes (its tied embeddings, 8 key/value heads), at a sequence and batch of ours
LLAMA_3_2_1B = LlamaConfig(
    vocab=128256, embed=2048, heads=32, kv_heads=8, hidden=8192, layers=16, seq=2048, batch=1,
    tied=True,
)  # fmt: skip


def init_params(config, key):
    """f32 parameters, a nested dict named as a checkpoint's: N(0, 1 / fan_in) matrices, the
    table N(0, 1 / embed) too (it is the head when tied), unit RMSNorm scales."""
    E, D = config.embed, config.head_dim
    shapes = {
        "q_proj": (E, config.heads * D),
        "k_proj": (E, config.kv_heads * D),
        "v_proj": (E, config.kv_heads * D),
        "o_proj": (config.heads * D, E),
        "gate_proj": (E, config.hidden),
        "up_proj": (E, config.hidden),
        "down_proj": (config.hidden, E),
    }
    keys = iter(jax.random.split(key, config.layers * len(shapes) + 2))

    def normal(shape, fan_in):
        return jax.random.normal(next(keys), shape, jnp.float32) * fan_in**-0.5

    layers = [
        {
            "input_layernorm": jnp.ones((E,), jnp.float32),
            "post_attention_layernorm": jnp.ones((E,), jnp.float32),
            **{name: normal(shape, shape[0]) for name, shape in shapes.items()},
        }
        for _ in range(config.layers)
    ]
    params = {
        "embed_tokens": normal((config.vocab, E), E),
        "layers": layers,
        "norm": jnp.ones((E,), jnp.float32),
    }
    if not config.tied:
        params["lm_head"] = normal((E, config.vocab), E)
    return params


def init(config, seed=0):
    """(params, AdamW state): the train step's state."""
    params = init_params(config, jax.random.key(seed))
    return params, OPTIMIZER.init(params)


def rms_norm(x, scale):
    """x / rms(x) * scale, in f32, back to x's dtype."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPS)
    return (normed * scale.astype(jnp.float32)).astype(x.dtype)


def rotary(x, positions):
    """Rotate each head's pairs (i, i + head_dim / 2) of x[batch, seq, heads, head_dim] by
    position x ROPE_THETA^(-2i / head_dim), in f32."""
    half = x.shape[-1] // 2
    frequencies = ROPE_THETA ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[:, None].astype(jnp.float32) * frequencies  # [seq, half]
    cos, sin = jnp.cos(angles)[:, None], jnp.sin(angles)[:, None]  # [seq, 1, half]
    x32 = x.astype(jnp.float32)
    first, second = x32[..., :half], x32[..., half:]
    turned = jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)
    return turned.astype(x.dtype)


def self_attention(config, layer, x):
    b, s, _ = x.shape
    D = config.head_dim
    positions = jnp.arange(s)
    q = (x @ layer["q_proj"]).reshape(b, s, config.heads, D)
    k = (x @ layer["k_proj"]).reshape(b, s, config.kv_heads, D)
    v = (x @ layer["v_proj"]).reshape(b, s, config.kv_heads, D)
    q, k = rotary(q, positions), rotary(k, positions)
    # each group of heads // kv_heads query heads attends with one key/value head
    y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    return y.reshape(b, s, config.heads * D) @ layer["o_proj"]


def swiglu(layer, x):
    return (jax.nn.silu(x @ layer["gate_proj"]) * (x @ layer["up_proj"])) @ layer["down_proj"]


def decoder_layer(config, layer, x):
    with jax.named_scope("attention"):
        x = x + self_attention(config, layer, rms_norm(x, layer["input_layernorm"]))
    with jax.named_scope("mlp"):
        return x + swiglu(layer, rms_norm(x, layer["post_attention_layernorm"]))


def forward_logits(config, params, tokens):
    """logits[batch, seq, vocab] (bf16 parameters give bf16 logits)."""
    x = params["embed_tokens"][tokens]
    run_layer = partial(decoder_layer, config)
    if config.remat != "none":
        run_layer = jax.checkpoint(run_layer, policy=POLICIES[config.remat])
    for i, layer in enumerate(params["layers"]):
        with jax.named_scope(f"layer_{i}"):
            x = run_layer(layer, x)
    head = params["embed_tokens"].T if config.tied else params["lm_head"]
    return rms_norm(x, params["norm"]) @ head


def llama_loss(config, params, tokens):
    """Mean cross-entropy of tokens[:, 1:] from tokens[:, :-1], the parameters cast to bf16,
    the logits to f32."""
    bf16 = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
    scores = forward_logits(config, bf16, tokens[:, :-1]).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(scores, tokens[:, 1:]).mean()


def train_step(config):
    """(state, tokens) -> (state, loss): one AdamW step on `llama_loss`, tokens[batch, seq + 1]."""

    def step(state, tokens):
        params, opt_state = state
        value, grads = jax.value_and_grad(partial(llama_loss, config))(params, tokens)
        updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), value

    return step


def jitted(config):
    """The train step, jitted, its state donated."""
    return jax.jit(train_step(config), donate_argnums=0)


def abstract_state(config):
    """The state's shapes and dtypes, nothing allocated."""
    return jax.eval_shape(partial(init, config))


def parameter_count(params):
    """Elements of every array of a (possibly abstract) parameter tree."""
    return sum(a.size for a in jax.tree.leaves(params))


def tokens_for(config, seed=0):
    """Random tokens[batch, seq + 1] in the vocabulary."""
    shape = (config.batch, config.seq + 1)
    return jax.random.randint(jax.random.key(seed), shape, 0, config.vocab, jnp.int32)
