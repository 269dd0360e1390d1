"""A step file for tools/measure_step.py: `guide_helpers.llama_family`, a Llama-shaped decoder
(RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, tied or untied embeddings), f32
parameters and AdamW, bf16 compute, its state donated.

`configurations()` is the list for one TPU v5e chip (issue 61): width, depth, key/value heads,
vocabulary (32,000 to 128,256, tied and untied), sequence, batch and remat vary; each fits the
chip's 15.75 GiB as compiled by libtpu (`--compile-only v5e:2x2`), but for the first two, which
the compiler refuses. The others run in order of their compiled peaks, smallest first, as the
chip's `peak_bytes_in_use` is a maximum over the process. `configurations("tiny")`: two
small ones for the CPU; `configurations("too_big")`: one no chip holds.
"""

from functools import partial

import jax
import jax.numpy as jnp

from guide_helpers.llama_family import LlamaConfig, abstract_state, init, jitted, tokens_for


def llama(embed, hidden, layers, heads, kv_heads, vocab, seq, batch, tied=False, remat="none"):
    return LlamaConfig(vocab, embed, heads, kv_heads, hidden, layers, seq, batch, tied, remat)


SETS = {
    "tiny": [
        llama(128, 256, 2, 4, 2, 512, 32, 4, tied=True),
        llama(128, 256, 2, 4, 1, 512, 32, 4, remat="block"),
    ],
    "too_big": [llama(8192, 28672, 2, 64, 8, 128256, 4096, 8)],
    # Compiled for one v5e chip with libtpu here (--compile-only v5e:2x2): peak bound in GB
    # (arguments + outputs + scratch - aliased) at the end of each line. The two the compiler
    # refuses come first (they compile in seconds and allocate nothing), then the others in
    # the order of their compiled peaks, as the chip's peak_bytes_in_use is the process's.
    "v5e": [
        # Llama 3.2 1B's shapes: AdamW's f32 state alone is 19.8 GB (refused: 18.42G of HBM)
        llama(2048, 8192, 16, 32, 8, 128256, 1024, 4, tied=True, remat="block"),
        # 16,384 tokens' f32 logits over 128,256 words (refused: 40.66G)
        llama(2048, 8192, 6, 32, 8, 128256, 2048, 8),
        llama(1024, 4096, 8, 8, 1, 32000, 4096, 2, tied=True, remat="dots"),  # 5.600
        llama(1024, 4096, 24, 16, 4, 49152, 1024, 8, tied=True, remat="block"),  # 9.189
        llama(1536, 4096, 12, 12, 4, 32000, 2048, 4, tied=True, remat="dots"),  # 9.569
        llama(1536, 6144, 8, 12, 2, 100352, 1024, 4, tied=True, remat="dots"),  # 9.684
        llama(2048, 8192, 4, 16, 2, 128256, 2048, 1, remat="dots"),  # 12.210
        llama(2048, 8192, 8, 32, 8, 128256, 1024, 2, tied=True, remat="block"),  # 12.238
        llama(2048, 5632, 8, 16, 8, 32000, 2048, 2),  # 12.878
        llama(4096, 11008, 2, 32, 32, 32000, 2048, 2),  # 13.040
        llama(3072, 8192, 4, 24, 8, 32000, 2048, 2),  # 13.206
        llama(1024, 3584, 12, 8, 2, 32000, 2048, 4),  # 13.492
        llama(2560, 6912, 6, 20, 4, 50304, 2048, 4, remat="dots"),  # 13.685
        llama(2048, 6144, 8, 16, 4, 32000, 8192, 1, remat="block"),  # 13.931
    ],
}


def configurations(name="v5e"):
    return SETS[name]


def build(config):
    """The jitted step, its (state, tokens) abstract or made, and the model's FLOPs per step."""

    def arguments(abstract):
        if abstract:
            tokens = jax.ShapeDtypeStruct((config.batch, config.seq + 1), jnp.int32)
            return abstract_state(config), tokens
        return jax.jit(partial(init, config))(), tokens_for(config)

    return jitted(config), arguments, config.model_flops()
