"""Size and build time of `praxist-fs report` at 10,000 jobs (issue 17: <= 5 MB, <= 3 s).

    .venv/bin/python bench/bench_report.py [--jobs 10000] [--gpus 64] [--trace FILE.csv]

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
from praxist_fs.report import end_of, load_run, render, write
from praxist_fs.simulate import load_trace, replay

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "trace_philly.csv"
MAX_BYTES, MAX_BUILD_S = 5_000_000, 3.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--gpus", type=int, default=64)
    args = parser.parse_args()
    result = replay(load_trace(args.trace, args.jobs), gpus=args.gpus, policy=load_policy(None),
                    keep_scheduler=True)
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        layout = RunLayout.at(Path(tmp) / "run")
        layout.journal_dir.mkdir(parents=True)
        layout.snapshot.write_bytes(snapshot.render(result.scheduler, 0).data)
        began = time.perf_counter()
        sched, last = load_run(layout)
        loaded = time.perf_counter()
        document = render(sched, title="bench", until=end_of(sched, last))
        rendered = time.perf_counter()
        size = write(Path(tmp) / "report.html", document)
        done = time.perf_counter()
    build_s = done - began
    print(json.dumps({
        "jobs": len(sched.jobs), "attempts": sum(len(j.attempts) for j in sched.jobs.values()),
        "gpu_lanes": len({g for j in sched.jobs.values() for a in j.attempts for g in a.gpus}),
        "load_s": round(loaded - began, 3), "render_s": round(rendered - loaded, 3),
        "build_s": round(build_s, 3), "bytes": size,
        "size_ok": size <= MAX_BYTES, "time_ok": build_s <= MAX_BUILD_S}, indent=2))


if __name__ == "__main__":
    main()
