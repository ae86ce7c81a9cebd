#!/usr/bin/env python3
"""What the coordinator's sweep of ``jobs/*/`` for junk costs (``Housekeeper.tidy_jobs``).

Builds a run with N finished and M queued jobs (bench/fixture.py), replays its journal
in-process into a scheduler, and times a housekeeper's sweeps as the daemon
runs them: at start (names and kinds only: the repair reads the files), every reconcile
(``running/``: a stat of each file, and a slice of ``queued/``), a whole pass over
``queued/`` (a slice a reconcile, SLICE_SECONDS or DONE_SLICE entries: the total and the
slowest slice), every DONE_SWEEP_SECONDS the same of ``done/`` and ``spool/replies/``,
and the worst case, a ``done/`` pass that finds every file changed since the last
(each read and compared with the journal's document). Best of R runs each.

Usage: bench/bench_tidy.py [--finished N] [--queued M] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_coordinator import TASK_YAML  # noqa: E402
from fixture import build_run  # noqa: E402

from praxist_fs.adapters.journal import Journal  # noqa: E402
from praxist_fs.adapters.layout import RunLayout  # noqa: E402
from praxist_fs.core.replay import replay  # noqa: E402
from praxist_fs.core.scheduler import Scheduler  # noqa: E402
from praxist_fs.housekeeping import HISTORY, SLICED, Housekeeper  # noqa: E402


def best(runs: int, sweep) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sweep()
        times.append(time.perf_counter() - t0)
    return round(min(times), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tidy-") as scratch:
        task = Path(scratch) / "task.yaml"
        task.write_text(TASK_YAML.format(concurrency=4, maximum=8))
        run_dir = Path(scratch) / "run"
        built = build_run(run_dir, task, finished=args.finished, queued=args.queued)
        layout, sched = RunLayout.at(run_dir), Scheduler()
        keeper = Housekeeper(layout)
        journal = Journal(layout.journal)
        replay(sched, journal.replay())
        journal.close()
        time.sleep(1.1)  # past the sweeps' mtime slack: the fixture's files are not news

        def due(directories: tuple[str, ...]) -> None:
            """Only ``directories`` (of SLICED) are due for a sliced pass."""
            for directory in SLICED:
                keeper._next_sweep[directory] = 0.0 if directory in directories else math.inf
            keeper._watches.clear()  # each pass runs, as after a change (none skipped)

        def sliced_pass(directories: tuple[str, ...] = HISTORY,
                        since: int | None = None) -> dict:
            """One whole pass over ``directories`` (the history: jobs/done/ and
            spool/replies/; or jobs/queued/), slice by slice as the reconciles take it."""
            due(directories)
            for directory in directories:
                if since is not None:
                    keeper._swept_ns[directory] = since
            slices = []
            while True:
                t0 = time.perf_counter()
                keeper._sweep_slices(sched, None)
                slices.append(time.perf_counter() - t0)
                if all(keeper._listing[directory] is None for directory in directories):
                    break
            return {"slices": len(slices), "total_s": round(sum(slices), 4),
                    "slowest_slice_s": round(max(slices), 4)}

        def reconcile_sweep() -> None:
            """What a reconcile sweeps while no history pass is due: jobs/running/ whole,
            and a slice of jobs/queued/."""
            due(("queued",))
            keeper.tidy_jobs(sched, None, ("queued", "running"))

        found = {
            "finished": args.finished, "queued": args.queued, "build_s": built,
            "start_sweep_all_s": best(args.runs, lambda: keeper.tidy_jobs(
                sched, None, ("queued", "running", "done"), start=True, clean=True)),
            "reconcile_sweep_queued_running_s": best(args.runs, reconcile_sweep),
            "queued_sweep": min((sliced_pass(("queued",)) for _ in range(args.runs)),
                                key=lambda found: found["total_s"]),
            "done_sweep": min((sliced_pass() for _ in range(args.runs)),
                              key=lambda found: found["total_s"]),
            # as if every file changed since the last pass: each is read and compared
            "done_sweep_every_file_changed": sliced_pass(since=0),
            "set_aside_anything": layout.quarantine.exists(),
        }
    print(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
