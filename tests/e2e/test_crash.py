"""kill -9 the coordinator: running attempts are re-adopted, never relaunched (R-DUR-2, R-RUN-2)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from .conftest import counting, read_json, request, starts, wait_for


def test_kill_9_readopts_the_running_attempt_and_runs_the_queue_once(make_run, tmp_path):
    run = make_run(slots=1, max_slots=1)
    run.start()
    marker, gate = tmp_path / "starts", tmp_path / "gate"
    long_job = run.reply(run.submit(request(
        "long", counting(marker, f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 7"))))["job_id"]
    queued = [run.reply(run.submit(request(f"q{i}", counting(marker, "true"))))["job_id"]
              for i in range(3)]
    wait_for(lambda: starts(marker) == [long_job], message="the long job to start")
    shim = run.wait_attempt_field(long_job, "pid")  # its file may lag its command's start

    run.kill()
    run.start()
    status = wait_for(lambda: (s := run.status()) and s["coordinator"]["pid"] == run.proc.pid
                      and s)
    assert status["running"] == 1 and status["active"][0]["job_id"] == long_job
    assert status["active"][0]["pid"] == shim  # the same shim, re-adopted
    gate.touch()

    job = run.wait_state(long_job, "failed")
    assert job["exit_code"] == 7 and len(job["attempts"]) == 1  # the true exit code, once
    for job_id in queued:
        run.wait_state(job_id, "completed")
    assert sorted(starts(marker)) == sorted([long_job, *queued])  # every command ran once


def test_command_killed_while_coordinator_is_down_ends_with_its_status(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    marker = tmp_path / "starts"
    job_id = run.reply(run.submit(request("victim", counting(marker, "exec sleep 60"))))["job_id"]
    wait_for(lambda: starts(marker), message="the victim to start")
    shim_pid = run.wait_attempt_field(job_id, "pid")  # its file may lag its command's start
    run.kill()
    command = wait_for(lambda: _children(shim_pid), message="the command under the shim")
    os.kill(command[0], signal.SIGKILL)
    attempt_dir = run.sched / "attempts" / job_id / "a1"
    wait_for(lambda: read_json(attempt_dir / "exit.json"), message="exit.json from the shim")

    run.start()
    job = run.wait_state(job_id, "failed")
    assert job["exit_code"] == 137 and job["attempts"][0]["outcome"] == "failed"
    assert "signal 9" in job["reason"]
    assert starts(marker) == [job_id]


def test_sigterm_leaves_attempts_running_for_the_next_coordinator(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    marker, gate = tmp_path / "starts", tmp_path / "gate"
    job_id = run.reply(run.submit(request(
        "survivor", counting(marker, f"while [ ! -e {gate} ]; do sleep 0.05; done"))))["job_id"]
    wait_for(lambda: starts(marker))
    assert run.stop() == 0
    assert not (run.sched / "endpoint.json").exists()
    assert run.status()["coordinator"]["state"] == "stopped"
    assert run.job(job_id)["state"] == "running"
    gate.touch()  # it finishes while no coordinator runs
    wait_for(lambda: read_json(run.sched / "attempts" / job_id / "a1" / "exit.json"))
    run.start()
    assert run.wait_state(job_id, "completed")["exit_code"] == 0
    assert starts(marker) == [job_id]


def test_requests_dropped_while_down_are_processed_at_start(make_run):
    run = make_run()
    ids = [run.submit(request(f"early-{i}")) for i in range(3)]
    run.start()
    for rid in ids:
        job_id = run.reply(rid)["job_id"]
        run.wait_state(job_id, "completed")


def test_derived_files_are_repaired_from_the_journal(run):
    rid = run.submit(request("repair-me"))
    job_id = run.reply(rid)["job_id"]
    run.wait_state(job_id, "completed")
    run.stop()
    (run.sched / "jobs" / "done" / f"{job_id}.json").unlink()
    (run.sched / "spool" / "replies" / f"{rid}.json").write_text("garbage")
    (run.sched / "jobs" / "queued" / f"{job_id}.json").write_text("{}")  # a stale copy
    run.start()
    assert run.wait_state(job_id, "completed")["exit_code"] == 0
    assert run.reply(rid)["outcome"] == "accepted"
    assert run.job_dirs(job_id) == ["done"]


def test_a_clean_stop_vouches_for_the_derived_files_until_the_next_start(run):
    rid = run.submit(request("clean-stop"))
    job_id = run.reply(rid)["job_id"]
    run.wait_state(job_id, "completed")
    run.stop()
    marker = read_json(run.sched / "journal" / "clean_stop.json")
    assert marker["journal_seq"] > 0
    (run.sched / "jobs" / "done" / f"{job_id}.json").unlink()  # missing files are still found
    run.start()
    assert run.wait_state(job_id, "completed")["exit_code"] == 0
    assert not (run.sched / "journal" / "clean_stop.json").exists()


def test_after_a_crash_every_derived_file_is_read_back(run):
    rid = run.submit(request("crash-readback"))
    job_id = run.reply(rid)["job_id"]
    run.wait_state(job_id, "completed")
    run.kill()
    assert not (run.sched / "journal" / "clean_stop.json").exists()
    reply = run.sched / "spool" / "replies" / f"{rid}.json"
    before = reply.stat()
    reply.write_text("garbage")
    os.utime(reply, ns=(before.st_atime_ns, before.st_mtime_ns))  # even with an old mtime
    run.start()
    assert run.reply(rid)["outcome"] == "accepted"


def test_after_a_crash_the_files_changed_since_the_last_compaction_are_read_back(run):
    """A compaction (here a clean stop's) makes the derived files durable and records when
    in its snapshot: a start after a crash reads back the files of what the journal
    changed since, but not the run's whole history (the finished jobs and replies the
    snapshot holds): one of those missing or changed since is the sliced sweep's to find,
    after the start (a changed job file is set aside, a missing one written)."""
    def garble(path: Path, keep_mtime: bool) -> None:
        before = path.stat()
        path.write_text("garbage")
        if keep_mtime:  # only a read can find it
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    old_rid = run.submit(request("settled"))
    old = run.reply(old_rid)["job_id"]
    gone_rid = run.submit(request("settled-gone"))
    gone = run.reply(gone_rid)["job_id"]
    run.wait_state(old, "completed")
    run.wait_state(gone, "completed")
    run.stop()
    header = (run.sched / "journal" / "snapshot.jsonl").read_bytes().split(b"\n", 1)[0]
    assert json.loads(header)["views_durable_ns"] <= read_json(
        run.sched / "journal" / "clean_stop.json")["views_durable_ns"]
    run.start()
    new_rid = run.submit(request("unsettled"))
    new = run.reply(new_rid)["job_id"]
    run.wait_state(new, "completed")
    run.kill()
    replies, done = run.sched / "spool" / "replies", run.sched / "jobs" / "done"
    garble(replies / f"{new_rid}.json", keep_mtime=True)  # its request came after: read
    garble(done / f"{new}.json", keep_mtime=True)
    garble(done / f"{old}.json", keep_mtime=False)  # touched since: the sweep's
    garble(replies / f"{old_rid}.json", keep_mtime=True)  # vouched for: not read
    aged = (replies / f"{old_rid}.json").stat().st_mtime_ns - 60 * 10**9  # the sweep's
    os.utime(replies / f"{old_rid}.json", ns=(aged, aged))  # margin for clocks: past it
    (done / f"{gone}.json").unlink()
    (replies / f"{gone_rid}.json").unlink()
    run.start()
    assert run.reply(new_rid)["outcome"] == "accepted"
    assert run.job(new)["exit_code"] == 0
    assert run.reply(gone_rid)["job_id"] == gone
    wait_for(lambda: (run.job(gone) or {}).get("exit_code") == 0 and
             (run.job(old) or {}).get("exit_code") == 0,
             message="the sweep writing the missing file and rewriting the changed one")
    assert (replies / f"{old_rid}.json").read_text() == "garbage"
    kept = [path.relative_to(run.sched).parts[2:] for path in
            (run.sched / "quarantine").rglob("*.json") if path.name == f"{old}.json"]
    assert kept == [("resource_scheduler", "jobs", "done", f"{old}.json")], kept


def test_a_compacted_journal_restarts_from_its_snapshot(make_run):
    run = make_run()
    env = {"PRAXIST_COMPACT_AFTER": "3"}
    run.start(env)
    ids = {tag: run.submit(request(tag)) for tag in ("snap-a", "snap-b", "snap-c")}
    jobs = {tag: run.reply(rid)["job_id"] for tag, rid in ids.items()}
    for job_id in jobs.values():
        run.wait_state(job_id, "completed")

    def compacted():
        """The snapshot covers the run and the journal holds only a short tail: the loop
        compacts after the batch whose job files the test saw, not before them."""
        try:
            header = (run.sched / "journal" / "snapshot.jsonl").read_bytes().split(b"\n", 1)[0]
            journal = (run.sched / "journal" / "journal.log").read_bytes().splitlines()
        except FileNotFoundError:
            return False
        return json.loads(header)["journal_seq"] > 3 and len(journal) < 3

    wait_for(compacted, message="a compaction after the last exit")
    run.kill()
    # a compaction killed as it wrote leaves its half-written snapshot (~135 MB at
    # 100,000 jobs) under the name it is written under: the next start removes it
    left = run.sched / "journal" / ".snapshot.jsonl.4242.0.tmp"
    left.write_bytes(b'{"journal_seq": 99')
    run.start(env)
    again = run.reply(run.submit(request("snap-a")))  # known only from the snapshot
    assert again["outcome"] == "duplicate" and again["job_id"] == jobs["snap-a"]
    assert not left.exists()
    wait_for(lambda: (run.status() or {}).get("counts", {}).get("completed") == 3,
             message="status.json of the restarted coordinator")
    assert all(run.job(job_id)["exit_code"] == 0 for job_id in jobs.values())


def test_jobs_a_compaction_took_out_of_memory_are_still_answered_and_rerun(make_run):
    """A compaction shelves the finished jobs and the replies in its snapshot (the same
    coordinator, no restart): a resubmitted tag and a retry of a failed job are answered
    as before, and the retried job runs again and is shelved again."""
    run = make_run()
    run.start({"PRAXIST_COMPACT_AFTER": "3"})
    docs = {"shelf-ok": request("shelf-ok"), "shelf-fails": request("shelf-fails", ["false"])}
    jobs = {tag: run.reply(run.submit(doc))["job_id"] for tag, doc in docs.items()}
    run.wait_state(jobs["shelf-ok"], "completed")
    run.wait_state(jobs["shelf-fails"], "failed")
    snapshot = run.sched / "journal" / "snapshot.jsonl"
    wait_for(lambda: snapshot.exists() and len(snapshot.read_bytes().splitlines()) >= 5,
             message="a compaction after the exits")
    again = run.reply(run.submit(request("shelf-ok")))
    assert again["outcome"] == "duplicate" and again["job_id"] == jobs["shelf-ok"]
    rerun = run.reply(run.submit({**docs["shelf-fails"], "retry_terminal": True}))
    assert rerun["outcome"] == "retry_accepted" and rerun["job_id"] == jobs["shelf-fails"]
    wait_for(lambda: len((run.job(jobs["shelf-fails"]) or {}).get("attempts", ())) == 2 and
             run.job(jobs["shelf-fails"])["state"] == "failed", message="the retry's end")
    wait_for(lambda: len(snapshot.read_bytes().splitlines()) >= 7,
             message="a compaction after the retry")
    last = run.reply(run.submit(docs["shelf-fails"]))
    assert last["outcome"] == "terminal_duplicate" and last["job_id"] == jobs["shelf-fails"]


def test_a_journal_whose_snapshot_is_gone_is_refused(make_run):
    run = make_run()
    run.start({"PRAXIST_COMPACT_AFTER": "2"})
    for tag in ("lost-a", "lost-b"):
        run.wait_state(run.reply(run.submit(request(tag)))["job_id"], "completed")
    snapshot = run.sched / "journal" / "snapshot.jsonl"
    wait_for(snapshot.exists, message="a compaction")  # after the batch the test saw
    run.kill()
    snapshot.unlink()
    run.start_raw()
    # A crash start rebuilds the job index and clears the killed compaction's temp file
    # (fsyncs) before it reads the journal: behind another process's writeback that took
    # over 15 s on a loaded 2-core box (twice in whole-suite runs, 6 of 12 under dd load).
    assert run.proc.wait(timeout=60) != 0
    log = (run.root.parent / f"coordinator-{run.root.name}.log").read_text()
    assert "refusing to start" in log


def test_torn_journal_tail_is_truncated_and_serving_resumes(run):
    job_id = run.reply(run.submit(request("before-tear")))["job_id"]
    run.wait_state(job_id, "completed")
    run.kill()
    journal = run.sched / "journal" / "journal.log"
    with open(journal, "ab") as handle:
        handle.write(b'99 deadbeef {"type": "request_se')  # a torn, unfinished record
    run.start()
    rid = run.submit(request("after-tear"))
    assert run.reply(rid)["outcome"] == "accepted"
    assert b"deadbeef" not in journal.read_bytes()
    assert run.job(job_id)["state"] == "completed"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat and stat[1] == pid:
                found.append(int(entry))
    return found


def read_stat(pid: int):
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1])


def test_abandoned_temporary_files_are_swept_at_start(make_run):
    run = make_run()
    run.start()
    run.kill()
    ours = run.sched / "jobs" / "queued" / ".x.json.123.0.tmp"  # a crash between write and rename
    ours.write_text("{")
    old = run.sched / "spool" / "tmp" / "abandoned.json"
    old.write_text("{")
    os.utime(old, (1, 1))
    fresh = run.sched / "spool" / "tmp" / "being-written.json"
    fresh.write_text("{")
    run.start()
    assert not ours.exists() and not old.exists() and fresh.exists()


def test_a_reply_names_a_job_whose_file_is_there(make_run):
    """The coordinator dies right after writing a reply: the job that reply says was
    accepted has its job file already, though the same batch wrote it twice (accepted,
    then its pending reason), so a peer that reads the job right after the reply (``wait``
    after ``launch --detach``, the Python client) never misses a job just accepted."""
    run = make_run()
    run.start_raw(env={"PRAXIST_CRASH_AT": "effect.WriteReply.after:2"})
    first = run.reply(run.submit(request("held", ["true"], hold=True)))
    request_id = run.submit(request("waiting", ["true"], after=[first["job_id"]]))
    assert run.proc.wait(timeout=30) == 86  # PRAXIST_CRASH_AT's exit
    reply = read_json(run.sched / "spool" / "replies" / f"{request_id}.json")
    assert reply["outcome"] == "accepted"
    assert run.job_dirs(reply["job_id"]), "the reply was written before its job file"
