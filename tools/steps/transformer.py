"""A step file for tools/measure_step.py: the site's transformer, the step of
`guide_helpers.onechip` (f32 parameters and Adam, bf16 compute, its state donated) that
tools/measure_tpu.py measures, given to the tool that measures any step.

`configurations()` is tools/measure_tpu.py's grid ("full"; `configurations("sequence")`,
`configurations("tiny")` its others): `onechip.Run`s, each a `plan.Config`, a remat policy and
micro-batches.
"""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
from flax import nnx

from guide_helpers import onechip, plan
from guide_helpers.transformer import logical_rules

TOOL = Path(__file__).resolve().parent.parent / "measure_tpu.py"


def configurations(name="full"):
    spec = importlib.util.spec_from_file_location("measure_tpu", TOOL)
    measure_tpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure_tpu)
    return measure_tpu.grid(name)


def build(run):
    """onechip's step for `run` as (state, tokens) -> (state, loss), state = (params, Adam's),
    traced under the transformer's logical rules (nothing split on one chip)."""
    with nnx.logical_axis_rules(logical_rules()):
        graphdef, _ = nnx.split(nnx.eval_shape(lambda: onechip._model_of(run.config)), nnx.Param)
    inner = onechip._step_fn(graphdef, run)

    def step(state, tokens):
        with nnx.logical_axis_rules(logical_rules()):
            params, opt_state, loss = inner(*state, tokens)
        return (params, opt_state), loss

    def arguments(abstract):
        shape = (run.config.batch, run.config.seq + 1)
        with nnx.logical_axis_rules(logical_rules()):
            if abstract:
                model = nnx.eval_shape(lambda: onechip._model_of(run.config))
            else:
                model = onechip._model_of(run.config)
        params = nnx.to_pure_dict(nnx.split(model, nnx.Param)[1])
        if abstract:
            opt_state = jax.eval_shape(onechip.OPTIMIZER.init, params)
            return (params, opt_state), jax.ShapeDtypeStruct(shape, jnp.int32)
        tokens = jax.random.randint(jax.random.key(0), shape, 0, run.config.vocab)
        return (params, onechip.OPTIMIZER.init(params)), tokens

    model_flops = plan.model_flops(run.config, onechip.ONE_CHIP)
    return jax.jit(step, donate_argnums=0), arguments, model_flops
