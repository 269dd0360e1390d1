"""guide_helpers.roofline: the chip table and the roofline arithmetic, against hand arithmetic."""

import dataclasses
import math

import pytest

from guide_helpers import roofline
from guide_helpers.roofline import CHIPS, Chip, StepTime, step_time

# A chip with round figures, so that every expected number below is exact by hand.
ROUND = Chip(
    name="round",
    flops=1e15,
    hbm_bytes=100e9,
    hbm_bandwidth=4e12,
    link_bandwidth=500e9,
    network_bandwidth=50e9,
    sources=("https://example.com",),
)


def test_the_four_chips_are_there_keyed_by_name():
    assert {"TPU v5e", "TPU v5p", "H100 SXM", "H200 SXM"} <= set(CHIPS)
    assert all(name == chip.name for name, chip in CHIPS.items())


def test_every_chip_has_public_sources_and_notes():
    for chip in CHIPS.values():
        assert chip.sources and all(s.startswith("https://") for s in chip.sources), chip.name
        assert chip.notes, chip.name


def test_units_are_bytes_and_flops_per_second():
    h100, h200 = CHIPS["H100 SXM"], CHIPS["H200 SXM"]
    v5e, v5p = CHIPS["TPU v5e"], CHIPS["TPU v5p"]
    # Dense bf16: about a petaFLOP/s for Hopper, hundreds of teraFLOP/s for the TPUs.
    assert 0.9e15 < h100.flops == h200.flops < 1.1e15
    assert 150e12 < v5e.flops < v5p.flops < 500e12
    # HBM in tens of gigabytes at terabytes per second.
    assert 10e9 < v5e.hbm_bytes < h100.hbm_bytes < v5p.hbm_bytes < h200.hbm_bytes < 200e9
    assert 0.5e12 < v5e.hbm_bandwidth < h100.hbm_bandwidth < h200.hbm_bandwidth < 10e12
    for chip in CHIPS.values():
        # One direction: links inside a node are hundreds of GB/s, the network far less.
        assert 100e9 <= chip.link_bandwidth <= 1e12, chip.name
        assert 1e9 < chip.network_bandwidth < chip.link_bandwidth / 5, chip.name


def test_vendor_figures_converted_to_one_direction_and_dense():
    h100 = CHIPS["H100 SXM"]
    assert h100.flops == 1979e12 / 2  # the data sheet's 1,979 TFLOP/s is with sparsity
    assert h100.link_bandwidth == 450e9  # NVLink 900 GB/s is both directions together
    assert h100.network_bandwidth == 50e9  # 400 Gb/s per GPU, in bytes
    assert CHIPS["TPU v5p"].link_bandwidth == 600e9  # ICI 1,200 GB/s bidirectional
    assert CHIPS["TPU v5e"].link_bandwidth == 200e9  # ICI 400 GB/s bidirectional
    assert CHIPS["TPU v5e"].network_bandwidth == 25e9 / 8  # 2 x 100 Gb/s per 8 chips
    assert CHIPS["TPU v5p"].hbm_bytes == 95 * 2**30
    # 600 GB/s one way over a v5p chip's 6 ICI links: 100 GB/s per link, as the links source says.
    assert CHIPS["TPU v5p"].link_bandwidth / 6 == 100e9


def test_step_time_divides_by_the_peaks():
    t = step_time(2e15, 1e12, ROUND)
    assert t == StepTime(compute=2.0, communication=2.0)
    t = step_time(1e15, 250e9, ROUND)
    assert (t.compute, t.communication) == (1.0, 0.5)
    across = step_time(1e15, 250e9, ROUND, across_nodes=True)
    assert (across.compute, across.communication) == (1.0, 5.0)


def test_overlapped_serial_and_bound():
    compute_bound = StepTime(compute=3.0, communication=1.0)
    assert compute_bound.overlapped == 3.0
    assert compute_bound.serial == 4.0
    assert compute_bound.bound == "compute"
    talk_bound = StepTime(compute=1.0, communication=3.0)
    assert (talk_bound.overlapped, talk_bound.serial) == (3.0, 4.0)
    assert talk_bound.bound == "communication"
    assert StepTime(2.0, 2.0).bound == "compute"  # a tie counts as compute


def test_hbm_time_adds_to_both_bounds_and_not_to_bound():
    t = step_time(1e15, 250e9, ROUND, hbm_bytes_moved=2e12)
    assert (t.compute, t.communication, t.hbm) == (1.0, 0.5, 0.5)
    assert (t.overlapped, t.serial, t.bound) == (1.5, 2.0, "compute")
    assert step_time(1e15, 250e9, ROUND).hbm == 0.0  # not priced unless asked
    talk = StepTime(compute=1.0, communication=3.0, hbm=0.5)
    assert (talk.overlapped, talk.serial, talk.bound) == (3.5, 4.5, "communication")


def test_adam_update_of_an_h100_by_hand():
    # bf16 parameters, gradients, mu and nu: read 8 bytes per parameter, write 6.
    params = 1e9
    t = step_time(0, 0, CHIPS["H100 SXM"], hbm_bytes_moved=14 * params)
    assert t.hbm == pytest.approx(14e9 / 3.35e12)


def test_step_time_of_an_h100_by_hand():
    # 6 x 1e9 parameters x 4096 tokens of FLOPs; a bf16 gradient all-reduce over 8 in a ring.
    flops = 6 * 1e9 * 4096
    sent = 2 * 7 / 8 * 1e9 * 2
    t = step_time(flops, sent, CHIPS["H100 SXM"])
    assert t.compute == pytest.approx(24.576e12 / 989.5e12)
    assert t.communication == pytest.approx(3.5e9 / 450e9)
    assert t.bound == "compute"


def test_data_parallel_threshold_by_hand():
    # T >= passes x bytes x flops / (6 x bandwidth): 2 x 2 x 1e15 / (6 x 500e9) = 1333.3...
    assert roofline.data_parallel_threshold(ROUND) == pytest.approx(4e15 / 3e12)
    assert roofline.data_parallel_threshold(ROUND, across_nodes=True) == pytest.approx(4e15 / 3e11)
    assert roofline.data_parallel_threshold(ROUND, bytes_per_param=4) == pytest.approx(8e15 / 3e12)
    fsdp = roofline.data_parallel_threshold(ROUND, passes=3)
    assert fsdp == pytest.approx(1.5 * roofline.data_parallel_threshold(ROUND))
    eight = roofline.data_parallel_threshold(ROUND, devices=8)
    assert eight == pytest.approx(7 / 8 * 4e15 / 3e12)
    # Overlapping the backward pass only (4 of the 6 FLOPs): 1.5 times the default.
    backward = roofline.data_parallel_threshold(ROUND, overlap_flops=4)
    assert backward == pytest.approx(2 * 2 * 1e15 / (4 * 500e9))
    assert backward == pytest.approx(1.5 * roofline.data_parallel_threshold(ROUND))


def test_data_parallel_threshold_is_where_compute_meets_communication():
    params, n = 1e9, 8
    tokens = roofline.data_parallel_threshold(ROUND, devices=n)
    at = step_time(6 * params * tokens, 2 * (n - 1) / n * params * 2, ROUND)
    assert at.compute == pytest.approx(at.communication)
    above = step_time(6 * params * 2 * tokens, 2 * (n - 1) / n * params * 2, ROUND)
    assert above.bound == "compute"


def test_tensor_parallel_threshold_by_hand():
    # h >= bytes x flops / (3 x bandwidth): 2 x 1e15 / (3 x 500e9) = 1333.3...
    assert roofline.tensor_parallel_threshold(ROUND) == pytest.approx(2e15 / 1.5e12)
    across = roofline.tensor_parallel_threshold(ROUND, across_nodes=True)
    assert across == pytest.approx(10 * roofline.tensor_parallel_threshold(ROUND))
    # At the threshold, one layer's step (12 E h FLOPs and 2 all-reduces of E values per
    # token, over n devices) takes as long to compute as to communicate.
    embed, tokens, n = 2048, 512, 4
    h = roofline.tensor_parallel_threshold(ROUND, devices=n)
    flops = 12 * embed * h * tokens
    sent = 2 * 2 * (n - 1) / n * embed * tokens * 2
    at = step_time(flops, sent, ROUND)
    assert at.compute == pytest.approx(at.communication)


def test_thresholds_of_real_chips_by_hand():
    h100 = CHIPS["H100 SXM"]
    assert roofline.data_parallel_threshold(h100) == pytest.approx(2 * 2 * 989.5e12 / (6 * 450e9))
    # The default is exactly the whole-step formula the layout guide asserts.
    assert roofline.data_parallel_threshold(h100, devices=8) == 2 * 7 / 8 * 2 * 989.5e12 / (
        6 * 450e9
    )
    backward = roofline.data_parallel_threshold(h100, devices=8, overlap_flops=4)
    assert round(backward) == 1924
    assert math.isclose(roofline.tensor_parallel_threshold(h100), 2 * 989.5e12 / (3 * 450e9))
    assert 1000 < roofline.data_parallel_threshold(h100) < 2000  # tokens per GPU
    assert roofline.data_parallel_threshold(h100, across_nodes=True) > 10_000


def test_chips_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        CHIPS["H100 SXM"].flops = 0
