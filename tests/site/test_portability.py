"""The stored outputs are the same on another machine: `make portability`.

Every guide is executed once more, in the site's real Sphinx build, under a second profile
(tests/support/profiles.py): Colab's Python (3.13, its own venv), XLA's vector ISA capped one step
below this CPU's, another OpenBLAS kernel for NumPy, one core. On a machine with two cores or more,
two builds run at once, each pinned to a core of its own and executing half of the guides (the
halves of tools/ci_time.py, balanced by the recorded times; conf.py's SITE_EXECUTE_ONLY): every
guide still executes on one core, in half the wall time. Each stored notebook is then
compared with that execution by the same nbval comparison as tests/site/test_outputs.py. A stored
output that depends on the Python version, the CPU, its ISA, the BLAS kernel or the core count
fails here, naming the guide, the cell and both outputs.

The tests marked `portability` run under `make portability` (and CI); the last test, which
proves that the check catches what it should, runs under `make test`.
"""

import os
import shutil
import subprocess
import time

import ci_time
import nbformat
import pytest
from conftest import (
    BUILD,
    DOCS,
    NOTEBOOKS,
    ONE_CORE_BUILD_TIMEOUT,
    ROOT,
    guide_names,
    run,
    sphinx_command,
)
from support.compare_outputs import (
    executed_notebooks,
    sanitize_patterns,
    stale_cells,
    stale_report,
)
from support.profiles import default_profile, not_taken_effect, probe, second_profile
from support.sites import write_site

PORTABILITY = BUILD / "portability"


@pytest.fixture(scope="module")
def profiles():
    """(the default profile's probe, the second profile, its probe)."""
    default = probe(default_profile())
    second = second_profile(default)
    return default, second, probe(second)


def describe(profile):
    return ", ".join(f"{what} {value}" for what, value in profile.changes.items())


def build_under(profile, src, out):
    """The site's build of `src` under `profile`, every guide executed into a new cache."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = sphinx_command(src, out / "html", out / "doctrees", executed=out / "executed")
    result = run(profile.command(cmd), ONE_CORE_BUILD_TIMEOUT, cwd=ROOT, env=profile.environ())
    return result, executed_notebooks(out / "executed")


def builds_at_once(profiles_and_halves, out):
    """The site's build once per (profile, guides) at the same time, each executing only its
    guides (SITE_EXECUTE_ONLY): (a result with the return codes' worst and every build's output,
    the executed notebooks of all). Each is bounded by ONE_CORE_BUILD_TIMEOUT."""
    shutil.rmtree(out, ignore_errors=True)
    started = []
    for i, (profile, names) in enumerate(profiles_and_halves):
        part = out / f"half{i}"
        part.mkdir(parents=True)
        cmd = sphinx_command(DOCS, part / "html", part / "doctrees", executed=part / "executed")
        env = {**profile.environ(), "SITE_EXECUTE_ONLY": ",".join(names)}
        log = (part / "build.log").open("w")
        process = subprocess.Popen(
            profile.command(cmd), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        started.append((part, process, log))
    deadline = time.monotonic() + ONE_CORE_BUILD_TIMEOUT
    for _, process, log in started:
        try:
            process.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for _, other, _ in started:
                other.kill()
            raise
        finally:
            log.close()
    outputs = [f"--- {part.name}\n" + (part / "build.log").read_text() for part, _, _ in started]
    result = subprocess.CompletedProcess(
        "the builds at once", max(p.returncode for _, p, _ in started), "\n".join(outputs)
    )
    executed = {}
    for part, _, _ in started:
        executed.update(executed_notebooks(part / "executed"))
    return result, executed


@pytest.fixture(scope="module")
def second_build(profiles):
    """Every guide executed under the second profile: in two builds at once, one core each,
    where this process may use two cores; else in one build."""
    default, second, _ = profiles
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return build_under(second, DOCS, PORTABILITY)
    recorded = ci_time.load()["second_profile_s"]
    split = ci_time.halves(ci_time.with_unrecorded(guide_names(), recorded))
    per_core = [(second_profile(default, cpu), names) for cpu, names in zip(cores, split)]
    return builds_at_once(per_core, PORTABILITY)


@pytest.mark.portability
def test_the_second_profile_differs_from_this_machine_in_each_way(profiles):
    default, second, seen = profiles
    print(f"default: {default}\n{second.name} ({describe(second)}): {seen}")
    missing = not_taken_effect(default, seen, second)
    assert not missing, "the second profile did not take effect: " + "; ".join(missing)


@pytest.mark.portability
def test_every_guide_executes_under_the_second_profile(second_build, profiles):
    result, executed = second_build
    assert result.returncode == 0, (
        f"the build under the {profiles[1].name} ({describe(profiles[1])}) failed:\n"
        + result.stdout[-20000:]
    )
    assert sorted(executed) == sorted(guide_names())
    pythons = {name: nb.metadata.language_info.version for name, nb in executed.items()}
    wanted = profiles[2]["python"]  # what the probe found under the second profile
    assert all(v.startswith(wanted + ".") for v in pythons.values()), (wanted, pythons)


@pytest.mark.portability
@pytest.mark.parametrize("name", guide_names())
def test_stored_outputs_are_the_same_under_the_second_profile(second_build, profiles, name):
    _, executed = second_build
    assert name in executed, f"{name} did not execute under the second profile; see above"
    stored = nbformat.read(NOTEBOOKS / f"{name}.ipynb", 4)
    problems = stale_cells(stored, executed[name], sanitize_patterns())
    assert not problems, (
        f"{stale_report(name, problems)}\n\nThese outputs were stored on this machine and "
        f"differ under the {profiles[1].name} ({describe(profiles[1])}): print a bound that an "
        "assert checks, not the digits of a floating-point error."
    )


ORDER_DEPENDENT = """\
import numpy as np

rng = np.random.default_rng(0)
a = rng.standard_normal((64, 256), dtype=np.float32)
b = rng.standard_normal((256, 64), dtype=np.float32)
total = float((a @ b).sum())
print(f"sum of a @ b: {total:.10g}")"""
AS_A_BOUND = """\
exact = float((a.astype(np.float64) @ b.astype(np.float64)).sum())
assert abs(total - exact) < 1e-4 * abs(exact)
print("within 1e-4 of float64:", abs(total - exact) < 1e-4 * abs(exact))"""


def test_the_check_catches_an_order_dependent_float_and_passes_its_bound(tmp_path, profiles):
    """A guide that prints a float's digits passes on the profile that stored it and fails
    under the other, naming the guide, the cell and both outputs; its bound passes on both."""
    default, second, _ = profiles
    src = tmp_path / "docs"
    cells = f"{ORDER_DEPENDENT}\n```\n\n```{{code-cell}} ipython3\n{AS_A_BOUND}"
    write_site(src, {"float_digits": cells})
    built = {}
    for key, profile in (("default", default_profile()), ("second", second)):
        result, executed = build_under(profile, src, tmp_path / key)
        assert result.returncode == 0, result.stdout[-5000:]
        built[key] = executed["float_digits"]
    stored = built["default"]  # what a session on this machine would have committed

    assert stale_cells(stored, stored, sanitize_patterns()) == []
    problems = stale_cells(stored, built["second"], sanitize_patterns())
    assert [number for number, _ in problems] == [0], problems  # the digits, not the bound
    report = stale_report("float_digits", problems)
    first = [next(c for c in nb.cells if c.cell_type == "code") for nb in built.values()]
    digits = [cell.outputs[0]["text"].strip() for cell in first]
    assert digits[0] != digits[1], digits
    assert "notebooks/float_digits.ipynb, code cell 0" in report, report
    assert all(d in report for d in digits), report
