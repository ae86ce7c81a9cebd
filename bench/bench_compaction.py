#!/usr/bin/env python3
"""The longest the coordinator's loop stalls while it compacts its journal with a long
history behind it (issue 31, item 3: no stall over 50 ms at 100,000 finished jobs).

A run of ``--finished`` completed jobs is built by bench/fixture.py and served once by
a coordinator stopped cleanly (compacted: its snapshot shelves them all; its job index
whole, so that no start-up work of the history remains), then served by a coordinator
that compacts every ``--compact-after`` records. Requests (``true``, one slot) are
renamed in one at a time, the next as soon as the last one's reply is there, until
``--compactions`` compactions have replaced ``snapshot.jsonl`` and one more second
has passed: a request is always waiting, so a turn of the loop that takes S seconds
delays the reply of one of them by about S. Reported: the count of requests and of
compactions, and rename -> reply p50, p99 and max in milliseconds, with the replies
that waited longest and when (seconds from the first request), beside the times the
snapshots were replaced; and, from the stopped coordinator's metrics.prom, its loop's
turns and how many took over 50 ms of wall time and of the loop thread's CPU (a turn
long in wall time alone waited: an fsync, a busy disk, no core to spare).

``--dirty-mb M``: meanwhile another program on the same disk keeps about M MB unwritten
(a checkpoint saved every few seconds: a new file of M MB written, the last one removed
unwritten), the hostile case for a compaction that syncs more than its own files.

``--durable-step JOBS``: only the compaction child's first step, timed apart from any
coordinator: the derived files of JOBS jobs written as the views write them (each job's
file through queued/, running/ and done/, and its reply: 4 records a job), an M MB file
(``--dirty-mb``, default 1024) written just before on the same disk, and a journal-like
append + fdatasync every 5 ms beside it; then ``sync()`` (e2e5b88's step) or the files
synced by name (``unsynced.make_durable``), alternating, ``--rounds`` each. Printed:
how long each took and the longest of those fdatasyncs meanwhile.

Usage: .venv/bin/python bench/bench_compaction.py [--finished 100000] [--compact-after 4000]
       [--compactions 2] [--fixtures DIR] [--dirty-mb M] [--json PATH]
       .venv/bin/python bench/bench_compaction.py --durable-step 5000 [--dirty-mb 1024]
       [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from history_rows import copy_fixture  # noqa: E402
from bench_coordinator import TASK_YAML, TRUE, Coordinator, discard  # noqa: E402
from bench_history import INDEX, left_by  # noqa: E402

PROBE_TIMEOUT_S = 120.0


def served_fixture(directory: Path, finished: int) -> Path:
    """``directory`` holding task.yaml and run/ with ``finished`` jobs, as a coordinator
    that served it and stopped cleanly leaves it (compacted, its job index whole), so
    that the run served next does no start-up work of its history (built once: a
    directory that has it already is used as it is)."""
    if (directory / INDEX).exists():
        return directory
    built = Path(tempfile.mkdtemp(prefix="praxist-bench-compaction-built-"))
    (built / "task.yaml").write_text(TASK_YAML.format(concurrency=1, maximum=8))
    subprocess.run([sys.executable, str(HERE / "fixture.py"), str(built / "run"),
                    str(built / "task.yaml"), "--finished", str(finished)],
                   check=True, capture_output=True, cwd=HERE.parent)
    served = left_by(built, "compaction-served", crash=False)
    shutil.rmtree(built)
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("task.yaml", "run"):
        shutil.move(served / name, directory / name)
    shutil.rmtree(served)
    return directory


def dirty_writer(directory: Path, megabytes: int) -> subprocess.Popen:
    """A program that keeps about ``megabytes`` MB unwritten in ``directory`` until it is
    killed: a new file every 3 s, the one before removed (its pages dropped unwritten)."""
    script = (f'i=0; while :; do dd if=/dev/zero of="{directory}/dirty.$i" bs=1M '
              f'count={megabytes} status=none; rm -f "{directory}/dirty.$((i-1))"; '
              'i=$((i+1)); sleep 3; done')
    return subprocess.Popen(["sh", "-c", script], start_new_session=True)


def serve_and_probe(source: Path, compact_after: int, compactions: int,
                    dirty_mb: int = 0) -> dict:
    """Rename requests in one at a time on a copy of ``source`` until ``compactions``
    snapshots replaced the one it started with, and a second after that; with
    ``dirty_mb``, beside a program that keeps that much unwritten on the same disk."""
    scratch = copy_fixture(source, "compaction")
    # The copy's ~1 GB settles on the disk first: its writeback is the bench's, and the
    # compaction child's sync (the watermark's) would otherwise flush it while we time
    # the replies (170-657 ms against 21 ms settled, bench/README.md)
    os.sync()
    snapshot = scratch / "run" / "resource_scheduler" / "journal" / "snapshot.jsonl"
    os.environ["PRAXIST_COMPACT_AFTER"] = str(compact_after)
    latencies: list[tuple[float, float]] = []  # (seconds since the first request, ms)
    replaced: list[dict] = []
    writer = dirty_writer(scratch, dirty_mb) if dirty_mb else None
    try:
        with Coordinator("compaction", concurrency=1, scratch=scratch, keep=True,
                         start_timeout=900, start_poll=0.005) as co:
            inode, began, until = os.stat(snapshot).st_ino, time.monotonic(), None
            n = 0
            while until is None or time.monotonic() < until:
                rid = f"probe-{n:06d}"
                name = co.prepare(rid, rid, [TRUE])
                sent = time.monotonic()
                co.drop(name)
                co.wait_reply(rid, timeout=PROBE_TIMEOUT_S)
                now = time.monotonic()
                latencies.append((round(sent - began, 3), (now - sent) * 1000))
                n += 1
                current = os.stat(snapshot).st_ino
                if current != inode:
                    inode = current
                    with open(snapshot, "rb") as handle:
                        seq = json.loads(handle.readline())["journal_seq"]
                    replaced.append({"at_s": round(now - began, 3), "journal_seq": seq})
                    if len(replaced) >= compactions and until is None:
                        until = now + 1.0
            log = co.log_path.read_text(errors="replace")
        turns = loop_turns(scratch / "run" / "resource_scheduler" / "metrics.prom")
    finally:
        os.environ.pop("PRAXIST_COMPACT_AFTER", None)
        if writer is not None:
            os.killpg(writer.pid, 9)
            writer.wait()
        discard(scratch)
    values = sorted(ms for _, ms in latencies)
    slowest = sorted(latencies, key=lambda entry: -entry[1])[:5]
    return {"requests": len(values), "compactions": len(replaced),
            "compacted_log_lines": log.count("journal compacted"),
            "snapshot_replaced_at_s": replaced,
            "reply_p50_ms": round(statistics.median(values), 2),
            "reply_p99_ms": round(values[min(len(values) - 1, int(len(values) * 0.99))], 2),
            "reply_max_ms": round(values[-1], 2),
            "slowest": [{"at_s": at, "ms": round(ms, 2)} for at, ms in slowest],
            **turns}


def durable_step(jobs: int, dirty_mb: int, rounds: int) -> dict:
    """``--durable-step``: the compaction child's sync both ways, alternating."""
    import threading

    from praxist_fs.adapters.fsio import unlink, write_atomic
    from praxist_fs.adapters.unsynced import Unsynced, make_durable

    def journal_like(path: Path, stop: threading.Event, waits: list[float]) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while not stop.is_set():
                began = time.perf_counter()
                os.write(fd, b"r" * 200)
                os.fdatasync(fd)
                waits.append((time.perf_counter() - began) * 1000)
                stop.wait(0.005)
        finally:
            os.close(fd)

    def one(way: str) -> dict:
        scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-durable-"))
        owed, body = Unsynced(everything=False), b"x" * 900
        directories = [scratch / name for name in ("queued", "running", "done", "replies")]
        for directory in directories:
            directory.mkdir()
        for n in range(jobs):
            for directory in directories:
                path = str(directory / f"job-{n:06d}.json")
                write_atomic(path, body, sync=False)
                owed.note(path)
                if directory.name in ("queued", "running"):  # moved on
                    unlink(path)
        with open(scratch / "unrelated", "wb") as handle:
            for _ in range(dirty_mb):
                handle.write(bytes(1 << 20))
        stop, waits = threading.Event(), []
        prober = threading.Thread(target=journal_like, args=(scratch / "journal", stop, waits))
        prober.start()
        time.sleep(0.1)  # a few fdatasyncs before: the prober's own floor
        began = time.perf_counter()
        if way == "sync":
            os.sync()
        else:
            make_durable(owed.take())
        took = time.perf_counter() - began
        stop.set()
        prober.join()
        (scratch / "unrelated").unlink()
        os.sync()  # nothing of this round left for the next one's
        discard(scratch)
        return {"way": way, "took_s": round(took, 3), "fdatasync_max_ms": round(max(waits), 1),
                "fdatasync_p50_ms": round(statistics.median(waits), 2)}

    os.sync()
    rounds_done = []
    for n in range(rounds):
        for way in (("sync", "by_name") if n % 2 == 0 else ("by_name", "sync")):
            rounds_done.append(one(way))
            print(json.dumps(rounds_done[-1]), flush=True)
    medians = {way: {key: statistics.median(r[key] for r in rounds_done if r["way"] == way)
                     for key in ("took_s", "fdatasync_max_ms")} for way in ("sync", "by_name")}
    return {"jobs": jobs, "dirty_mb": dirty_mb, "load": os.getloadavg()[0],
            "rounds": rounds_done, "medians": medians}


def loop_turns(metrics: Path) -> dict:
    """From the stopped coordinator's metrics.prom: its loop's turns, and how many took
    over 50 ms of wall time and of the loop thread's CPU (``praxist_loop_turn_seconds``,
    ``praxist_loop_turn_cpu_seconds``; none from a coordinator without them)."""
    text = metrics.read_text() if metrics.exists() else ""
    found = {}
    for name, key in (("praxist_loop_turn_seconds", "wall"),
                      ("praxist_loop_turn_cpu_seconds", "cpu")):
        count = re.search(rf"^{name}_count{{[^}}]*}} (\S+)$", text, re.M)
        within = re.search(rf'^{name}_bucket{{[^}}]*le="0.05"[^}}]*}} (\S+)$', text, re.M)
        if count and within:
            found["loop_turns"] = int(float(count.group(1)))
            found[f"turns_over_50ms_{key}"] = int(float(count.group(1)) - float(within.group(1)))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--compact-after", type=int, default=4000,
                        help="PRAXIST_COMPACT_AFTER for the coordinator served (records)")
    parser.add_argument("--compactions", type=int, default=2)
    parser.add_argument("--fixtures", type=Path,
                        help="keep the built run here, to compare versions on one")
    parser.add_argument("--dirty-mb", type=int, default=0,
                        help="keep this much unwritten on the same disk meanwhile (MB)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--durable-step", type=int, metavar="JOBS",
                        help="time only the compaction child's sync, both ways")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.durable_step:
        result = durable_step(args.durable_step, args.dirty_mb or 1024, args.rounds)
        print(json.dumps(result["medians"], indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return 0
    keep = args.fixtures is not None
    source = args.fixtures or Path(os.environ.get("TMPDIR", "/tmp")) / \
        f"praxist-bench-compaction-{os.getpid()}"
    try:
        t0 = time.monotonic()
        served_fixture(source, args.finished)
        result = {"finished": args.finished, "compact_after": args.compact_after,
                  "fixture_s": round(time.monotonic() - t0, 1),
                  "load": os.getloadavg()[0],
                  "dirty_mb": args.dirty_mb,
                  **serve_and_probe(source, args.compact_after, args.compactions,
                                    args.dirty_mb)}
    finally:
        if not keep:
            shutil.rmtree(source, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
