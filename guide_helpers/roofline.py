"""Real chips, and a roofline estimate of a train step's time on them.

A compiled program tells you, per device and per step, how many FLOPs it computes and how many
bytes it sends (`guide_helpers.compiled`). A chip's data sheet tells you how fast it computes and
how fast its links carry bytes. Dividing one by the other gives two times:

- `compute` = FLOPs / peak FLOP/s, the time if the chip ran at its peak and never waited;
- `communication` = bytes sent / link bandwidth, the time if the links ran at their peak.

A real step takes at least the larger of the two (`overlapped`: communication fully hidden
behind compute) and at most roughly their sum (`serial`: nothing hidden), if the chip reaches
its peak at all. `bound` names the larger one. Optionally, a third time, `hbm` = bytes read and
written in HBM / HBM bandwidth, prices element-wise work that overlaps neither (such as the
optimizer's update, which waits for the gradients): both bounds add it. That is the whole model;
what it leaves out (kernels below peak, other HBM-bound work, latency per collective, topology)
is listed on the page that uses it, docs/real_chips.md.

Every figure in `CHIPS` is one direction of one chip's bandwidth, in bytes per second, and dense
bf16 FLOP/s (no structured sparsity). Some sources print bandwidth as both directions added up,
and NVIDIA prints Hopper's FLOP/s with sparsity: each `Chip.notes` says what the source printed
and how it was converted. A NIC's line rate is taken as one direction (the links are full
duplex).
"""

from dataclasses import dataclass

GB = 1e9  # vendors' GB and Gb are decimal
GIB = 2**30


@dataclass(frozen=True)
class Chip:
    name: str  # "TPU v5e", "TPU v5p", "H100 SXM", "H200 SXM"
    flops: float  # peak dense bf16 FLOP/s per chip (no sparsity)
    hbm_bytes: float  # HBM capacity per chip, bytes
    hbm_bandwidth: float  # HBM bytes/s per chip
    # bytes/s one chip can send in one direction to its peers inside a node / slice (NVLink;
    # TPU ICI summed over the chip's links)
    link_bandwidth: float
    # bytes/s per chip, one direction, between nodes (a NIC's line rate per GPU; TPU
    # data-center network per chip): a typical configuration, not a property of the chip
    network_bandwidth: float
    sources: tuple[str, ...]  # public URLs the figures come from
    notes: str = ""  # what the sources print, and how it was converted


TPU_V5E = "https://cloud.google.com/tpu/docs/v5e"
TPU_V5P = "https://cloud.google.com/tpu/docs/v5p"
H100 = "https://www.nvidia.com/en-us/data-center/h100/"
H200 = "https://www.nvidia.com/en-us/data-center/h200/"
TPU_LINKS = "https://jax-ml.github.io/scaling-book/tpus/"  # ICI per link, wraparound
HGX_NETWORK = (
    "https://docs.nvidia.com/reference-architectures/hgx-ai-factory-h100-h200-b200/abstract"
)

CHIPS = {
    chip.name: chip
    for chip in (
        Chip(
            name="TPU v5e",
            flops=197e12,
            hbm_bytes=16 * GB,
            hbm_bandwidth=819 * GB,
            link_bandwidth=400 * GB / 2,
            network_bandwidth=2 * 100e9 / 8 / 8,
            sources=(TPU_V5E,),
            notes=(
                "197 TFLOP/s bf16; HBM 16 GB at 819 GB/s (one version of the page says "
                "800 GiBps, 859 GB/s; this uses 819); ICI 400 GB/s per chip, both directions "
                "added, halved (an older table's 1,600 Gbps is the one-way 200 GB/s); "
                "data-center network: 2 x 100 Gbps NICs per host of 8 chips, 25 Gb/s per chip"
            ),
        ),
        Chip(
            name="TPU v5p",
            flops=459e12,
            hbm_bytes=95 * GIB,
            hbm_bandwidth=2765 * GB,
            link_bandwidth=1200 * GB / 2,
            network_bandwidth=50e9 / 8,
            sources=(TPU_V5P, TPU_LINKS),
            notes=(
                "459 TFLOP/s bf16; HBM 95 GiB at 2,765 GB/s; ICI 1,200 GB/s per chip, both "
                "directions added, halved (an older table's 4,800 Gbps is the one-way "
                "600 GB/s), summed over the chip's 6 links; data-center network 50 Gbps per chip"
            ),
        ),
        Chip(
            name="H100 SXM",
            flops=1979e12 / 2,
            hbm_bytes=80 * GB,
            hbm_bandwidth=3.35e12,
            link_bandwidth=900 * GB / 2,
            network_bandwidth=400e9 / 8,
            sources=(H100, HGX_NETWORK),
            notes=(
                "1,979 TFLOP/s bf16 with sparsity, halved; HBM 80 GB at 3.35 TB/s; NVLink "
                "900 GB/s, both directions added, halved; network: 400 Gb/s per GPU in NVIDIA's "
                "HGX reference architecture (Spectrum-X Ethernet), taken as one direction"
            ),
        ),
        Chip(
            name="H200 SXM",
            flops=1979e12 / 2,
            hbm_bytes=141 * GB,
            hbm_bandwidth=4.8e12,
            link_bandwidth=900 * GB / 2,
            network_bandwidth=400e9 / 8,
            sources=(H200, HGX_NETWORK),
            notes=(
                "1,979 TFLOP/s bf16 with sparsity, halved; HBM 141 GB at 4.8 TB/s; NVLink "
                "900 GB/s, both directions added, halved; network: 400 Gb/s per GPU in NVIDIA's "
                "HGX reference architecture (Spectrum-X Ethernet), taken as one direction"
            ),
        ),
    )
}


@dataclass(frozen=True)
class StepTime:
    compute: float  # seconds: flops / chip.flops
    communication: float  # seconds: bytes / bandwidth
    # seconds: bytes read and written in HBM / chip.hbm_bandwidth, for element-wise work that
    # overlaps neither compute nor communication (the optimizer's update); 0 if not priced
    hbm: float = 0.0

    @property
    def overlapped(self) -> float:
        """max(compute, communication) + hbm: the best case, every byte sent while computing."""
        return max(self.compute, self.communication) + self.hbm

    @property
    def serial(self) -> float:
        """compute + communication + hbm: the worst case, nothing sent while computing."""
        return self.compute + self.communication + self.hbm

    @property
    def bound(self) -> str:
        """ "compute" or "communication": the larger of the two times (compute on a tie);
        `hbm` does not enter, since it adds to both bounds alike."""
        return "compute" if self.compute >= self.communication else "communication"


def bandwidth(chip, across_nodes=False):
    """Bytes/s one chip sends in one direction: between nodes, or to its peers in a node."""
    return chip.network_bandwidth if across_nodes else chip.link_bandwidth


def step_time(
    flops_per_device, bytes_sent_per_device, chip, across_nodes=False, hbm_bytes_moved=0
) -> StepTime:
    """The roofline times of one step on `chip`: its FLOPs at peak, its bytes at link speed.

    `bytes_sent_per_device` is what one device sends per step (for example
    `compiled.sent_per_device`, which assumes ring collectives); `across_nodes` sends them at
    the network's bandwidth instead of the links' inside a node or slice. `hbm_bytes_moved`
    (optional) is what one device reads and writes in HBM for work that overlaps neither, such
    as the optimizer's update: Adam with bf16 parameters, gradients and moments reads 8 bytes
    per parameter the device holds and writes 6, 14 in all. It becomes `StepTime.hbm`.
    """
    return StepTime(
        compute=flops_per_device / chip.flops,
        communication=bytes_sent_per_device / bandwidth(chip, across_nodes),
        hbm=hbm_bytes_moved / chip.hbm_bandwidth,
    )


def _ring_share(devices):
    """(n - 1) / n for a ring of n devices; 1, the large-ring limit, when n is None."""
    return 1.0 if devices is None else (devices - 1) / devices


def data_parallel_threshold(
    chip, across_nodes=False, bytes_per_param=2, passes=2, devices=None, overlap_flops=6
) -> float:
    """Tokens per device above which data-parallel (or FSDP) compute hides its gradient traffic.

    A train step of a dense model computes about 6 FLOPs per parameter and token (2 forward,
    4 backward), so a device with T tokens and P parameters computes 6 P T FLOPs. It sends
    `passes` ring passes of the P parameters' gradients (or weights), each pass
    (n - 1) / n * P * bytes_per_param bytes: 2 passes for data parallelism's all-reduce
    (a reduce-scatter then an all-gather); 3 for FSDP (an all-gather of the weights forward,
    another backward, a reduce-scatter of the gradients). Compute takes at least as long as
    communication when

        6 P T / flops >= passes * (n - 1) / n * P * bytes_per_param / bandwidth
        T >= passes * (n - 1) / n * bytes_per_param * flops / (6 * bandwidth)

    P cancels: the threshold is a property of the chip and the link. With `devices=None`,
    (n - 1) / n is taken as 1, the large-ring limit, which slightly overstates the threshold.

    The default compares the traffic with the whole step's FLOPs, an optimistic bound: a
    gradient all-reduce can only overlap the backward pass, 4 of the 6 FLOPs. `overlap_flops=4`
    puts 4 in place of 6, which raises the threshold 1.5 times. (FSDP's passes split 1 forward,
    2 backward, in proportion to the FLOPs, so for it the default holds pass by pass.)
    """
    share = _ring_share(devices)
    per_second = overlap_flops * bandwidth(chip, across_nodes)
    return passes * share * bytes_per_param * chip.flops / per_second


def tensor_parallel_threshold(chip, across_nodes=False, bytes_per_value=2, devices=None) -> float:
    """Hidden width per shard above which a tensor-parallel layer hides its activation traffic.

    The layer is the site's relu(x @ W1) @ W2 with W1[embed, hidden@model] and
    W2[hidden@model, embed], split over n devices, so each holds h = hidden / n columns of W1.
    Per token and train step, a device computes 6 matrix products' worth of 2 * embed * h
    FLOPs (2 forward, 4 backward): 12 * embed * h. It all-reduces the layer's output forward
    and the gradient of its input backward, each embed values per token: 2 ring all-reduces of
    2 * (n - 1) / n * embed * bytes_per_value bytes. Compute takes at least as long when

        12 * embed * h / flops >= 4 * (n - 1) / n * embed * bytes_per_value / bandwidth
        h >= (n - 1) / n * bytes_per_value * flops / (3 * bandwidth)

    embed and the number of tokens cancel. With `devices=None`, (n - 1) / n is taken as 1.
    Like `data_parallel_threshold`, it compares whole-step totals; per pass, the forward
    all-reduce has 4 of the 12 FLOPs to hide behind, the backward one 8.
    """
    share = _ring_share(devices)
    return share * bytes_per_value * chip.flops / (3 * bandwidth(chip, across_nodes))
