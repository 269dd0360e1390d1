"""The site's second model: a small decoder-only transformer in Flax NNX.

The transformer guide (docs/transformer.md) writes these classes out as its lesson;
tests/site/test_sources.py checks that its definitions and these stay identical, so that later
pages import the same model from here.

Every weight is created with logical axis names, mapped to the mesh by `nnx.logical_axis_rules`
(see `logical_rules`):

- `Wqkv[embed, heads, 3, head_dim]`: the fused q, k, v projection, head-major, so that splitting
  `heads` over a mesh axis gives each device whole heads, their q, k and v together;
- `Wo[heads, head_dim, embed]`: the attention output, split by rows where `heads` is split;
- `W1[embed, hidden]`, `W2[hidden, embed]`: the MLP;
- `table[vocab, embed]`, `head[embed, vocab]`: the token embedding and the LM head.

The residual stream between sublayers is `x[batch, seq, embed]`, constrained to what the rules
say of `batch` and `seq` (sequence parallelism maps `seq` to a mesh axis).

The guide writes its training out too, for later pages to import: `train_step` (Adam on
`next_token_loss`, or on the `loss_fn` given), `model_and_optimizer` (created
in their shards) and `compile_train_step` (the step compiled for a state, donating it).
"""

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

NAMES = ("batch", "seq", "embed", "heads", "hidden", "vocab")


def logical_rules(**mesh_axes):
    """Logical axis rules naming every logical axis: those not given stay whole."""
    unknown = set(mesh_axes) - set(NAMES)
    if unknown:
        raise ValueError(f"unknown logical axes {sorted(unknown)}; the model has {NAMES}")
    return tuple((name, mesh_axes.get(name)) for name in NAMES)


def weight(rngs, shape, names, fan_in):
    """A parameter drawn from N(0, 1 / fan_in), its axes named for the logical rules."""
    init = nnx.with_partitioning(nnx.initializers.normal(fan_in**-0.5), names)
    return nnx.Param(init(rngs.params(), shape))


def residual(x):
    """The residual stream x[batch, seq, embed], split as the current rules split batch and seq."""
    return jax.lax.with_sharding_constraint(x, nn.logical_to_mesh_axes(("batch", "seq", None)))


def whole_sequence(x):
    """A sublayer's input x[batch, seq, embed], every position of the sequence on each device."""
    return jax.lax.with_sharding_constraint(x, nn.logical_to_mesh_axes(("batch", None, None)))


class CausalSelfAttention(nnx.Module):
    def __init__(self, embed, heads, *, rngs):
        head_dim = embed // heads
        self.qkv = weight(rngs, (embed, heads, 3, head_dim), ("embed", "heads", None, None), embed)
        self.out = weight(rngs, (heads, head_dim, embed), ("heads", None, "embed"), embed)

    def __call__(self, x):
        qkv = jnp.einsum("bse,ehtd->bshtd", x, self.qkv[...])  # each head's q, k, v together
        q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True)  # y[batch, seq, heads, head_dim]
        return jnp.einsum("bshd,hde->bse", y, self.out[...])  # sums over heads


class FeedForward(nnx.Module):
    def __init__(self, embed, hidden, *, rngs):
        self.w1 = weight(rngs, (embed, hidden), ("embed", "hidden"), embed)
        self.w2 = weight(rngs, (hidden, embed), ("hidden", "embed"), hidden)

    def __call__(self, x):
        return jax.nn.gelu(x @ self.w1[...]) @ self.w2[...]


class DecoderBlock(nnx.Module):
    def __init__(self, embed, heads, hidden, *, rngs):
        self.attention_norm = nnx.RMSNorm(embed, rngs=rngs)
        self.attention = CausalSelfAttention(embed, heads, rngs=rngs)
        self.mlp_norm = nnx.RMSNorm(embed, rngs=rngs)
        self.mlp = FeedForward(embed, hidden, rngs=rngs)

    def __call__(self, x):  # each sublayer named in the program, for a profile to find
        with jax.named_scope("attention"):
            x = residual(x + self.attention(whole_sequence(self.attention_norm(x))))
        with jax.named_scope("mlp"):
            return residual(x + self.mlp(whole_sequence(self.mlp_norm(x))))


class Transformer(nnx.Module):
    def __init__(self, vocab, embed, heads, hidden, layers, *, rngs):
        self.table = weight(rngs, (vocab, embed), ("vocab", "embed"), 1)
        self.blocks = nnx.List(
            [DecoderBlock(embed, heads, hidden, rngs=rngs) for _ in range(layers)]
        )
        self.norm = nnx.RMSNorm(embed, rngs=rngs)
        self.head = weight(rngs, (embed, vocab), ("embed", "vocab"), embed)

    def __call__(self, tokens):
        x = residual(self.table[...][tokens])  # x[batch, seq, embed]
        for i, block in enumerate(self.blocks):
            with jax.named_scope(f"block_{i}"):
                x = block(x)
        return self.norm(x) @ self.head[...]  # logits[batch, seq, vocab]


def next_token_loss(model, tokens):
    """Mean cross-entropy of predicting tokens[:, 1:] from tokens[:, :-1]."""
    logits = model(tokens[:, :-1])
    log_probs = jax.nn.log_softmax(logits)
    targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1], dtype=log_probs.dtype)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))


def train_step(graphdef, state, tokens, loss_fn=next_token_loss):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens)
    optimizer.update(model, grads)
    return nnx.state((model, optimizer)), loss


def model_and_optimizer(vocab, embed, heads, hidden, layers, edit=None):
    """The model and its Adam optimizer; inside a mesh and rules, each array in its shards."""
    model = Transformer(vocab, embed, heads, hidden, layers, rngs=nnx.Rngs(0))
    if edit is not None:
        edit(model)  # changed before Adam's state is made for it
    return model, nnx.Optimizer(model, optax.adam(3e-3), wrt=nnx.Param)


def compile_train_step(graphdef, state, tokens, loss_fn=next_token_loss):
    """The train step for `state` and `tokens` (arrays, or shapes with shardings), compiled
    under the mesh and rules it is called in: it donates the state and returns the new state in
    the same shardings."""
    mesh = jax.tree.leaves(state)[0].sharding.mesh
    out = (jax.tree.map(lambda a: a.sharding, state), NamedSharding(mesh, P()))
    step = partial(train_step, graphdef, loss_fn=loss_fn)
    return jax.jit(step, donate_argnums=0, out_shardings=out).lower(state, tokens).compile()
