"""Figures drawn from the arrays and programs a page asserts on, so that they cannot disagree.

- `blocks(array)`: the blocks of an array each group of devices holds, read from its sharding;
  `layout({name: array})` draws them, one panel per array, each block labelled by its devices.
- `traffic(rows)`: the bytes of a step's collectives (`guide_helpers.hlo.collectives`), by
  scope (each layer of a loop, or once per step), pass and kind; `traffic_chart(rows)` draws them.
- `ranges_chart(rows)`: measured values against predicted ranges, one row each.

Figures have an opaque white background, so that they read the same in the site's light and dark
themes. Each function returns a matplotlib Figure, which a notebook cell shows as its last value.
"""

import collections
from typing import NamedTuple

import matplotlib.pyplot as plt

# Colour-blind-safe colours (Okabe and Ito's palette), light enough for black labels.
PALETTE = ("#56B4E9", "#E69F00", "#009E73", "#F0E442", "#CC79A7", "#0072B2", "#D55E00", "#999999")
KIND_COLOURS = {
    "all-reduce": "#56B4E9",
    "all-gather": "#E69F00",
    "reduce-scatter": "#009E73",
    "all-to-all": "#CC79A7",
    "collective-permute": "#F0E442",
}
BACKGROUND = "white"


class HeldBlock(NamedTuple):
    rows: tuple  # (start, stop) along the figure's row axis
    cols: tuple  # (start, stop) along its column axis
    devices: tuple  # ids of the devices that hold this block, sorted


def _span(index, size):
    start, stop, _ = index.indices(size)
    return start, stop


def drawn_axes(array):
    """The two axes of an array a figure draws as rows and columns: its sharded axes, filled up
    with its last ones (a 1-D array is one row)."""
    if array.ndim < 2:
        return (None, 0) if array.ndim == 1 else (None, None)
    spec = array.sharding.devices_indices_map(array.shape)
    whole = tuple(slice(None).indices(n)[:2] for n in array.shape)
    split = sorted(
        {d for index in spec.values() for d, s in enumerate(index) if _span(s, array.shape[d])
         != whole[d]}
    )  # fmt: skip
    if len(split) > 2:
        raise ValueError(f"a figure draws two axes; this array is split along axes {split}")
    fill = [d for d in reversed(range(array.ndim)) if d not in split]
    return tuple(sorted(split + fill[: 2 - len(split)]))


def blocks(array):
    """The blocks of `array` that groups of devices hold, along `drawn_axes(array)`."""
    row_axis, col_axis = drawn_axes(array)
    held = collections.defaultdict(list)
    for device, index in array.sharding.devices_indices_map(array.shape).items():
        rows = _span(index[row_axis], array.shape[row_axis]) if row_axis is not None else (0, 1)
        cols = _span(index[col_axis], array.shape[col_axis]) if col_axis is not None else (0, 1)
        held[rows, cols].append(device.id)
    return sorted(HeldBlock(r, c, tuple(sorted(d))) for (r, c), d in held.items())


def device_label(ids, total=None):
    """ "0-3", "0,4", "all 8": the devices of a block, runs of consecutive ids shortened."""
    if total is not None and len(ids) == total:
        return f"all {total}"
    runs, start = [], ids[0]
    for prev, cur in zip(ids, ids[1:] + (None,)):
        if cur != prev + 1 if cur is not None else True:
            runs.append(str(start) if start == prev else f"{start}-{prev}")
            start = cur
    return ",".join(runs)


def _figure(panels, height, columns=None):
    columns = min(panels, columns or panels)
    rows = -(-panels // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, height * rows), squeeze=False)
    plt.close(fig)  # shown once, as the cell's value, not again by the inline backend
    fig.set_facecolor(BACKGROUND)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, axes.flat[:panels]


def _edges(values):
    """Ticks at the blocks' edges; only the ends where more than 5 would crowd the axis."""
    edges = sorted(set(values))
    return edges if len(edges) <= 5 else [edges[0], edges[-1]]


def layout(arrays, title=None, columns=4):
    """One panel per named array (`columns` to a row): its blocks, each labelled with the
    devices that hold it. `arrays` maps a label (such as "W1[embed, hidden]") to a jax.Array."""
    fig, axes = _figure(len(arrays), 2.9, columns)
    for ax, (label, array) in zip(axes, arrays.items()):
        total = array.sharding.num_devices
        row_axis, col_axis = drawn_axes(array)
        n_rows = array.shape[row_axis] if row_axis is not None else 1
        n_cols = array.shape[col_axis] if col_axis is not None else 1
        drawn = blocks(array)
        for i, b in enumerate(drawn):
            (r0, r1), (c0, c1) = b.rows, b.cols
            ax.add_patch(
                plt.Rectangle(
                    (c0, r0), c1 - c0, r1 - r0, facecolor=PALETTE[i % len(PALETTE)],
                    edgecolor="black", linewidth=1.2,
                )
            )  # fmt: skip
            ax.text((c0 + c1) / 2, (r0 + r1) / 2, device_label(b.devices, total),
                    ha="center", va="center", fontsize=9)  # fmt: skip
        ax.set(xlim=(0, n_cols), ylim=(n_rows, 0))
        ax.set_xticks(_edges(c for b in drawn for c in b.cols))
        ax.set_yticks(_edges(r for b in drawn for r in b.rows))
        ax.set_title(label, fontsize=10)
        ax.set_xlabel(f"axis {col_axis}" if col_axis is not None else "", fontsize=8)
        ax.set_ylabel(f"axis {row_axis}" if row_axis is not None else "", fontsize=8)
        ax.tick_params(labelsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def scope_of(c):
    """ "each layer" for a collective inside a loop's body, "once per step" otherwise."""
    return "each layer" if c.where == "loop" else "once per step"


def traffic(rows):
    """{(scope, pass, kind, group size): bytes}: the results' bytes of a step's collectives, for
    one run of a layer's body ("each layer") or for the whole step ("once per step"). The
    pages' loops run their body once per layer."""
    out = collections.Counter()
    for c in rows:
        runs = 1 if c.where == "loop" else c.per_step
        out[scope_of(c), c.direction, c.kind, c.group] += runs * c.nbytes
    return dict(sorted(out.items()))


def _kib(n):
    return f"{n / 1024:,.1f} KiB" if n >= 1024 else f"{n} B"


def traffic_chart(rows, title=None):
    """A horizontal bar per scope and pass, one segment per kind and group size, coloured by
    kind and labelled with its group where it is wide enough: the bytes `traffic(rows)` gives."""
    data = traffic(rows)
    bars = list(dict.fromkeys(key[:2] for key in data))
    kinds = [k for k in KIND_COLOURS if any(key[2] == k for key in data)]
    totals = [sum(n for key, n in data.items() if key[:2] == bar) for bar in bars]
    fig, (ax,) = _figure(1, 1.2 + 0.45 * len(bars))
    fig.set_size_inches(8, 1.2 + 0.45 * len(bars))
    xmax = 1.35 * max(totals) / 1024
    for y, bar in enumerate(bars):
        left = 0
        for (*_, kind, group), n in sorted(
            ((key, n) for key, n in data.items() if key[:2] == bar),
            key=lambda item: (kinds.index(item[0][2]), item[0][3]),
        ):
            ax.barh(y, n / 1024, left=left / 1024, color=KIND_COLOURS[kind],
                    edgecolor="black", height=0.6)  # fmt: skip
            if n / 1024 > 0.12 * xmax:
                ax.text((left + n / 2) / 1024, y, f"over {group}", ha="center", va="center",
                        fontsize=8)  # fmt: skip
            left += n
        ax.text(left / 1024, y, "  " + _kib(left), va="center", fontsize=9)
    ax.set_yticks(range(len(bars)), [f"{d}, {s}" for s, d in bars], fontsize=9)
    ax.set_ylim(len(bars) - 0.4, -0.6)
    ax.set_xlim(0, xmax)
    ax.set_xlabel("KiB per device: the bytes of the collectives' results", fontsize=9)
    ax.tick_params(labelsize=8)
    handles = [
        plt.Rectangle((0, 0), 1, 1, facecolor=KIND_COLOURS[k], edgecolor="black") for k in kinds
    ]
    ax.legend(handles, kinds, loc="lower right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def ranges_chart(rows, unit="ms", title=None):
    """One row per (label, measured, (low, high)): the predicted range as a bar, the measured
    value as a dot, each as a fraction of the range's low end, so that steps of any length
    share one axis."""
    fig, (ax,) = _figure(1, 1.0 + 0.4 * len(rows))
    fig.set_size_inches(8, 1.0 + 0.4 * len(rows))
    for y, (label, measured, (low, high)) in enumerate(rows):
        ax.barh(y, high / low - 1, left=1, color=PALETTE[0], edgecolor="black", height=0.5)
        ax.plot(measured / low, y, "o", color=PALETTE[6], markeredgecolor="black")
        ax.text(max(high / low, measured / low), y, f"  {measured:,.1f} {unit}", va="center",
                fontsize=8)  # fmt: skip
    ax.set_yticks(range(len(rows)), [label for label, _, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("measured (dot) and predicted range (bar), over the range's low end", fontsize=9)
    ax.tick_params(labelsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig
