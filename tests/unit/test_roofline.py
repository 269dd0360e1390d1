"""guide_helpers.roofline: the chip table, links and the roofline arithmetic, by hand."""

import dataclasses

import pytest

from guide_helpers import hlo, plan, roofline
from guide_helpers.roofline import CHIPS, Chip, Slice, StepTime, step_time

# Chips with round figures, so that every expected number below is exact by hand.
ROUND_GPU = Chip(
    name="round GPU", flops=1e15, hbm_bytes=100e9, hbm_bandwidth=4e12, link_bandwidth=500e9,
    links=1, network_bandwidth=50e9, chips_per_host=8, torus_every=0,
    sources=("https://example.com",),
)  # fmt: skip
ROUND_TPU = dataclasses.replace(
    ROUND_GPU, name="round TPU", link_bandwidth=100e9, links=6, chips_per_host=4, torus_every=4
)
H100, H200 = CHIPS["H100 SXM"], CHIPS["H200 SXM"]
V5E, V5P = CHIPS["TPU v5e"], CHIPS["TPU v5p"]


def test_the_four_chips_are_there_keyed_by_name():
    assert {"TPU v5e", "TPU v5p", "H100 SXM", "H200 SXM"} <= set(CHIPS)
    assert all(name == chip.name for name, chip in CHIPS.items())


def test_every_chip_has_public_sources_and_notes():
    for chip in CHIPS.values():
        assert chip.sources and all(s.startswith("https://") for s in chip.sources), chip.name
        assert chip.notes, chip.name
    assert all(s.startswith("https://") for s in roofline.MEASURED_SOURCES)


def test_units_are_bytes_and_flops_per_second():
    assert 0.9e15 < H100.flops == H200.flops < 1.1e15
    assert 150e12 < V5E.flops < V5P.flops < 500e12
    assert 10e9 < V5E.hbm_bytes < H100.hbm_bytes < V5P.hbm_bytes < H200.hbm_bytes < 200e9
    assert 0.5e12 < V5E.hbm_bandwidth < H100.hbm_bandwidth < H200.hbm_bandwidth < 10e12
    for chip in CHIPS.values():
        # One direction: a link carries tens to hundreds of GB/s; each chip's network far less.
        assert 10e9 <= chip.link_bandwidth <= 1e12, chip.name
        assert 1e9 < chip.network_bandwidth < chip.link_bandwidth, chip.name


def test_vendor_figures_converted_to_one_direction_dense_and_per_link():
    assert H100.flops == 1979e12 / 2  # the data sheet's 1,979 TFLOP/s is with sparsity
    assert H100.link_bandwidth == 450e9 and H100.links == 1  # NVLink 900 GB/s, both directions
    assert H100.network_bandwidth == 50e9  # 400 Gb/s per GPU, in bytes
    # ICI: 1,200 GB/s (v5p) and 400 GB/s (v5e) per chip, both directions, over 6 and 4 links.
    assert (V5P.link_bandwidth, V5P.links) == (100e9, 6)
    assert (V5E.link_bandwidth, V5E.links) == (50e9, 4)
    assert V5P.link_bandwidth * V5P.links == 600e9 and V5E.link_bandwidth * V5E.links == 200e9
    assert V5E.network_bandwidth == 25e9 / 8  # 2 x 100 Gb/s per host of 8 chips
    assert V5P.hbm_bytes == 95 * 2**30


def test_a_ring_uses_two_links_per_torus_axis_one_per_line_axis():
    # 8 v5p chips are a 2x2x2 slice with no wraparound: 1 link along each of 3 axes.
    v5p_16 = Slice(V5P, (2, 2, 2))
    assert not v5p_16.torus and v5p_16.links([0, 1, 2]) == 3
    assert v5p_16.bandwidth() == 300e9 and v5p_16.bandwidth([0]) == 100e9
    # A whole 4x4x4 cube wraps around: 2 links per axis, all 6 for all three axes.
    cube = Slice(V5P, (4, 4, 4))
    assert cube.torus and cube.bandwidth([2]) == 200e9 and cube.bandwidth() == 600e9
    # A v5p slice wraps only as whole cubes: 4x4x10 and 2x4x4 wrap along no axis.
    for shape in ((4, 4, 8 + 2), (2, 4, 4)):
        part = Slice(V5P, shape)
        assert not part.torus and not any(part.wraps(a) for a in range(3)), shape
        assert part.bandwidth([1]) == 100e9
    assert Slice(V5P, (4, 4, 8)).bandwidth([2]) == 200e9  # two cubes: every axis wraps
    # v5e-8 is 2x4, a line each way; the 16x16 pod wraps both ways, an 8x16 along its 16 only.
    v5e_8 = Slice(V5E, (2, 4))
    assert not v5e_8.torus and v5e_8.bandwidth() == 100e9
    assert Slice(V5E, (16, 16)).torus and Slice(V5E, (16, 16)).bandwidth() == 200e9
    half = Slice(V5E, (8, 16))
    assert half.bandwidth([1]) == 2 * 50e9 and half.bandwidth([0]) == 50e9
    # A 2x2x1 slice (v5p-8): the third axis has one chip and no links.
    assert Slice(V5P, (2, 2, 1)).bandwidth() == 200e9
    # A GPU node: every group inside it uses the GPU's NVLink to the switch.
    node = Slice(H100, (8,))
    assert node.bandwidth() == 450e9 and node.links([0]) == 1


def test_mesh_axes_fill_the_grid_in_order_and_refuse_a_split():
    assert Slice(V5P, (2, 2, 2)).mesh_axes((2, 4)) == [(0,), (1, 2)]
    assert Slice(V5P, (2, 2, 2)).mesh_axes((8, 1)) == [(0, 1, 2), ()]
    assert Slice(V5E, (2, 4)).mesh_axes((1, 8)) == [(), (0, 1)]
    # In a GPU node every group reaches the switch the same way: any mesh shape fits.
    assert Slice(H100, (8,)).mesh_axes((2, 4)) == [(0,), (0,)]
    assert Slice(H100, (8,)).mesh_axes((8, 1)) == [(0,), ()]
    with pytest.raises(ValueError, match="does not map onto whole axes"):
        Slice(V5E, (2, 4)).mesh_axes((4, 2))


def test_ring_seconds_and_hierarchical_all_reduce_by_hand():
    assert roofline.ring_seconds(8e9, 8, 500e9) == pytest.approx(7 / 8 * 8e9 / 500e9)
    assert roofline.ring_seconds(8e9, 8, 500e9, passes=2) == pytest.approx(2 * 7e9 / 500e9)
    node = Slice(ROUND_GPU, (8,))
    inside, across = roofline.hierarchical_all_reduce(8e9, node, nodes=2)
    assert inside == pytest.approx(2 * 7 / 8 * 8e9 / 500e9)
    assert across == pytest.approx(2 * 1 / 2 * 1e9 / 50e9)  # a 1/8 shard per NIC


def test_step_time_divides_by_the_peaks():
    t = step_time(2e15, 2.0, ROUND_GPU)
    assert t == StepTime(compute=2.0, communication=2.0)
    assert step_time(1e15, 0.5, ROUND_GPU, hbm_bytes_moved=2e12).hbm == 0.5


def test_overlapped_serial_and_bound():
    compute_bound = StepTime(compute=3.0, communication=1.0)
    assert (compute_bound.overlapped, compute_bound.serial) == (3.0, 4.0)
    assert compute_bound.bound == "compute"
    talk_bound = StepTime(compute=1.0, communication=3.0, hbm=0.5)
    assert (talk_bound.overlapped, talk_bound.serial) == (3.5, 4.5)
    assert talk_bound.bound == "communication"
    assert StepTime(2.0, 2.0).bound == "compute"  # a tie counts as compute
    # Tensor parallelism's all-reduces without a collective matmul: in both bounds.
    tp = StepTime(compute=3.0, communication=1.0, exposed=2.0)
    assert (tp.overlapped, tp.serial, tp.bound) == (5.0, 6.0, "compute")


def test_calibration_takes_the_mfu_as_the_whole_steps_and_counts_nothing_twice():
    t = StepTime(compute=1.0, communication=0.5, hbm=0.1, exposed=0.2)
    assert t.at(0.5, 0.5, 0.5) == StepTime(2.0, 1.0, 0.2, 0.4)
    measured = {"mfu": (0.4, 0.5), "link": (0.5, 1.0)}
    fast, slow = t.calibrated(measured)
    # fast: compute at 50% (2.0) hides the 0.5 s of links; exposed 0.2; the update is inside
    # the whole-step MFU, not added
    assert fast == pytest.approx(1.0 / 0.5 + 0.2)
    # slow: compute at 40% (2.5) against links at 50% (1.0): 2.5; exposed 0.4
    assert slow == pytest.approx(1.0 / 0.4 + 0.2 / 0.5)
    # an MFU is a fraction of the model's FLOPs: recomputation is inside it, not added
    remat = StepTime(compute=1.25, communication=0.5, model_compute=1.0)
    assert remat.calibrated(measured)[0] == pytest.approx(1.0 / 0.5)
    assert remat.at(0.5).model_compute == 2.0
    # a step bound by its links: the links' time, not the compute's
    talk = StepTime(compute=1.0, communication=3.0)
    assert talk.calibrated(measured) == (pytest.approx(3.0), pytest.approx(6.0))
    # the update is inside the MFU, so no HBM efficiency is taken that could change nothing
    with pytest.raises(TypeError):
        t.at_mfu(0.5, 1.0, 0.8)


def test_a_verdict_compares_layouts_at_the_same_efficiencies():
    measured = {"mfu": (0.4, 0.5), "link": (0.5, 1.0)}
    # 10% apart in every part: their ranges overlap, yet at each efficiency a is faster
    close = {"a": StepTime(1.0, 0.1), "b": StepTime(1.1, 0.11)}
    ranges = [t.calibrated(measured) for t in close.values()]
    assert ranges[0][1] > ranges[1][0] and roofline.verdict(close, measured) == ("a",)
    # equal compute, both compute-bound: the hidden communication decides nothing, a tie
    tie = {"a": StepTime(1.0, 0.1), "b": StepTime(1.0, 0.3), "c": StepTime(1.5, 0.1)}
    assert roofline.verdict(tie, measured) == ("a", "b") and tie["a"].dominates(tie["b"])
    # a wins with fast links, b with slow ones: no verdict
    crossing = {"a": StepTime(1.0, 2.2), "b": StepTime(2.1, 0.1)}
    assert roofline.verdict(crossing, measured) == ()
    # x alone at some corners, tied with y at others: x is among the fastest at every one
    some = {"x": StepTime(1.0, 0.1), "y": StepTime(1.0, 1.1)}
    assert roofline.verdict(some, measured) == ("x",)
    # the corners are over MFU and links only: an MFU holds the update's HBM time
    assert roofline.corners(measured) == [(0.4, 0.5), (0.4, 1.0), (0.5, 0.5), (0.5, 1.0)]
    assert set(roofline.MEASURED) == {"mfu", "link"}
    assert roofline.measured_for(V5E)["link"] == (0.9, 1.0)
    assert roofline.measured_for(H100)["link"] == (370 / 450, 1.0)


def test_a_step_that_is_no_slower_in_any_part_dominates():
    a, b = StepTime(1.0, 0.5, 0.1), StepTime(1.0, 0.7, 0.2)
    assert a.dominates(b) and not b.dominates(a) and a.dominates(a)
    assert not StepTime(1.1, 0.1, 0.0).dominates(b)  # faster links do not buy back compute
    # the model's FLOPs count too: less recomputation is no help if the model computes more
    more_model = StepTime(1.0, 0.5, 0.1, model_compute=0.99)
    assert not more_model.dominates(StepTime(1.05, 0.5, 0.1, model_compute=0.5))
    # a deferred reduction: less of it, or a longer window, never slower
    late = StepTime(1.0, 0.0, deferred=0.5, window=0.2)
    assert StepTime(1.0, 0.0, deferred=0.5, window=0.3).dominates(late)
    assert (late.overlapped, late.serial) == (pytest.approx(1.3), 1.5)
    assert late.at_mfu(0.5) == pytest.approx(2.0 + max(0.0, 0.5 - 0.2 / 0.5))
    # hidable traffic against exposed traffic: less in all, none exposed, still never slower
    hides, waits = StepTime(1.0, 0.6, 0.1), StepTime(1.0, 0.0, 0.1, exposed=0.7)
    assert hides.dominates(waits) and not waits.dominates(hides)
    for x, y in ((a, b), (hides, waits)):
        for mfu in (0.3, 0.5, 1.0):
            for link in (0.5, 1.0):
                fast, slow = x.at(mfu, link), y.at(mfu, link)
                assert fast.overlapped <= slow.overlapped and fast.serial <= slow.serial
                assert x.at_mfu(mfu, link) <= y.at_mfu(mfu, link)


def test_mixed_precision_bytes_per_parameter():
    """One accounting, two steps: the real chips page's (a bf16 copy kept, bf16 gradients) and
    the site's transformer's in plan (cast inside the loss, f32 gradients, no copy kept)."""
    assert sum(roofline.MIXED.values()) == 16  # bf16 copy, f32 master and moments, bf16 grads
    assert roofline.ADAM_UPDATE_BYTES == 28  # read 4 + 8 + 2, write 4 + 8 + 2
    assert (plan.STATE_BYTES, plan.GRADIENT_BYTES, plan.LEAN_GRADIENT_BYTES) == (12, 10, 6)
    assert plan.UPDATE_BYTES == roofline.adam_update_bytes(4, 0) == (12 + 4) + 12


def test_the_ring_formula_is_one_and_has_a_large_ring_limit():
    assert hlo.ring(4, 1000) == 750 and hlo.ring(None, 1000, passes=2) == 2000
    assert roofline.ring_seconds(1000, 4, 10.0, passes=2) == hlo.ring(4, 1000, 2) / 10.0
    chip = roofline.CHIPS["TPU v5e"]
    assert roofline.data_parallel_threshold(chip, 1e11) == 2 * chip.flops / (2 * 1e11)


def test_data_parallel_threshold_is_the_backward_pass_by_hand():
    # T >= (n - 1) / n x bytes x flops / (2 x bandwidth)
    assert roofline.data_parallel_threshold(ROUND_GPU) == pytest.approx(2e15 / 1e12)
    eight = roofline.data_parallel_threshold(ROUND_GPU, devices=8)
    assert eight == pytest.approx(7 / 8 * 2000)
    # At the threshold the backward pass (4 P T FLOPs) takes as long as the all-reduce.
    params, n = 1e9, 8
    backward = 4 * params * eight / ROUND_GPU.flops
    assert backward == pytest.approx(roofline.ring_seconds(params * 2, n, 500e9, passes=2))
    assert round(roofline.data_parallel_threshold(H100, devices=8)) == 1924


def test_fsdp_threshold_equals_data_parallels_pass_by_pass():
    for chip in (ROUND_GPU, H100, V5P):
        assert roofline.fsdp_threshold(chip, devices=8) == pytest.approx(
            roofline.data_parallel_threshold(chip, devices=8)
        )


def test_tensor_parallel_threshold_is_the_forward_pass_by_hand():
    # h >= (n - 1) / n x bytes x flops / (2 x bandwidth)
    assert roofline.tensor_parallel_threshold(ROUND_GPU) == pytest.approx(2e15 / 1e12)
    embed, tokens, n = 2048, 512, 4
    h = roofline.tensor_parallel_threshold(ROUND_GPU, devices=n)
    forward = 4 * embed * h * tokens / ROUND_GPU.flops
    all_reduce = roofline.ring_seconds(embed * tokens * 2, n, 500e9, passes=2)
    assert forward == pytest.approx(all_reduce)
    # 1,024 columns per chip on 8 chips is below every chip's threshold: link-bound everywhere.
    slices = {H100: Slice(H100, (8,)), H200: Slice(H200, (8,))}
    slices |= {V5P: Slice(V5P, (2, 2, 2)), V5E: Slice(V5E, (2, 4))}
    for chip, s in slices.items():
        assert roofline.tensor_parallel_threshold(chip, s.bandwidth(), devices=8) > 1024


def test_cross_node_threshold_is_about_the_in_node_one():
    node = Slice(H100, (8,))
    across = roofline.cross_node_data_parallel_threshold(node)
    assert across == pytest.approx(989.5e12 / 400e9)  # 2,474: the node's 8 NICs, 400 GB/s
    inside = roofline.data_parallel_threshold(H100)  # large-ring limit: 2,199
    assert 1.1 < across / inside < 1.15
    # Two nodes: the cross-node ring is (2 - 1) / 2; then the NVLink phase binds.
    two = roofline.cross_node_data_parallel_threshold(node, nodes=2)
    assert two == pytest.approx(roofline.data_parallel_threshold(H100, devices=8))


def test_ring_attention_block_is_the_forward_step_by_hand():
    """Each ring step hides its own k and v blocks: 4 b^2 FLOPs against 4 b bytes (bf16)."""
    h100 = CHIPS["H100 SXM"]
    assert roofline.ring_attention_block(h100, 450e9) == pytest.approx(989.5e12 / 450e9)
    assert round(roofline.ring_attention_block(h100, 450e9)) == 2199  # NVLink
    assert round(roofline.ring_attention_block(h100, 50e9)) == 19790  # the NIC
    # Llama 3's 8 key-value heads of 32 send a quarter; skipping the masked half doubles it
    assert round(roofline.ring_attention_block(h100, 450e9, kv_fraction=8 / 32)) == 550
    b = roofline.ring_attention_block(h100, 450e9, skip_masked=True)
    assert 2 * b**2 / 989.5e12 == pytest.approx(4 * b / 450e9)  # half the work, same bytes


def test_context_parallel_prices_three_splits_of_a_sequence_by_hand():
    h100, n, seq, d = CHIPS["H100 SXM"], 8, 32768, 128
    priced = roofline.context_parallel(h100, 450e9, seq, 32, 8, d, n)
    assert priced["compute"] == pytest.approx(4 * seq * seq / n * 32 * d / 989.5e12)
    block = 2 * seq / n * 8 * d * 2  # a device's k and v block, bf16
    assert priced["all-gather"] == pytest.approx((7 * block, 7 * block / 450e9))
    # a 4,096-token block is past ring_attention_block's 550 (8 of 32 heads): hidden
    assert seq / n > roofline.ring_attention_block(h100, 450e9, kv_fraction=8 / 32)
    assert priced["ring"] == pytest.approx((7 * block, 0.0))
    ulysses = 7 / 8 * seq / n * (2 * 32 + 2 * 8) * d * 2  # q, k, v and the output, 7/8 sent
    assert priced["ulysses"] == pytest.approx((ulysses, ulysses / 450e9))
    # below the block the ring exposes each step's excess; 2 kv heads are repeated to 8
    short = roofline.context_parallel(h100, 50e9, 8192, 32, 2, d, n)
    step = 2 * 1024 * 2 * d * 2 / 50e9 - 4 * 8192 * 1024 * 32 * d / 989.5e12 / n
    assert step > 0 and short["ring"][1] == pytest.approx(7 * step)
    assert short["ulysses"][0] == pytest.approx(7 / 8 * 1024 * (2 * 32 + 2 * 8) * d * 2)
    assert roofline.context_parallel(h100, 450e9, seq, 12, 12, d, n)["ulysses"] is None
