#!/usr/bin/env python3
"""How long a journal's fsync waits while a compaction writes its snapshot on the same disk
(issue 31, item 3: the slowest reply while compacting at 100,000 finished jobs came as
the child wrote its ~135 MB snapshot, with no loop turn long in CPU).

A thread appends a small record to a file and fsyncs it every 5 ms, as the coordinator
commits its journal, while a forked child writes ``--mb`` megabytes and fsyncs them:
whole (one write, then fsync: the old snapshot write) or in slices whose writeback is
started as they go (``fsio.write_atomic(..., sliced=True)``: ``adapters/writeback.py``).
The two alternate for ``--rounds`` rounds in one directory (``--dir``, default TMPDIR:
put it on the disk a run's journal lives on). Reported per way: the fsync latencies'
p50, p99 and max in milliseconds, and the writer's seconds, with the load average.
Fewer things touch this than a served run's reply times (no Python loop, no scheduler),
so it shows the writeback alone.

Usage: .venv/bin/python bench/bench_writeback.py [--mb 135] [--rounds 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from praxist_fs.adapters.fsio import write_atomic

RECORD = b"x" * 300  # about a journal record


def _fsyncs(path: Path, stop: threading.Event, latencies: list[float]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while not stop.is_set():
            began = time.perf_counter()
            os.write(fd, RECORD)
            os.fsync(fd)
            latencies.append((time.perf_counter() - began) * 1000)
            time.sleep(0.005)
    finally:
        os.close(fd)


def one(directory: Path, data: bytes, sliced: bool) -> dict:
    """The fsync latencies while a child writes ``data`` whole or sliced, and its seconds."""
    stop, latencies = threading.Event(), []
    prober = threading.Thread(target=_fsyncs, args=(directory / "journal", stop, latencies))
    prober.start()
    time.sleep(0.3)  # the quiet before
    began = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            write_atomic(directory / "snapshot", data, durable=True, sliced=sliced)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    wrote = time.perf_counter() - began
    time.sleep(0.2)
    stop.set()
    prober.join()
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError("the writer failed")
    latencies.sort()
    return {"fsyncs": len(latencies), "p50_ms": round(statistics.median(latencies), 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)], 2),
            "max_ms": round(latencies[-1], 2), "write_s": round(wrote, 3),
            "load": os.getloadavg()[0]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=135, help="the snapshot's size")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="where to write (default: TMPDIR)")
    args = parser.parse_args()
    data = os.urandom(1 << 20) * args.mb
    results: dict[str, list[dict]] = {"whole": [], "sliced": []}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="praxist-bench-writeback-") as tmp:
        for round_ in range(args.rounds):
            for way in (("whole", "sliced") if round_ % 2 == 0 else ("sliced", "whole")):
                results[way].append(one(Path(tmp), data, way == "sliced"))
                (Path(tmp) / "snapshot").unlink()
    summary = {way: {"max_ms_median": statistics.median(r["max_ms"] for r in runs),
                     "p99_ms_median": statistics.median(r["p99_ms"] for r in runs),
                     "rounds": runs} for way, runs in results.items()}
    print(json.dumps({"mb": args.mb, **summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
