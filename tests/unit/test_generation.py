"""guide_helpers.generation: the chip's record of generation, held to the formulas."""

from guide_helpers import generation
from guide_helpers import llama_family as lf


def test_the_generation_record_is_llama_3_2_1b_in_bf16_and_its_counts_are_the_formulas():
    provenance, prefills, decodes = generation.load()
    config = lf.LLAMA_3_2_1B
    assert provenance["chip"] == "TPU v5 lite" and provenance["step"] == "docs/generate_text.md"
    assert provenance["param_bytes"] == 2 * config.params  # bf16
    assert [(r["batch"], r["prompt"]) for r in prefills] == [(1, 2048), (4, 2048), (16, 512),
                                                             (64, 128)]  # fmt: skip
    assert len(decodes) == 12 and all(r["fits"] for r in prefills + decodes)
    attention = 4 * config.layers * config.heads * config.head_dim
    for r in decodes:
        cache = 2 * config.layers * r["batch"] * r["context"] * config.kv_heads * config.head_dim
        # beside weights and cache: the tokens and the position, each padded to 512 bytes
        padded = -(-4 * r["batch"] // 512) * 512 + 512
        assert r["argument_bytes"] == 2 * config.params + 2 * cache + padded
        products = 2 * config.matmul_params * (r["batch"] > 1)  # at batch 1 they are no dots
        assert r["matmul_flops"] == r["batch"] * (products + attention * r["context"])
