#!/usr/bin/env python3
"""How long a CLI verb takes to start and answer (issue 31: "commands that start in a
blink", target <= 60 ms per read/control verb on a quiet machine), beside a bare Python
and, where installed, task-spooler's ``tsp -l``.

Each verb runs ``--runs`` times against ``--run-dir`` (default: a fresh run built by
bench/fixture.py with ``--finished`` finished jobs, 1,000 unless given, then served once by
a coordinator and stopped, as every real run is: the fixture alone has no job index, and
without one ``jobs`` reads every job file, seconds at 100,000); the median wall
time and the median CPU time (user + system, which a loaded machine inflates less) are
printed per verb. The verbs only read, and need no coordinator: status, jobs --limit
20, jobs --state failed, and logs and wait of an ended job.

Usage: .venv/bin/python bench/bench_cli.py [--run-dir RUN] [--finished N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compaction import served_fixture  # noqa: E402


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``argv`` over ``runs`` runs."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def built_run(directory: Path, finished: int) -> Path:
    """A run with ``finished`` jobs as a coordinator that served it leaves it."""
    return served_fixture(directory / "served", finished) / "run"


def an_ended_job(run: Path) -> str:
    done = sorted((run / "resource_scheduler" / "jobs" / "done").glob("*.json"))
    return json.loads(done[0].read_text())["job_id"] if done else "none"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="an existing run (default: one built)")
    parser.add_argument("--finished", type=int, default=1000,
                        help="finished jobs of the run built (default 1000)")
    parser.add_argument("--runs", type=int, default=15, help="runs per verb (default 15)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-cli."))
    try:
        run = args.run_dir or built_run(scratch, args.finished)
        job = an_ended_job(run)
        cli = [sys.executable, "-m", "praxist_fs"]
        rows = [("python -c pass", [sys.executable, "-c", "pass"])]
        for verb in (["status"], ["jobs", "--limit", "20"], ["jobs", "--state", "failed"],
                     ["logs", job], ["wait", job]):
            rows.append((" ".join(verb[:3]).replace(job, "JOB"),
                         [*cli, *verb, "--run-dir", str(run)]))
        if shutil.which("tsp"):
            rows.append(("tsp -l (task-spooler)", ["tsp", "-l"]))
        print(f"{'command':32}{'wall ms':>10}{'cpu ms':>10}   ({args.runs} runs, median)")
        for label, argv in rows:
            wall, cpu = timed(argv, args.runs)
            print(f"{label:32}{wall:10.1f}{cpu:10.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
