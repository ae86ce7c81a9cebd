"""Size and build time of `praxist-fs report` at 10,000 jobs (issue 17: <= 5 MB, <= 3 s),
and its peak memory on a run's history (issue 31: memory flat in history).

    .venv/bin/python bench/bench_report.py [--jobs 10000] [--gpus 64] [--trace FILE.csv]
    .venv/bin/python bench/bench_report.py --run-dir RUN

With ``--run-dir`` the report of that run (e.g. one of 100,000 finished jobs that
bench/bench_compaction.py --fixtures DIR leaves in DIR/run) is built as `praxist-fs
report` builds it (``report_of``) and written to a temporary file; printed: its jobs,
seconds, bytes, and the process's peak RSS (MB, VmHWM) beside its peak before.

The jobs are a `praxist-fs simulate` replay of the first N jobs of the Philly trace (the
replay itself is not timed). Its final state is written as a run's snapshot
(snapshot.jsonl, as a compaction leaves it) into a temporary run directory, and the
report is built from there as `praxist-fs report` builds it: replay the run read-only,
render, write. Prints one JSON object: jobs, attempts, GPU lanes, load_s, render_s,
build_s (load + render + write), bytes, and whether both targets were met.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.config import load_policy
from praxist_fs.core import snapshot
from praxist_fs.report import load_run, render, write
from praxist_fs.report_history import History
from praxist_fs.simulate import load_trace, replay

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "trace_philly.csv"
MAX_BYTES, MAX_BUILD_S = 5_000_000, 3.0


def of_run(run_dir: Path) -> dict:
    """``praxist-fs report``'s work on ``run_dir``: time, size and peak memory."""
    from praxist_fs.report import report_of

    before = peak_rss_mb()
    began = time.perf_counter()
    document, jobs = report_of(RunLayout.at(run_dir))  # drawn as write consumes it
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        size = write(Path(tmp) / "report.html", document)
    return {"jobs": jobs, "build_s": round(time.perf_counter() - began, 3), "bytes": size,
            "rss_mb_before": before, "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec (``VmHWM``), in MB. Not ``ru_maxrss``:
    Linux carries that over a fork and an exec, so a bench started by a larger process
    (``make bench``'s, ~100 MB) reads its parent's size however little it uses."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1000, 1)  # kB, as ru_maxrss / 1000 read
    raise RuntimeError("/proc/self/status has no VmHWM")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--run-dir", type=Path,
                        help="build the report of this run instead, and say its peak RSS")
    args = parser.parse_args()
    if args.run_dir is not None:
        print(json.dumps(of_run(args.run_dir), indent=2))
        return
    result = replay(load_trace(args.trace, args.jobs), gpus=args.gpus, policy=load_policy(None),
                    keep_scheduler=True)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        layout = RunLayout.at(Path(tmp) / "run")
        layout.journal_dir.mkdir(parents=True)
        layout.snapshot.write_bytes(snapshot.render(result.scheduler, 0).data)
        began = time.perf_counter()
        sched, last = load_run(layout)
        history = History.of(sched.jobs.values())
        loaded = time.perf_counter()
        document = render(sched, title="bench", until=history.end(last), history=history)
        rendered = time.perf_counter()
        size = write(Path(tmp) / "report.html", document)
        done = time.perf_counter()
    build_s = done - began
    print(json.dumps({
        "jobs": history.jobs, "attempts": history.attempts,
        "gpu_lanes": len({g for j in history.gpu_jobs for a in j.attempts for g in a.gpus}),
        "load_s": round(loaded - began, 3), "render_s": round(rendered - loaded, 3),
        "build_s": round(build_s, 3), "bytes": size,
        "size_ok": size <= MAX_BYTES, "time_ok": build_s <= MAX_BUILD_S}, indent=2))


if __name__ == "__main__":
    main()
