"""guide_helpers.figures: the charts the pages draw, from real programs here."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from support.programs import scanned_step

from guide_helpers import figures, hlo


def test_blocks_are_read_from_the_sharding(mesh):

    w = jax.device_put(jnp.ones((4, 256, 1024)), NamedSharding(mesh, P(None, "data", "model")))
    assert figures.drawn_axes(w) == (1, 2)
    drawn = figures.blocks(w)
    assert len(drawn) == 8 and all(len(b.devices) == 1 for b in drawn)
    assert drawn[0] == figures.HeldBlock((0, 128), (0, 256), (0,))
    assert drawn[-1] == figures.HeldBlock((128, 256), (768, 1024), (7,))
    x = jax.device_put(jnp.ones((16, 256)), NamedSharding(mesh, P("data")))
    assert [b.devices for b in figures.blocks(x)] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    whole = jax.device_put(jnp.ones(8), NamedSharding(mesh, P()))
    assert figures.blocks(whole) == [figures.HeldBlock((0, 1), (0, 8), tuple(range(8)))]
    # A split axis other than the last two is drawn, with the last one.
    qkv = jax.device_put(jnp.ones((128, 8, 3, 16)), NamedSharding(mesh, P(None, "model")))
    assert figures.drawn_axes(qkv) == (1, 3)
    cube = jax.device_put(jnp.ones((2, 4, 2)), NamedSharding(mesh, P("data", "model")))
    assert figures.drawn_axes(cube) == (0, 1)


def test_a_figure_refuses_three_split_axes():

    mesh3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"), axis_types=(AxisType.Auto,) * 3)
    cube = jax.device_put(jnp.ones((2, 2, 2)), NamedSharding(mesh3, P("a", "b", "c")))
    with pytest.raises(ValueError, match=r"two axes; this array is split along axes \[0, 1, 2\]"):
        figures.blocks(cube)


def test_device_labels_shorten_runs():
    from guide_helpers.figures import device_label

    assert device_label((0, 1, 2, 3)) == "0-3"
    assert device_label((0, 4)) == "0,4"
    assert device_label((0, 1, 3, 5, 6)) == "0-1,3,5-6"
    assert device_label(tuple(range(8)), total=8) == "all 8"


def test_figures_are_white_and_draw_every_array(mesh):

    x = jax.device_put(jnp.ones((16, 256)), NamedSharding(mesh, P("data")))
    fig = figures.layout({f"x{i}": x for i in range(5)}, columns=3)
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)  # readable on a dark page too
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 6 and len(visible) == 5
    assert [len(ax.patches) for ax in visible] == [2] * 5
    assert [t.get_text() for t in visible[0].texts] == ["0-3", "4-7"]


def test_traffic_adds_up_the_programs_collectives(mesh):

    rows = hlo.collectives(scanned_step(mesh))
    by_pass = figures.traffic(rows)
    for scope, direction, kind, group in by_pass:
        chosen = [
            c for c in rows
            if (figures.scope_of(c), c.direction, c.kind, c.group)
            == (scope, direction, kind, group)
        ]  # fmt: skip
        runs = [1 if c.where == "loop" else c.per_step for c in chosen]
        assert by_pass[scope, direction, kind, group] == sum(
            r * c.nbytes for r, c in zip(runs, chosen)
        )
    fig = figures.traffic_chart(rows, "t")
    bars = fig.axes[0].patches
    drawn = sorted(round(b.get_width() * 1024) for b in bars)
    assert fig.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    assert drawn == sorted(by_pass.values())  # one segment per entry


def test_a_chart_of_ranges_is_white_and_has_one_row_each():
    chart = figures.ranges_chart([("a", 1.1, (1.0, 1.2)), ("b", 3.0, (1.0, 1.2))])
    assert chart.get_facecolor() == (1.0, 1.0, 1.0, 1.0)
    assert [t.get_text() for t in chart.axes[0].get_yticklabels()] == ["a", "b"]
