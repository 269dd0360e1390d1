"""guide_helpers.profile: traces and memory profiles read from real runs here."""

import textwrap

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def test_a_trace_is_read_per_device_and_joined_with_its_program(mesh, tmp_path):
    from guide_helpers import profile

    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("data", "model")))
    with jax.named_scope("outer"):
        compiled = jax.jit(lambda a: jnp.sum(a @ a.T)).lower(x).compile()
    compiled(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
        for _ in range(2):
            compiled(x).block_until_ready()
    events = profile.read_trace(tmp_path)
    assert {e.device for e in events} == set(range(8)) and len({e.run for e in events}) == 2
    labels = profile.label_instructions(compiled)
    assert {e.op for e in events} <= set(labels)
    kinds = {labels[e.op][0] for e in events}
    assert {"matmul", "all-reduce"} <= kinds
    per_device = profile.timings(events, lambda e: labels[e.op][0])
    assert all(t >= 0 for t in per_device.values()) and {d for d, _ in per_device} == set(range(8))
    with pytest.raises(FileNotFoundError, match="create_perfetto_trace=True"):
        profile.read_trace(tmp_path / "empty")


def test_scopes_come_from_jax_names():
    from guide_helpers import profile

    text = textwrap.dedent(
        """\
        HloModule m

        ENTRY %main (p: f32[4,4]) -> f32[4,4] {
          %p = f32[4,4]{1,0} parameter(0)
          %dot.1 = f32[4,4]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(f)/layer_1/dot_general"}
          ROOT %ar = f32[4,4]{1,0} all-reduce(%dot.1), replica_groups={{0,1}}, to_apply=%add, metadata={op_name="jit(f)/layer_10/psum"}
        }
        """  # noqa: E501
    )
    labels = profile.label_instructions(text, ["layer_1", "layer_10"])
    assert labels["dot.1"] == ("matmul", "layer_1") and labels["ar"] == ("all-reduce", "layer_10")


def test_a_named_scope_is_found_in_the_backward_pass_too():
    from guide_helpers import hlo, profile

    def f(w, x):
        for i in range(2):
            with jax.named_scope(f"block_{i}"):
                x = jnp.tanh(x @ w)
        return x.sum()

    compiled = jax.jit(jax.grad(f)).lower(jnp.ones((8, 8)), jnp.ones((4, 8))).compile()
    labels = profile.label_instructions(compiled, ["block_0", "block_1"])
    # forward products are named jvp(block_i)/..., backward ones transpose(jvp(block_i))/...
    names = {
        ins.name: hlo.op_name_of(ins, default="")
        for ins in hlo.parse(compiled.as_text()).instructions
    }
    backward = [
        n for n, name in names.items() if name.startswith("jit(f)/transpose(jvp(block_1))")
    ]
    assert backward and all(labels[n][1] == "block_1" for n in backward)
    matmuls = {scope for what, scope in labels.values() if what == "matmul"}
    assert matmuls == {"block_0", "block_1"}  # every product in a block, none unnamed


def test_runs_span_each_call_and_idle_counts_the_gaps_between_them():
    from guide_helpers import profile

    E = profile.Event
    events = [
        E(0, "dot", "jit_step", 10.0, 5.0, "a"),
        E(0, "add", "jit_step", 16.0, 4.0, "a"),  # run a: 10 to 20
        E(1, "dot", "jit_step", 0.0, 50.0, "a"),  # another device: not counted
        E(0, "dot", "jit_other", 22.0, 3.0, "c"),  # another program: not counted
        E(0, "dot", "jit_step", 35.0, 5.0, "b"),  # run b: 35 to 40
        E(0, "dot", "jit_step", 41.0, 9.0, "d"),  # run d: 41 to 50
    ]
    spans = profile.runs(events, "jit_step", device=0)
    assert spans == [(10.0, 20.0), (35.0, 40.0), (41.0, 50.0)]
    assert profile.idle(spans) == [15.0, 1.0]
    assert profile.idle([(0.0, 10.0), (5.0, 8.0), (12.0, 13.0)]) == [2.0]  # overlap: no gap
    with pytest.raises(ValueError, match=r"'jit_none' on device 0.*jit_other"):
        profile.runs(events, "jit_none", device=0)


def test_a_pause_between_calls_is_idle_time_in_a_real_trace(mesh, tmp_path):
    import time

    from guide_helpers import profile

    x = jax.device_put(jnp.ones((64, 32)), NamedSharding(mesh, P("data")))

    def double(a):
        return a * 2.0

    step = jax.jit(double)
    step(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path), create_perfetto_trace=True):
        for _ in range(2):
            step(x).block_until_ready()
            time.sleep(0.05)  # the host does something else for 50 ms
    spans = profile.runs(profile.read_trace(tmp_path), "jit_double", device=0)
    gaps = profile.idle(spans)
    assert len(spans) == 2 and len(gaps) == 1
    assert gaps[0] >= 50_000  # microseconds: the device waited at least the pause


def test_the_memory_profile_agrees_with_the_live_arrays(mesh):
    from collections import Counter

    from guide_helpers import profile

    kept = jax.device_put(jnp.ones((16, 1024)), NamedSharding(mesh, P("data", "model")))
    samples = profile.memory_profile(jax.profiler.device_memory_profile())
    in_profile, live = Counter(), Counter()
    for s in samples:
        if s.kind == "buffer":
            in_profile[s.device] += s.nbytes
    for array in jax.live_arrays():
        for shard in array.addressable_shards:
            live[f"cpu:{shard.device.id}"] += shard.data.nbytes
    assert in_profile == live and kept.is_fully_addressable
    assert any("batched_device_put" in s.functions for s in samples if s.kind == "buffer")
