"""guide_helpers.pipeline: the blocks stacked by stage, a run of layers, the head's loss, the
bytes a device holds; and the same as docs/pipeline_parallelism.md's lesson, which writes them.

A toy model stands in for the transformer, with its parameter tree (`table`, `blocks`, `norm`,
`head`) and a linear layer for a block: small and quick, and what the module reads of a model.
"""

import ast
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import jupytext
import numpy as np
import pytest
from conftest import DOCS
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from guide_helpers.pipeline import head_loss, run_layers, shard_bytes, stack_blocks

VOCAB, EMBED, LAYERS, SEQ = 8, 4, 8, 3


class Toy(nnx.Module):
    def __init__(self, rngs):
        self.table = nnx.Param(jax.random.normal(rngs.params(), (VOCAB, EMBED)))
        self.blocks = nnx.List([nnx.Linear(EMBED, EMBED, rngs=rngs) for _ in range(LAYERS)])
        self.norm = nnx.RMSNorm(EMBED, rngs=rngs)
        self.head = nnx.Param(jax.random.normal(rngs.params(), (EMBED, VOCAB)))


@pytest.fixture(scope="module")
def model():
    return Toy(nnx.Rngs(0))


@pytest.fixture(scope="module")
def tokens():
    return jax.random.randint(jax.random.key(1), (4, SEQ + 1), 0, VOCAB)


def test_stack_blocks_puts_each_layer_where_its_stage_runs_it(model):
    params = nnx.state(model, nnx.Param)
    kernels = [np.asarray(b.kernel[...]) for b in model.blocks]
    consecutive = stack_blocks(params, 4)["stages"]["kernel"]
    assert consecutive.shape == (4, 2, EMBED, EMBED)
    dealt = stack_blocks(params, 2, repeats=2)["stages"]["kernel"]
    assert dealt.shape == (2, 2, 2, EMBED, EMBED)
    for s in range(2):
        for i in range(2):
            assert np.array_equal(consecutive[s, i], kernels[2 * s + i])
            for r in range(2):
                assert np.array_equal(dealt[s, r, i], kernels[(r * 2 + s) * 2 + i])
    assert set(stack_blocks(params, 4)["outer"]) == {"table", "norm", "head"}
    with pytest.raises(ValueError, match="8 layers do not cut into 3 runs"):
        stack_blocks(params, 3)


def test_the_layers_and_the_head_give_the_models_loss(model, tokens):
    stacked = stack_blocks(nnx.state(model, nnx.Param), 1)
    outer, whole = stacked["outer"], jax.tree.map(lambda w: w[0], stacked["stages"])
    y = run_layers(nnx.graphdef(model.blocks[0]), outer["table"][tokens[:, :-1]], whole)
    loss = head_loss(nnx.graphdef(model.norm), y, outer, tokens[:, 1:])
    x = model.table[...][tokens[:, :-1]]
    for block in model.blocks:  # in order: a shuffled run of layers gives another loss
        x = block(x)
    log_probs = jax.nn.log_softmax(model.norm(x) @ model.head[...])
    expected = -jnp.mean(jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1))
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_shard_bytes_counts_one_devices_shards():
    mesh = jax.make_mesh((8,), ("data",), (AxisType.Auto,))
    split = jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("data")))
    whole = jax.device_put(jnp.zeros(3, jnp.int32), NamedSharding(mesh, P()))
    assert shard_bytes({"split": split, "whole": whole}) == 4 * 4 + 3 * 4


def lesson(names, **context):
    """The named top-level functions of docs/pipeline_parallelism.md's code cells, defined in a
    namespace that holds `context` as the page's globals."""
    found = {}
    for cell in jupytext.read(DOCS / "pipeline_parallelism.md").cells:
        if cell.cell_type == "code" and not cell.source.lstrip().startswith("%"):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.FunctionDef) and node.name in names:
                    found[node.name] = node
    assert set(found) == set(names), f"the lesson no longer defines {set(names) - set(found)}"
    namespace = {"jax": jax, "jnp": jnp, "nnx": nnx, **context}
    exec(compile(ast.Module(list(found.values()), []), "pipeline_parallelism.md", "exec"),
         namespace)  # fmt: skip
    return [namespace[name] for name in names]


def test_the_module_equals_the_pipeline_guides_lesson(model, tokens):
    """Bitwise: the same stacking, the same layers in the same order, the same head."""
    block, norm = nnx.graphdef(model.blocks[0]), nnx.graphdef(model.norm)
    page = dict(LAYERS=LAYERS, STAGES=4, SEQ=SEQ, EMBED=EMBED, BLOCK=block, NORM=norm,
                mesh=SimpleNamespace(shape={"data": 1}))  # fmt: skip
    to_stages, stage_forward, pipelined_loss = lesson(
        ["to_stages", "stage_forward", "pipelined_loss"], **page
    )
    params = nnx.state(model, nnx.Param)
    ours, theirs = stack_blocks(params, 4), to_stages(params)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, ours, theirs)))
    x = ours["outer"]["table"][tokens[:, :-1]]
    layers = jax.tree.map(lambda w: w[1], ours["stages"])
    assert np.array_equal(run_layers(block, x, layers), stage_forward(x, layers))
    # With the blocks left out (`run` hands its input back), the lesson's loss is the head's.
    skip_blocks = lambda stages, xs: xs  # noqa: E731
    theirs = pipelined_loss(skip_blocks, 2, ours, tokens)
    assert np.array_equal(head_loss(norm, x, ours["outer"], tokens[:, 1:]), theirs)
