"""guide_helpers.buffers, what fills a compiled program's memory: a small CPU train step whose
arrays are known, a hand-made heap, the TPU compiler's refusal, and a refused TPU program read
from its dump and from a plan alone."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
import pytest
from conftest import ROOT

from guide_helpers import buffers, hlo

B, S, E, V = 4, 16, 32, 1000  # batch, sequence, width, vocabulary: every size distinct
OPTIMIZER = optax.adam(1e-3)


def loss(params, tokens):
    x = params["embed"][tokens[:, :-1]]
    h = jnp.tanh(x @ params["w"])
    logits = h @ params["head"]  # the logits' line, read back from the program
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()


def step(state, tokens):
    params, opt_state = state
    value, grads = jax.value_and_grad(loss)(params, tokens)
    updates, opt_state = OPTIMIZER.update(grads, opt_state)
    return (optax.apply_updates(params, updates), opt_state), value


def arguments():
    shapes = {"embed": (V, E), "w": (E, E), "head": (E, V)}
    params = {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
    tokens = jax.ShapeDtypeStruct((B, S + 1), jnp.int32)
    return (params, jax.eval_shape(OPTIMIZER.init, params)), tokens


KINDS = (("parameters", "optimizer state"), "batch")
LOGITS_LINE = next(
    i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
    if "# the logits' line" in line
)  # fmt: skip


@pytest.fixture(scope="module")
def listing():
    args = arguments()
    lowered = jax.jit(step, donate_argnums=0).lower(*args)
    return buffers.compile_listing(lowered, V, S, buffers.argument_kinds(args, KINDS))


def test_argument_kinds_name_each_array_as_the_program_does():
    kinds = buffers.argument_kinds(arguments(), KINDS)
    assert kinds[:3] == [("[0]['embed']", "parameters"), ("[0]['head']", "parameters"),
                         ("[0]['w']", "parameters")]  # fmt: skip
    assert ("[1][0].mu['head']", "optimizer state") in kinds and kinds[-1] == ("", "batch")
    assert len(kinds) == 3 + 1 + 6 + 1  # params, Adam's count, its two moments, the tokens


def test_the_arguments_are_listed_exactly(listing):
    param_bytes = 4 * (2 * V * E + E * E)
    assert listing.by_kind["parameters"] == param_bytes
    assert listing.by_kind["optimizer state"] == 2 * param_bytes + 4  # the moments and a count
    assert listing.by_kind["batch"] == 4 * B * (S + 1)
    head = next(b for b in listing.buffers if b.op_name == "state[0]['head']")
    assert (head.nbytes, head.kind, head.shape) == (4 * E * V, "parameters", f"f32[{E},{V}]")


def test_the_logits_are_found_with_their_line(listing):
    logits = [b for b in listing.buffers if b.kind == "logits"]
    made = next(b for b in logits if b.op_name == "jit(step)/jvp()/dot_general")
    assert made.nbytes == 4 * B * S * V and made.shape in (
        f"f32[{B * S},{V}]",
        f"f32[{B},{S},{V}]",
    )
    assert made.source == f"test_buffers.py:{LOGITS_LINE}"
    assert {b.kind for b in listing.buffers if b.nbytes >= made.nbytes} == {"logits"}  # largest


def test_kinds_add_up_to_every_allocation(listing):
    assert sum(listing.by_kind.values()) == listing.total
    assert 0 <= listing.total - hlo.memory(listing.compiled).peak_bound < 256  # a few scalars
    assert list(listing.by_kind.values()) == sorted(listing.by_kind.values(), reverse=True)
    assert set(listing.by_kind) <= set(buffers.KINDS) and listing.fits(listing.total)
    kinds = {b.kind for b in listing.buffers}
    assert {"gradients", "saved activations", "logits"} <= kinds
    tanh = next(b for b in listing.buffers if b.op_name.endswith("jvp()/tanh"))
    assert tanh.kind == "saved activations"  # the backward pass reads it


def test_each_byte_of_a_heap_goes_to_its_largest_value():
    values = [  # (id, name, size, offset, shape, kind): b and c reuse a's and d's bytes
        (0, "a", 100, 0, "f32[25]", "logits"),
        (1, "b", 40, 0, "f32[10]", "saved activations"),
        (2, "c", 30, 120, "f32[8]", "saved activations"),
        (3, "d", 60, 110, "f32[15]", "attention scores"),
    ]
    charged = buffers._charge(values, 200)  # 10 bytes between a and d, 30 after d: unused
    assert charged == {"logits": 100, "attention scores": 60, "scratch": 40}


def test_the_refusal_reads_as_bytes():
    path = ROOT / "guide_helpers" / "measured" / "tpu_v5e_llama_2026-12-07.jsonl"
    records = map(json.loads, path.read_text().splitlines())
    message = next(r for r in records if r.get("refused"))["refused"]
    assert buffers.refused_bytes(message) == (round(18.42 * 2**30), round(15.75 * 2**30))
    assert buffers.refused_bytes("INTERNAL: something else") is None


def test_a_refused_tpu_program_is_listed_from_its_dump_and_from_its_plan():
    pytest.importorskip("guide_helpers.tpu").library_path() or pytest.skip("no libtpu")
    from guide_helpers.tpu import topology

    fields = dict(vocab=32000, embed=256, heads=2, kv_heads=1, hidden=512, layers=1, seq=512,
                  batch=256)  # fmt: skip
    lowered, kinds = buffers.lowered_llama(fields, topology("v5e:2x2")[0])
    compiled = buffers.compile_listing(lowered, 32000, 512, kinds)
    needed, available = buffers.refused_bytes(compiled.refused)
    assert compiled.compiled is None and abs(compiled.total - needed) < 0.006 * 2**30
    assert not compiled.fits(available) and compiled.by_kind["logits"] > available / 2
    planned = buffers.plan("guide_helpers.buffers:lowered_llama", fields, vocab=32000, seq=512)
    assert (planned.total, planned.by_kind, planned.refused) == (
        compiled.total, compiled.by_kind, compiled.refused,
    )  # fmt: skip


def test_a_plan_that_fits_stops_before_the_code_and_a_failure_says_why():
    pytest.importorskip("guide_helpers.tpu").library_path() or pytest.skip("no libtpu")
    fields = dict(vocab=512, embed=128, heads=2, kv_heads=1, hidden=256, layers=1, seq=64,
                  batch=2, tied=True)  # fmt: skip
    planned = buffers.plan("guide_helpers.buffers:lowered_llama", fields, vocab=512, seq=64)
    assert not planned.refused and planned.compiled is None and planned.fits(2**30)
    params = 4 * (512 * 128 + 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 + 3 * 128)
    assert planned.by_kind["parameters"] >= params  # each in whole (8, 128) tiles, padded
    assert sum(planned.by_kind.values()) == planned.total
    with pytest.raises(RuntimeError, match="no_such_builder"):
        buffers.plan("guide_helpers.buffers:no_such_builder", fields)
