"""The views and the inboxes on a real run directory, with the test as the loop: the
inboxes return what peers wrote as events (they feed nothing), the core decides, and the
views write what it decided through the same mapping the repair at start uses."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from praxist_fs.adapters import spool
from praxist_fs.adapters.jobindex import JobIndex, JobQuery, list_jobs
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.vault import Vault
from praxist_fs.core.effects import WriteJob, WriteReply
from praxist_fs.core.events import ControlSeen, CoordinatorStarted, RequestSeen
from praxist_fs.core.metrics import COMMIT_BUCKETS, AttemptTally, Histogram
from praxist_fs.core.policy import Policy
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.inboxes import Inboxes
from praxist_fs import sinks
from tests.e2e.conftest import wait_for
from praxist_fs.sinks import StatusSink
from praxist_fs.views import Unsettled, Views


def drop_request(layout: RunLayout, tag: str, env: dict[str, str] | None = None,
                 age: float = 10.0) -> str:
    """A peer's request file, written ``age`` seconds ago (past the spool's grace)."""
    name = f"{tag}.json"
    path = layout.incoming / name
    path.write_text(json.dumps({"peer": "alice", "tag": tag, "argv": ["true"],
                                "env": env or {}}))
    then = time.time() - age
    os.utime(path, (then, then))
    return name


def accepted(layout: RunLayout, *tags: str) -> tuple[Scheduler, Vault, Views]:
    """A started core and the views of a fresh run, with a request per tag accepted and
    its files written."""
    sched, vault = Scheduler(), Vault(layout)
    sched.handle(CoordinatorStarted(at=time.time(), policy=Policy().to_dict(), pid=1,
                                    host="h", boot_id="boot"))
    views = Views(layout, vault, JobIndex(layout.job_index, journal_seq=0, boot_id="boot",
                                          clean=False), AttemptTally.of(sched.jobs.values()))
    for tag in tags:
        drop_request(layout, tag)
    requests, _ = Inboxes(layout, vault).requests()
    for effect in [effect for event in requests for effect in sched.handle(event)]:
        views.execute(effect, sched)
    return sched, vault, views


def test_a_burst_larger_than_a_batch_is_read_a_batch_at_a_time_and_says_more_wait(layout):
    """Issue 16 (DESIGN.md, inboxes.py: "read into events"): requests are read in
    arrival order, a batch at a time, and a full batch says more wait (the loop rings
    itself for the rest). Reading consumes nothing: that is an effect, after the commit."""
    names = [drop_request(layout, f"r{n:04d}", age=10.0 + spool.BATCH + 3 - n)
             for n in range(spool.BATCH + 3)]
    events, full = Inboxes(layout, Vault(layout)).requests()
    assert full
    assert [e.name for e in events] == names[:spool.BATCH]  # oldest first
    assert all(isinstance(e, RequestSeen) and e.request is not None for e in events)
    assert sorted(os.listdir(layout.incoming)) == sorted(names)  # still there: not consumed

    for name in names[:spool.BATCH]:
        os.unlink(layout.incoming / name)
    events, full = Inboxes(layout, Vault(layout)).requests()
    assert not full and [e.name for e in events] == names[spool.BATCH:]


def test_a_secret_in_a_request_never_reaches_the_event(layout):
    """seed 000 "State And Compatibility": "Runtime environment values that look
    credential-bearing by name or value shape are stored only as hashes": the event the
    core journals holds a keyed hash, never the value."""
    drop_request(layout, "secret", env={"API_TOKEN": "sk-live-0123456789abcdef"})
    [event], _ = Inboxes(layout, Vault(layout)).requests()
    assert "sk-live-0123456789abcdef" not in json.dumps(event.request.env)
    assert set(event.request.env) == {"API_TOKEN"}


def test_a_bad_control_file_is_an_event_that_names_its_field(layout):
    """A peer's malformed control file becomes an event saying what is wrong (answered
    and set aside by the core's effects), never an exception in the reader."""
    (layout.control / "c1.json").write_text(json.dumps({"op": "no-such-op"}))
    [event] = Inboxes(layout, Vault(layout)).controls()
    assert isinstance(event, ControlSeen) and event.control is None
    assert event.error_field and event.error_problem


def test_the_repair_at_start_rewrites_the_very_files_execute_wrote(layout):
    """seed 000 "State And Compatibility": state is "a compact derived view"; issue 16:
    one mapping from effect to file, used both to execute and to repair. A lost job file
    and a damaged reply are rewritten at start, to the bytes the coordinator wrote."""
    sched, vault = Scheduler(), Vault(layout)
    sched.handle(CoordinatorStarted(at=time.time(), policy=Policy().to_dict(), pid=1,
                                    host="h", boot_id="boot"))
    views = Views(layout, vault, JobIndex(layout.job_index, journal_seq=0, boot_id="boot",
                                          clean=False),
                  AttemptTally.of(sched.jobs.values()))
    drop_request(layout, "one")
    requests, _ = Inboxes(layout, vault).requests()
    effects = [effect for event in requests for effect in sched.handle(event)]
    written = [e for e in effects if isinstance(e, (WriteJob, WriteReply))]
    assert {type(e) for e in written} == {WriteJob, WriteReply}
    for effect in written:
        views.execute(effect, sched)
    wrote = {path: path.read_bytes() for path in (Path(views.path(e)) for e in written)}

    [job_file] = [Path(views.path(e)) for e in written if isinstance(e, WriteJob)]
    [reply] = [Path(views.path(e)) for e in written if isinstance(e, WriteReply)]
    job_file.unlink()
    reply.write_text("{damaged")
    views.repair(sched, None, 1, lambda path, data, why: pytest.fail(f"set aside {path}"))
    assert {path: path.read_bytes() for path in wrote} == wrote


def test_after_a_crash_the_repair_reads_back_and_reindexes_only_what_the_tail_changed(layout):
    """Issue 19: a start after a crash is proportional to what was not settled. The last
    compaction's watermark vouches for the files written before it; the tail's files are
    read back, and its jobs staged again into the job index the crash left behind."""
    sched, vault = Scheduler(), Vault(layout)
    sched.handle(CoordinatorStarted(at=time.time(), policy=Policy().to_dict(), pid=1,
                                    host="h", boot_id="boot"))

    def accept(tag: str) -> list:
        drop_request(layout, tag)
        requests, _ = Inboxes(layout, vault).requests()
        return [effect for event in requests for effect in sched.handle(event)]

    views = Views(layout, vault, JobIndex(layout.job_index, journal_seq=1, boot_id="boot",
                                          clean=False), AttemptTally.of(sched.jobs.values()))
    views.repair(sched, None, 1, lambda path, data, why: pytest.fail(f"set aside {path}"))
    settled = accept("settled")
    for effect in settled:
        views.execute(effect, sched)
    views.index.flush(2)  # the compaction at seq 2: the index committed, then the sync
    watermark = time.time_ns()
    unsettled = Unsettled()
    tail = accept("unsettled")  # seq 3: journaled, its files written, not yet indexed
    unsettled.note(tail)
    for effect in tail:
        views.execute(effect, sched)
    views.index.close()  # the crash: what was staged for the index is gone

    def garble(effects: list) -> Path:  # a change only a read would find
        [reply] = [Path(views.path(e)) for e in effects if isinstance(e, WriteReply)]
        before = reply.stat()
        reply.write_text("{garbled")
        os.utime(reply, ns=(before.st_atime_ns, before.st_mtime_ns))
        return reply

    settled_reply, tail_reply = garble(settled), garble(tail)

    index = JobIndex(layout.job_index, journal_seq=3, boot_id="boot", clean=False,
                     settled_seq=2)
    assert index.complete and index.behind
    views = Views(layout, vault, index, AttemptTally.of(sched.jobs.values()))
    views.repair(sched, watermark, 3, lambda path, data, why: pytest.fail(f"set aside {path}"),
                 unsettled)
    assert json.loads(tail_reply.read_text())["outcome"] == "accepted"  # read back
    assert settled_reply.read_text() == "{garbled"  # vouched for: not read
    views.index.flush(3)
    listing = list_jobs(layout, JobQuery(), owner=sched.coordinator["since"])
    assert listing.source == "index"
    assert sorted(doc["tag"] for doc in listing.documents) == ["settled", "unsettled"]


def test_a_job_that_ended_before_any_index_commit_showed_it_is_listed_once_it_ended(layout):
    """The job index is committed at status.json's cadence (up to seconds apart), and a
    reader looks in jobs/done/ only for the jobs the index shows unended (done/ holds
    every finished job: never scanned). A short job accepted and ended between two
    commits was in neither: `praxist-fs jobs` and ``Client.jobs`` left it out until the
    next status write (docs/PYTHON.md's example missed `eval.seed1` under load). The
    batch that ends such a job commits the index."""
    sched, vault = Scheduler(), Vault(layout)
    sched.handle(CoordinatorStarted(at=time.time(), policy=Policy().to_dict(), pid=1,
                                    host="h", boot_id="boot"))
    views = Views(layout, vault, JobIndex(layout.job_index, journal_seq=1, boot_id="boot",
                                          clean=False), AttemptTally.of(sched.jobs.values()))
    views.repair(sched, None, 1, lambda path, data, why: pytest.fail(f"set aside {path}"))
    status = StatusSink(views, Histogram(COMMIT_BUCKETS), lambda state: {}, lambda: 3)

    def tags() -> list[tuple[str, str]]:
        listing = list_jobs(layout, JobQuery(), owner=sched.coordinator["since"])
        assert listing.source == "index"
        return sorted((doc["tag"], doc["state"]) for doc in listing.documents)

    drop_request(layout, "shown")
    requests, _ = Inboxes(layout, vault).requests()
    for effect in [effect for event in requests for effect in sched.handle(event)]:
        views.execute(effect, sched)
    views.index.flush(2)  # a status write: "shown" is in a commit, queued
    drop_request(layout, "quick")
    requests, _ = Inboxes(layout, vault).requests()
    accepted = [effect for event in requests for effect in sched.handle(event)]
    for effect in accepted:
        views.execute(effect, sched)
    [queued] = [effect for effect in accepted if isinstance(effect, WriteJob)]

    def ended(write: WriteJob) -> WriteJob:
        return replace(write, directory="done", replaces="queued",
                       document={**sched.written_document(write), "state": "completed",
                                 "exit_code": 0})

    views.execute(ended(queued), sched)  # "quick" ran and ended: in no commit yet
    status.committed(sinks.Commit(events=[], effects=[], sched=sched))
    assert tags() == [("quick", "completed"), ("shown", "queued")]



def test_a_costly_status_write_is_owed_again_only_after_twenty_times_its_cost(layout):
    """A status write walks every queued job for its pending reason (0.1 s at 10,000):
    at the usual 0.2 s cadence a long queue's status would take half the loop from its
    jobs' exits and launches. A write that took 0.05 s is owed again after 1 s, a cheap
    one after the usual 0.2 s, and none waits past STATUS_MAX_AGE."""
    sched = Scheduler()
    sched.handle(CoordinatorStarted(at=time.time(), policy=Policy().to_dict(), pid=1,
                                    host="h", boot_id="boot"))
    views = Views(layout, Vault(layout), JobIndex(layout.job_index, journal_seq=0,
                                                  boot_id="boot", clean=False),
                  AttemptTally.of(sched.jobs.values()))
    status = StatusSink(views, Histogram(COMMIT_BUCKETS), lambda state: {}, lambda: 0)
    now = time.time()

    def owed_after(took: float) -> float:
        status.status_written(sched, now, took)
        status.status_outdated()  # what it shows changed at once
        return status.status_deadline(sched, 0.0) + (time.time() - now)  # from ``now``

    assert owed_after(0.05) == pytest.approx(1.0, abs=0.05)
    assert not status.status_due(sched, now + 0.5) and status.status_due(sched, now + 1.0)
    assert owed_after(0.001) == pytest.approx(sinks.STATUS_MIN_GAP, abs=0.05)
    assert owed_after(10.0) == pytest.approx(sinks.STATUS_MAX_AGE, abs=0.05)


def test_a_sweep_knows_a_job_file_as_written_and_not_one_rewritten_in_its_place(layout):
    """The sweep of jobs/ reads back each file changed since its last pass to compare it
    with the journal: for the coordinator's own writes (every job file, several times a
    job) that was a read and a parse each. ``Views.wrote`` vouches for the very file it
    wrote, listed as a sweep lists it, once; a file rewritten in its place is not."""
    sched, _, views = accepted(layout, "kept", "forged")

    def listed() -> dict[str, os.DirEntry]:
        with os.scandir(layout.jobs("queued")) as listing:
            return {entry.name: entry for entry in listing}

    entries = listed()
    assert len(entries) == 2
    forged = next(Path(e.path) for e in entries.values()
                  if json.loads(Path(e.path).read_bytes())["tag"] == "forged")
    # in a later tick of the file clock (a coarse one lasts a few ms): a same-size write
    # in place within the tick of the coordinator's own would pass for it
    written_ns = forged.stat().st_mtime_ns
    wait_for(lambda: time.time_ns() > written_ns + 50_000_000, message="a later tick")
    forged.write_bytes(forged.read_bytes().replace(b'"forged"', b'"forgeD"'))  # same size
    verdicts = {json.loads(Path(e.path).read_bytes())["tag"]: views.wrote(e.path, e.stat())
                for e in listed().values()}
    assert verdicts == {"kept": True, "forgeD": False}
    kept = next(e for e in listed().values() if e.path != str(forged))
    assert not views.wrote(kept.path, kept.stat())  # asked once: then its mtime vouches


def test_a_job_that_moves_on_is_written_into_the_inode_an_earlier_move_let_go(layout):
    """Issue 31 item 1: on ext4 without a journal every file creation walks past the
    inodes freed lately, so each job's moves (queued/ -> running/ -> done/) made the next
    creations slower. A replaced job file is kept aside and the next move written into
    it: the second job's running file is the first job's queued file's inode, and no
    copy is left in queued/. A reader that opened the file before still reads it whole
    (tests/adapters/test_spares.py)."""
    sched, vault, views = accepted(layout, "first", "second")
    first, second = sorted(job.job_id for job in sched.queued())
    first_inode = os.stat(layout.job_file("queued", first)).st_ino

    def launched(job_id: str) -> None:
        views.execute(WriteJob(job_id=job_id, directory="running", replaces="queued",
                               document={"job_id": job_id, "state": "running"}), sched)

    launched(first)  # its queued file is not freed (the file system could reuse it or
    # not): the run keeps it, in its private directory
    assert first_inode in {entry.stat().st_ino for entry in os.scandir(vault.directory)}
    launched(second)
    assert os.stat(layout.job_file("running", second)).st_ino == first_inode
    assert json.loads(layout.job_file("running", second).read_bytes()) == {
        "job_id": second, "state": "running"}
    assert not os.listdir(layout.jobs("queued"))


def test_an_answered_request_is_written_into_again_unless_its_env_held_a_secret(layout):
    """Issue 31: an answered request, unlinked, freed an inode that every later creation
    walked past; now its file is kept aside and a later job file or reply is written into
    it. A request whose env held a secret is unlinked as before: the raw value in its
    bytes must not outlive the job (PROTOCOL.md section 3), and nothing in the private
    directory but the vault's own file holds it."""
    sched, vault, views = accepted(layout)
    inboxes = Inboxes(layout, vault)

    def accept(tag: str, env: dict[str, str] | None = None) -> int:
        inode = os.stat(layout.incoming / drop_request(layout, tag, env)).st_ino
        requests, _ = inboxes.requests()
        for effect in [effect for event in requests for effect in sched.handle(event)]:
            views.execute(effect, sched)
        assert not os.listdir(layout.incoming) and (layout.reply(tag)).exists()
        return inode

    plain = accept("plain")
    assert plain in {entry.stat().st_ino for entry in os.scandir(vault.directory)}
    secret = accept("secret", {"API_TOKEN": "s3cr3t-value-of-alice"})
    [job_id] = [job.job_id for job in sched.queued() if job.request.tag == "secret"]
    assert os.stat(layout.job_file("queued", job_id)).st_ino == plain
    assert secret not in {entry.stat().st_ino for entry in os.scandir(vault.directory)}
    holding = [entry.name for entry in os.scandir(vault.directory)
               if b"s3cr3t-value-of-alice" in Path(entry.path).read_bytes()]
    assert holding == ["secret.env.json"]
