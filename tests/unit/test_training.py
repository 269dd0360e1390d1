"""guide_helpers.training: the main guide's state and step, built for a mesh, rules or none."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from guide_helpers import training
from guide_helpers.models import MLP, LogicalMLP

BATCH, EMBED, HIDDEN = 16, 32, 64


@pytest.fixture
def batch():
    x = jax.random.normal(jax.random.key(0), (BATCH, EMBED))
    return x, jnp.tanh(x)


def test_a_model_that_names_mesh_axes_is_built_as_the_main_guide_shards_it(mesh, batch):
    built = training.layout_step(MLP(2, HIDDEN), mesh, *batch)
    w1 = built.state.params["layers"]["W1"].value
    assert w1.sharding.spec == P(None, None, "model") and built.x.sharding.spec == P("data", None)
    state, first = built.compiled(built.state, built.x, built.target)
    _, second = built.compiled(state, built.x, built.target)
    assert float(second) < float(first) and first.sharding.is_fully_replicated


def test_rules_choose_the_layout_and_each_rule_set_traces_its_own_step(mesh, batch):
    fsdp = (("batch", "data"), ("embed", "data"), ("hidden", None), ("layer", None))
    tensor = (("batch", None), ("embed", None), ("hidden", "model"), ("layer", None))
    built = {
        name: training.layout_step(LogicalMLP(2, HIDDEN), mesh, *batch, rules=rules)
        for name, rules in [("FSDP", fsdp), ("tensor", tensor)]
    }
    specs = {n: b.state.params["layers"]["W1"].value.sharding.spec for n, b in built.items()}
    assert specs == {"FSDP": P(None, "data", None), "tensor": P(None, None, "model")}
    assert built["FSDP"].x.sharding.spec == P("data", None)
    gathers = {n: "all-gather" in b.compiled.as_text() for n, b in built.items()}
    assert gathers == {"FSDP": True, "tensor": False}  # FSDP gathers its weights; tensor does not
    losses = [float(b.compiled(b.state, b.x, b.target)[1]) for b in built.values()]
    assert np.isclose(losses[0], losses[1], rtol=1e-5)  # one model, two layouts


def test_the_donated_step_deletes_the_state_it_is_given(mesh, batch):
    built = training.layout_step(MLP(1, HIDDEN), mesh, *batch)
    state, _ = built.donated(built.state, built.x, built.target)
    assert all(a.is_deleted() for a in jax.tree.leaves(built.state))
    assert not any(a.is_deleted() for a in jax.tree.leaves(state))


def test_the_step_is_adam_on_the_mean_squared_error(batch):
    x, target = batch
    model = LogicalMLP(1, HIDDEN)  # no rules: its constraints name no mesh axis
    steps = training.steps_for(model)  # jitted here: one program each, not op by op
    state = jax.jit(steps.make_state)(jax.random.key(1), x)
    new, loss = jax.jit(steps.train_step)(state, x, target)
    prediction = model.apply({"params": state.params}, x)
    assert np.isclose(float(loss), float(jnp.mean((prediction - target) ** 2)), rtol=1e-6)
    assert int(new.step) == 1 and int(new.opt_state[0].count) == 1


def test_mixed_precision_keeps_bf16_parameters_and_updates_f32_masters(batch):
    x, target = batch
    model = LogicalMLP(1, HIDDEN)
    steps = training.mixed_precision_steps_for(model, training.ADAM)
    state = jax.jit(steps.make_state)(jax.random.key(1), x)
    new, loss = jax.jit(steps.train_step)(state, x.astype(jnp.bfloat16), target)
    dtypes = {k: {a.dtype for a in jax.tree.leaves(v)} for k, v in new.items()}
    assert dtypes["params"] == {jnp.dtype(jnp.bfloat16)} and dtypes["master"] == {jnp.dtype("f4")}
    master, copy = new["master"]["layers"]["W1"].value, new["params"]["layers"]["W1"].value
    assert not np.array_equal(master, state["master"]["layers"]["W1"].value)  # it moved
    assert np.array_equal(copy, master.astype(jnp.bfloat16)) and np.isfinite(float(loss))


def test_the_nnx_step_updates_the_model_and_adam_in_place(batch):
    from flax import nnx

    x, target = batch
    model = nnx.Linear(EMBED, EMBED, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, training.ADAM, wrt=nnx.Param)
    before = np.asarray(model.kernel[...])
    first = training.train_step_in_place(model, optimizer, x, target)
    second = training.loss_fn(model, x, target)
    assert float(second) < float(first) and int(optimizer.step[...]) == 1
    assert not np.array_equal(before, model.kernel[...])


def test_the_nnx_step_trains_the_loss_it_is_given_jitted(batch):
    """Another loss (the mean absolute error, of a batch given as one tuple) bound before
    `nnx.jit`: the step returns that loss and follows its gradients, not the squared error's."""
    from functools import partial

    from flax import nnx

    def absolute_error(model, batch):
        x, target = batch
        return jnp.mean(jnp.abs(model(x) - target))

    def one_step(*batch, **loss_fn):
        model = nnx.Linear(EMBED, EMBED, rngs=nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
        step = nnx.jit(partial(training.train_step_in_place, **loss_fn))
        return model, step(model, optimizer, *batch)

    model, loss = one_step(batch, loss_fn=absolute_error)  # the batch as one argument
    squared_model, squared_loss = one_step(*batch)  # x, target: the default, the squared error
    start = nnx.Linear(EMBED, EMBED, rngs=nnx.Rngs(0))
    assert np.isclose(float(loss), float(absolute_error(start, batch)), rtol=1e-6)
    assert np.isclose(float(squared_loss), float(training.loss_fn(start, *batch)), rtol=1e-6)
    grads = nnx.grad(absolute_error)(start, batch)  # one SGD step of 0.1 along them
    expected = start.kernel[...] - 0.1 * grads.kernel[...]
    assert np.allclose(model.kernel[...], expected, atol=1e-6)
    assert not np.allclose(squared_model.kernel[...], expected, atol=1e-6)
