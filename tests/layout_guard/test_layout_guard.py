"""Fail when an upgrade or an edited rule changes how the training steps are laid out.

Copy this file into your tests and put your steps under "Your steps here". Run it once as
`UPDATE_LAYOUTS=1 pytest test_layout_guard.py`: it writes layout_guard.json beside this file;
commit that. From then on, a change to a step's layouts or collectives fails with the lines that
changed. When a change is meant, run it with UPDATE_LAYOUTS=1 again and review the JSON's diff.
It needs guide-helpers (installed from this site's repository, as each guide's first cell does)
and, for the TPU targets, libtpu (no TPU: `guide_helpers.tpu` says how to install it).
"""

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

GOLDEN = Path(__file__).with_name("layout_guard.json")
TARGETS = ("cpu", "v5e:2x4", "v5p:2x2x2")  # 8 CPU devices; two TPU slices, compiled by libtpu
jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts (else: in conftest.py)

from guide_helpers import guard  # noqa: E402


def devices(target):
    if target == "cpu":
        return jax.devices("cpu")[:8]
    from guide_helpers import tpu  # libtpu compiles for the slice; no TPU needed

    return tpu.topology(target)


@pytest.fixture(scope="module")
def golden():
    recorded = guard.read_golden(GOLDEN)
    yield recorded
    if os.environ.get(guard.UPDATE):
        guard.write_golden(GOLDEN, recorded)


@pytest.mark.parametrize("target", TARGETS)
def test_layouts_are_as_recorded(target, golden):
    changed = [guard.changes(golden, f"{name} @ {target}", guard.record(*step))
               for name, step in steps(devices(target)).items()]  # fmt: skip
    if any(changed):
        pytest.fail("\n".join(c for c in changed if c), pytrace=False)


# Your steps here: {name: (the step lowered with sharded shapes, its mesh)}.
from guide_helpers import llama_family as lf  # noqa: E402
from guide_helpers import path_rules  # noqa: E402
from guide_helpers import transformer as tf  # noqa: E402

CONFIG = lf.LlamaConfig(vocab=512, embed=128, heads=8, kv_heads=4, hidden=256, layers=2,
                        seq=32, batch=8, tied=True)  # fmt: skip
RULES = [
    (r"(q|k|v)_proj", path_rules.Heads(P(None, "model"), CONFIG.head_dim)),
    (r"o_proj", path_rules.Heads(P("model", None), CONFIG.head_dim, dim=0)),
    (r"(gate|up)_proj", P(None, "model")),
    (r"down_proj", P("model", None)),
    (r"embed_tokens", P("model", None)),
    (r".*", P()),
]


def typed(shapes, specs, mesh):
    """Each shape with its sharding: what a step is lowered for, nothing allocated."""
    return jax.tree.map(lambda a, spec: jax.ShapeDtypeStruct(
        a.shape, a.dtype, sharding=NamedSharding(mesh, spec)), shapes, specs)  # fmt: skip


def llama_step(mesh):
    """The site's Llama-shaped decoder, laid out by its parameters' paths."""
    state = lf.abstract_state(CONFIG)
    state = typed(state, path_rules.specs_by_path(state, RULES, mesh), mesh)
    rows = NamedSharding(mesh, P("data"))
    tokens = jax.ShapeDtypeStruct((CONFIG.batch, CONFIG.seq + 1), jnp.int32, sharding=rows)
    return lf.jitted(CONFIG).lower(state, tokens)


def transformer_step(mesh):
    """The site's NNX transformer, laid out by its logical axis rules."""
    rules = tf.logical_rules(batch="data", heads="model", hidden="model")
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules):
        sizes = dict(vocab=512, embed=128, heads=8, hidden=512, layers=2)
        graphdef, state = nnx.split(nnx.eval_shape(lambda: tf.model_and_optimizer(**sizes)))
        state = typed(state, nnx.get_partition_spec(state), mesh)
        tokens = jax.ShapeDtypeStruct((8, 65), jnp.int32, sharding=NamedSharding(mesh, P("data")))
        return jax.jit(tf.train_step, static_argnums=0, donate_argnums=1).lower(
            graphdef, state, tokens)  # fmt: skip


def steps(chips):
    mesh = jax.make_mesh((2, 4), ("data", "model"), (AxisType.Auto,) * 2, devices=chips)
    return {"llama": (llama_step(mesh), mesh), "transformer": (transformer_step(mesh), mesh)}
