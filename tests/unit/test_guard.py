"""guide_helpers.guard: a step's record, its changes part by part, and the file it is kept in."""

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from guide_helpers import guard

MESH = jax.make_mesh((2, 4), ("data", "model"), (AxisType.Auto,) * 2)


def lowered(spec):
    """A step whose weight is laid out by `spec`: y = x @ w, summed over the batch."""
    w = jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(MESH, spec))
    x = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(MESH, P("data")))
    return jax.jit(lambda params, x: (params, (x @ params["w"]).sum())).lower({"w": w}, x)


def test_a_record_holds_layouts_bytes_and_collectives():
    record = guard.record(lowered(P("model")), MESH)
    assert record["arguments"] == {"0.w": "P('model',), 128 B", "1": "P('data',), 256 B"}
    assert record["outputs"]["0.w"] == "P('model',), 128 B"
    assert record["outputs"]["1"] == "P(), 4 B"
    # the product's parts summed over 'model', the batch's over 'data'
    assert record["collectives"] == {"all-reduce over data, forward": 1,
                                     "all-reduce over model, forward": 1}  # fmt: skip


def test_trailing_nones_do_not_count_as_a_change():
    assert guard.record(lowered(P("model", None)), MESH) == guard.record(lowered(P("model")), MESH)


def test_a_change_is_listed_part_by_part(monkeypatch):
    monkeypatch.delenv(guard.UPDATE, raising=False)
    golden = {"step": guard.record(lowered(P("model")), MESH)}
    now = guard.record(lowered(P()), MESH)
    assert guard.changes(golden, "step", golden["step"]) == ""
    lines = guard.changes(golden, "step", now).splitlines()
    assert lines[0].startswith("step: the layout changed (if meant: UPDATE_LAYOUTS=1 records it")
    assert lines[1:4] == ["arguments",
                         "  - 0.w: P('model',), 128 B", "  + 0.w: P(), 512 B"]  # fmt: skip
    assert "collectives" in lines and "outputs" in lines
    assert guard.changes({}, "new", now) == "new: not recorded; UPDATE_LAYOUTS=1 records it"


def test_update_records_and_the_file_round_trips(monkeypatch, tmp_path):
    monkeypatch.setenv(guard.UPDATE, "1")
    golden, now = {}, guard.record(lowered(P()), MESH)
    assert guard.changes(golden, "step", now) == "" and golden == {"step": now}
    path = tmp_path / "layouts.json"
    assert guard.read_golden(path) == {}
    guard.write_golden(path, golden)
    assert guard.read_golden(path) == golden
