"""tools/bench.py's file of rounds: a row is read by its key and machine, whatever else it has."""

import json

import bench


def test_recorded_keeps_the_rows_of_its_key_and_machine_and_skips_a_row_without_one(tmp_path):
    rounds = tmp_path / "rounds.jsonl"
    rows = [
        {"key": "tree:1", "machine": "x86_64, 2 cores", "times": {"make unit": 50.0}},
        {"key": "tree:1", "times": {"make unit": 51.0}},  # an older row, before machines
        {"key": "tree:1", "machine": "arm64, 8 cores", "times": {"make unit": 20.0}},
        {"key": "tree:2", "machine": "x86_64, 2 cores", "times": {"make unit": 52.0}},
    ]
    rounds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench.recorded(rounds, "tree:1", "x86_64, 2 cores") == rows[:1]
    assert bench.recorded(tmp_path / "none.jsonl", "tree:1", "x86_64, 2 cores") == []
