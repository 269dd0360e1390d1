"""guide_helpers.plan and the links of multi-node collectives, by hand and on real programs.

The device groups and their links are read from programs compiled here on 8 emulated CPU
devices, taken as 2 "nodes" of 4; the estimator's formulas are checked by hand arithmetic.
"""

import dataclasses

import jax
import pytest

from guide_helpers import hlo, llama_family, plan, roofline
from guide_helpers.hlo import Collective

jax.config.update("jax_num_cpu_devices", 8)  # before JAX starts its backend, as in the guides

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

GPU = dataclasses.replace(
    roofline.CHIPS["H100 SXM"], link_bandwidth=400e9, network_bandwidth=50e9
)  # round figures
NODE = roofline.Slice(GPU, (4,))


@pytest.fixture(scope="module")
def two_nodes():
    """A 2 x 4 mesh, ('node', 'gpu'): devices 0-3 on node 0, 4-7 on node 1."""
    return jax.make_mesh((2, 4), ("node", "gpu"), (AxisType.Auto,) * 2)


def summed_over(mesh, axis):
    """A compiled sum over one mesh axis of an f32[8, 1024] split over both axes."""
    split = NamedSharding(mesh, P("node", "gpu"))
    x = jax.ShapeDtypeStruct((8, 1024), jnp.float32, sharding=split)
    axis_of = {"node": 0, "gpu": 1}[axis]
    out = NamedSharding(mesh, P(*(None if a == axis else a for a in ("node", "gpu"))))
    return jax.jit(lambda x: x.sum(axis_of, keepdims=True), out_shardings=out).lower(x).compile()


def test_a_program_s_groups_decide_its_link(two_nodes):
    node_of = roofline.nodes_of(two_nodes, node_size=4)
    assert node_of == [0, 0, 0, 0, 1, 1, 1, 1]
    for axis, link in (("gpu", "NVLink"), ("node", "network")):
        (c,) = hlo.collectives(summed_over(two_nodes, axis))
        assert c.kind == "all-reduce" and len(c.device_groups) == {"gpu": 2, "node": 4}[axis]
        sent, _ = roofline.per_link([c], NODE, node_of)
        assert sent[link] > 0 and sent[{"NVLink": "network", "network": "NVLink"}[link]] == 0


def collective(kind, nbytes, groups, per_step=1):
    return Collective(kind, "f32[]", nbytes, len(groups[0]), "", "loop", per_step, "", "", groups)


def test_collective_on_links_inside_a_node_across_and_hierarchical_by_hand():
    node_of = [0, 0, 0, 0, 1, 1, 1, 1]
    inside = collective("all-gather", 8e9, ((0, 1, 2, 3), (4, 5, 6, 7)))
    assert roofline.collective_on_links(inside, NODE, node_of) == (
        {"NVLink": 6e9, "network": 0.0}, 6e9 / 400e9
    )  # fmt: skip
    pairs = collective("all-reduce", 8e9, ((0, 4), (1, 5), (2, 6), (3, 7)))
    assert roofline.collective_on_links(pairs, NODE, node_of) == (
        {"NVLink": 0.0, "network": 8e9}, 8e9 / 50e9
    )  # fmt: skip
    # An all-reduce over 8 devices, 4 on each node, runs hierarchically: 2 passes of 3/4 of
    # the array over NVLink, 2 of 1/2 of a quarter over the network, pipelined: the longer one
    everyone = ((0, 1, 2, 3, 4, 5, 6, 7),)
    sent, seconds = roofline.collective_on_links(
        collective("all-reduce", 8e9, everyone), NODE, node_of
    )
    assert sent == {"NVLink": 12e9, "network": 2e9}
    assert seconds == max(12e9 / 400e9, 2e9 / 50e9)
    # An all-gather there is one flat ring of 8 (NCCL): 7/8 of the array from every device,
    # 2 of the ring's 8 hops cross nodes: 7/8 / 4 per NIC, 1.75 times the hierarchical 1/2 / 4
    sent, seconds = roofline.collective_on_links(
        collective("all-gather", 8e9, everyone), NODE, node_of
    )
    assert sent == {"NVLink": 7e9 * 3 / 4, "network": 7e9 / 4}
    assert seconds == max(5.25e9 / 400e9, 1.75e9 / 50e9)
    # 2 nodes of 8: 15/16 / 8 against 1/2 / 8, the 1.875 of NCCL's flat rings
    sixteen = collective("reduce-scatter", 1e9, (tuple(range(16)),))
    flat, _ = roofline.collective_on_links(sixteen, roofline.Slice(GPU, (8,)), [0] * 8 + [1] * 8)
    assert flat["network"] / (0.5 * 16e9 / 8) == pytest.approx(1.875)
    permute = Collective("collective-permute", "f32[]", 1e9, 2, "", "loop", 1, "", "",
                         ((0, 0), (1, 5), (5, 1)))  # fmt: skip
    assert roofline.collective_on_links(permute, NODE, node_of) == ({"network": 1e9}, 1e9 / 50e9)


def test_per_link_counts_each_run_and_refuses_uneven_groups():
    node_of = [0, 0, 0, 0, 1, 1, 1, 1]
    rows = [collective("all-reduce", 4e9, ((0, 4), (1, 5), (2, 6), (3, 7)), per_step=3)]
    assert roofline.per_link(rows, NODE, node_of) == ({"NVLink": 0.0, "network": 12e9}, 0.24)
    with pytest.raises(ValueError, match="unequal"):
        roofline.collective_on_links(collective("all-gather", 1e9, ((0, 1, 4),)), NODE, node_of)


# A model whose every figure is easy by hand: E 4, F 8, 2 layers, vocabulary 16, 4 heads.
TINY = plan.Config(vocab=16, embed=4, heads=4, hidden=8, layers=2, seq=8, batch=16)
TWO_NODES = plan.layouts(nodes=2, node_size=4)


def test_parameter_counts_by_hand():
    assert TINY.block_matrices == 4 * 16 + 2 * 32 == 128
    assert TINY.replicated == 5 * 4
    assert TINY.params == 2 * 64 + 2 * 128 + 20 == 404
    assert TINY.matmul_params == 404 - 64 - 20
    assert plan.LLAMA_8B_LIKE.params == 8_835_567_616


def test_tied_embeddings_are_counted_once_and_their_head_multiplied():
    tied = dataclasses.replace(TINY, tied=True)
    assert tied.params == 404 - 64  # one vocab x embed table
    assert tied.matmul_params == TINY.matmul_params == 2 * 128 + 64  # the table is the head
    assert plan.flops(tied, TWO_NODES["HSDP"], "block") == plan.flops(
        TINY, TWO_NODES["HSDP"], "block"
    )
    # Llama 3.2 1B's shapes, counted here and by the Llama-shaped model itself
    assert plan.LLAMA_3_2_1B.params == llama_family.LLAMA_3_2_1B.params == 1_235_814_400
    untied = dataclasses.replace(plan.LLAMA_3_2_1B, tied=False)
    assert untied.params - plan.LLAMA_3_2_1B.params == 128256 * 2048
    one_chip = plan.Layout("one chip", 1, 1, 1, 1, 1, 1)
    for remat in plan.REMAT:
        llama = dataclasses.replace(llama_family.LLAMA_3_2_1B, remat=remat)
        assert plan.flops(plan.LLAMA_3_2_1B, one_chip, remat) == llama.matmul_flops()
    assert plan.model_flops(plan.LLAMA_3_2_1B, one_chip) == llama.model_flops()


def test_layouts_split_what_they_say():
    fsdp, hsdp, tp = TWO_NODES["FSDP"], TWO_NODES["HSDP"], TWO_NODES["FSDP x tensor"]
    assert (fsdp.param_shards, fsdp.fsdp_nodes, fsdp.batch_shards) == (8, 2, 8)
    assert (hsdp.param_shards, hsdp.fsdp_nodes, hsdp.deferred) == (4, 1, True)
    assert (tp.tensor, tp.fsdp, tp.batch_shards) == (4, 2, 2)


def test_memory_parts_by_hand():
    hsdp = TWO_NODES["HSDP"]
    parts = plan.memory(TINY, hsdp, micro_batches=2, remat="block")
    per_device = (404 - 20) / 4 + 20  # matrices over a node's 4 devices, norms whole
    assert parts == {
        "state": 12 * per_device,
        "tokens": 4 * 2 * 1 * 9,  # 16 sequences over 2 micro-batches and 8 devices: 1 each
        "gradients": 10 * per_device,
        "saved activations": 2 * (2 * 1 * 8 * 4),  # layers x x[1, seq, embed] in bf16
        "attention scores": 15 * 1 * 4 * 8 * 8,
        "logits": 14 * 1 * 8 * 16,
    }
    assert plan.memory(TINY, hsdp, 2, "block", flash=True)["attention scores"] == 0
    dots = plan.activations_per_layer(TINY, hsdp, 1, "dots")
    assert dots == 2 * 8 * (4 + 12 + 4 + 8)
    flash = plan.activations_per_layer(TINY, hsdp, 1, "none", flash=True)
    assert flash == 1 * 8 * (6 * 4 * 4 + 6 * 2 * 4 + 6 * 2 * 8) + 4 * 4 * 8  # log-sum-exp per row
    assert plan.activations_per_layer(TINY, hsdp, 1, "none") == flash - 4 * 4 * 8 + 11 * 4 * 8 * 8


def test_a_batch_that_does_not_split_is_named():
    with pytest.raises(ValueError, match="micro_batches dividing 2"):
        plan.memory(TINY, TWO_NODES["HSDP"], micro_batches=3, remat="block")
    with pytest.raises(ValueError, match="remat must be one of"):
        plan.activations_per_layer(TINY, TWO_NODES["HSDP"], 1, "everything")


def test_flops_by_hand():
    hsdp = TWO_NODES["HSDP"]
    tokens = 16 * 8 / 8
    attention = 4 * 2 * 4 * 8 * tokens
    none = 6 * (404 - 64 - 20) * tokens + 3 * attention
    assert plan.flops(TINY, hsdp, "none") == none
    assert plan.flops(TINY, hsdp, "dots") == none + attention
    assert plan.flops(TINY, hsdp, "block") == none + 2 * 2 * (4 * 16 + 32) * tokens + attention
    assert plan.model_flops(TINY, hsdp) == none - 1.5 * attention


def test_traffic_by_hand():
    sharded = 404 - 20
    hsdp = plan.traffic(TINY, TWO_NODES["HSDP"], 2, "block")
    # per micro-batch, 3 ring passes of the bf16 weights over 4; once, the f32 shard over 2 nodes
    assert hsdp == {"NVLink": 2 * 3 * 0.75 * 2 * sharded, "network": 2 * 0.5 * 4 * sharded / 4}
    # FSDP over both nodes: gathers and reduce-scatter in one flat ring of 8, each node's 4
    # NICs sharing its crossings
    fsdp = plan.traffic(TINY, TWO_NODES["FSDP"], 2, "block")
    flat = 2 * 3 * 7 / 8 * 2 * sharded  # 2 micro-batches, 3 passes each
    assert fsdp == {"NVLink": flat * 3 / 4, "network": flat / 4}
    # the CPU's conventions: f32, and an all-reduce (hierarchical) instead of the reduce-scatter
    cpu = plan.traffic(TINY, TWO_NODES["FSDP"], 2, "block", wire=4, reduce_passes=2)
    assert cpu["NVLink"] == 2 * (2 * 7 / 8 * 4 * sharded * 3 / 4 + 2 * 0.75 * 4 * sharded)
    assert cpu["network"] == 2 * (2 * 7 / 8 * 4 * sharded / 4 + 2 * 0.5 * 4 * sharded / 4)
    tp = plan.traffic(TINY, TWO_NODES["FSDP x tensor"], 2, "block")
    x = 2 * 4 * 8 * 4  # x[4 sequences, seq, embed] in bf16 per all-reduce
    weights = 2 * 3 * 0.5 * 2 * sharded / 4  # FSDP over the 2 nodes, one device of each
    assert tp == {"NVLink": 2 * 2 * 6 * 2 * 0.75 * x, "network": weights}


def test_estimate_prices_the_step_on_the_slower_link():
    e = plan.estimate(TINY, TWO_NODES["FSDP"], GPU, 2, "block")
    assert e.time.compute == plan.flops(TINY, TWO_NODES["FSDP"], "block") / GPU.flops
    assert e.time.communication == max(
        e.sent["NVLink"] / GPU.link_bandwidth, e.sent["network"] / GPU.network_bandwidth
    )
    update = 28 * ((404 - 20) / 8 + 20)  # read weight, mu, nu, gradient; write three back
    assert e.time.hbm == update / GPU.hbm_bandwidth
    assert e.peak == sum(e.memory.values()) and e.fits(GPU)
    assert e.tokens_per_second(2.0) == 16 * 8 / 2
    assert e.mfu(1.0, GPU) == e.model_flops / GPU.flops


def test_estimate_computes_the_traffic_once(monkeypatch):
    calls, parts = [], plan.traffic_parts
    monkeypatch.setattr(plan, "traffic_parts", lambda *args: calls.append(args) or parts(*args))
    e = plan.estimate(TINY, TWO_NODES["HSDP"], GPU, 2, "block")
    assert len(calls) == 1 and e.sent == plan.traffic(TINY, TWO_NODES["HSDP"], 2, "block")


def test_tensor_parallel_traffic_is_exposed_and_a_deferred_reduction_has_one_window():
    tp = plan.estimate(TINY, TWO_NODES["FSDP x tensor"], GPU, 2, "block")
    parts = plan.traffic_parts(TINY, TWO_NODES["FSDP x tensor"], 2, "block")
    assert tp.time.exposed == parts["tensor"]["NVLink"] / GPU.link_bandwidth > 0
    hsdp = plan.estimate(TINY, TWO_NODES["HSDP"], GPU, 2, "block")
    forward = 2 * (404 - 64 - 20) * 16 * 8 / 8 + 4 * 2 * 4 * 8 * 16 * 8 / 8  # weights, attention
    backward = (plan.flops(TINY, TWO_NODES["HSDP"], "block") - forward) / 2  # the last of 2
    assert hsdp.window == pytest.approx(backward / GPU.flops)
    assert hsdp.deferred == 2 * 0.5 * 4 * (404 - 20) / 4  # all-reduce of the f32 shard, 2 nodes
    assert hsdp.network_breakeven() == pytest.approx(hsdp.deferred / hsdp.window)
    # at an MFU the step takes the model's FLOPs at that fraction of the peak, the window too
    stretch = hsdp.time.model_compute / 0.5 / hsdp.time.compute
    assert hsdp.network_breakeven(0.5) == pytest.approx(hsdp.network_breakeven() / stretch)
    # a network too slow for that window: what overruns it is exposed
    slow = dataclasses.replace(GPU, network_bandwidth=hsdp.deferred / hsdp.window / 4)
    late = plan.estimate(TINY, TWO_NODES["HSDP"], slow, 2, "block").time
    assert late.deferred == pytest.approx(4 * hsdp.window) and late.window == hsdp.window
    assert late.overlapped - max(late.compute, late.communication) - late.hbm == pytest.approx(
        3 * hsdp.window
    )


def test_a_tpu_slice_is_priced_on_its_rings_not_one_link():
    v5e = roofline.CHIPS["TPU v5e"]
    with pytest.raises(ValueError, match="pass node=roofline.Slice"):
        plan.estimate(TINY, TWO_NODES["FSDP"], v5e, 2, "block")
    grid = roofline.Slice(v5e, (2, 2))
    e = plan.estimate(TINY, TWO_NODES["FSDP"], v5e, 2, "block", node=grid)
    parts = plan.traffic_parts(TINY, TWO_NODES["FSDP"], 2, "block")["fsdp"]
    assert e.time.communication == max(
        parts["NVLink"] / (2 * 50e9), parts["network"] / v5e.network_bandwidth
    )
    one_chip = plan.Layout("one chip", 1, 1, 1, 1, 1, 1)  # nothing sent: no slice needed
    assert plan.estimate(TINY, one_chip, v5e, 1, "none").sent == {"NVLink": 0.0, "network": 0.0}


def test_leaner_gradients_and_a_fused_loss_change_only_their_parts():
    hsdp = TWO_NODES["HSDP"]
    site = plan.memory(TINY, hsdp, 2, "block")
    lean = plan.memory(TINY, hsdp, 2, "block", gradient_bytes=6, logit_bytes=2)
    assert lean["gradients"] == site["gradients"] * 6 / 10
    assert lean["logits"] == site["logits"] * 2 / 14
    assert {k: v for k, v in lean.items() if k not in ("gradients", "logits")} == {
        k: v for k, v in site.items() if k not in ("gradients", "logits")
    }


def test_the_8b_plan_fits_an_h100_and_the_naive_one_does_not():
    layouts, h100 = plan.layouts(), roofline.CHIPS["H100 SXM"]
    model = plan.LLAMA_8B_LIKE
    assert not plan.estimate(model, layouts["FSDP"], h100, 1, "none").fits(h100)
    assert plan.estimate(model, layouts["HSDP"], h100, 16, "block").fits(h100, headroom=0.4)
    assert plan.fix(model, layouts["HSDP"], h100, 1, "none") == (16, "dots", "HSDP")
    # 2 sequences per GPU: 13.3 GB state, 11.0 gradients, 4.3 saved, 29.4 logits: 58 of 72 GB
    assert plan.fix(model, layouts["HSDP"], h100, 1, "block") == (8, "block", "HSDP")
    too_small = dataclasses.replace(h100, hbm_bytes=40e9)
    assert plan.fix(model, layouts["HSDP"], too_small, 16, "block") == (
        16,
        "block",
        "FSDP over all devices",
    )
    big = dataclasses.replace(model, embed=8192, heads=64, hidden=43008, layers=80)
    assert plan.fix(big, layouts["HSDP"], h100, 16, "block") is None
    # 64 GPUs: 4 sequences each, so at most 4 micro-batches, the 16 asked for cannot be
    assert plan.fix(big, plan.layouts(nodes=8)["HSDP"], h100, 16, "block") == (
        4,
        "block",
        "FSDP over all devices",
    )
