"""The main guide's train state, loss and step, and one builder that compiles them for a mesh and
logical axis rules: for the pages whose lesson is not the step.

The main guide (scale_up_a_flax_model) writes `make_state`, `loss_fn` and `train_step` out in its
own cells, for its `model`, because writing them is its lesson; `steps_for(model)` writes the
same three for any model (the `MLP` and the `LogicalMLP` of `guide_helpers.models`, at any size),
and tests/site/test_sources.py keeps their code and the guide's identical.

- `steps_for(model, optimizer=ADAM)`: the guide's `make_state(rng, x)` (a `TrainState`, Adam at
  1e-3 unless another optax optimizer is given), `loss_fn(params, x, target)` (the mean squared
  error) and `train_step(state, x, target)`.
- `under_rules(fn, rules)`: `fn` with a logical model's constraints resolved by `rules`.
- `layout_step(model, mesh, x, target, rules=None)`: the state made in its shards and the batch
  placed, the step compiled plain and with the state donated: a `Built`.
- `mixed_precision_steps_for(model, optimizer)`: the same step in bf16, its update applied to f32
  master parameters, for the pages that count a mixed-precision state's bytes.
- `loss_fn(model, x, target)` and `train_step_in_place(model, optimizer, *batch, loss_fn=...)`:
  the NNX guide's (nnx_sharding) loss and step of an NNX model, which updates the model and the
  optimizer in place and returns the loss of `loss_fn(model, *batch)`: the mean squared error
  unless another loss of the model and the batch is given (bound with `functools.partial` before
  `nnx.jit`, since a function is not an array to trace). tests/site/test_sources.py keeps the
  two identical to the guide's.
"""

import functools
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from flax.training import train_state
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


class Steps(NamedTuple):
    make_state: Callable
    loss_fn: Callable
    train_step: Callable


ADAM = optax.adam(learning_rate=1e-3)  # the main guide's optimizer


@functools.cache
def steps_for(model, optimizer=ADAM):
    """The main guide's `make_state`, `loss_fn` and `train_step`, for `model`: the guide writes
    them at its top level for its own model; tests keep their code and these identical. One set
    per model and optimizer, so that every state of a model has one tree structure."""

    def make_state(rng, x):
        variables = model.init(rng, x)
        return train_state.TrainState.create(
            apply_fn=model.apply, params=variables["params"], tx=optimizer
        )

    def loss_fn(params, x, target):
        prediction = model.apply({"params": params}, x)
        return jnp.mean((prediction - target) ** 2)

    def train_step(state, x, target):
        loss, grads = jax.value_and_grad(loss_fn)(state.params, x, target)
        return state.apply_gradients(grads=grads), loss

    return Steps(make_state, loss_fn, train_step)


def under_rules(fn, rules):
    """`fn` with the logical axis names of the model's constraints mapped by `rules` (a new
    function each time, so that a jit of it traces its own program for its own rules)."""

    @functools.wraps(fn)
    def wrapped(*args):
        with nn.logical_axis_rules(rules):
            return fn(*args)

    return wrapped


@dataclass(frozen=True)
class Built:
    """A layout, built: its mesh and rules (None for a model annotated with mesh axes), the train
    state in its shards, the batch placed, and the step compiled plain and with the state
    donated (which deletes the state passed to it)."""

    mesh: jax.sharding.Mesh
    rules: Any
    state: train_state.TrainState
    x: jax.Array
    target: jax.Array
    compiled: Any
    donated: Any


def layout_step(model, mesh, x, target, rules=None, seed=1, optimizer=ADAM):
    """`model`'s train state and batch on `mesh`, and its step compiled for them. With `rules`,
    the model's names are logical and `rules` map them to mesh axes (the batch by its "batch"
    and "embed" names); without, the model names mesh axes, and the batch is split over 'data'."""
    steps = steps_for(model, optimizer)
    names = () if rules is None else rules
    x_spec = (
        P("data", None) if rules is None else nn.logical_to_mesh_axes(("batch", "embed"), rules)
    )
    batch = NamedSharding(mesh, x_spec)
    make_state, train_step = (
        under_rules(steps.make_state, names),
        under_rules(steps.train_step, names),
    )
    with jax.set_mesh(mesh):
        abstract = jax.eval_shape(make_state, jax.random.key(seed), x)
        if rules is None:
            state_sharding = nn.get_sharding(abstract, mesh)
        else:
            specs = nn.get_partition_spec(abstract)
            state_sharding = nn.logical_to_mesh_sharding(specs, mesh, rules)
        state = jax.jit(make_state, out_shardings=state_sharding)(jax.random.key(seed), x)
        x, target = jax.device_put(x, batch), jax.device_put(target, batch)
        jitted = functools.partial(
            jax.jit, train_step, out_shardings=(state_sharding, NamedSharding(mesh, P()))
        )
        compiled = jitted().lower(state, x, target).compile()
        donated = jitted(donate_argnums=0).lower(state, x, target).compile()
    return Built(mesh, rules, state, x, target, compiled, donated)


def mixed_precision_steps_for(model, optimizer):
    """`make_state`, `loss_fn` and `train_step` of mixed-precision training: the state holds the
    parameters in bf16 for the matrix products, and f32 master parameters and `optimizer`'s
    moments (which take the master parameters' dtype); the gradients come in bf16, the update
    runs in f32 and writes a new bf16 copy."""

    def bf16(tree):
        return jax.tree.map(lambda p: p.astype(jnp.bfloat16), tree)

    def make_state(rng, x):
        master = model.init(rng, x.astype(jnp.float32))["params"]  # f32, boxes kept
        return {"params": bf16(master), "master": master, "opt": optimizer.init(master)}

    def loss_fn(params, x, target):
        return jnp.mean((model.apply({"params": params}, x) - target) ** 2)

    def train_step(state, x, target):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, target)  # bf16 gradients
        updates, opt = optimizer.update(grads, state["opt"], state["master"])  # in f32
        master = optax.apply_updates(state["master"], updates)
        return {"params": bf16(master), "master": master, "opt": opt}, loss

    return Steps(make_state, loss_fn, train_step)


def loss_fn(model, x, target):
    return jnp.mean((model(x) - target) ** 2)


def train_step_in_place(model, optimizer, *batch, loss_fn=loss_fn):
    loss, grads = nnx.value_and_grad(loss_fn)(model, *batch)
    optimizer.update(model, grads)
    return loss
