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
