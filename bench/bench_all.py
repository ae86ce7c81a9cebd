#!/usr/bin/env python3
"""praxist_fs side by side with task-spooler, plus praxist_fs-only measurements.

    .venv/bin/python bench/bench_all.py            # full: 3 rounds, about 15 minutes
    .venv/bin/python bench/bench_all.py --quick    # small counts, 1 round, about 2 minutes
    .venv/bin/python bench/bench_all.py --profile  # also cProfile the coordinator

Comparisons (ratio = praxist_fs / task-spooler, the median of each round's; the
latency rows run both systems at once, a job of each in turn, each once both went
quiet; the others one system then the other, the first swapping by round):

  latency     submit-to-start p50/p99 over N sequential trivial jobs. Both run
              the same command, ``/bin/sh -c 'date +%s%N > FILE'`` (task-spooler
              execs its argv; praxist_fs gets it as ``argv``), so "start" is the
              timestamp date writes. Submit is the rename into spool/incoming/
              (praxist_fs) or the ``tsp`` call (task-spooler), timed just before.
  throughput  wall time for N ``/usr/bin/true`` at two slots, from the first
              submission to the last job finished.
  submit      the cost of submitting N jobs while the only slot is held by a
              blocker (nothing runs): praxist_fs from the first rename to the
              last ``accepted`` reply (each acceptance fsynced in the journal
              before its reply is written); task-spooler's per-call cost x N.
  shell       the latency scenario as a shell user submits, both systems through
              one running ``/bin/sh`` fed a command line per job (timed just
              before the line is written): ``printf ... > spool/tmp/X && mv
              spool/tmp/X spool/incoming/`` (printf is built in: one exec, mv)
              against ``tsp /bin/sh -c '...'`` (one exec, tsp). Until round 3
              praxist_fs's side started a new ``sh -c`` per job and task-spooler's
              execed tsp straight from Python: praxist_fs paid a shell start
              (~1 ms) that task-spooler did not.
  16 slots    the throughput scenario at 16 slots on both sides (10,000 jobs).
  first job   (praxist_fs only) submit-to-start of the first job after a start,
              against the sequential p50.

praxist_fs alone: acceptance per request with 0 / 10,000 / 100,000 finished jobs
already in the run; a scheduling pass over 10,000 queued jobs on the fake 8-GPU
inventory; journal replay of 100,000 events (cold start to serving); acceptance one at a time
with 0 / 2,000 / 5,000 jobs queued behind a held slot (bench/bench_queue_depth.py); idle CPU
and RSS with 10,000 finished jobs; and the physical floor of this machine. At
100,000 finished (10,000 quick; bench/perf3_rows.py): each CLI verb's start, the
longest reply wait while the journal compacts, the report's peak RSS; and a burst of
10,000 invalid requests (2,000 quick).
Existing jobs are a journal written directly (bench/fixture.py), not run.

The table goes to stdout, everything to bench/results/bench-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_queue_depth  # noqa: E402
import bench_scheduling  # noqa: E402
import bench_tsp  # noqa: E402
import disk  # noqa: E402
import perf3_rows  # noqa: E402
from bench_coordinator import TRUE, machine, summary_ms  # noqa: E402
from bench_table import build_rows, render_table  # noqa: E402
from history_rows import px_acceptance_levels, px_replay  # noqa: E402
from side_by_side import compare, log, px_throughput  # noqa: E402

FULL = {"rounds": 3, "latency": 200, "throughput": 1000, "submit": 1000,
        "shell_latency": 200, "throughput16": 10_000, "first_job": 5,
        "accept_levels": [0, 10_000, 100_000], "accept_rounds": 3, "accept_batch": 1000,
        "accept_seq": 100,
        "idle_level": 10_000, "idle_s": 30.0, "replay_events": 100_000,
        "sched_jobs": 10_000, "sched_rounds": 10, "floor": 200, "history": 100_000,
        "burst": 10_000, "queue_depths": [0, 2000, 5000], "queue_seq": 100}
QUICK = {"rounds": 1, "latency": 50, "throughput": 200, "submit": 200,
         "shell_latency": 50, "throughput16": 1000, "first_job": 3,
         "accept_levels": [0, 1_000, 10_000], "accept_rounds": 1, "accept_batch": 200,
         "accept_seq": 30,
         "idle_level": 10_000, "idle_s": 5.0, "replay_events": 20_000,
         "sched_jobs": 10_000, "sched_rounds": 3, "floor": 50, "history": 10_000,
         "burst": 2_000, "queue_depths": [0, 500], "queue_seq": 30}


def px_scheduling(jobs: int, rounds: int) -> dict:
    """bench_scheduling.py's three passes, medians over ``rounds`` fresh schedulers."""
    fill, held, after_exit, launched = [], [], [], 0
    for _ in range(rounds):
        sched = bench_scheduling.build(jobs)
        ms, launches = bench_scheduling.timed(lambda: sched.next_launches(2e6))
        fill.append(ms)
        launched = len(launches)
        loop = bench_scheduling.run_launches(sched, launches, 2e6)
        sched.version += 1  # same state again: every job is held now
        held.append(bench_scheduling.timed(lambda: sched.next_launches(2e6))[0])
        loop.advance(3e6)  # the first one ends
        after_exit.append(bench_scheduling.timed(lambda: sched.next_launches(3e6))[0])
    return {"jobs": jobs, "devices": 8, "rounds": rounds, "launched_first_pass": launched,
            "first_pass_ms": round(statistics.median(fill), 3),
            "all_held_pass_ms": round(statistics.median(held), 3),
            "pass_after_one_exit_ms": round(statistics.median(after_exit), 3)}


def physical_floor(n: int) -> dict:
    """What one durable file hand-off and one process start cost here, from Python; and
    a journal record's flush after a quiet spell and right after another
    (``disk.flushes_after_quiet_ns``, a quarter as many: each waits 50 ms)."""
    durable, spawn = disk.durable_handoffs_ns(n), []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn(TRUE, [TRUE], os.environ)
        os.waitpid(pid, 0)
        spawn.append(time.perf_counter_ns() - t0)
    d, s = summary_ms(durable), summary_ms(spawn)
    flushes = disk.flushes_after_quiet_ns(max(1, n // 4))
    return {"samples": n, "write_fsync_rename_dirfsync": d, "spawn_true_and_wait": s,
            "sum_p50_ms": round(d["p50_ms"] + s["p50_ms"], 3),
            "append_fsync_after_50ms_quiet": summary_ms(flushes["after_quiet"]),
            "append_fsync_after_a_flush": summary_ms(flushes["after_flush"])}


def profile_summary(path: Path, top: int = 25) -> str:
    import io
    import pstats
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# --- main ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round")
    parser.add_argument("--rounds", type=int, help="rounds of the comparisons (default 3, "
                        "quick 1)")
    parser.add_argument("--profile", action="store_true",
                        help="also run the coordinator under cProfile for one throughput run "
                        "and one cold start; print the top functions")
    parser.add_argument("--tsp", help="the tsp binary (default: tsp on PATH, installed with "
                        "apt-get if missing)")
    parser.add_argument("--json", metavar="PATH",
                        help="write results here (default bench/results/bench-<ts>.json)")
    args = parser.parse_args(argv)
    counts = dict(QUICK if args.quick else FULL)
    if args.rounds:
        counts["rounds"] = args.rounds
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.json) if args.json else HERE / "results" / f"bench-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Measure what an installed package does (pip compiles a wheel's modules): with
    # PYTHONDONTWRITEBYTECODE set, every coordinator and cold shim would compile its source.
    compileall.compile_dir(HERE.parent / "praxist_fs", quiet=1)
    tsp, version = bench_tsp.ensure_tsp(args.tsp)
    scratch = disk.isolate()  # before any scratch directory is made
    t_begin = time.monotonic()
    results = {"mode": "quick" if args.quick else "full", "counts": counts,
               "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
               "load_avg_at_start": os.getloadavg(), "task_spooler": {"binary": tsp,
                                                                      "version": version},
               "disk": scratch}
    log(f"physical floor ({counts['floor']} samples) ...")
    results["floor"] = physical_floor(counts["floor"])
    log(f"scheduling pass over {counts['sched_jobs']:,} queued jobs ...")
    results["scheduling"] = px_scheduling(counts["sched_jobs"], counts["sched_rounds"])
    results["comparisons"] = compare(counts["rounds"], counts, tsp)
    log(f"replay of {counts['replay_events']:,} events: building the journal ...")
    profile_start = HERE / "results" / f"profile-coldstart-{stamp}.pstats" if args.profile \
        else None
    results["replay"] = px_replay(counts["replay_events"], counts["rounds"], profile_start)
    results["acceptance"], results["idle"] = px_acceptance_levels(
        counts["accept_levels"], counts["accept_rounds"], counts["accept_batch"],
        counts["accept_seq"],
        counts["idle_level"], counts["idle_s"])
    log(f"acceptance one at a time at {counts['queue_depths']} queued jobs (no slot) ...")
    results["queue_depth"] = bench_queue_depth.measure(counts["queue_depths"],
                                                       counts["queue_seq"])
    log(f"CLI verbs, compaction stall, report memory at {counts['history']:,} finished; "
        f"a burst of {counts['burst']:,} invalid requests ...")
    results["perf3"] = perf3_rows.measure(counts["history"], counts["burst"],
                                          counts["floor"] // 10, 4000)
    if args.profile:
        path = HERE / "results" / f"profile-throughput-{stamp}.pstats"
        log(f"cProfile: {counts['throughput']} jobs at 2 slots, coordinator under cProfile ...")
        results["profile_throughput"] = px_throughput(counts["throughput"],
                                                      ("-m", "cProfile", "-o", str(path)))
        results["profile_throughput"]["pstats"] = str(path)
    results["load_avg_at_end"] = os.getloadavg()
    results["elapsed_s"] = round(time.monotonic() - t_begin, 1)
    results["table"] = build_rows(results)
    out.write_text(json.dumps(results, indent=2) + "\n")

    m = results["machine"]
    print()
    print(f"machine: nproc {m['nproc']}, Python {m['python']}, {m['tmp_dir']} on {m['tmp_fs']}, "
          f"kernel {m['kernel']}; {version}; mode {results['mode']}, "
          f"{counts['rounds']} round(s); load avg {results['load_avg_at_start'][0]:.2f} -> "
          f"{results['load_avg_at_end'][0]:.2f}")
    print(render_table(results["table"]))
    lat = results["comparisons"]["latency"]["runs"]["praxist_fs"][-1]
    print(f"\npraxist_fs submit-to-start phases (p50 ms, last round): {lat['phases_p50_ms']}")
    print("its slowest jobs (ms; submitted_s: seconds after the coordinator's start):")
    for sample in lat["slowest"]:
        print(f"  {sample}")
    problems = _problems(results)
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if args.profile:
        for key in ("profile_coldstart", "profile_throughput"):
            path = Path(results["replay"]["profile"]) if key == "profile_coldstart" else \
                Path(results["profile_throughput"]["pstats"])
            if path.exists():
                print(f"\n=== {key}: {path} ===")
                print(profile_summary(path))
    print(f"\nresults: {out} ({results['elapsed_s']:.0f} s)")
    return 1 if problems else 0


def _problems(results: dict) -> list[str]:
    problems = []
    c = results["comparisons"]
    for name in ("latency", "latency_blocks", "shell_latency"):
        for run in c[name]["runs"]["praxist_fs"] + c[name]["runs"]["task_spooler"]:
            problems += run["failures"][:3]
    for name in ("throughput", "throughput16"):
        for run in c[name]["runs"]["praxist_fs"]:
            if run["done_states"].get("completed") != run["jobs"]:
                problems.append(f"praxist {name} done states: {run['done_states']}")
        for run in c[name]["runs"]["task_spooler"]:
            if run["exit_levels"].get("0") != run["jobs"]:
                problems.append(f"tsp {name} exit levels: {run['exit_levels']}")
    for run in c["submit"]["runs"]["praxist_fs"]:
        if run["outcomes"].get("accepted") != run["requests"]:
            problems.append(f"praxist submit outcomes: {run['outcomes']}")
    for level, entry in results["acceptance"].items():
        for b in entry["batches"]:
            if b["outcomes"].get("accepted") != b["requests"]:
                problems.append(f"acceptance at {level}: {b['outcomes']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
