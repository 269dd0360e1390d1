"""tools/measure_decode.py: it times the page's own code, records what it says, and refuses to
run where there is no chip."""

import json
import subprocess
import sys

import jax
from conftest import ROOT

TOOL = ROOT / "tools" / "measure_decode.py"
sys.path.insert(0, str(ROOT / "tools"))
import measure_decode  # noqa: E402  (tools/)


def test_the_code_measured_is_the_pages():
    code = measure_decode.page_code()
    assert set(code) == {"empty_cache", "attend", "forward"}
    assert all(f.__code__.co_filename == str(measure_decode.PAGE) for f in code.values())


def test_a_page_without_the_code_is_named(tmp_path):
    page = tmp_path / "generate_text.md"
    page.write_text("```{code-cell} ipython3\ndef empty_cache(config):\n    pass\n```\n")
    try:
        measure_decode.page_code(page)
    except SystemExit as error:
        assert str(error) == "generate_text.md no longer defines attend, forward: update this tool"
    else:
        raise AssertionError("a page without attend and forward was accepted")


def test_the_tool_records_prefill_and_decode_with_provenance(tmp_path):
    out = tmp_path / "decode.jsonl"
    args = ["--grid", "tiny", "--platform", "cpu", "--repeats", "2", "--out", str(out)]
    result = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                            timeout=600, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    head, *records = (json.loads(line) for line in out.read_text().splitlines())
    provenance = head["provenance"]
    assert provenance["platform"] == "cpu" and provenance["versions"]["jax"] == jax.__version__
    assert provenance["step"] == "docs/generate_text.md" and provenance["hbm"]["read_GBps"] > 0
    assert [(r["what"], r["batch"]) for r in records] == [
        ("prefill", 2), ("decode", 2), ("decode", 4)]  # fmt: skip
    config = measure_decode.grid("tiny")[0]
    for r in records[1:]:
        low, high = r["measured_ms_min_max"]
        assert r["fits"] and low <= r["measured_ms_median"] <= high
        # a step multiplies each weight once a sequence and attends over the whole context
        attention = 4 * config.layers * config.heads * config.head_dim * r["context"]
        assert r["matmul_flops"] == r["batch"] * (2 * config.matmul_params + attention)
        cache = 2 * config.layers * r["batch"] * r["context"] * config.kv_heads * config.head_dim
        assert r["argument_bytes"] == provenance["param_bytes"] + 2 * cache + 4 * r["batch"] + 4


def test_the_tool_says_where_to_run_it(tmp_path):
    env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, str(TOOL), "--out", "x.jsonl"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "run this on a TPU host" in result.stderr
    assert not (tmp_path / "x.jsonl").exists()
