"""Host offload of the site's transformer on one chip: the Adam moments, or the blocks' saved
activations, kept in the host's memory, beside the step that keeps everything on the device.

The steps are `guide_helpers.onechip`'s (the measured one-chip step: f32 parameters and moments,
the parameters cast to bf16 inside the loss, `optax.adamw(1e-4)`, the state donated), in three
placements, `WHERE`:
- "device": everything in the chip's memory (onechip's step);
- "moments on host": Adam's two moments live in `pinned_host` memory between steps; the step
  brings them to the device for the update and sends the new ones back;
- "activations on host": each block runs under `jax.checkpoint` with a policy that saves its
  output to `pinned_host` in the forward pass and brings it back for the backward pass.

- `compile_for(run, where, device)`: the step compiled from shapes alone (a TPU chip of
  `guide_helpers.tpu.topology`, or any JAX device).
- `bytes_by_kind(compiled)`: what the program holds per memory kind, from XLA's memory analysis.
- `transfers(compiled)`: the bytes its copies move to and from the host, from its HLO.
- `setup(run, where, device)` and `step_fn(run, where, graphdef)`: real arrays and the jitted
  step, for `tools/measure_offload.py` on a chip and for equal values on any device.
- `load(path)`: tools/measure_offload.py's record.
"""

import json
import re
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from guide_helpers import hlo, onechip
from guide_helpers.transformer import logical_rules, next_token_loss, residual

WHERE = ("device", "moments on host", "activations on host")
HOST = "pinned_host"
# tools/measure_offload.py on one TPU v5e chip: the three placements' steps, the host link
RECORDED_V5E = onechip.MEASURED / "tpu_v5e_offload_2026-12-07.jsonl"
OFFLOADED = jax.checkpoint_policies.save_and_offload_only_these_names(
    names_which_can_be_saved=[],
    names_which_can_be_offloaded=["block_output"],
    offload_src="device",
    offload_dst=HOST,
)


def _check(where):
    if where not in WHERE:
        raise ValueError(f"where must be one of {WHERE}, not {where!r}")


def _loss(graphdef, where, params, tokens):
    bf16 = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
    model = nnx.merge(graphdef, bf16)
    if where != "activations on host":
        return next_token_loss(model, tokens)

    def blocks_fn(blocks, x):  # each block's output named, the one thing the policy keeps
        for block in blocks:
            x = checkpoint_name(block(x), "block_output")
        return x

    x = residual(model.table[...][tokens[:, :-1]])
    x = nnx.remat(blocks_fn, policy=OFFLOADED)(model.blocks, x)
    logits = model.norm(x) @ model.head[...]
    log_probs = jax.nn.log_softmax(logits)
    targets = jax.nn.one_hot(tokens[:, 1:], logits.shape[-1], dtype=log_probs.dtype)
    return -jnp.mean(jnp.sum(targets * log_probs, axis=-1))


def _moments_placed(opt_state, space):
    """Adam's moments (mu, nu) of `opt_state` put in memory `space`; the count stays."""

    def put(path, a):
        names = {getattr(k, "name", None) for k in path}
        return jax.device_put(a, space) if names & {"mu", "nu"} else a

    return jax.tree_util.tree_map_with_path(put, opt_state)


def step_fn(run, where, graphdef):
    """(params, opt_state, tokens) -> (params, opt_state, loss), not yet jitted."""
    _check(where)
    loss_of = partial(_loss, graphdef, where)

    def step(params, opt_state, tokens):
        value, grads = jax.value_and_grad(loss_of)(params, tokens)
        if where == "moments on host":
            opt_state = _moments_placed(opt_state, jax.memory.Space.Device)
        updates, opt_state = onechip.OPTIMIZER.update(grads, opt_state, params)
        if where == "moments on host":
            opt_state = _moments_placed(opt_state, jax.memory.Space.Host)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def _shardings(opt_state, mesh, where):
    """Each moment's sharding: on the device, or in pinned_host memory for "moments on host"."""
    device, host = NamedSharding(mesh, P()), NamedSharding(mesh, P(), memory_kind=HOST)

    def of(path, a):
        names = {getattr(k, "name", None) for k in path}
        return host if where == "moments on host" and names & {"mu", "nu"} else device

    return jax.tree_util.tree_map_with_path(of, opt_state)


def jitted(run, where, graphdef, opt_state, mesh):
    state = _shardings(opt_state, mesh, where)
    whole = NamedSharding(mesh, P())
    return jax.jit(
        step_fn(run, where, graphdef),
        donate_argnums=(0, 1),
        out_shardings=(whole, state, whole),
    )


def compile_for(run, where, device):
    """The step in placement `where`, compiled from shapes alone for `device`."""
    graphdef, params, opt_state, tokens = onechip.abstract_args(run, device)
    mesh = onechip._mesh(device)
    state = _shardings(opt_state, mesh, where)
    opt_state = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), opt_state, state
    )
    with jax.set_mesh(mesh), nnx.logical_axis_rules(logical_rules()):
        step = jitted(run, where, graphdef, opt_state, mesh)
        return step.lower(params, opt_state, tokens).compile()


def setup(run, where, device, seed=0):
    """(step, params, opt_state, tokens): real arrays on `device` in placement `where`, and the
    jitted step for them (call it under `jax.set_mesh(onechip._mesh(device))`)."""
    mesh = onechip._mesh(device)
    whole = NamedSharding(mesh, P())
    with jax.set_mesh(mesh), nnx.logical_axis_rules(logical_rules()):
        graphdef, params = nnx.split(onechip._model_of(run.config, seed), nnx.Param)
        params = jax.device_put(nnx.to_pure_dict(params), whole)
        # made where they live: moments on the host never pass through the chip's memory
        placed = _shardings(jax.eval_shape(onechip.OPTIMIZER.init, params), mesh, where)
        opt_state = jax.jit(onechip.OPTIMIZER.init, out_shardings=placed)(params)
        shape = (run.config.batch, run.config.seq + 1)
        tokens = jax.random.randint(jax.random.key(seed), shape, 0, run.config.vocab)
        step = jitted(run, where, graphdef, opt_state, mesh)
    return step, params, opt_state, jax.device_put(tokens, whole)


def bytes_by_kind(compiled):
    """{"device": bytes, "host": bytes}: arguments, outputs and scratch, less what the outputs
    reuse, in each memory, from XLA's memory analysis."""
    m = compiled.memory_analysis()
    device = (
        m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )  # fmt: skip
    host = (
        m.host_argument_size_in_bytes + m.host_output_size_in_bytes + m.host_temp_size_in_bytes
        - m.host_alias_size_in_bytes
    )  # fmt: skip
    return {"device": device, "host": host}


_WITH_LAYOUT = re.compile(r"[a-z]+\d*\[[\d,]*\](?:\{[^}]*\})?")  # f32[4,64]{1,0:T(8,128)S(5)}


def transfers(compiled):
    """{"to host": bytes, "to device": bytes} that the program's asynchronous copies move per
    call. A copy-start's result is (destination, source, context); S(5) in a layout is the
    host's memory."""
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    moved = {"to host": 0, "to device": 0}
    for ins in hlo.parse(text).instructions:
        if ins.op != "copy-start":
            continue
        destination, source = _WITH_LAYOUT.findall(ins.shape)[:2]
        nbytes = hlo.shape_bytes(destination)
        if "S(5)" in destination and "S(5)" not in source:
            moved["to host"] += nbytes
        elif "S(5)" in source and "S(5)" not in destination:
            moved["to device"] += nbytes
    return moved


def load(path=RECORDED_V5E):
    """(provenance, [record]) of tools/measure_offload.py's JSON lines."""
    lines = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    return lines[0]["provenance"], lines[1:]
