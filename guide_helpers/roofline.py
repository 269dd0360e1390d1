"""Real chips, their links, and a roofline estimate of a train step's time on them.

A compiled program tells you, per device and per step, how many FLOPs it computes and how many
bytes it sends (`guide_helpers.hlo`). A chip's data sheet tells you how fast it computes and
how fast its links carry bytes. Dividing one by the other gives two times:

- `compute` = FLOPs / peak FLOP/s, the time if the chip ran at its peak and never waited;
- `communication` = bytes sent / the bandwidth of the links the collective runs on.

A real step takes at least the larger of the two (`overlapped`: communication fully hidden behind
compute) and at most roughly their sum (`serial`: nothing hidden). `exposed` is communication
that nothing can hide: a tensor-parallel layer's all-reduces, which the next layer waits for,
unless a collective matmul splits the product to overlap them (XLA's windowed einsum, PyTorch's
async TP, both on the all-gather and reduce-scatter of sequence parallelism's form); both bounds
add it. `hbm` = bytes read and written in HBM / HBM bandwidth prices the
optimizer's update, which waits for the gradients: both bounds add it.

`StepTime.calibrated` prices a step at the whole-step efficiency real training reaches
(`MEASURED`, the MFU of published runs): that figure already holds whatever those runs spent
besides the model's matrix products (the update, recomputation, what they did not hide), so the
calibrated time is the model's FLOPs at that MFU, or the links at their measured rate where the
step is bound by them, plus the exposed communication, and nothing else: a whole-step MFU, never
a kernel efficiency with overheads added. `verdict` compares layouts at the same efficiencies,
since one chip's efficiency is common to every layout on it.

Links. Every bandwidth here is one direction. A TPU chip has `links` ICI links of
`link_bandwidth` each, two per axis of its slice's grid; a ring collective over some axes of a
slice uses, per chip, 2 links along each axis that wraps around (a torus) and 1 along each that
does not (a line), so its bandwidth comes from the slice's shape (`Slice.bandwidth`). A GPU sends
to the NVSwitch of its node over all its NVLinks at once: one "link" of `link_bandwidth`, whatever
the group inside the node. Between nodes (or TPU slices) every chip has its own share of the
network, `network_bandwidth`. An all-reduce across nodes is hierarchical
(`hierarchical_all_reduce`); NCCL runs all-gathers and reduce-scatters across nodes as flat
rings, one per channel, each device's NIC carrying 1/k of the (n - 1) / n it sends per pass, k
devices to a node (`collective_on_links`).

Every figure in `CHIPS` is dense bf16 FLOP/s (no structured sparsity) and one direction of
bandwidth. Some sources print bandwidth as both directions added up, and NVIDIA prints Hopper's
FLOP/s with sparsity: each `Chip.notes` says what the source printed and how it was converted.
"""

import collections
import math
from dataclasses import dataclass

from guide_helpers.hlo import RING_PASSES, ring

GB = 1e9  # vendors' GB and Gb are decimal
GIB = 2**30


@dataclass(frozen=True)
class Chip:
    name: str  # "TPU v5e", "TPU v5p", "H100 SXM", "H200 SXM"
    flops: float  # peak dense bf16 FLOP/s per chip (no sparsity)
    hbm_bytes: float  # HBM capacity per chip, bytes
    hbm_bandwidth: float  # HBM bytes/s per chip
    link_bandwidth: float  # bytes/s of one link, one direction (a GPU: all its NVLink, as one)
    links: int  # links per chip: ICI links of a TPU (2 per axis of its grid); 1 for a GPU
    # bytes/s per chip, one direction, between nodes or slices (a GPU's NIC; a TPU's share of
    # its host's data-center network): a typical configuration, not a property of the chip
    network_bandwidth: float
    chips_per_host: int  # chips that share a host (and its NICs)
    # a TPU slice wraps around when its sides are multiples of this (0: never): every side, for
    # the whole slice to wrap (v5p's cubes), or each side on its own (`wraps_per_axis`, v5e)
    torus_every: int
    sources: tuple[str, ...]  # public URLs the figures come from
    notes: str = ""  # what the sources print, and how it was converted
    wraps_per_axis: bool = False

    @property
    def is_gpu(self):
        return self.links == 1


TPU_V5E = "https://cloud.google.com/tpu/docs/v5e"
TPU_V5P = "https://cloud.google.com/tpu/docs/v5p"
H100 = "https://www.nvidia.com/en-us/data-center/h100/"
H200 = "https://www.nvidia.com/en-us/data-center/h200/"
TPU_LINKS = "https://jax-ml.github.io/scaling-book/tpus/"  # ICI per link, wraparound
GPU_NETWORK = "https://jax-ml.github.io/scaling-book/gpus/"  # hierarchical collectives
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
            link_bandwidth=400 * GB / 2 / 4,
            links=4,
            network_bandwidth=2 * 100e9 / 8 / 8,
            chips_per_host=8,
            torus_every=16,
            wraps_per_axis=True,
            sources=(TPU_V5E, TPU_LINKS),
            notes=(
                "197 TFLOP/s bf16; HBM 16 GB at 819 GB/s (one version of the page says "
                "800 GiBps, 859 GB/s; this uses 819); ICI 400 GB/s per chip, both directions "
                "added, halved, over 4 links (a 2-D grid): 50 GB/s a link (the scaling book "
                "gives 45, the lower end); an axis wraps around only at the pod's side of 16; "
                "data-center network: 2 x 100 Gbps NICs per host of 8 "
                "chips, 25 Gb/s per chip"
            ),
        ),
        Chip(
            name="TPU v5p",
            flops=459e12,
            hbm_bytes=95 * GIB,
            hbm_bandwidth=2765 * GB,
            link_bandwidth=1200 * GB / 2 / 6,
            links=6,
            network_bandwidth=50e9 / 8,
            chips_per_host=4,
            torus_every=4,
            sources=(TPU_V5P, TPU_LINKS),
            notes=(
                "459 TFLOP/s bf16; HBM 95 GiB at 2,765 GB/s; ICI 1,200 GB/s per chip, both "
                "directions added, halved, over 6 links (a 3-D grid): 100 GB/s a link (the "
                "scaling book gives 90, the lower end); an axis wraps around where its side is "
                "a multiple of 4 (whole 4x4x4 cubes); data-center network 50 Gbps per chip, 4 "
                "chips per host"
            ),
        ),
        Chip(
            name="H100 SXM",
            flops=1979e12 / 2,
            hbm_bytes=80 * GB,
            hbm_bandwidth=3.35e12,
            link_bandwidth=900 * GB / 2,
            links=1,
            network_bandwidth=400e9 / 8,
            chips_per_host=8,
            torus_every=0,
            sources=(H100, HGX_NETWORK, GPU_NETWORK),
            notes=(
                "1,979 TFLOP/s bf16 with sparsity, halved; HBM 80 GB at 3.35 TB/s; NVLink "
                "900 GB/s, both directions added, halved, to the node's NVSwitch; network: "
                "one 400 Gb/s NIC per GPU, 8 per node, in NVIDIA's HGX reference architecture, "
                "taken as one direction"
            ),
        ),
        Chip(
            name="H200 SXM",
            flops=1979e12 / 2,
            hbm_bytes=141 * GB,
            hbm_bandwidth=4.8e12,
            link_bandwidth=900 * GB / 2,
            links=1,
            network_bandwidth=400e9 / 8,
            chips_per_host=8,
            torus_every=0,
            sources=(H200, HGX_NETWORK, GPU_NETWORK),
            notes=(
                "1,979 TFLOP/s bf16 with sparsity, halved; HBM 141 GB at 4.8 TB/s; NVLink "
                "900 GB/s, both directions added, halved, to the node's NVSwitch; network: "
                "one 400 Gb/s NIC per GPU, 8 per node, in NVIDIA's HGX reference architecture, "
                "taken as one direction"
            ),
        ),
    )
}


@dataclass(frozen=True)
class Slice:
    """Chips joined by their fast links: a TPU slice's grid, or a GPU node (`shape=(8,)`)."""

    chip: Chip
    shape: tuple[int, ...]  # TPU: chips along each axis of the grid, (2, 2, 2); GPU: (8,)

    @property
    def chips(self):
        return math.prod(self.shape)

    def wraps(self, axis):
        """True where the slice wraps around along `axis`. A v5p slice wraps along every axis
        or none: only slices of whole 4x4x4 cubes do (`torus_every` 4). A v5e wraps each axis
        whose side is the pod's 16 on its own (`wraps_per_axis`): an 8x16 along its 16 only."""
        every = self.chip.torus_every
        if not every:
            return False
        if self.chip.wraps_per_axis:
            return self.shape[axis] % every == 0
        return all(side % every == 0 for side in self.shape)

    @property
    def torus(self):
        """True where the slice wraps around along every axis."""
        return all(self.wraps(a) for a in range(len(self.shape)))

    def links(self, axes):
        """Links per chip a ring collective over these grid axes uses: 2 along an axis that
        wraps around, 1 along one that does not; a GPU's NVLink counts as 1."""
        if self.chip.is_gpu:
            return 1 if any(self.shape[a] > 1 for a in axes) else 0
        return sum((2 if self.wraps(a) else 1) for a in axes if self.shape[a] > 1)

    def bandwidth(self, axes=None):
        """Bytes/s per chip, one direction, of a ring collective over `axes` (all by default)."""
        axes = range(len(self.shape)) if axes is None else axes
        return self.links(axes) * self.chip.link_bandwidth

    def mesh_axes(self, mesh_shape):
        """The grid axes each mesh axis runs over, filling the grid's axes in order: a (2, 4)
        mesh on a (2, 2, 2) slice is [(0,), (1, 2)]. Raises if a mesh axis would split one. In a
        GPU node every group reaches the switch alike: each mesh axis of size > 1 gets (0,)."""
        if self.chip.is_gpu:
            return [(0,) if size > 1 else () for size in mesh_shape]
        found, axis = [], 0
        for size in mesh_shape:
            taken, product = [], 1
            while product < size and axis < len(self.shape):
                taken.append(axis)
                product *= self.shape[axis]
                axis += 1
            if product != size:
                raise ValueError(f"mesh {mesh_shape} does not map onto whole axes of {self.shape}")
            found.append(tuple(taken))
        return found


def ring_seconds(nbytes, devices, bandwidth, passes=1):
    """Seconds of `passes` ring passes of an `nbytes` array among `devices`, per device."""
    return ring(devices, nbytes, passes) / bandwidth


def hierarchical_all_reduce(nbytes, node, nodes):
    """Seconds of a gradient all-reduce over `nodes` nodes (or slices) of `node`'s chips, as
    multi-node libraries run it: a reduce-scatter inside each node, so each chip holds 1/chips
    of the sum; an all-reduce of that shard across the nodes, every chip over its own NIC at
    once; an all-gather inside the node. Returns (inside, across): with the phases pipelined
    over chunks, the step waits for the larger; in series, for their sum."""
    inside = ring_seconds(nbytes, node.chips, node.bandwidth(), passes=2)
    across = ring_seconds(nbytes / node.chips, nodes, node.chip.network_bandwidth, passes=2)
    return inside, across


@dataclass(frozen=True)
class StepTime:
    compute: float  # seconds: flops / chip.flops
    communication: float  # seconds: bytes / bandwidth of the collectives compute can hide
    # seconds: bytes read and written in HBM / chip.hbm_bandwidth, for element-wise work that
    # overlaps neither compute nor communication (the optimizer's update); 0 if not priced
    hbm: float = 0.0
    # seconds: bytes / bandwidth of the collectives nothing hides (a tensor-parallel layer's
    # all-reduces without a collective matmul): on the critical path in every bound
    exposed: float = 0.0
    # seconds: the model's FLOPs (no recomputation) / chip.flops, what an MFU is a fraction of;
    # None: the same as `compute`
    model_compute: float | None = None
    # seconds: bytes / bandwidth of a reduction deferred to the end of the step (HSDP's across
    # nodes), which can hide only behind `window`, seconds of compute at the peak (the last
    # micro-batch's backward pass); what overruns the window is exposed
    deferred: float = 0.0
    window: float = 0.0

    @property
    def model(self):
        return self.compute if self.model_compute is None else self.model_compute

    @property
    def overlapped(self) -> float:
        """max(compute, communication) + exposed + the deferred reduction's overrun + hbm: the
        best case, every byte that can be sent while computing sent then."""
        overrun = max(0.0, self.deferred - self.window)
        return max(self.compute, self.communication) + self.exposed + overrun + self.hbm

    @property
    def serial(self) -> float:
        """compute + communication + exposed + deferred + hbm: the worst case, nothing sent
        while computing."""
        return self.compute + self.communication + self.exposed + self.deferred + self.hbm

    @property
    def bound(self) -> str:
        """ "compute" or "communication": the larger of the compute and all the communication
        (compute on a tie); `hbm` does not enter, since it adds to both bounds alike."""
        talk = self.communication + self.exposed + self.deferred
        return "compute" if self.compute >= talk else "communication"

    def at(self, compute_efficiency, link_efficiency=1.0, hbm_efficiency=1.0):
        """The same step on a chip whose compute reaches `compute_efficiency` of the peak,
        whose links reach `link_efficiency` of theirs, and HBM `hbm_efficiency`."""
        c, link = compute_efficiency, link_efficiency
        return StepTime(
            self.compute / c,
            self.communication / link,
            self.hbm / hbm_efficiency,
            self.exposed / link,
            None if self.model_compute is None else self.model_compute / c,
            self.deferred / link,
            self.window / c,
        )

    def dominates(self, other):
        """This step is never slower than the other, at any efficiencies the calibration
        scales the parts by, overlapped or not: no more compute (the program's or the model's),
        update, exposed or deferred communication, no more communication in all (hidable and
        exposed together), and no shorter window for the deferred reduction."""

        def parts(t):
            talk = t.communication + t.exposed
            return (t.compute, t.model, t.hbm, t.exposed, talk, t.deferred, -t.window)

        # equal parts summed in another order may differ in the last bits: they count as equal
        pairs = zip(parts(self), parts(other))
        return all(a <= b or math.isclose(a, b, rel_tol=1e-9) for a, b in pairs)

    def at_mfu(self, mfu, link_efficiency=1.0):
        """The step at a whole-step MFU: the model's FLOPs at that fraction of the peak, or the
        hidable communication at the links' rate where that is longer; plus the exposed
        communication and what the deferred reduction overruns of its window (the window
        stretched as the whole step is). A whole-step MFU holds everything else the runs that
        measured it spent (the update, recomputation, what they did not hide), so nothing else
        is added: not `hbm`, and no HBM efficiency is taken."""
        link = link_efficiency
        stretch = self.model / mfu / self.compute if self.compute else 1 / mfu
        overrun = max(0.0, self.deferred / link - self.window * stretch)
        hidden = max(self.model / mfu, self.communication / link)
        return hidden + self.exposed / link + overrun

    def calibrated(self, measured=None):
        """(fastest, slowest) seconds: the step at the highest and at the lowest measured
        efficiencies (`at_mfu`)."""
        m = measured or MEASURED
        return (
            self.at_mfu(m["mfu"][1], m["link"][1]),
            self.at_mfu(m["mfu"][0], m["link"][0]),
        )


# Efficiencies measured in public, (lowest, highest). MFU (model FLOPs utilization) is a whole
# run's: the model's FLOPs over the step time and the peak, with everything the run did not hide
# (communication, pipeline bubbles, the update) inside it; it is not a matrix kernel's
# efficiency, which is higher. Llama 3's pre-training on H100s reached 38-43% (Table 4 of arXiv
# 2407.21783), PaLM's on TPU v4 46.2% (arXiv 2204.02311). Links: NCCL's developers give about
# 370 of NVLink's 450 GB/s one way as what its ring collectives reach on H100 (nccl-tests issue
# 212), up to the full rate; that is a GPU's figure, and `measured_for` gives a TPU's ICI the
# scaling book's lower per-link figure instead. No HBM efficiency: the whole-step MFU holds the
# update's time (`StepTime.at_mfu`).
MEASURED = {"mfu": (0.38, 0.462), "link": (370 / 450, 1.0)}
MEASURED_SOURCES = (
    "https://arxiv.org/abs/2407.21783",
    "https://arxiv.org/abs/2204.02311",
    "https://github.com/NVIDIA/nccl-tests/issues/212",
    TPU_LINKS,
)
# The scaling book's one-way ICI per link against the data sheet's: 45 of 50 GB/s (v5e), 90 of
# 100 (v5p).
TPU_LINK = (0.9, 1.0)


def measured_for(chip):
    """MEASURED with the chip's own link range: NCCL's on a GPU, the scaling book's on a TPU."""
    return MEASURED if chip.is_gpu else {**MEASURED, "link": TPU_LINK}


def corners(measured=None):
    """The efficiencies a comparison sweeps: each end of each measured range, as (mfu, link)
    pairs, the arguments of `StepTime.at_mfu`."""
    m = measured or MEASURED
    return [(c, link) for c in m["mfu"] for link in m["link"]]


def verdict(times, measured=None):
    """The layouts that are among the fastest (ties included) at every corner of the measured
    ranges (`corners`), in `times`' order; () if no layout is. Layouts on one chip share its
    efficiencies, so they are compared at the same ones, not range against range. Only the
    corners are checked, not the efficiencies between them."""
    winners = None
    for efficiencies in corners(measured):
        at = {name: t.at_mfu(*efficiencies) for name, t in times.items()}
        best = min(at.values())
        fastest = {n for n, v in at.items() if math.isclose(v, best, rel_tol=1e-9)}
        winners = fastest if winners is None else winners & fastest
    return tuple(n for n in times if n in winners)


def step_time(flops_per_device, communication_seconds, chip, hbm_bytes_moved=0) -> StepTime:
    """The roofline times of one step on `chip`: its FLOPs at peak, its collectives' seconds
    (from `ring_seconds` over the links each runs on), and `hbm_bytes_moved` at HBM speed."""
    return StepTime(
        compute=flops_per_device / chip.flops,
        communication=communication_seconds,
        hbm=hbm_bytes_moved / chip.hbm_bandwidth,
    )


# Mixed-precision Adam, bytes per parameter: the site's one accounting. Adam keeps f32 master
# parameters and two f32 moments (ADAM_STATE, 12). Two steps use it:
# - MIXED, the real chips page's: a bf16 copy of the parameters kept in the state for the matrix
#   products, so the gradients are bf16: 16 bytes;
# - `plan`'s, the site's transformer (guide_helpers.onechip): the f32 parameters cast to bf16
#   inside the loss, so the gradients are f32 (plan.GRADIENT_BYTES).
# The update reads the master, the moments and a gradient and writes the master, the moments and
# the bf16 copy where one is kept (`adam_update_bytes`).
F32, BF16 = 4, 2
ADAM_STATE = {"master": F32, "moments": 2 * F32}
MIXED = {"params": BF16, **ADAM_STATE, "grads": BF16}


def adam_update_bytes(gradient=BF16, copy=BF16):
    """HBM bytes per parameter of Adam's update: read master, moments and a `gradient`-byte
    gradient; write master, moments and a `copy`-byte bf16 copy (0 where none is kept)."""
    state = sum(ADAM_STATE.values())
    return (state + gradient) + (state + copy)


ADAM_UPDATE_BYTES = adam_update_bytes()  # MIXED's step: read 14, write 14


def _default_bandwidth(chip):
    """A ring's bandwidth inside a node or slice when none is given: a GPU's NVLink; for a TPU,
    2 links, one axis of a torus (a slice without wraparound has half that on each axis)."""
    return chip.link_bandwidth * (1 if chip.is_gpu else 2)


def data_parallel_threshold(chip, bandwidth=None, bytes_per_param=2, devices=None) -> float:
    """Tokens per device from which the backward pass hides data parallelism's gradients.

    A dense model's train step computes about 6 FLOPs per parameter and token, 2 forward and 4
    backward. The gradients exist only during the backward pass, so their all-reduce (2 ring
    passes of (n - 1) / n * P * bytes_per_param bytes) can overlap only its 4 P T FLOPs:

        4 P T / flops >= 2 (n - 1) / n * P * bytes_per_param / bandwidth
        T >= (n - 1) / n * bytes_per_param * flops / (2 * bandwidth)

    P cancels. With `devices=None`, (n - 1) / n is taken as 1, the large-ring limit. T counts
    the tokens of the backward pass the reduction overlaps: with gradient accumulation, a
    reduction deferred to the end of the step hides only behind the last micro-batch's backward
    pass, so T is then the tokens of one micro-batch.
    """
    bandwidth = bandwidth or _default_bandwidth(chip)
    return ring(devices, bytes_per_param) * chip.flops / (2 * bandwidth)


def fsdp_threshold(chip, bandwidth=None, bytes_per_param=2, devices=None) -> float:
    """Tokens per device from which FSDP's traffic hides, pass by pass: the same as data
    parallelism's. Forward, one all-gather of the weights against 2 P T FLOPs; backward,
    another all-gather and a reduce-scatter of the gradients against 4 P T. Each gives
    T >= (n - 1) / n * bytes_per_param * flops / (2 * bandwidth). With gradient accumulation
    FSDP gathers and reduces again for every micro-batch: T is the tokens of one micro-batch."""
    bandwidth = bandwidth or _default_bandwidth(chip)
    per_pass = ring(devices, bytes_per_param) / bandwidth  # seconds per parameter and pass
    forward = 1 * per_pass * chip.flops / 2  # tokens at which 2 P T FLOPs take as long as 1 pass
    backward = 2 * per_pass * chip.flops / 4
    return max(forward, backward)


def tensor_parallel_threshold(chip, bandwidth=None, bytes_per_value=2, devices=None) -> float:
    """Hidden width per shard from which a tensor-parallel layer hides its all-reduces, pass by
    pass.

    The layer is the site's relu(x @ W1) @ W2 with W1[embed, hidden@model] and
    W2[hidden@model, embed] over n devices, each with h = hidden / n columns of W1. Per token,
    the forward pass computes 4 * embed * h FLOPs and all-reduces embed values (2 ring passes of
    (n - 1) / n * embed * bytes_per_value bytes); the backward pass computes twice the FLOPs
    for one all-reduce. The forward pass binds, and nothing else can hide its all-reduce (the
    next layer needs the sum):

        4 * embed * h / flops >= 2 (n - 1) / n * embed * bytes_per_value / bandwidth
        h >= (n - 1) / n * bytes_per_value * flops / (2 * bandwidth)

    embed and the tokens cancel; 1.5 times the threshold of the whole step's totals. It holds
    only where a collective matmul splits the product so that its communication overlaps it
    (XLA's windowed einsum, PyTorch's async TP, on the all-gather and reduce-scatter sequence
    parallelism splits the all-reduce into); without one, the next layer waits for every
    all-reduce whatever h is (`StepTime.exposed`).
    """
    bandwidth = bandwidth or _default_bandwidth(chip)
    return ring(devices, bytes_per_value) * chip.flops / (2 * bandwidth)


def cross_node_data_parallel_threshold(node, nodes=None, bytes_per_param=2) -> float:
    """Tokens per chip from which the backward pass hides a hierarchical gradient all-reduce
    over `nodes` nodes (None: many) of `node`'s chips, its phases pipelined (the larger one
    counts). The cross-node phase sends 1/chips of the gradients per chip over its own NIC."""
    inside = ring(node.chips, 1) / node.bandwidth()
    across = ring(nodes, 1) / (node.chips * node.chip.network_bandwidth)
    seconds_per_byte = 2 * max(inside, across)  # 2 ring passes of each gradient byte
    return seconds_per_byte * bytes_per_param * node.chip.flops / 4


def ring_attention_block(chip, bandwidth, kv_fraction=1.0, skip_masked=False) -> float:
    """Tokens a ring-attention block needs for every ring step to hide its own transfer.

    Per ring step and device, in units of block x heads x head_dim: the forward pass computes
    q k^T and p v, 4 block^2 FLOPs, while the next key and value blocks arrive, 2 x 2 bytes in
    bf16 (`kv_fraction` of them: kv_heads / heads under grouped-query attention). Each step
    must hide its own transfer; pooling passes would let one pass's spare FLOPs hide another's
    bytes. The backward pass computes twice the FLOPs and sends at most twice the bytes (k, v,
    dk and dv in a hand-written backward ring; `jax.grad` of the forward ring sends dk and dv),
    so the forward pass binds:

        4 block^2 / flops >= kv_fraction * 4 block / bandwidth
        block >= kv_fraction * flops / bandwidth

    Twice that where the ring skips the causal mask's masked work (half the FLOPs, the same
    bytes).
    """
    return kv_fraction * chip.flops / bandwidth * (2 if skip_masked else 1)


# Collectives on their own links. A device of a multi-node mesh reaches the devices of its own
# node over NVLink and every other one over the network. Which link a collective uses follows
# from its device groups (`compiled.Collective.device_groups`) and the node of each device.


def nodes_of(mesh, node_size):
    """The node of each partition id of a program compiled for `mesh`: partition i runs on
    mesh.devices.flat[i], and devices 0..node_size-1 make node 0, the next node_size node 1."""
    return [int(d.id) // node_size for d in mesh.devices.flat]


def collective_on_links(c, node, node_of):
    """({"NVLink": bytes, "network": bytes} each device sends, seconds) of one run of a
    collective `c`, as NCCL runs it on `node`'s chips.

    A group inside one node is a ring over NVLink. A group that spans m nodes, k devices on each:
    - an all-reduce runs hierarchically: a ring of the k inside each node over NVLink, and a
      ring of the m nodes over the network that carries 1/k of the array per device (every
      device over its own NIC); the phases pipeline over chunks, so it takes the longer;
    - an all-gather or a reduce-scatter runs as one flat ring of all k m devices, node after
      node (one ring per channel, each crossing between nodes on its own NIC): every device
      sends (k m - 1) / (k m) of the array per pass, and m of the ring's k m hops cross nodes,
      so 1/k of that goes over each device's NIC and the rest over NVLink. On 2 nodes of 8 that
      is 1.875 times a hierarchical ring's network bytes.
    A collective-permute sends its array once, over the network if a pair crosses nodes.
    """

    if c.kind == "collective-permute":
        moving = [(s, t) for s, t in c.device_groups if s != t]
        crossing = any(node_of[s] != node_of[t] for s, t in moving)
        sent = c.nbytes if moving else 0
        link = "network" if crossing else "NVLink"
        bandwidth = node.chip.network_bandwidth if crossing else node.bandwidth()
        return {link: sent}, sent / bandwidth
    whole = c.nbytes * c.group if c.kind == "reduce-scatter" else c.nbytes
    passes = RING_PASSES[c.kind]
    group = c.device_groups[0]
    per_node = collections.Counter(node_of[d] for d in group)
    k, m = max(per_node.values()), len(per_node)
    if len(set(per_node.values())) > 1:
        raise ValueError(f"a group with unequal devices per node: {group}")
    if m > 1 and c.kind != "all-reduce":  # a flat ring over every device of the group
        flat = ring(k * m, whole, passes)  # what each device sends; 1 hop in k leaves the node
        inside, across = flat * (k - 1) / k, flat / k
    else:
        inside = ring(k, whole, passes)
        across = ring(m, whole / k, passes) if m > 1 else 0.0
    seconds = max(inside / node.bandwidth(), across / node.chip.network_bandwidth)
    return {"NVLink": inside, "network": across}, seconds


def per_link(rows, node, node_of):
    """({"NVLink": bytes, "network": bytes} each device sends per step, seconds per step) of
    a program's collectives, each on its own links (`collective_on_links`), one after another."""
    sent, seconds = {"NVLink": 0.0, "network": 0.0}, 0.0
    for c in rows:
        by_link, t = collective_on_links(c, node, node_of)
        for link, nbytes in by_link.items():
            sent[link] += c.per_step * nbytes
        seconds += c.per_step * t
    return sent, seconds


def context_parallel(chip, bandwidth, seq, heads, kv_heads, head_dim, devices, wire=BF16):
    """One attention layer's forward pass with its sequence split over `devices`, three ways.

    Returns {"compute": seconds, "ring": (bytes, exposed seconds), "all-gather": (...),
    "ulysses": (...)}, per device, at the chip's peak and `bandwidth` bytes/s per device.

    - compute: q k^T and p v over the whole seq x seq square (no masked work skipped),
      4 seq (seq / n) heads head_dim FLOPs per device.
    - ring: n - 1 steps, each sending the next key and value blocks (kv_heads of them) while it
      computes one block pair; a step whose transfer outlasts its compute exposes the rest
      (`ring_attention_block` is where it stops).
    - all-gather: every device gathers the keys and values it lacks, (n - 1) / n of them,
      before attending: exposed, unless other work overlaps it.
    - ulysses: all-to-alls trade the sequence split for a head split, for q, k and v and back
      for the output, each sending (n - 1) / n of a device's share: exposed. It needs `heads`
      divisible by n; with fewer key/value heads than devices, each is repeated to give every
      device one (so they count as n), and None is returned when heads % n.
    """
    n = devices
    compute = 4 * seq * (seq / n) * heads * head_dim / chip.flops
    block_kv = 2 * (seq / n) * kv_heads * head_dim * wire  # a device's k and v block
    step = max(0.0, block_kv / bandwidth - compute / n)
    ring = ((n - 1) * block_kv, (n - 1) * step)
    gathered = (n - 1) * block_kv
    out = {"compute": compute, "ring": ring, "all-gather": (gathered, gathered / bandwidth)}
    if heads % n:
        out["ulysses"] = None
    else:
        kv = max(kv_heads, n)
        sent = (n - 1) / n * (seq / n) * (2 * heads + 2 * kv) * head_dim * wire
        out["ulysses"] = (sent, sent / bandwidth)
    return out
