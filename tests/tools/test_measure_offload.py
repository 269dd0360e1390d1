"""tools/measure_offload.py: what it records, on the CPU, and what it says where it cannot run."""

import json
import subprocess
import sys

import jax
from conftest import ROOT

from guide_helpers import offload

TOOL = ROOT / "tools" / "measure_offload.py"


def test_the_tool_records_every_placement_with_its_provenance(tmp_path):
    out = tmp_path / "offload.jsonl"
    args = ["--grid", "tiny", "--platform", "cpu", "--steps", "2", "--warmup", "0"]
    result = subprocess.run(
        [sys.executable, str(TOOL), *args, "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    provenance, records = offload.load(out)
    assert provenance["platform"] == "cpu" and provenance["versions"]["jax"] == jax.__version__
    assert "tools/measure_offload.py" in provenance["command"] and provenance["date"]
    assert [r["where"] for r in records] == list(offload.WHERE)
    for r in records:
        low, high = r["measured_ms_min_max"]
        assert low <= r["measured_ms_median"] <= high and len(r["losses"]) == 2
        assert r["transfers"] == {"to host": 0, "to device": 0}  # on CPU nothing moves
    assert len({tuple(r["losses"]) for r in records}) == 1
    assert json.loads(out.read_text().splitlines()[0])["provenance"] == provenance


def test_the_tool_says_where_to_run_it(tmp_path):
    env = {"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, str(TOOL), "--out", "x.jsonl"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "run this on a TPU host" in result.stderr
