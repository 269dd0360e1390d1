"""Llama-shaped pieces beside the site's transformer: grouped-query attention and a gated MLP.

The site's transformer (`guide_helpers.transformer`) gives every head its own keys and values
and has a two-matrix MLP. Llama 3 shares each key/value head among a group of query heads
(grouped-query attention, GQA) and gates its MLP (SwiGLU). The plan page compiles this model at
Llama 3 8B's shapes (`plan.LLAMA_3_8B`: 8.03B parameters) and checks `guide_helpers.plan`'s
formulas against its programs. Conventions are the transformer's (weights named for the logical
rules, the residual stream constrained by them), with one more logical axis:

- `Wq[embed, heads, head_dim]`, `Wo[heads, head_dim, embed]`: the query and output
  projections, split where `heads` is;
- `Wkv[embed, kv_heads, 2, head_dim]`: the keys and values, head-major (a head's k and v
  together). `kv_heads` follows `heads` unless the rules say otherwise (`logical_rules`): under
  tensor parallelism of degree t, each device then holds kv_heads / t of them, which needs
  kv_heads divisible by t; with fewer key/value heads than devices, map `kv_heads` to None
  (each device keeps them all: Wkv whole on every device, its gradient summed over them);
- `Wgate[embed, hidden]`, `Wup[embed, hidden]`, `Wdown[hidden, embed]`: the gated MLP,
  silu(x Wgate) * (x Wup) then Wdown; `hidden` split keeps each gate column with its up column.
"""

import jax
import jax.numpy as jnp
from flax import nnx

from guide_helpers import transformer
from guide_helpers.transformer import weight

NAMES = (*transformer.NAMES, "kv_heads")


def logical_rules(**mesh_axes):
    """The transformer's rules and `kv_heads`: split as `heads` unless given (None: whole)."""
    kv = mesh_axes.pop("kv_heads", mesh_axes.get("heads"))
    return (*transformer.logical_rules(**mesh_axes), ("kv_heads", kv))


class GroupedQueryAttention(nnx.Module):
    def __init__(self, embed, heads, kv_heads, *, rngs):
        if heads % kv_heads:
            raise ValueError(f"{heads} query heads do not form groups of {kv_heads} kv heads")
        head_dim = embed // heads
        self.q = weight(rngs, (embed, heads, head_dim), ("embed", "heads", None), embed)
        self.kv = weight(
            rngs, (embed, kv_heads, 2, head_dim), ("embed", "kv_heads", None, None), embed
        )
        self.out = weight(rngs, (heads, head_dim, embed), ("heads", None, "embed"), embed)

    def __call__(self, x):
        q = jnp.einsum("bse,ehd->bshd", x, self.q[...])
        kv = jnp.einsum("bse,ektd->bsktd", x, self.kv[...])  # each kv head's k and v together
        # each group of heads // kv_heads query heads attends with one key/value head
        y = jax.nn.dot_product_attention(q, kv[:, :, :, 0], kv[:, :, :, 1], is_causal=True)
        return jnp.einsum("bshd,hde->bse", y, self.out[...])


class GatedFeedForward(nnx.Module):
    def __init__(self, embed, hidden, *, rngs):
        self.gate = weight(rngs, (embed, hidden), ("embed", "hidden"), embed)
        self.up = weight(rngs, (embed, hidden), ("embed", "hidden"), embed)
        self.down = weight(rngs, (hidden, embed), ("hidden", "embed"), hidden)

    def __call__(self, x):
        return (jax.nn.silu(x @ self.gate[...]) * (x @ self.up[...])) @ self.down[...]


class LlamaBlock(transformer.DecoderBlock):
    """The transformer's pre-norm block (its `__call__`), with these two sublayers."""

    def __init__(self, embed, heads, kv_heads, hidden, *, rngs):
        self.attention_norm = nnx.RMSNorm(embed, rngs=rngs)
        self.attention = GroupedQueryAttention(embed, heads, kv_heads, rngs=rngs)
        self.mlp_norm = nnx.RMSNorm(embed, rngs=rngs)
        self.mlp = GatedFeedForward(embed, hidden, rngs=rngs)


class Llama(transformer.Transformer):
    """The transformer (its table, blocks, final norm and LM head, its `__call__`) with
    Llama's blocks."""

    def __init__(self, vocab, embed, heads, kv_heads, hidden, layers, *, rngs):
        self.table = weight(rngs, (vocab, embed), ("vocab", "embed"), 1)
        self.blocks = nnx.List(
            [LlamaBlock(embed, heads, kv_heads, hidden, rngs=rngs) for _ in range(layers)]
        )
        self.norm = nnx.RMSNorm(embed, rngs=rngs)
        self.head = weight(rngs, (embed, vocab), ("embed", "vocab"), embed)
