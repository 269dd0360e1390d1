"""guide_helpers.offload: the three placements of the one-chip step, what their programs hold
and move, and the record of a real v5e.

The CPU runs the steps (nothing moves there); the TPU compiler, with no TPU, gives the bytes
that the chip's programs hold on the host and move over the link.
"""

import textwrap

import jax
import pytest

from guide_helpers import offload, onechip, plan, tpu

TINY = onechip.Run(plan.Config(512, 128, 1, 512, layers=2, seq=64, batch=4))
CPU = jax.devices("cpu")[0]


def test_every_placement_trains_to_the_same_losses_on_a_cpu_device():
    found = {}
    for where in offload.WHERE:
        step, params, opt_state, tokens = offload.setup(TINY, where, CPU)
        with jax.set_mesh(onechip._mesh(CPU)):
            losses = []
            for _ in range(2):
                params, opt_state, loss = step(params, opt_state, tokens)
                losses.append(float(loss))
        found[where] = losses
        memories = {a.sharding.memory_kind for a in jax.tree.leaves(opt_state)}
        on_host = {"pinned_host"} if where == "moments on host" else set()
        assert memories == {"device"} | on_host
    assert found["device"] == found["moments on host"] == found["activations on host"]
    assert found["device"][1] < found["device"][0]


def test_the_tpu_compiler_puts_the_moments_on_the_host_and_moves_them_each_way():
    chip = tpu.topology("v5e:2x2")[0]
    program = offload.compile_for(TINY, "moments on host", chip)
    moments = 2 * 4 * TINY.config.params  # mu and nu, f32
    assert offload.bytes_by_kind(program)["host"] == moments
    assert offload.transfers(program) == {"to host": moments, "to device": moments}
    on_cpu = offload.compile_for(TINY, "moments on host", CPU)
    assert offload.bytes_by_kind(on_cpu)["host"] == 0  # the CPU compiles it and moves nothing
    assert offload.transfers(on_cpu) == {"to host": 0, "to device": 0}


def test_transfers_read_each_copy_start_by_its_destination_and_source():
    text = textwrap.dedent(
        """\
        HloModule m

        ENTRY %main (p: f32[4,8]) -> f32[4,8] {
          %p = f32[4,8]{1,0:T(8,128)S(5)} parameter(0)
          %in = (f32[4,8]{1,0:T(8,128)}, f32[4,8]{1,0:T(8,128)S(5)}, u32[]{:S(2)}) copy-start(%p)
          %d = f32[4,8]{1,0:T(8,128)} copy-done(%in)
          %out = (bf16[2,8]{1,0:T(8,128)(2,1)S(5)}, bf16[2,8]{1,0:T(8,128)(2,1)}, u32[]{:S(2)}) copy-start(%d)
          ROOT %c = f32[4,8]{1,0:T(8,128)} copy(%d)
        }
        """  # noqa: E501
    )
    assert offload.transfers(text) == {"to host": 2 * 8 * 2, "to device": 4 * 8 * 4}


def test_a_placement_must_be_one_of_the_three():
    with pytest.raises(ValueError, match="where must be one of"):
        offload.step_fn(TINY, "disk", None)


def test_the_record_of_a_v5e_holds_every_placement_and_the_link():
    provenance, records = offload.load()
    assert provenance["chip"] == "TPU v5 lite" and provenance["versions"]["jax"] == jax.__version__
    steps = {(r["config"]["layers"], r["where"]): r for r in records if "where" in r}
    assert set(steps) == {(n, w) for n in (4, 24) for w in offload.WHERE}
    assert all(steps[4, w]["fits"] for w in offload.WHERE) and not steps[24, "device"]["fits"]
    link = next(r for r in records if r["what"] == "link")
    assert link["program to device GB/s"] > 1
