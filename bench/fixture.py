"""Build a run directory that already holds N finished (or queued) jobs, without running them.

The journal is written the way the coordinator writes it: every event goes
through ``Scheduler.handle`` and is appended with ``Journal.append`` /
``to_record`` only when it changed the scheduler's version (the daemon's rule),
so a coordinator started on the directory replays exactly these records. A
finished job is four journaled events: ``RequestSeen`` (accepted),
``AttemptLaunched``, ``AttemptObserved`` (alive, pid known) and
``AttemptObserved`` (exited 0). A queued job is one ``RequestSeen``.

The derived files a real run leaves behind (jobs/<dir>/<job>.json and
spool/replies/<request>.json) are written too, byte for byte what the
coordinator's start-up repair expects, so a start on the directory measures
replay and the repair's comparison, not 2 x N fsynced rewrites. They are written
without fsync: this is a fixture, and a crash while building it only means
building it again.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from praxist_fs.adapters.fsio import dumps
from praxist_fs.adapters.journal import Journal
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.vault import Vault
from praxist_fs.config import load_policy
from praxist_fs.core.effects import WriteJob, WriteReply
from praxist_fs.core.events import (
    AttemptLaunched, AttemptObserved, CoordinatorStarted, RequestSeen, from_record, to_record,
)
from praxist_fs.core.metrics import AttemptTally
from praxist_fs.core.replay import replay
from praxist_fs.core.request import parse_request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.snapshot import render

PEER = "bench"
COMMIT_EVERY = 4096  # records per group commit while building


def request_document(request_id: str, tag: str, argv: list[str], cwd: str) -> dict:
    """The request a peer writes (the same shape bench_coordinator submits)."""
    return {"request_id": request_id, "peer": PEER, "tag": tag, "argv": argv,
            "profile": "cpu_light", "cwd": cwd, "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"}}


class _Builder:
    """Hand-made events straight into a core and a journal, on purpose not through
    ``praxist_fs.driver.Driver``: a fixture of a million jobs wants group commits of
    COMMIT_EVERY records and no effects carried out (the views are written once, at the
    end, from the core's ``derived_views``), where the driver commits and writes per
    batch. What it builds is only ever read back by the real start (replay and repair);
    the driver's batching is tested where it runs (tests/core/test_replay.py, the
    simulation's crash/replay property test, tests/test_driver.py)."""

    def __init__(self, run_dir: Path, task: Path) -> None:
        self.layout = RunLayout.at(run_dir)
        self.layout.create()
        self.policy = load_policy(str(task))
        self.vault = Vault(self.layout)  # creates the run's HMAC key: digests match a real run
        self.journal = Journal(self.layout.journal)
        if self.journal.seq:
            raise RuntimeError(f"{self.layout.journal} is not empty")
        self.sched = Scheduler()
        self.events = 0
        self.cwd = str(run_dir.parent)

    def process(self, event) -> None:
        before = self.sched.version
        self.sched.handle(event)
        if self.sched.version != before:
            self.journal.append(to_record(event))
            self.events += 1
            if self.events % COMMIT_EVERY == 0:
                self.journal.commit()

    def request(self, request_id: str, tag: str, argv: list[str], at: float) -> str:
        name = f"{request_id}.json"
        data = json.dumps(request_document(request_id, tag, argv, self.cwd)).encode()
        request = parse_request(name, data)
        self.process(RequestSeen(at=at, name=name, digest=self.vault.digest(data),
                                 request_id=request.request_id, request=request))
        reply = self.sched.replies[request_id]
        if reply.outcome != "accepted":
            raise RuntimeError(f"fixture request {request_id}: {reply.outcome} {reply.reason}")
        return reply.job_id

    def finish(self, job_id: str, at: float, pid: int, boot: str) -> None:
        self.process(AttemptLaunched(at=at, job_id=job_id, attempt_id="a1"))
        self.process(AttemptObserved(at=at + 0.001, job_id=job_id, attempt_id="a1", alive=True,
                                     handle={"pid": pid, "pid_start": 1000 + pid,
                                             "boot_id": boot}))
        self.process(AttemptObserved(at=at + 0.03, job_id=job_id, attempt_id="a1", alive=False,
                                     ready=True, go=True, exited=True, exit_code=0,
                                     ended_at=at + 0.03))

    def write_views(self, at: float) -> int:
        """The derived files, as a restarted coordinator derives them from the journal
        (replay rebuilds this very state: the journal holds every state change), dated
        ``at`` (the run's last event) as the run that wrote them would have left them.
        Dated now, all of them fell within the second before the clean-stop marker's
        ``views_durable_ns``, inside the sweep's mtime slack: the first history pass
        after every start read back and compared every file (minutes of it at 10,000
        finished jobs, in make bench's idle row), which no real run's history asks."""
        written, stamp = 0, int(at * 1e9)
        for effect in self.sched.derived_views():
            if isinstance(effect, WriteJob):
                path = self.layout.job_file(effect.directory, effect.job_id)
            elif isinstance(effect, WriteReply):
                path = self.layout.reply(effect.request_id)
            else:
                continue  # generation files: none in these fixtures
            with open(path, "wb") as handle:
                handle.write(dumps(self.sched.written_document(effect)))
            os.utime(path, ns=(stamp, stamp))
            written += 1
        return written


def build_run(run_dir: Path, task: Path, *, finished: int = 0, queued: int = 0,
              queued_argv: list[str] | None = None, prefix: str = "fx",
              spacing: float = 0.05, last_at: float | None = None) -> dict:
    """Write a run directory with ``finished`` completed and then ``queued`` queued jobs,
    submitted ``spacing`` seconds apart, the last at ``last_at`` (default: a day ago).

    Returns what was built: counts, journal events and bytes, and the seconds it took."""
    t0 = time.monotonic()
    b = _Builder(Path(run_dir), Path(task))
    last_at = time.time() - 86400.0 if last_at is None else last_at
    at = last_at - (finished + queued) * spacing
    b.process(CoordinatorStarted(at=at, policy=b.policy.to_dict(), pid=os.getpid(),
                                 host=socket.gethostname(), boot_id="bench-fixture"))
    for i in range(finished):
        rid = f"{prefix}-done-{i:06d}"
        job_id = b.request(rid, rid, ["/bin/true"], at)
        b.finish(job_id, at + 0.002, pid=10_000 + i % 50_000, boot="bench-fixture")
        at += spacing
    for i in range(queued):
        rid = f"{prefix}-queued-{i:06d}"
        b.request(rid, rid, queued_argv or ["/bin/true"], at)
        at += spacing
    b.journal.commit()
    t1 = time.monotonic()
    files = b.write_views(last_at)
    # As a clean stop leaves it: the views are all there (bench_all removes this marker to
    # time the start after a crash; without a snapshot, every derived file is read back).
    with open(b.layout.clean_stop, "w") as handle:
        json.dump({"journal_seq": b.journal.seq, "views_durable_ns": time.time_ns()}, handle)
    b.journal.close()
    return {"finished_jobs": finished, "queued_jobs": queued, "journal_events": b.events,
            "journal_bytes": os.path.getsize(b.layout.journal), "derived_files": files,
            "journal_build_s": round(t1 - t0, 3),
            "views_build_s": round(time.monotonic() - t1, 3)}


def replay_in_process(run_dir: Path) -> dict:
    """The pure replay, no process start: Journal load (decode + CRC) and Scheduler.handle."""
    layout = RunLayout.at(run_dir)
    t0 = time.perf_counter()
    journal = Journal(layout.journal)
    t1 = time.perf_counter()
    sched = Scheduler()
    events = 0
    for record in journal.replay():
        sched.handle(from_record(record))
        events += 1
    t2 = time.perf_counter()
    journal.close()
    return {"events": events, "load_s": round(t1 - t0, 4),
            "handle_s": round(t2 - t1, 4), "total_s": round(t2 - t0, 4)}


def compact_run(run_dir: Path) -> dict:
    """Compact a built run as the coordinator does: the replayed state as snapshot.jsonl,
    with its attempt tally and the watermark of its derived files (the clean-stop marker's time: all written
    by then), then an empty journal (the clean-stop marker keeps vouching for the same
    seq)."""
    layout = RunLayout.at(run_dir)
    journal = Journal(layout.journal)
    sched = Scheduler()
    replay(sched, journal.replay())
    with open(layout.clean_stop, "rb") as handle:
        durable_ns = json.load(handle)["views_durable_ns"]
    tally = AttemptTally.of(sched.jobs.values())  # as compaction.compact saves it
    tally.forget_finished(sched.jobs.in_memory, sched.last_order)
    data = render(sched, journal.seq, views_durable_ns=durable_ns, tally=tally.to_dict()).data
    with open(layout.snapshot, "wb") as handle:
        handle.write(data)
    journal.compact()
    journal.close()
    return {"snapshot_bytes": len(data), "journal_seq": journal.seq}


def main(argv: list[str] | None = None) -> int:
    """``fixture.py RUN_DIR TASK_YAML --finished N [--queued M]``: build, print JSON."""
    import argparse
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("task", type=Path)
    parser.add_argument("--finished", type=int, default=0)
    parser.add_argument("--queued", type=int, default=0)
    parser.add_argument("--prefix", default="fx")
    parser.add_argument("--replay", action="store_true",
                        help="also time an in-process replay of the journal just built")
    parser.add_argument("--compact", action="store_true",
                        help="only compact the run already at RUN_DIR into a snapshot")
    args = parser.parse_args(argv)
    if args.compact:
        print(json.dumps(compact_run(args.run_dir)))
        return 0
    built = build_run(args.run_dir, args.task, finished=args.finished, queued=args.queued,
                      prefix=args.prefix)
    if args.replay:
        built["in_process_replay"] = replay_in_process(args.run_dir)
    print(json.dumps(built))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
