"""The pipeline pages' plumbing: the transformer's blocks stacked by stage, and what runs them.

docs/pipeline_parallelism.md writes this out as its lesson (its `to_stages`, `stage_forward` and
the head of its `pipelined_loss`); the later pipeline pages import it from here instead
(tests/unit/test_pipeline.py holds the two equal):

- `stack_blocks`: a `Transformer`'s parameters as {"outer": the token table, the final norm and
  the LM head; "stages": every block's parameters stacked with leading axes `[stage, layer]`, a
  stage's consecutive layers, or `[stage, repeat, layer]`, virtual stage `repeat x stages +
  stage` on device `stage` (the interleaved placement)}.
- `run_layers`: an input through a run of stacked layers, in order, with `jax.lax.scan`, each
  layer rebuilt from its slice of the parameters by `nnx.merge`.
- `head_loss`: the final norm, the LM head and the mean next-token cross-entropy.
- `shard_bytes`: the bytes of one device's shards of a tree of arrays.
"""

import jax
import jax.numpy as jnp
from flax import nnx


def stack_blocks(params, stages, repeats=None):
    """{"outer": table, norm, head; "stages": the blocks as [stage, layer, ...], or dealt out as
    [stage, repeat, layer, ...] when `repeats` is given (layer (r x stages + s) x per + i goes
    to [s, r, i], per = layers // (stages x repeats))."""
    pure = nnx.to_pure_dict(params)
    layers = len(pure["blocks"])
    runs = stages * (repeats or 1)  # runs of consecutive layers
    if layers % runs:
        raise ValueError(f"{layers} layers do not cut into {runs} runs of equal length")
    blocks = [pure["blocks"][i] for i in range(layers)]

    def stack(*w):
        runs_first = jnp.stack(w).reshape(repeats or 1, stages, layers // runs, *w[0].shape)
        return runs_first[0] if repeats is None else runs_first.swapaxes(0, 1)

    outer = {k: v for k, v in pure.items() if k != "blocks"}
    return {"outer": outer, "stages": jax.tree.map(stack, *blocks)}


def run_layers(block, x, layers):
    """x through the layers in order; `block` is a block's graphdef, `layers` the layers'
    parameters stacked as [layer, ...]."""

    def one_layer(x, block_params):
        return nnx.merge(block, nnx.State(block_params))(x), None

    return jax.lax.scan(one_layer, x, layers)[0]


def head_loss(norm, y, outer, targets):
    """The mean cross-entropy of the LM head on the final norm of y; `norm` is the final norm's
    graphdef, `outer` holds its parameters ("norm") and the head's ("head")."""
    logits = nnx.merge(norm, nnx.State(outer["norm"]))(y) @ outer["head"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, targets[..., None], axis=-1))


def shard_bytes(tree):
    """Bytes of one device's shards of a tree of arrays."""
    return sum(w.addressable_shards[0].data.nbytes for w in jax.tree.leaves(tree))
