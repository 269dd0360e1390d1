"""guide_helpers.llama: grouped-query attention and the gated MLP, against references and plan.

Its FLOPs and saved activations are checked against `guide_helpers.plan`'s formulas on programs
compiled here, as the plan page checks them at Llama 3 8B's shapes.
"""

import contextlib
import dataclasses
import io

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import AxisType

from guide_helpers import hlo, llama, plan

TINY = plan.Config(
    vocab=64, embed=32, heads=8, hidden=48, layers=2, seq=16, batch=2, kv_heads=2, gated=True
)
ONE = plan.Layout("one device", 1, 1, 1, 1, 1, 1)
POLICIES = {
    "none": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "block": jax.checkpoint_policies.nothing_saveable,
}


@pytest.fixture(scope="module")
def one_device():
    """A 1-device mesh and rules that keep every axis whole."""
    mesh = jax.make_mesh((1,), ("model",), (AxisType.Auto,), devices=jax.devices()[:1])
    with jax.set_mesh(mesh), nnx.logical_axis_rules(llama.logical_rules()):
        yield mesh


def tiny_llama():
    c = TINY
    return llama.Llama(c.vocab, c.embed, c.heads, c.kv_heads, c.hidden, c.layers, rngs=nnx.Rngs(0))


def test_kv_heads_follow_heads_unless_the_rules_say_otherwise():
    assert dict(llama.logical_rules(heads="model"))["kv_heads"] == "model"
    assert dict(llama.logical_rules(heads="model", kv_heads=None))["kv_heads"] is None
    assert set(dict(llama.logical_rules())) == set(llama.NAMES)
    with pytest.raises(ValueError, match="unknown logical axes"):
        llama.logical_rules(kv="model")


def test_the_parameters_are_plan_s_count_and_llama_3_8b_has_8_03b(one_device):
    model = nnx.eval_shape(tiny_llama)  # shapes only: the other tests build real ones
    assert sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))) == TINY.params
    big = plan.LLAMA_3_8B
    shapes = nnx.eval_shape(
        lambda: llama.Llama(
            big.vocab, big.embed, big.heads, big.kv_heads, big.hidden, big.layers, rngs=nnx.Rngs(0)
        )  # fmt: skip
    )
    assert sum(x.size for x in jax.tree.leaves(nnx.state(shapes, nnx.Param))) == 8_030_261_248
    with pytest.raises(ValueError, match="groups"):
        llama.GroupedQueryAttention(32, 8, 3, rngs=nnx.Rngs(0))


def test_each_query_head_attends_with_its_group_s_key_and_value(one_device):
    attention = llama.GroupedQueryAttention(32, 8, 2, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 16, 32))
    q = jnp.einsum("bse,ehd->bshd", x, attention.q[...])
    k, v = jnp.einsum("bse,ektd->tbskd", x, attention.kv[...])
    k, v = jnp.repeat(k, 4, axis=2), jnp.repeat(v, 4, axis=2)  # heads 0-3 share kv head 0
    scores = jnp.einsum("bshd,bthd->bhst", q, k) / np.sqrt(4)
    scores = jnp.where(jnp.tril(jnp.ones((16, 16), bool)), scores, -jnp.inf)
    y = jnp.einsum("bhst,bthd->bshd", jax.nn.softmax(scores), v)
    expected = jnp.einsum("bshd,hde->bse", y, attention.out[...])
    np.testing.assert_allclose(attention(x), expected, rtol=1e-5, atol=1e-5)


def test_the_gated_mlp_is_silu_gate_times_up_then_down(one_device):
    mlp = llama.GatedFeedForward(32, 48, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(2), (4, 32))
    gate, up = x @ mlp.gate[...], x @ mlp.up[...]
    expected = (gate / (1 + jnp.exp(-gate)) * up) @ mlp.down[...]
    np.testing.assert_allclose(mlp(x), expected, rtol=1e-5, atol=1e-5)


def grad_program(remat):
    """One device's gradient of the tiny model's loss, its blocks scanned, remat as named."""
    model = tiny_llama()
    block_def = nnx.graphdef(model.blocks[0])
    stacked = jax.tree.map(lambda *w: jnp.stack(w), *[nnx.split(b)[1] for b in model.blocks])

    def layer(x, p):
        return nnx.merge(block_def, p)(x), None

    if POLICIES[remat] is not None:
        layer = jax.checkpoint(layer, policy=POLICIES[remat])

    def loss(params, tokens):
        x = params["table"][tokens[:, :-1]]
        x, _ = jax.lax.scan(layer, x, params["blocks"])
        logits = model.norm(x) @ params["head"]
        return -jnp.mean(jax.nn.log_softmax(logits)[..., 0])

    params = {"table": model.table[...], "head": model.head[...], "blocks": stacked}
    tokens = jnp.zeros((TINY.batch, TINY.seq + 1), jnp.int32)
    return jax.jit(jax.grad(loss)).lower(params, tokens).compile()


@pytest.mark.parametrize("remat", ["none", "dots", "block"])
def test_the_program_s_matrix_flops_are_plan_s(one_device, remat):
    assert hlo.matmul_flops(grad_program(remat)) == plan.flops(TINY, ONE, remat)


def test_dots_saves_what_plan_counts(one_device):
    c = TINY
    block = llama.LlamaBlock(c.embed, c.heads, c.kv_heads, c.hidden, rngs=nnx.Rngs(0))
    block_def, state = nnx.split(block)
    p = jax.tree.map(lambda w: w.astype(jnp.bfloat16), nnx.to_pure_dict(state))
    f = jax.checkpoint(
        lambda x, p: nnx.merge(block_def, nnx.State(p))(x).sum(), policy=POLICIES["dots"]
    )
    listing = io.StringIO()
    with contextlib.redirect_stdout(listing):
        jax.ad_checkpoint.print_saved_residuals(f, jnp.zeros((1, c.seq, c.embed), jnp.bfloat16), p)
    lines = listing.getvalue().splitlines()
    saved = [line.split()[0] for line in lines if "argument p" not in line]
    one_sequence = dataclasses.replace(c, batch=1)
    assert sum(map(hlo.shape_bytes, saved)) == plan.activations_per_layer(
        one_sequence, ONE, 1, "dots"
    )
