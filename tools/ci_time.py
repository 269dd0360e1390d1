"""CI's time, projected from each guide's recorded execution times: the budget a new guide spends.

CI (`.ci/run`) executes every guide twice: once in `make test`'s build (this machine's profile,
two cores) and once more in `make portability`'s (the second profile, one core per build), whose
guides are split into two halves executed at once, one half per core. The record,
tools/guide_times.json, keeps what one real run measured on this machine: each guide's execution
time in both builds (jupyter-cache's `execution_seconds` of each executed notebook) and the rest
of the run (setup, lint, the other tests). `make bench` refreshes it; so does
`python tools/ci_time.py record ...` after a run of `.ci/run` (see `main`).

The projection of the current guides is

    rest + sum(build time of each guide) + max(sum of one half's second-profile times)

with the halves chosen by `halves` from the recorded second-profile times, as
tests/site/test_portability.py chooses them. A guide with no recorded time counts at the slowest
recorded guide's. tests/site/test_budget.py fails when the projection passes BUDGET_S, naming the
guides that cost most. `python tools/ci_time.py` prints the projection.
"""

import argparse
import json
import re
import sys
from pathlib import Path

from guides import guide_names
from provenance import machine, today

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tools" / "guide_times.json"
BUDGET_S = 60 * 60  # the projection's limit: CI's 90 minutes, with room for a slower runner
GUIDE_LIMIT_S = 60  # a guide that executes longer in make test's build says why on its page
# The one line a page carries when it executes for longer than GUIDE_LIMIT_S, after its opening.
WHY_SLOW = re.compile(r"^This page executes in over 60 s on two CPU cores: (\S.{9,})$", re.M)


def execution_seconds(*caches):
    """{guide: seconds} of the notebooks executed into the given jupyter-caches."""
    from jupyter_cache import get_cache

    seconds = {}
    for cache in caches:
        for record in get_cache(str(cache)).list_cache_records():
            seconds[re.sub(r"\.md$", "", Path(record.uri).name)] = round(
                record.data["execution_seconds"], 1
            )
    return seconds


def with_unrecorded(names, seconds):
    """`seconds` for each of `names`, the slowest recorded time for a guide with none."""
    slowest = max(seconds.values())
    return {name: seconds.get(name, slowest) for name in names}


def halves(seconds):
    """Two lists of guides whose summed times are close: the longest guide first, each into the
    half with less so far (ties by name, so the split is the same on every machine)."""
    split, sums = ([], []), [0.0, 0.0]
    for name in sorted(seconds, key=lambda n: (-seconds[n], n)):
        side = 0 if sums[0] <= sums[1] else 1
        split[side].append(name)
        sums[side] += seconds[name]
    return sorted(split[0]), sorted(split[1])


def parallel_seconds(seconds):
    """The wall time of the two halves executed at once: the longer half's."""
    return max(sum(seconds[n] for n in half) for half in halves(seconds))


def load(path=RECORD):
    return json.loads(Path(path).read_text())


def projection(names, record):
    """The projected CI seconds of `names` from `record`, its parts, and each guide's cost (its
    two executions), costliest first."""
    build = with_unrecorded(names, record["build_s"])
    second = with_unrecorded(names, record["second_profile_s"])
    parallel = parallel_seconds(second)
    parts = {"rest": record["rest_s"], "build": sum(build.values()), "portability": parallel}
    costs = sorted(((build[n] + second[n], n) for n in names), reverse=True)
    return sum(parts.values()), parts, [(name, cost) for cost, name in costs]


def make_record(build, second, total_s, source):
    """The record of one run: its guides' times in both builds, and the rest of its `total_s`."""
    parallel = parallel_seconds(second)
    return {
        "what": "each guide's execution seconds in make test's build (build_s) and in make "
        "portability's (second_profile_s, two halves at once, one core each), and the rest of "
        "the run (rest_s: total_s less the build's guides and the longer portability half)",
        "source": source,
        "machine": machine(),
        "portability": "two halves at once",
        "date": today(),
        "total_s": round(total_s),
        "rest_s": round(total_s - sum(build.values()) - parallel),
        "build_s": dict(sorted(build.items())),
        "second_profile_s": dict(sorted(second.items())),
    }


def write(record, path=RECORD):
    Path(path).write_text(json.dumps(record, indent=1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    rec = sub.add_parser("record", help="write the record from a finished run's caches")
    rec.add_argument("--work", default=str(ROOT), help="the clone the run built in")
    rec.add_argument("--total-seconds", type=float, required=True, help="the run's wall time")
    rec.add_argument("--source", required=True, help="what run it was (command, commit)")
    args = parser.parse_args()
    if args.command == "record":
        built = Path(args.work) / "_build"
        build = execution_seconds(built / "executed")
        second = execution_seconds(*sorted((built / "portability").glob("*/executed")))
        write(make_record(build, second, args.total_seconds, args.source))
    record = load()
    names = guide_names(ROOT / "docs")
    total, parts, costs = projection(names, record)
    print(f"recorded {record['date']} on {record['machine']} ({record['source']})")
    print(", ".join(f"{k} {v / 60:.1f} min" for k, v in parts.items()))
    print(f"projected CI time of {len(names)} guides: {total / 60:.1f} min "
          f"(budget {BUDGET_S / 60:.0f} min)")  # fmt: skip
    print("costliest:", ", ".join(f"{n} {c:.0f} s" for n, c in costs[:5]))
    return 0 if total <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
