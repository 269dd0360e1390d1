"""CI's budget, projected before anything runs: tools/ci_time.py on the recorded guide times.

Fast: no guide is executed. The projection of `.ci/run` on this machine, from each guide's
recorded execution times in both builds (tools/guide_times.json, refreshed by `make bench`),
must stay within ci_time.BUDGET_S (60 min), and a guide that executes for longer than 60 s in
make test's build says why on its page, in one line.
"""

import ci_time
from conftest import DOCS, guide_names

RECORD = ci_time.load()


def test_the_projected_ci_time_fits_the_budget():
    total, parts, costs = ci_time.projection(guide_names(), RECORD)
    costliest = ", ".join(
        f"{name} ({cost:.0f} s for its two executions)" for name, cost in costs[:5]
    )
    print(
        f"projected {total / 60:.1f} min: " + ", ".join(f"{k} {v:.0f} s" for k, v in parts.items())
    )
    assert total <= ci_time.BUDGET_S, (
        f".ci/run is projected at {total / 60:.1f} min on this machine, past the budget of "
        f"{ci_time.BUDGET_S / 60:.0f} min (CONTRIBUTING.md, 'What a guide may cost'); the "
        f"guides that cost most: {costliest}. Make them cheaper, or refresh the record "
        f"(make bench) if they already are."
    )


def test_the_record_is_one_real_run_of_every_recorded_guide_in_both_builds():
    """Both builds' times of the same guides, and the rest of the run what they leave of it."""
    build, second = RECORD["build_s"], RECORD["second_profile_s"]
    assert set(build) == set(second) and RECORD["machine"]  # where it was measured, said
    if RECORD["portability"] == "in series":
        portability = sum(second.values())
    else:
        portability = ci_time.parallel_seconds(second)
    assert RECORD["rest_s"] == round(RECORD["total_s"] - sum(build.values()) - portability)


SMALL = {
    "rest_s": 100,
    "build_s": {"a": 10.0, "b": 20.0, "c": 30.0},
    "second_profile_s": {"a": 20.0, "b": 40.0, "c": 60.0},
}


def test_the_halves_balance_the_times_and_keep_every_guide_once():
    times = {"a": 50.0, "b": 40.0, "c": 30.0, "d": 20.0, "e": 10.0}
    one, two = ci_time.halves(times)
    assert sorted(one + two) == sorted(times)
    sums = sorted(sum(times[n] for n in half) for half in (one, two))
    assert sums == [70.0, 80.0]  # a+d / b+c+e: the longest first, each into the lighter half


def test_a_guide_with_no_record_counts_at_the_slowest():
    total, parts, costs = ci_time.projection(["a", "b", "c", "new"], SMALL)
    assert parts["build"] == 10 + 20 + 30 + 30
    assert costs[0][1] == costs[1][1] == 90.0 and {costs[0][0], costs[1][0]} == {"c", "new"}
    # halves of 20, 40, 60, 60 by the longest first: c+a (80) and new+b (100)
    assert parts["portability"] == 100 and total == 100 + 90 + 100


def test_the_projection_passes_the_budget_when_a_guide_costs_enough():
    slow = {**SMALL, "build_s": {**SMALL["build_s"], "c": ci_time.BUDGET_S}}
    total, _, costs = ci_time.projection(["a", "b", "c"], slow)
    assert total > ci_time.BUDGET_S and costs[0][0] == "c"


def test_a_guide_over_the_limit_says_why_on_its_page():
    """The line ci_time.WHY_SLOW, once, on the page of each guide whose recorded time in make
    test's build is over 60 s, and on none well under it (under 45 s; between the two a run's
    noise decides, so either is right). A guide not yet recorded counts at the slowest guide's
    in the projection and is held to this once it is recorded."""
    lines = {
        name: ci_time.WHY_SLOW.findall((DOCS / f"{name}.md").read_text())
        for name in guide_names()
        if name in RECORD["build_s"]
    }
    seconds = {name: RECORD["build_s"][name] for name in lines}
    over = {n for n, s in seconds.items() if s > ci_time.GUIDE_LIMIT_S}
    missing = sorted(n for n in over if len(lines[n]) != 1)
    stale = sorted(n for n, s in seconds.items() if s < 0.75 * ci_time.GUIDE_LIMIT_S and lines[n])
    assert not missing, (
        f"these guides execute for over {ci_time.GUIDE_LIMIT_S} s in make test's build: "
        + ", ".join(f"{n} ({seconds[n]:.0f} s)" for n in missing)
        + ". Make them cheaper, or say why in one line after the opening paragraph: "
        "'This page executes in over 60 s on two CPU cores: WHY.' (CONTRIBUTING.md)"
    )
    assert not stale, f"these guides now execute in under 45 s: remove their line: {stale}"


def test_execution_seconds_reads_each_guides_time_from_jupyter_caches(tmp_path):
    """What myst-nb's cache mode stores for an executed notebook: its name and seconds."""
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    for half, (name, seconds) in enumerate((("a", 12.34), ("b", 5.0))):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"x = {half}")])
        bundle = CacheBundleIn(nb, f"/docs/{name}.md", data={"execution_seconds": seconds})
        get_cache(str(tmp_path / str(half))).cache_notebook_bundle(bundle, check_validity=False)
    found = ci_time.execution_seconds(tmp_path / "0", tmp_path / "1")
    assert found == {"a": 12.3, "b": 5.0}
