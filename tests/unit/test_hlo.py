"""guide_helpers.hlo, the compiled-program reader: on real programs compiled here (8 emulated
CPU devices) and on small HLO texts for what a program here does not show.
"""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from support.programs import scanned_step

from guide_helpers import hlo


def test_collectives_of_a_scanned_step_run_once_per_layer(mesh):
    step = scanned_step(mesh, layers=3)
    rows = hlo.collectives(step)
    assert {(r.kind, r.where, r.per_step) for r in rows} == {("all-reduce", "loop", 3)}
    # Forward and backward activation sums over 'model' (groups of 4), the weight gradients
    # over 'data' (groups of 2): the main guide's pattern.
    assert sorted((r.group, r.nbytes) for r in rows) == [
        (2, 2 * 32 * 16 * 4), (4, 8 * 32 * 4), (4, 8 * 32 * 4),
    ]  # fmt: skip
    assert hlo.per_step(rows) == {("all-reduce", 1024, 4): 6, ("all-reduce", 4096, 2): 3}
    assert hlo.trip_counts(step) == [3, 3]
    assert all("while/body" in r.op_name for r in rows)
    # The forward pass's sum over 'model'; the backward pass's over 'model' and over 'data'.
    assert sorted((r.direction, r.group) for r in rows) == [
        ("backward", 2), ("backward", 4), ("forward", 4),
    ]  # fmt: skip


def test_show_collectives_prints_one_line_each(mesh, capsys):
    hlo.show_collectives(hlo.collectives(scanned_step(mesh)))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(
        "all-reduce" in line and "x3 per step" in line for line in lines
    )
    assert sum("backward" in line for line in lines) == 2
    hlo.show_collectives([])
    assert capsys.readouterr().out.strip() == "no collectives"


def test_matmul_flops_count_every_layer_and_the_backward_pass(mesh):
    # Per device: batch 8, 32 x 16 columns then 16 x 32; forward 2 dots, backward 4, 3 layers.
    per_layer_dot = 2 * 8 * 32 * 16
    assert hlo.matmul_flops(scanned_step(mesh, layers=3)) == 3 * 6 * per_layer_dot
    single = jax.jit(jnp.matmul).lower(jnp.ones((16, 256)), jnp.ones((256, 1024))).compile()
    assert hlo.matmul_flops(single) == 2 * 16 * 256 * 1024
    assert hlo.collectives(single) == []


def test_program_size_grows_with_an_unrolled_loop_not_with_a_scan():
    def unrolled(x, n):
        for _ in range(n):
            x = jnp.sin(x) @ x
        return x

    def scanned(x, n):
        return jax.lax.scan(lambda c, _: (jnp.sin(c) @ c, None), x, None, length=n)[0]

    x = jnp.ones((8, 8))

    def size(f, n):
        return hlo.instruction_count(jax.jit(f, static_argnums=1).lower(x, n).compile())

    assert size(unrolled, 4) > size(unrolled, 2) > size(unrolled, 1)
    assert size(scanned, 4) == size(scanned, 8)


def test_memory_counts_donated_buffers_once():
    x = jnp.ones((256, 256))
    kept = hlo.memory(jax.jit(lambda a: a * 2).lower(x).compile())
    donated = hlo.memory(jax.jit(lambda a: a * 2, donate_argnums=0).lower(x).compile())
    assert kept.arguments == kept.outputs == donated.arguments == 256 * 256 * 4
    assert kept.aliased == 0 and donated.aliased == 256 * 256 * 4
    assert donated.peak_bound == kept.peak_bound - 256 * 256 * 4


# A program as XLA prints it, cut down: a while loop of known trip count 5 whose body holds an
# all-reduce, and an all-gather that XLA hoisted out of that loop into the entry computation
# (its op_name still says while/body), applied directly to the step's argument.
HOISTED = """\
HloModule step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%body (p: (s32[], f32[4,8])) -> (s32[], f32[4,8]) {
  %p = (s32[], f32[4,8]{1,0}) parameter(0)
  %x = f32[4,8]{1,0} get-tuple-element(%p), index=1
  %ar = f32[4,8]{1,0} all-reduce(%x), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, \
to_apply=%add, metadata={op_name="jit(step)/while/body/dot_general"}
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], f32[4,8]{1,0}) tuple(%i, %ar)
}

%cond (q: (s32[], f32[4,8])) -> pred[] {
  %q = (s32[], f32[4,8]{1,0}) parameter(0)
  ROOT %c = pred[] constant(true)
}

ENTRY %main (w: bf16[2,8]) -> (s32[], f32[4,8]) {
  %w = bf16[2,8]{1,0} parameter(0), metadata={op_name="state.params['W1']"}
  %ag = bf16[4,8]{1,0} all-gather(%w), channel_id=2, replica_groups=[4,2]<=[8], dimensions={0}, \
metadata={op_name="jit(step)/while/body/dynamic_slice"}
  %z = f32[4,8]{1,0} convert(%ag)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4,8]{1,0}) tuple(%zero, %z)
  ROOT %loop = (s32[], f32[4,8]{1,0}) while(%init), condition=%cond, body=%body, \
backend_config={"known_trip_count":{"n":"5"}}
}
""".replace("\\\n", "")


def test_where_is_decided_by_the_computation_not_by_the_op_name():
    program = SimpleNamespace(as_text=lambda: HOISTED)
    gathered, reduced = sorted(hlo.collectives(program))
    assert gathered.kind == "all-gather" and gathered.where == "entry"
    assert "while/body" in gathered.op_name  # the name says loop; the computation says entry
    assert (gathered.per_step, gathered.group, gathered.nbytes) == (1, 2, 4 * 8 * 2)
    assert gathered.operand == "state.params['W1']" and gathered.shape == "bf16[4,8]"
    assert (reduced.where, reduced.per_step, reduced.group) == ("loop", 5, 4)
    assert reduced.operand == "" and reduced.groups == "{{0,1,2,3},{4,5,6,7}}"
    assert hlo.trip_counts(program) == [5]


def test_sent_per_device_is_the_ring_model():
    def row(kind, nbytes, group, per_step):
        return hlo.Collective(kind, "", nbytes, group, "", "loop", per_step, "", "")

    # All-reduce: 2 (n-1)/n; all-gather and reduce-scatter: (n-1)/n; a permute: all of it.
    assert hlo.sent_per_device([row("all-reduce", 1000, 4, 2)]) == 2 * 2 * 1000 * 3 / 4
    assert hlo.sent_per_device([row("all-gather", 800, 8, 1)]) == 700
    # A reduce-scatter's result is one shard of 800 bytes: each device sends the other shard.
    assert hlo.sent_per_device([row("reduce-scatter", 800, 2, 3)]) == 3 * 800
    assert hlo.sent_per_device([row("reduce-scatter", 100, 8, 1)]) == 700
    assert hlo.sent_per_device([row("collective-permute", 64, 2, 4)]) == 256
    assert hlo.shape_bytes("(f32[2,3], bf16[4], pred[])") == 24 + 8 + 1
    assert hlo.shape_bytes("bool[2,4]") == 8  # JAX's name, as print_saved_residuals prints it


# A program in the forms XLA's GPU backend prints (written by hand: no GPU here): a cuBLAS gemm,
# async all-reduce and all-gather pairs, empty replica groups, a multi-operand all-reduce-start.
GPU_FORMS = """\
HloModule jit_step, is_scheduled=true, num_partitions=8

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (p0: f32[64,256], p1: f32[256,128], p2: f32[4], p3: f32[8]) -> f32[512,128] {
  %p0 = f32[64,256]{1,0} parameter(0)
  %p1 = f32[256,128]{1,0} parameter(1)
  %p2 = f32[4]{0} parameter(2)
  %p3 = f32[8]{0} parameter(3)
  %gemm = (f32[64,128]{1,0}, s8[4194304]{0}) custom-call(%p0, %p1), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]}}}
  %out = f32[64,128]{1,0} get-tuple-element(%gemm), index=0
  %ars = f32[64,128]{1,0} all-reduce-start(%out), replica_groups={}, to_apply=%add
  %ard = f32[64,128]{1,0} all-reduce-done(%ars)
  %pair = (f32[4]{0}, f32[8]{0}) all-reduce-start(%p2, %p3), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %paird = (f32[4]{0}, f32[8]{0}) all-reduce-done(%pair)
  %ags = (f32[64,128]{1,0}, f32[512,128]{1,0}) all-gather-start(%ard), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  ROOT %agd = f32[512,128]{1,0} all-gather-done(%ags)
}
"""  # noqa: E501


def test_readers_handle_the_gpu_backends_forms():
    rows = hlo.collectives(GPU_FORMS)
    assert [(c.kind, c.shape, c.group) for c in rows] == [
        ("all-reduce", "f32[64,128]", 8),  # replica_groups={}: every device of the module
        ("all-reduce", "(f32[4], f32[8])", 2),  # a start's shape is its result
        ("all-gather", "f32[512,128]", 8),  # (operand, result): the result
    ]
    assert [c.nbytes for c in rows] == [64 * 128 * 4, 12 * 4, 512 * 128 * 4]
    assert hlo.matmul_flops(GPU_FORMS) == 2 * 64 * 128 * 256  # the gemm, its workspace ignored


def test_empty_replica_groups_need_the_device_count():
    with pytest.raises(ValueError, match="device count"):
        hlo.device_groups("replica_groups={}, to_apply=%add")
    assert hlo.device_groups("replica_groups={}, to_apply=%add", devices=4) == ((0, 1, 2, 3),)


@pytest.mark.parametrize(
    "attrs, groups",
    [
        ("replica_groups={{0,1},{2,3}}, to_apply=%add", ((0, 1), (2, 3))),
        ("replica_groups=[2,2]<=[4], dimensions={0}", ((0, 1), (2, 3))),
        ("replica_groups=[2,2]<=[2,2]T(1,0), dimensions={0}", ((0, 2), (1, 3))),
        ("replica_groups={}, to_apply=%add", ((0, 1, 2, 3),)),
        (
            "replica_groups=mesh['a'=2,'b'=2], device_ids=([2,2]T(1,0)) {'b'}, dimensions={1}",
            ((0, 2), (1, 3)),
        ),
        ("replica_groups=mesh['a'=2,'b'=2] {'a'}, to_apply=%add", ((0, 2), (1, 3))),
        ("source_target_pairs={{0,1},{1,0}}, metadata={}", ((0, 1), (1, 0))),
    ],
)
def test_device_groups_read_every_notation(attrs, groups):
    assert hlo.device_groups(attrs, devices=4) == groups


def test_device_groups_refuse_what_they_cannot_read():
    with pytest.raises(ValueError, match="no device groups"):
        hlo.device_groups("dimensions={0}")


# A loop as libtpu prints it, cut down: no known_trip_count, a condition `i < 4`, and a counter
# that starts from a copy of a constant. Where XLA peeled the loop's first iteration off (as in
# a two-slice data-parallel step's backward loop), that constant is 1 and the body runs 3 times.
PEELED = """\
HloModule step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %ar = f32[8]{0} all-reduce(%x), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  ROOT %t = (s32[], f32[8]{0}) tuple(%next, %ar)
}

%cond (q: (s32[], f32[8])) -> pred[] {
  %bound = s32[] constant(4)
  %q = (s32[], f32[8]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  ROOT %lt = pred[] compare(%j, %bound), direction=LT
}

ENTRY %main (w: f32[8], n: s32[]) -> (s32[], f32[8]) {
  %w = f32[8]{0} parameter(0)
  %n = s32[] parameter(1)
  %start = s32[] constant(START)
  %counter = s32[] copy(COUNTER)
  %init = (s32[], f32[8]{0}) tuple(%counter, %w)
  ROOT %loop = (s32[], f32[8]{0}) while(%init), condition=%cond, body=%body
}
"""


@pytest.mark.parametrize(
    "start, counter, runs",
    [
        (1, "%start", 3),  # peeled: one iteration ran before the loop
        (0, "%start", 4),
        (0, "%n", 1),  # a start that is not a constant: the count is unknown, counted once
    ],
)
def test_a_loop_counts_from_the_constant_its_counter_is_copied_from(start, counter, runs):
    text = PEELED.replace("START", str(start)).replace("COUNTER", counter)
    (reduced,) = hlo.collectives(SimpleNamespace(as_text=lambda: text))
    assert (reduced.where, reduced.per_step) == ("loop", runs)


def test_mesh_axes_name_the_axes_a_collective_runs_along(mesh):
    """The scanned step's weight gradients are summed over 'data', its activations over
    'model'; by_axis counts them per step, each with its pass; a group that holds part of an
    axis's devices is named as such."""
    rows = hlo.collectives(scanned_step(mesh, layers=3))
    assert hlo.by_axis(rows, mesh) == {
        ("all-reduce", "model", "forward"): 3,
        ("all-reduce", "model", "backward"): 3,
        ("all-reduce", "data", "backward"): 3,
    }
    pairs = rows[0]._replace(group=2, device_groups=((0, 1), (2, 3), (4, 5), (6, 7)))
    assert hlo.mesh_axes(pairs, mesh) == "pairs of model"
    every = rows[0]._replace(group=8, device_groups=(tuple(range(8)),))
    assert hlo.mesh_axes(every, mesh) == "data+model"
    four = rows[0]._replace(group=4, device_groups=((0, 1, 4, 5), (2, 3, 6, 7)))
    assert hlo.mesh_axes(four, mesh) == "groups of 4 of data+model"
    unnamed = rows[0]._replace(op_name="")
    assert hlo.by_axis([unnamed], mesh) == {
        ("all-reduce", hlo.mesh_axes(unnamed, mesh), "unnamed"): 3
    }
