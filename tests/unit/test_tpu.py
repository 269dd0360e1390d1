"""guide_helpers.hlo read on real TPU programs, compiled here by libtpu with no TPU attached.

`make setup` installs the TPU compiler (guide_helpers/requirements-tpu.txt); without it these
tests fail and say how to install it, rather than skip.
"""

import re

import jax
import pytest

from guide_helpers import hlo, tpu

# Collected before any test runs, so before JAX starts its backend in this process.
jax.config.update("jax_num_cpu_devices", 8)

import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

LAYERS, EMBED, HIDDEN, BATCH = 3, 256, 1024, 64


def fsdp_gradient(devices):
    """The gradient of a scanned two-matmul layer, weights split over 'data' (FSDP), compiled
    for `devices` from abstract arguments only."""
    mesh = jax.make_mesh((8,), ("data",), (AxisType.Auto,), devices=devices)

    def arg(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    def loss(w, x):
        def layer(h, wl):
            return jax.nn.relu(h @ wl[0]) @ wl[1], None

        return jnp.mean(jax.lax.scan(layer, x, w)[0] ** 2)

    w1 = arg((LAYERS, EMBED, HIDDEN), P(None, "data"))
    w = (w1, arg((LAYERS, HIDDEN, EMBED), P(None, None, "data")))
    x = arg((BATCH, EMBED), P("data"))
    kept = tuple(a.sharding for a in w)  # each device keeps its shard of the gradients
    return jax.jit(jax.grad(loss), out_shardings=kept).lower(w, x).compile()


@pytest.fixture(scope="module")
def programs():
    try:
        chips = tpu.topology("v5e:2x4")
    except tpu.TPUCompilerMissing as error:
        pytest.fail(str(error))
    return {"cpu": fsdp_gradient(jax.devices("cpu")), "tpu": fsdp_gradient(chips)}


def test_a_missing_compiler_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(tpu, "LIBTPU_DIR", tmp_path)
    monkeypatch.setattr(tpu, "library_path", lambda: None)
    with pytest.raises(tpu.TPUCompilerMissing, match="make setup"):
        tpu.topology("v5e:2x4")


def test_the_pin_is_read_from_its_one_file():
    assert tpu.PINS.name == "requirements-tpu.txt" and tpu.PINS.parent.name == "guide_helpers"
    assert re.fullmatch(r"libtpu==\d+\.\d+\.\d+(\.\d+)?", tpu.LIBTPU), tpu.LIBTPU


def test_topologies_give_compile_only_chips():
    v5e, v5p = tpu.topology("v5e:2x4"), tpu.topology("v5p:2x2x2")
    assert [len(v5e), len(v5p)] == [8, 8]
    assert {d.device_kind for d in v5e} == {"TPU v5 lite"}
    assert {d.device_kind for d in v5p} == {"TPU v5"}
    with pytest.raises(Exception):  # noqa: B017  (compile only: nothing can be put there)
        jax.device_put(jnp.ones(2), v5e[0])


def test_trip_counts_come_from_the_loop_condition(programs):
    # The TPU program states no known_trip_count; the readers count the loops from their
    # conditions, so the scanned layers run LAYERS times, as on the CPU.
    assert "known_trip_count" not in programs["tpu"].as_text()
    per_step = {c.per_step for c in hlo.collectives(programs["tpu"]) if c.where == "loop"}
    assert per_step == {LAYERS}
    assert hlo.matmul_flops(programs["tpu"]) == hlo.matmul_flops(programs["cpu"])
    assert hlo.matmul_flops(programs["tpu"]) == 6 * 2 * BATCH // 8 * EMBED * HIDDEN * LAYERS


def test_tpu_async_collectives_are_counted_once_with_their_overlap(programs):
    rows = hlo.collectives(programs["tpu"])
    gathers = [c for c in rows if c.kind == "all-gather"]
    # Each weight gathered forward and backward, once each, in bf16 (whole layers of W1, W2).
    assert sum(c.per_step for c in gathers) == 4 * LAYERS
    assert {c.shape.split("[")[0] for c in gathers} == {"bf16"}
    assert any(c.asynchronous and c.overlapped for c in gathers)
    assert not any(c.asynchronous for c in hlo.collectives(programs["cpu"]))


def test_the_tpu_reduce_scatters_what_the_cpu_all_reduces(programs):
    def gradient_sums(name):  # {(kind, (dims of each array))}, the gathers left out
        rows = hlo.collectives(programs[name])
        return {
            (c.kind, tuple(sorted(tuple(d) for _, d in hlo.arrays(c.shape))))
            for c in rows
            if c.kind != "all-gather"
        }

    shards = ((EMBED // 8, HIDDEN), (HIDDEN, EMBED // 8))  # W1's and W2's gradient shards
    assert gradient_sums("tpu") == {("reduce-scatter", tuple(sorted(shards)))}
    whole = ((EMBED, HIDDEN), (HIDDEN, EMBED))
    assert gradient_sums("cpu") == {("all-reduce", tuple(sorted(whole)))}


def test_products_say_what_is_fused_and_in_what_precision(programs):
    tpu_products, cpu_products = hlo.products(programs["tpu"]), hlo.products(programs["cpu"])
    assert {p.op for p in tpu_products} == {"convolution"}
    # The TPU fuses products with the relu's backward (select) and with in-flight gathers.
    assert any("select" in p.fused for p in tpu_products)
    assert any("all-gather" in p.fused for p in tpu_products)
    assert all("bf16" in p.operands for p in tpu_products)  # default precision: bf16 passes
    assert {p.op for p in cpu_products} == {"dot"}
    assert all(p.operands == ("f32", "f32") and not p.fused for p in cpu_products)


def test_layouts_are_stripped_from_tpu_shapes():
    assert hlo._strip_layout("(f32[32,1024]{1,0:T(8,128)S(1)}, bf16[2]{0:T(256)(2,1)})") == (
        "(f32[32,1024], bf16[2])"
    )
    assert hlo._strip_layout("f32[]{:T(128)}") == "f32[]"


def batched_scores(devices):
    """Attention's per-head scores, `bqhd,bkhd->bhqk`, split over 8 devices by batch: a batched
    product, which a TPU writes as a convolution whose window spans the batch and heads."""
    mesh = jax.make_mesh((8,), ("data",), (AxisType.Auto,), devices=devices)
    q = jax.ShapeDtypeStruct(
        (32, 64, 4, 16), jnp.bfloat16, sharding=NamedSharding(mesh, P("data"))
    )
    scores = jax.jit(lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k))
    return scores.lower(q, q).compile()


def test_a_batched_product_counts_once_on_the_tpu():
    """2 x batch x heads x q x k x d per device, whatever form the compiler writes it in."""
    expected = 2 * (32 // 8) * 4 * 64 * 64 * 16
    cpu, tpu_program = batched_scores(jax.devices("cpu")), batched_scores(tpu.topology("v5e:2x4"))
    assert hlo.matmul_flops(cpu) == hlo.matmul_flops(tpu_program) == expected
    assert {p.op for p in hlo.products(tpu_program)} == {"convolution"}


# The two forms of convolution found in a TPU program of the site's transformer (v5e 2x4,
# tensor parallel), reduced to what the reader uses: a batched product over a dilated input (the
# window spans a batch of 4 and 2 heads, one real element per window) and one over padding.
def program(lhs, rhs, out, attrs):
    """A one-convolution HLO program with these shapes and attributes."""
    return (
        "ENTRY %main {\n"
        f"  %a = {lhs} parameter(0)\n  %b = {rhs} parameter(1)\n"
        f"  ROOT %c = {out} convolution(%a, %b), {attrs}\n}}\n"
    )


DILATED = program(
    "bf16[4,16,2,64]{3,2,1,0}",  # 0f1b: batch 4, 16 features, 2 heads, 64 positions
    "bf16[4,64,2,64]{3,2,1,0}",
    "f32[4,2,64,64]{3,2,1,0}",
    "window={size=4x2 stride=3x1 lhs_dilate=4x2}, dim_labels=0f1b_0o1i->01bf",
)
PADDED = program(
    "f32[4,64,16,1]{3,2,1,0}",  # 0bf1: a spatial dimension of 1, padded to 3
    "f32[2,16,16,1]{3,2,1,0}",
    "f32[4,64,2,16]{3,2,1,0}",
    "window={size=1x2 pad=0_0x1_1 rhs_reversal=0x1}, dim_labels=0bf1_1oi0->0b1f",
)


def test_convolution_flops_count_only_taps_on_real_elements():
    # dilated: per output element 16 features x 1 real tap of the 4x2 window
    assert hlo.matmul_flops(DILATED) == 2 * (4 * 2 * 64 * 64) * 16 * 1
    # padded: input 1 wide, window 2, pad 1 each side: 2 outputs, 1 real tap each
    assert hlo.matmul_flops(PADDED) == 2 * (4 * 64 * 2 * 16) * 16 * 1
