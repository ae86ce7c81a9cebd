#!/usr/bin/env python3
"""The rows of ``make bench`` for issue 31's targets that a long history and a hostile
spool measure (SPEC R-PERF-3): how fast each CLI verb starts and answers, the longest a
reply waits while the journal compacts, the peak memory of ``praxist-fs report``, all on
a run of ``--finished`` finished jobs (100,000 in a full ``make bench``, 10,000 quick),
the report's peak memory again on a run of a tenth as many (memory flat in history: the
two close), and a burst of invalid requests.

Each row is one of the benches that measure it alone, called here: bench_cli.py (a
verb's median wall time, judged as a user's pip install runs it, and beside it as this
development environment's editable install does, whose finder every Python start
imports; the verbs that talk to a coordinator on a small run it serves), bench_compaction.py (rename -> reply max while it compacts:
a loop turn that takes S seconds delays a reply by about S), bench_report.py --run-dir
(in a process of its own, whose peak RSS is the report's) and bench_burst.py. The
history fixture is built once (bench_compaction.served_fixture: served and stopped
cleanly) and read, never changed (the compaction probe serves a copy).

Usage: .venv/bin/python bench/perf3_rows.py [--finished N] [--burst N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_burst  # noqa: E402
import bench_cli  # noqa: E402
from bench_compaction import serve_and_probe, served_fixture  # noqa: E402

VERB_MS, STALL_MS, BURST_S, BURST_MB = 60.0, 50.0, 18.0, 50.0  # issue 31's targets
REPORT_FLAT_MB = 2.0  # the report's peak at N finished jobs above its peak at N / 10
SERVED_JOBS = 10  # the scratch run the verbs that talk to a coordinator are timed on


def verbs(job: str) -> list[tuple[str, list[str]]]:
    """The read and control verbs a user types, with the arguments each needs (``cancel``
    finds no coordinator serving the run, and says so without waiting for one)."""
    return [("status", ["status"]), ("jobs --limit 20", ["jobs", "--limit", "20"]),
            ("logs", ["logs", job]), ("wait", ["wait", job]),
            ("cancel", ["cancel", job, "--timeout", "0"])]


def measure(finished: int, burst: int, runs: int, compact_after: int) -> dict:
    source = Path(tempfile.mkdtemp(prefix="praxist-bench-perf3-"))
    try:
        served_fixture(source, finished)
        run = source / "run"
        job = bench_cli.an_ended_job(run)
        cli = [sys.executable, "-m", "praxist_fs"]
        started = {"python -c pass": bench_cli.timed([sys.executable, "-c", "pass"], runs)[0]}
        for label, argv in verbs(job):
            started[label] = bench_cli.timed([*cli, *argv, "--run-dir", str(run)], runs)[0]
        python = bench_cli.installed_python(source)  # as a user's pip install leaves it
        installed = {"python -c pass": bench_cli.timed([python, "-c", "pass"], runs, source)[0]}
        for label, argv in verbs(job):
            installed[label] = bench_cli.timed([python, "-m", "praxist_fs", *argv, "--run-dir",
                                                str(run)], runs, source)[0]
        served_fixture(source / "served", SERVED_JOBS)  # launch, generation, lease, stop
        served, served_installed = {}, {}
        for label, argv in bench_cli.served_verbs(source / "served", cli):
            served[label] = bench_cli.timed(argv, runs)[0]
            served_installed[label] = bench_cli.timed([python, *argv[1:]], runs, source)[0]
        report = report_memory(run)
        tenth = report_memory(served_fixture(source / "tenth", max(1, finished // 10)) / "run")
        compaction = serve_and_probe(source, compact_after, 2)
    finally:
        shutil.rmtree(source, ignore_errors=True)
    return {"finished": finished, "load": os.getloadavg(),
            "cli_ms": {label: round(ms, 1) for label, ms in started.items()},
            "cli_installed_ms": {label: round(ms, 1) for label, ms in installed.items()},
            "cli_served_ms": {label: round(ms, 1) for label, ms in served.items()},
            "cli_served_installed_ms": {label: round(ms, 1)
                                        for label, ms in served_installed.items()},
            "report": report, "report_tenth": tenth, "compaction": compaction,
            "burst": bench_burst.measure(burst)}


def report_memory(run: Path) -> dict:
    """bench_report.py --run-dir ``run``, in a process of its own: its peak RSS is the
    report's."""
    done = subprocess.run([sys.executable, str(HERE / "bench_report.py"), "--run-dir",
                           str(run)], capture_output=True, text=True, check=True,
                          cwd=HERE.parent)
    return json.loads(done.stdout)


def rows(result: dict, row) -> list[dict]:
    """The table's rows (``row`` is bench_table's) of what ``measure`` found."""
    n = f"{result['finished']:,} finished"
    # a user's install is judged; older results have only the editable rows, judged then
    installed = result.get("cli_installed_ms")
    dev = ", editable dev install" if installed else ""
    served = f"a served {SERVED_JOBS}-job run"
    found = _verb_rows(row, installed or {}, f"installed, {n} (wall, median)", True)
    found += _verb_rows(row, result["cli_ms"], f"{n} (wall, median){dev}", not installed)
    found += _verb_rows(row, result.get("cli_served_installed_ms", {}),
                        f"installed, {served} (wall, median)", True)
    found += _verb_rows(row, result.get("cli_served_ms", {}), f"{served} (wall, median){dev}",
                        not installed)
    stall = result["compaction"]["reply_max_ms"]
    found.append(row(f"longest reply wait while compacting, {n}", stall, None, None,
                     f"<= {STALL_MS:.0f} (a loop stall)", stall <= STALL_MS, "ms"))
    peak, tenth = result["report"]["peak_rss_mb"], result.get("report_tenth")
    above = None if tenth is None else round(peak - tenth["peak_rss_mb"], 1)  # older: none
    found.append(row(f"report peak RSS, {n}", peak, None, None,
                     "reference (flat in history)" if above is None else
                     f"<= {REPORT_FLAT_MB:.0f} above the line below (flat in history)",
                     None if above is None else above <= REPORT_FLAT_MB, "MB"))
    if tenth is not None:
        found.append(row(f"  report peak RSS, {tenth['jobs']:,} finished", tenth["peak_rss_mb"],
                         None, None, "reference (the line above, a tenth the history)", None,
                         "MB"))
    burst = result["burst"]
    found.append(row(f"{burst['count']:,} invalid requests answered", burst["answered_s"],
                     None, None, f"<= {BURST_S:.0f}", burst["answered_s"] <= BURST_S, "s"))
    found.append(row("  coordinator RSS after the burst", burst["rss_mb"], None, None,
                     f"<= {BURST_MB:.0f}", burst["rss_mb"] <= BURST_MB, "MB"))
    return found


def _verb_rows(row, times: dict[str, float], where: str, judged: bool) -> list[dict]:
    """A row per timed command, ``CLI <command>, <where>``; a verb's judged against
    VERB_MS when ``judged``, a bare ``python -c pass`` never (the interpreter's own)."""
    found = []
    for label, ms in times.items():
        judging = judged and not label.startswith("python")
        found.append(row(f"CLI {label}, {where}", ms, None, None,
                         f"<= {VERB_MS:.0f}" if judging else "reference",
                         ms <= VERB_MS if judging else None, "ms"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--burst", type=int, default=10_000, help="invalid requests")
    parser.add_argument("--runs", type=int, default=11, help="runs per CLI verb")
    parser.add_argument("--compact-after", type=int, default=4000,
                        help="PRAXIST_COMPACT_AFTER of the compaction probe (records)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.finished, args.burst, args.runs, args.compact_after),
                     indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
