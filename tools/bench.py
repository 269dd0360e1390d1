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
- `make portability` (every guide executed again under the second profile, two halves at once),

and two ratios: the clean build to the sum of the bare executions, and `make test` to the
clean build. A round of the working tree also refreshes tools/guide_times.json, the record of
each guide's execution times in make test's and make portability's builds that CI's projected
time is computed from (tools/ci_time.py, tests/site/test_budget.py): commit it with the change
that moved it.

A round of all the guides takes about an hour on a two-core machine, so three rounds need most
of a working session of an idle machine. Each finished round is therefore appended to a file of
rounds (`--rounds`, `.bench/rounds.jsonl`), keyed by what was measured: `--commit REF` measures
that commit's files (its key is the commit), otherwise the working tree (its key is a hash of its
files). A later run with the same key runs only the rounds still missing up to --repeat and
prints the medians of the latest --repeat rounds, each round's figures beside them.
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime
from functools import partial
from pathlib import Path

import ci_time
import provenance
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
    times["make portability"], _ = timed(["make", "portability"], work)
    return times


def refresh_guide_times(work, times, key):
    """tools/guide_times.json from this round's two builds in `work` (ci_time's record)."""
    built = work / "_build"
    build = ci_time.execution_seconds(built / "executed")
    second = ci_time.execution_seconds(*sorted((built / "portability").glob("*/executed")))
    total = times["make test"] + times["make portability"]
    source = f"make bench, {key}: make test then make portability (no setup), this machine"
    ci_time.write(ci_time.make_record(build, second, total, source))


def working_tree():
    """The repository's files as they are now: tracked and new ones, not the ignored ones."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True,
    ).stdout.decode()  # fmt: skip
    return [name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def tree_key(files):
    """A hash of the working tree's files, names and contents: what a round measured."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return "tree:" + digest.hexdigest()[:16]


def materialize(work, commit):
    """The files to measure, written into `work`: a commit's, or the working tree's; and the
    key of what they are."""
    if commit:
        git = partial(subprocess.run, cwd=ROOT, stdout=subprocess.PIPE, check=True)
        sha = git(["git", "rev-parse", "--verify", commit + "^{commit}"], text=True).stdout.strip()
        archive = git(["git", "archive", sha]).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(work, filter="data")
        # Old mtimes, older than .venv's stamp, so that make sees the environment as up to date.
        for path in work.rglob("*"):
            os.utime(path, (1e9, 1e9), follow_symlinks=False)
        return "commit:" + sha
    files = working_tree()
    for item in files:  # copy2 keeps mtimes, so make sees .venv as up to date
        (work / item).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / item, work / item)
    return tree_key(files)


def recorded(path, key, machine):
    """The rounds of `key` already in the file of rounds, measured on this kind of machine."""
    if not path.exists():
        return []
    rounds = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rounds if r["key"] == key and r.get("machine") == machine]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds; medians are printed")
    parser.add_argument("--commit", help="measure this commit's files, not the working tree")
    parser.add_argument("--rounds", default=str(ROOT / ".bench" / "rounds.jsonl"),
                        help="the file of finished rounds, kept between runs")  # fmt: skip
    args = parser.parse_args()
    machine = f"{provenance.machine()}, Python {provenance.python()}"
    store = Path(args.rounds)
    store.parent.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        key = materialize(work, args.commit)
        for venv in (".venv", ".venv-colab"):  # make test and make unit need both
            if (ROOT / venv).exists():
                os.symlink(ROOT / venv, work / venv)
        names = guide_names(work / "docs")
        done = recorded(store, key, machine)
        missing = max(0, args.repeat - len(done))
        print(f"{key}: {len(done)} rounds recorded in {store}, {missing} to run", flush=True)
        for i in range(missing):
            print(f"round {len(done) + 1} ({i + 1} of {missing} now) ...", flush=True)
            start = datetime.now().isoformat(timespec="seconds")
            times = one_round(work, names)
            finished = datetime.now().isoformat(timespec="seconds")
            row = {"key": key, "machine": machine, "guides": len(names), "started": start,
                   "finished": finished, "times": times}  # fmt: skip
            with store.open("a") as f:  # kept at once: a later run goes on from here
                f.write(json.dumps(row) + "\n")
            done.append(row)
            if not args.commit:
                refresh_guide_times(work, times, key)

    rounds = [r["times"] for r in done[-args.repeat :]]
    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    bare = sum(median[f"bare: {n}"] for n in names)
    median["sum of bare executions"] = bare
    median["clean/bare"] = median["clean make html"] / bare
    median["test/build"] = median["make test"] / median["clean make html"]
    print(f"\nmachine: {machine}")
    print(f"guides: {len(names)}; rounds: {len(rounds)} (medians)\n")
    for name, value in median.items():
        shown = f"{value:.0f}" if name.startswith("guides executed") else f"{value:.2f}"
        unit = "" if name.startswith("guides executed") or "/" in name else " s"
        each = " ".join(f"{r[name]:.1f}" for r in rounds) if name in rounds[0] else ""
        each = f"   (rounds: {each})" if len(rounds) > 1 and each else ""
        print(f"  {name:40} {shown}{unit}{each}")
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
