"""guide_helpers.exercises: the grader passes the reference and names what a wrong answer
adds.
"""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P


def layer(x, W1, W2):
    """The main guide's one layer, its hidden activation split over 'model'."""
    return jax.lax.with_sharding_constraint(jax.nn.relu(x @ W1), P("data", "model")) @ W2


def layer_program(mesh):
    """build(answer) for answers (function, W2's spec) of one layer on the 2x4 mesh."""
    keys = jax.random.split(jax.random.key(0), 3)
    sizes = [(16, 256), (256, 1024), (1024, 256)]
    inputs = [jax.random.normal(k, s) / s[0] ** 0.5 for k, s in zip(keys, sizes)]

    def build(answer):
        function, w2_spec = answer
        specs = (P("data", None), P(None, "model"), w2_spec)
        args = jax.device_put(tuple(inputs), tuple(NamedSharding(mesh, s) for s in specs))
        out = NamedSharding(mesh, P("data", None))
        with jax.set_mesh(mesh):
            return jax.jit(function, out_shardings=out).lower(*args).compile(), args

    return build


@pytest.fixture(scope="module")
def layer_exercise():
    from guide_helpers.exercises import Exercise

    return Exercise("W2 by rows", (layer, P("model", None)), arguments=("x", "W1", "W2"))


def test_the_grader_passes_the_reference(mesh, layer_exercise):
    grade = layer_exercise.grade((layer, P("model", None)), layer_program(mesh))
    assert grade.passed and bool(grade) and grade.hints() == []
    assert str(grade).splitlines()[0] == "W2 by rows: passed"
    assert [c.name for c in grade.checks] == ["value", "shardings", "collectives", "memory"]


def test_the_grader_names_what_a_split_by_columns_adds(mesh, layer_exercise):
    grade = layer_exercise.grade((layer, P(None, "model")), layer_program(mesh))
    assert not grade.passed
    assert grade.check("value").passed  # the same numbers, laid out otherwise
    assert grade.check("shardings").hints == (
        "argument W2: P(None, 'model'), expected P('model', None)",
    )
    assert grade.check("collectives").hints == (
        "extra: 1 x all-gather f32[8,1024] forward outside loops, group of 4, per step",
        # the output's columns, joined to give it whole embed, as out_shardings asks
        "extra: 1 x all-gather f32[8,256] forward outside loops, group of 4, per step",
        "missing: 1 x all-reduce f32[8,256] forward outside loops, group of 4, per step",
    )
    assert "not yet" in str(grade) and "extra: 1 x all-gather f32[8,1024]" in str(grade)


def test_the_grader_catches_a_different_value_and_a_memory_limit(mesh, layer_exercise):
    from guide_helpers.exercises import Exercise

    def doubled(x, W1, W2):
        return 2 * layer(x, W1, W2)

    grade = layer_exercise.grade((doubled, P("model", None)), layer_program(mesh))
    assert grade.check("value").hints == ("output: differs from the reference",)
    assert grade.check("collectives").passed and grade.check("shardings").passed
    tight = Exercise("tight", (layer, P("model", None)), memory_limit=1024)
    memory_check = tight.grade((layer, P("model", None)), layer_program(mesh)).check("memory")
    assert not memory_check.passed and memory_check.hints[0].endswith("MiB over the limit")


def test_the_grader_names_a_different_mesh():
    from guide_helpers.exercises import Exercise

    def build(answer):  # answers (mesh shape, W2's spec)
        shape, w2_spec = answer
        grid = jax.make_mesh(shape, ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        return layer_program(grid)((layer, w2_spec))

    exercise = Exercise("on 2x4", ((2, 4), P("model", None)))
    grade = exercise.grade(((4, 2), P("model", None)), build)
    assert grade.check("shardings").hints[0] == "mesh data=4 x model=2, expected data=2 x model=4"
    assert grade.check("collectives").hints  # groups of 2, not 4


def test_the_main_guides_fsdp_exercise_hints_at_the_gathers_it_lacks(mesh):
    """The main guide's exercise 2, graded here on the same model's gradients: its starting
    rules (data x tensor) lack FSDP's gathers, hold twice the weights, and are told so."""
    import flax.linen as nn

    from guide_helpers import exercises
    from guide_helpers.models import LogicalMLP

    model = LogicalMLP(num_layers=4, hidden=1024)
    x = jax.random.normal(jax.random.key(0), (16, 256))
    replicated = NamedSharding(mesh, P())

    def gradient_program(rules):
        with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
            boxed = jax.eval_shape(model.init, jax.random.key(1), x)
            specs = nn.get_partition_spec(boxed)
            every = nn.logical_to_mesh_sharding(specs, mesh, rules)
            params = jax.jit(model.init, out_shardings=every)(jax.random.key(1), x)
        shardings = every["params"]

        def loss(p, x):
            with nn.logical_axis_rules(rules):
                return jnp.mean(model.apply({"params": p}, x) ** 2)

        data = NamedSharding(mesh, nn.logical_to_mesh_axes(("batch", "embed"), rules))
        args = (nn.unbox(params["params"]), jax.device_put(x, data))
        grads = jax.jit(jax.value_and_grad(loss), out_shardings=(replicated, shardings))
        with jax.set_mesh(mesh):
            return grads.lower(*args).compile(), args

    data_tensor = (("batch", "data"), ("hidden", "model"), ("embed", None), ("layer", None))
    grade = exercises.FSDP_TENSOR.grade(data_tensor, gradient_program)
    assert not grade.passed and grade.check("value").passed
    assert grade.check("collectives").hints == tuple(
        f"missing: 8 x all-gather f32[256,256] {d} in the layer loop, group of 2, per step"
        for d in ("backward", "forward")
    )
    assert not grade.check("memory").passed
    assert exercises.FSDP_TENSOR.grade(exercises.FSDP_TENSOR.reference, gradient_program)


def test_the_grader_reports_an_answer_that_does_not_build(mesh, layer_exercise):
    def wrong_shapes(x, W1, W2):
        return x @ W2  # (16, 256) @ (1024, 256)

    grade = layer_exercise.grade((wrong_shapes, P("model", None)), layer_program(mesh))
    assert not grade.passed and [c.name for c in grade.checks] == ["builds"]
    assert grade.hints()[0].startswith("TypeError: dot_general requires contracting dimensions")
