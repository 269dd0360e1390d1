"""Generation measured on a chip: tools/measure_decode.py's record of the generate_text page's
cached forward pass, on one TPU v5e chip, at Llama 3.2 1B's shapes in bf16
(`guide_helpers.llama_family.LLAMA_3_2_1B`).

- `RECORDED_V5E`: the record (guide_helpers/measured/README.md says how it was made).
- `load(path)`: (provenance, [prefill record], [decode record]); a record that the tool's budget
  skipped is left out.
"""

import json
from pathlib import Path

# tools/measure_decode.py on one TPU v5e chip lent on 2026-12-07
RECORDED_V5E = Path(__file__).parent / "measured" / "tpu_v5e_decode_2026-12-07.jsonl"


def load(path=RECORDED_V5E):
    """(provenance, [prefill record], [decode record]) of a tools/measure_decode.py file."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    records = [r for r in lines[1:] if "skipped" not in r]
    kinds = [[r for r in records if r["what"] == what] for what in ("prefill", "decode")]
    return lines[0]["provenance"], *kinds
