"""guide_helpers.llama_family: exact parameter counts, FLOPs as the program counts them, rotary
embeddings, and a step that trains."""

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from guide_helpers import hlo
from guide_helpers import llama_family as lf

TINY = lf.LlamaConfig(vocab=512, embed=128, heads=4, kv_heads=2, hidden=256, layers=2, seq=32,
                      batch=4, tied=True)  # fmt: skip
CPU = jax.devices("cpu")[0]
MEASURED = Path(lf.__file__).parent / "measured"


def test_llama_3_2_1b_has_its_published_parameter_count_tied_once():
    params, opt_state = lf.abstract_state(lf.LLAMA_3_2_1B)  # shapes only: nothing allocated
    assert lf.parameter_count(params) == lf.LLAMA_3_2_1B.params == 1_235_814_400
    untied = dataclasses.replace(lf.LLAMA_3_2_1B, tied=False)
    count = lf.parameter_count(lf.abstract_state(untied)[0])
    assert count == untied.params == 1_235_814_400 + 128256 * 2048
    assert "lm_head" not in params
    assert {a.dtype for a in jax.tree.leaves(params)} == {jnp.dtype("float32")}
    assert lf.parameter_count(opt_state) == 2 * lf.LLAMA_3_2_1B.params + 1  # mu, nu and a count


@pytest.mark.parametrize("tied, remat", [(True, "none"), (False, "dots"), (False, "block")])
def test_matmul_flops_are_the_compiled_programs(tied, remat):
    config = dataclasses.replace(TINY, tied=tied, remat=remat)
    state = jax.eval_shape(lambda: lf.init(config))
    tokens = jax.ShapeDtypeStruct((config.batch, config.seq + 1), jnp.int32)
    with jax.default_device(CPU):
        program = lf.jitted(config).lower(state, tokens).compile()
    assert hlo.matmul_flops(program) == config.matmul_flops()


def test_model_flops_count_the_tied_head_and_half_the_attention_square():
    untied = dataclasses.replace(TINY, tied=False)
    assert TINY.model_flops() == untied.model_flops()  # the tied table is still the head
    E, V, T = TINY.embed, TINY.vocab, TINY.tokens
    head = 6 * E * V * T
    attention = 6 * TINY.layers * E * TINY.seq * T  # forward and backward, causal half
    assert TINY.model_flops() == 6 * TINY.layers * TINY.layer_matrices * T + head + attention


def test_rotary_embeddings_keep_norms_and_see_only_offsets():
    x = jax.random.normal(jax.random.key(0), (1, 8, 2, 16))
    positions = jnp.arange(8)
    turned = lf.rotary(x, positions)
    np.testing.assert_allclose(turned[:, 0], x[:, 0])  # position 0 is not rotated
    norms = jnp.linalg.norm(turned, axis=-1), jnp.linalg.norm(x, axis=-1)
    assert float(jnp.max(jnp.abs(norms[0] - norms[1]))) < 1e-5
    q, k = x[0, 0, 0], x[0, 1, 0]

    def score(i, j):
        return jnp.dot(lf.rotary(q[None, None, None], jnp.array([i]))[0, 0, 0],
                       lf.rotary(k[None, None, None], jnp.array([j]))[0, 0, 0])  # fmt: skip

    assert abs(float(score(5, 2) - score(13, 10))) < 1e-4  # the same offset, the same score
    assert abs(float(score(5, 2) - score(5, 3))) > 1e-3


def test_the_step_trains_and_donates_its_state():
    with jax.default_device(CPU):
        state, tokens = lf.init(TINY), lf.tokens_for(TINY)
        step = lf.jitted(TINY)
        first = state[0]["embed_tokens"]
        losses = []
        for _ in range(4):
            state, loss = step(state, tokens)
            losses.append(float(loss))
    assert first.is_deleted()  # donated to the step
    assert losses[-1] < losses[0] - 0.1 and np.isfinite(losses).all()


def test_a_config_refuses_what_it_cannot_build():
    with pytest.raises(ValueError, match="remat"):
        dataclasses.replace(TINY, remat="some")
    with pytest.raises(ValueError, match="kv_heads"):
        dataclasses.replace(TINY, kv_heads=3)


def test_the_chips_record_of_the_family_agrees_with_the_models_own_counts():
    """The v5e record (five calls of 2026-12-07): at least 12 distinct configurations measured,
    each one's parameters, model FLOPs and MFU those the model's formulas give for its config."""
    measured, refused = {}, set()
    for path in sorted((MEASURED).glob("tpu_v5e_llama_*.jsonl")):
        first, *records = (json.loads(line) for line in path.read_text().splitlines())
        assert first["provenance"]["chip"] == "TPU v5 lite", path
        assert first["provenance"]["versions"]["jax"] == "0.10.2", path
        for record in (r for r in records if r.get("skipped") != "budget"):
            config = lf.LlamaConfig(**record["config"])
            assert record["params_M"] == round(config.params / 1e6, 1), record["what"]
            if record.get("fits"):
                assert record["model_flops"] == config.model_flops()
                seconds = record["measured_ms_median"] / 1e3
                assert record["mfu"] == pytest.approx(
                    config.model_flops() / seconds / 197e12, abs=6e-4
                )
                measured[record["what"]] = record
            elif "refused" in record:
                refused.add(record["what"])
    assert len(measured) >= 12 and len(refused) == 2
    assert {r["config"]["remat"] for r in measured.values()} == {"none", "dots", "block"}
    assert {r["config"]["tied"] for r in measured.values()} == {True, False}
