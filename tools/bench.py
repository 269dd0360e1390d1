"""`make bench`: how long building the site takes, against executing its guides bare.

A benchmark, not a test: it measures and prints, and fails only when a build fails. Everything
runs in a temporary copy of the repository that shares .venv, so your _build/ and docs/ are
left alone. Measured, each --repeat times (medians printed):

- a clean `make html` (no _build, no execution cache),
- a `make html` with nothing changed,
- a `make html` after a prose-only edit of one guide (the cache must execute nothing),
- each guide's notebook executed bare with `jupyter execute` (no Sphinx),
- `make unit` (the unit tests alone, no site build),
- `make test` (lint, the real build with each guide executed once, the output comparison, the
  browser test and the rest),

and two ratios: the clean build to the sum of the bare executions, and `make test` to the
clean build.
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from guides import guide_names

ROOT = Path(__file__).resolve().parent.parent
PROSE_EDIT = "\n\nThis sentence was added by `make bench` to time a prose-only rebuild.\n"


def timed(cmd, cwd):
    start = time.perf_counter()
    result = subprocess.run(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed in {cwd}:\n{result.stdout[-5000:]}")
    return elapsed, result.stdout


def one_round(work, names):
    times = {}
    shutil.rmtree(work / "_build", ignore_errors=True)
    times["clean make html"], out = timed(["make", "html"], work)
    executed = out.count("Executing notebook using")
    assert executed == len(names), f"the clean build executed {executed} of {len(names)} guides"

    times["no-change rebuild"], _ = timed(["make", "html"], work)

    md = work / "docs" / f"{names[0]}.md"
    original = md.read_text()
    md.write_text(original + PROSE_EDIT)
    try:
        times["prose-edit rebuild"], out = timed(["make", "html"], work)
    finally:
        md.write_text(original)
    times["guides executed by the prose edit"] = out.count("Executing notebook using")
    assert "Using cached notebook" in out, "the prose-only edit did not reach the cache"
    timed(["make", "html"], work)  # back to the unedited page, not timed

    for name in names:
        times[f"bare: {name}"], _ = timed(
            [str(work / ".venv" / "bin" / "jupyter"), "execute", f"notebooks/{name}.ipynb"], work
        )
    times["make unit"], _ = timed(["make", "unit"], work)
    times["make test"], _ = timed(["make", "test"], work)  # timed() stops on a failure
    return times


def working_tree():
    """The repository's files as they are now: tracked and new ones, not the ignored ones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True,
    ).stdout.decode()  # fmt: skip
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are printed")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        for item in working_tree():  # copy2 keeps mtimes, so make sees .venv as up to date
            (work / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / item, work / item)
        for venv in (".venv", ".venv-colab"):  # make test and make unit need both
            if (ROOT / venv).exists():
                os.symlink(ROOT / venv, work / venv)
        names = guide_names(work / "docs")
        rounds = []
        for i in range(args.repeat):
            print(f"round {i + 1} of {args.repeat} ...", flush=True)
            rounds.append(one_round(work, names))

    median = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
    bare = sum(median[f"bare: {n}"] for n in names)
    median["sum of bare executions"] = bare
    median["clean/bare"] = median["clean make html"] / bare
    median["test/build"] = median["make test"] / median["clean make html"]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(f"\nmachine: {machine}")
    print(f"guides: {len(names)}; rounds: {args.repeat} (medians)\n")
    for key, value in median.items():
        shown = f"{value:.0f}" if key.startswith("guides executed") else f"{value:.2f}"
        unit = "" if key.startswith("guides executed") or "/" in key else " s"
        print(f"  {key:40} {shown}{unit}")
    print()
    checks = [
        ("clean build within 1.15x of the bare executions", median["clean/bare"] <= 1.15),
        ("no-change rebuild under 5 s", median["no-change rebuild"] < 5.0),
        ("prose-only edit executes nothing", median["guides executed by the prose edit"] == 0),
        ("make test under 2x a clean make html", median["test/build"] < 2.0),
    ]
    for label, ok in checks:
        print(f"  {'met   ' if ok else 'MISSED'} {label}")
    clean = median["clean make html"]
    print(f"\n  Sphinx's own share of the clean build: {clean - bare:.1f} s of {clean:.1f} s")


if __name__ == "__main__":
    main()
