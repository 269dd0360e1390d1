"""guide_helpers.path_rules: specs chosen by parameter path, and the checks that keep a rule
from replicating a parameter silently."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from guide_helpers import path_rules


def nnx_state():
    layer = nnx.Linear(8, 12, rngs=nnx.Rngs(0))
    return nnx.state(nnx.List([layer, nnx.Linear(12, 8, rngs=nnx.Rngs(1))]))


def test_a_path_reads_as_written_without_nnx_trailing_value():
    paths = [path_rules.path_of(p) for p, _ in jax.tree_util.tree_leaves_with_path(nnx_state())]
    assert paths == ["0/bias", "0/kernel", "1/bias", "1/kernel"]
    params = nn.Dense(4).init(jax.random.key(0), jnp.ones((1, 2)))
    linen = [path_rules.path_of(p) for p, _ in jax.tree_util.tree_leaves_with_path(params)]
    assert linen == ["params/bias", "params/kernel"]


def test_the_first_rule_that_matches_gives_the_spec():
    rules = [(r"0/kernel", P(None, "model")), (r"kernel", P("model", None)), (r".*", P())]
    specs = path_rules.specs_by_path(nnx_state(), rules)
    flat = {path: spec for path, _, spec in path_rules.zip_by_path(nnx_state(), specs)}
    assert flat == {
        "0/bias": P(), "0/kernel": P(None, "model"), "1/bias": P(), "1/kernel": P("model", None),
    }  # fmt: skip


@pytest.mark.parametrize(
    "rules, message",
    [
        ([(r"kernel/value", P("model")), (r".*", P())], "rules that match no parameter"),
        ([(r"kernel", P(None, "model"))], "parameters no rule matches: ['0/bias', '1/bias']"),
        ([(r"bias", P("model", None)), (r".*", P())], "specs longer than their parameter's rank"),
    ],
)
def test_rules_that_do_not_lay_out_every_parameter_once_are_refused(rules, message):
    with pytest.raises(path_rules.RuleError, match=message.replace("[", r"\[")):
        path_rules.specs_by_path(nnx_state(), rules)


def test_mismatches_names_the_arrays_not_laid_out_as_their_spec_says(mesh):
    rules = [(r"kernel", P(None, "model")), (r".*", P())]
    specs = path_rules.specs_by_path(nnx_state(), rules)
    placed = jax.device_put(nnx_state(), jax.tree.map(lambda s: NamedSharding(mesh, s), specs))
    assert path_rules.mismatches(placed, specs) == []
    whole = jax.device_put(nnx_state(), NamedSharding(mesh, P()))
    assert [m[0] for m in path_rules.mismatches(whole, specs)] == ["0/kernel", "1/kernel"]


def test_zip_by_path_pairs_a_tree_with_its_specs_and_refuses_trees_of_other_sizes():
    specs = path_rules.specs_by_path(nnx_state(), [(r"kernel", P(None, "model")), (r".*", P())])
    pairs = path_rules.zip_by_path(nnx_state(), specs)
    first = [(path, spec) for path, _, spec in pairs][:2]
    assert first == [("0/bias", P()), ("0/kernel", P(None, "model"))]
    with pytest.raises(ValueError):
        path_rules.zip_by_path(nnx_state(), [P(), P()])


def checkpoint_kernels():
    """A checkpoint's flat projections: 8 query heads and 2 key/value heads of 16 columns, and a
    vocabulary of 50,257 tokens, the shapes a rule sees (no heads axis to refuse a split)."""
    shapes = {"q_proj": (128, 128), "k_proj": (128, 32), "o_proj": (128, 128)}
    shapes["embed"] = (50257, 64)
    return {name: jax.ShapeDtypeStruct(shape, jnp.float32) for name, shape in shapes.items()}


HEADS = [
    (r"(q|k)_proj", path_rules.Heads(P(None, "model"), 16)),
    (r"o_proj", path_rules.Heads(P("model", None), 16, dim=0)),
    (r".*", P()),
]


def test_a_split_that_cuts_a_head_is_refused_naming_parameter_heads_devices_and_what_works(mesh):
    with pytest.raises(path_rules.RuleError) as refused:
        path_rules.specs_by_path(checkpoint_kernels(), HEADS, mesh)
    message = str(refused.value)
    assert message.count("cuts a head") == 1 and "k_proj (128, 32)" in message
    assert "its 2 heads of 16 columns over 4 devices of 'model', 0.5 of a head each" in message
    assert "keep that dimension whole" in message and "repeat each head 2 times" in message
    assert "q_proj" not in message and "o_proj" not in message  # 8 heads: 2 a device


def test_heads_that_divide_are_laid_out_as_the_plain_spec_says(mesh):
    rules = [(r"k_proj", P()), *HEADS]
    specs = path_rules.specs_by_path(checkpoint_kernels(), rules, mesh)
    assert specs == {"q_proj": P(None, "model"), "k_proj": P(), "o_proj": P("model", None),
                     "embed": P()}  # fmt: skip
    with jax.set_mesh(mesh):  # the mesh in context serves as well
        assert path_rules.specs_by_path(checkpoint_kernels(), rules) == specs
    assert path_rules.specs_by_path(checkpoint_kernels(), HEADS)["k_proj"] == P(None, "model")


def test_a_split_the_devices_do_not_divide_is_listed_and_refused(mesh):
    rules = [(r"embed", P("model", None)), (r".*", P())]
    specs = path_rules.specs_by_path(checkpoint_kernels(), rules)  # no mesh: nothing to divide
    uneven = path_rules.undivided(checkpoint_kernels(), specs, mesh)
    assert uneven == [("embed", (50257, 64), P("model", None),
                       "dimension 0 (50257) over 4 devices of 'model'")]  # fmt: skip
    with pytest.raises(path_rules.RuleError, match="splits the devices do not divide"):
        path_rules.specs_by_path(checkpoint_kernels(), rules, mesh)
    over_both = path_rules.undivided({"w": jnp.zeros((12, 8))}, {"w": P(("data", "model"))}, mesh)
    whys = [why for *_, why in over_both]
    assert whys == ["dimension 0 (12) over 8 devices of 'data' x 'model'"]
