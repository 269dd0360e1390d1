"""tools/provenance.py: the provenance the tools' records share, and the records on file that
carry it."""

import json
import platform
import sys
from datetime import date
from types import SimpleNamespace

import jax
import provenance  # tools/provenance.py (conftest puts tools/ on the path)
from conftest import ROOT

from guide_helpers import roofline

MEASURED = ROOT / "guide_helpers" / "measured"


def test_a_run_records_versions_python_date_command_and_step():
    said = provenance.of_this_run("tools/x.py", ["--out", "a.jsonl"], "my step")
    assert list(said) == ["versions", "python", "date", "command", "step"]
    assert list(said["versions"]) == list(provenance.PACKAGES)
    assert said["versions"]["jax"] == jax.__version__
    assert said["python"] == platform.python_version() and said["date"] == date.today().isoformat()
    assert said["command"] == "python tools/x.py --out a.jsonl" and said["step"] == "my step"


def test_a_package_not_installed_is_recorded_as_none():
    assert provenance.versions(("jax", "no-such-package-here")) == {
        "jax": jax.__version__,
        "no-such-package-here": None,
    }


def test_without_arguments_the_command_is_this_processs():
    assert provenance.command("tools/x.py") == " ".join(["python", "tools/x.py", *sys.argv[1:]])


def test_a_chip_is_named_as_roofline_names_it():
    v5e = SimpleNamespace(device_kind="TPU v5 lite", platform="tpu", memory_stats=lambda: None)
    cpu = jax.devices("cpu")[0]
    assert provenance.where(v5e) == {"chip": "TPU v5 lite", "platform": "tpu"}
    assert provenance.peak_flops(v5e) == roofline.CHIPS["TPU v5e"].flops
    assert provenance.peak_flops(cpu) is None and provenance.bytes_limit(v5e) is None
    assert provenance.bytes_limit(v5e, compile_only=True) == int(15.75 * 2**30)
    v5p = SimpleNamespace(device_kind="TPU v5")
    assert provenance.bytes_limit(v5p, compile_only=True) == roofline.CHIPS["TPU v5p"].hbm_bytes


def test_the_records_on_file_carry_the_shared_fields():
    """Every measurement on file begins with the block that of_this_run writes."""
    shared = set(provenance.of_this_run("tools/x.py", [], None))
    files = sorted(MEASURED.glob("*.jsonl"))
    assert files
    for path in files:
        first = json.loads(path.read_text().splitlines()[0])["provenance"]
        assert shared <= set(first), path.name
        assert {"chip", "platform"} <= set(first), path.name
