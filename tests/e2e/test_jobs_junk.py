"""The run directory cleans itself (issue 14, item 4): whatever ``jobs/{queued,running,done}/``
holds that the journal does not account for (one ``<job_id>.json`` per job, in its state's
directory) is set aside in ``resource_scheduler/quarantine/`` with a note, at a start and
at each reconcile, and counted in status.json. Nothing is signalled for it (a forged job
file naming a live process leaves that process alone), real jobs keep their files, and a
job's own moves between directories are never taken for junk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import TASK, read_json, request, wait_for

QUICK_DONE_SWEEP = {"PRAXIST_DONE_SWEEP_SECONDS": "0.5"}  # else jobs/done/ once a minute


def listing(run, directory: str) -> list[str]:
    return sorted(os.listdir(run.sched / "jobs" / directory))


def set_aside(run) -> dict[str, str]:
    """Every item of every quarantine case: run-relative path (as kept) -> why."""
    found = {}
    for case in (read_json(run.sched / "status.json") or {}).get("coordinator", {}).get(
            "problems", ()):
        for item in case["items"]:
            found[item["path"]] = item["why"]
    return found


def kept(run, path: str) -> list:
    """The copies of ``path`` kept in quarantine cases."""
    cases = run.sched / "quarantine"
    return [cases / case / path for case in sorted(os.listdir(cases))
            if os.path.lexists(cases / case / path)] if cases.exists() else []


def live_victim():
    """A process of the test, as a forged job file would name it: (process, start time)."""
    victim = subprocess.Popen(["sleep", "300"])
    with open(f"/proc/{victim.pid}/stat") as stat:
        start = int(stat.read().rsplit(")", 1)[1].split()[19])
    return victim, start


def forged_running(doc: dict, pid: int, start: int, **fields) -> bytes:
    """``doc`` made to say it runs, on ``pid``."""
    doc = json.loads(json.dumps(doc))
    doc.update(state="running", exit_code=None, reason="attempt a1 running", **fields)
    doc["attempts"][-1].update(pid=pid, pid_start=start, ended_at=None, exit_code=None,
                               outcome=None)
    return json.dumps(doc).encode()


def gated(tag: str, gate) -> dict:
    return request(tag, ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])


@pytest.fixture
def victim():
    process, start = live_victim()
    yield process, start
    process.kill()
    process.wait()


def drop_junk(run, done: dict, running: dict, victim_pid: int, victim_start: int,
              target) -> dict[str, bytes | None]:
    """One of each kind of junk in each job directory; run-relative path -> bytes (None for
    what is no plain file)."""
    jobs = run.sched / "jobs"
    dropped: dict[str, bytes | None] = {}

    def put(path: str, data: bytes) -> None:
        (jobs / path).write_bytes(data)
        dropped[path] = data

    put("queued/notes.txt", b"not a job")
    put("queued/garbage.json", b"\x00{not json")
    put("queued/.ghost.json.4242.1.tmp", b"{}")  # a crashed writer's temp file
    (jobs / "queued" / "dir.json").mkdir()
    dropped["queued/dir.json"] = None
    os.symlink(target, jobs / "queued" / f"{running['job_id']}.json")  # names a real job
    dropped[f"queued/{running['job_id']}.json"] = None
    os.symlink(target, jobs / "queued" / "link.json")
    dropped["queued/link.json"] = None
    # a stale copy of a finished job, forged to run on a live process of the test
    put(f"running/{done['job_id']}.json", forged_running(done, victim_pid, victim_start))
    put("running/ghost-00000000.json",  # a job the journal never had, on the same process
        forged_running(done, victim_pid, victim_start, job_id="ghost-00000000"))
    put("done/junk.json", b"[1, 2")
    put(f"done/{running['job_id']}.json", json.dumps({**running, "state": "completed"}).encode())
    (jobs / "done" / "subdir").mkdir()
    dropped["done/subdir"] = None
    return dropped


def test_junk_dropped_while_serving_is_set_aside_counted_and_never_signalled(
        make_run, tmp_path, victim):
    run = make_run()
    run.start(QUICK_DONE_SWEEP)
    finished = run.reply(run.submit(request("finished")))["job_id"]
    done = run.wait_state(finished, "completed")
    gate = tmp_path / "gate"
    busy = run.reply(run.submit(gated("busy", gate)))["job_id"]
    run.wait_attempt_field(busy, "pid")
    running = run.wait_state(busy, "running")
    running_bytes = (run.sched / "jobs" / "running" / f"{busy}.json").read_bytes()
    done_bytes = (run.sched / "jobs" / "done" / f"{finished}.json").read_bytes()
    target = tmp_path / "outside.json"
    target.write_text("{}")
    process, start = victim

    dropped = drop_junk(run, done, running, process.pid, start, target)
    wait_for(lambda: listing(run, "queued") == [] and
             listing(run, "running") == [f"{busy}.json"] and
             listing(run, "done") == [f"{finished}.json"], timeout=20,
             message="jobs/ holding only the real jobs' files")

    notes = wait_for(lambda: len(s := set_aside(run)) == len(dropped) and s, timeout=20,
                     message="status.json listing every item set aside")
    assert set(notes) == {f"resource_scheduler/jobs/{path}" for path in dropped}
    for path, data in dropped.items():
        [copy] = kept(run, f"resource_scheduler/jobs/{path}")
        if data is not None:
            assert copy.read_bytes() == data
    assert "which is completed" in notes[f"resource_scheduler/jobs/running/{finished}.json"]
    assert "no record" in notes["resource_scheduler/jobs/running/ghost-00000000.json"]
    assert "temporary" in notes["resource_scheduler/jobs/queued/.ghost.json.4242.1.tmp"]
    assert os.path.islink(kept(run, "resource_scheduler/jobs/queued/link.json")[0])
    assert target.read_text() == "{}"  # a symlink is moved, never followed

    status = wait_for(lambda: (s := run.status())["coordinator"].get("quarantined") ==
                      len(dropped) and s, message="status.json counting them")
    assert status["coordinator"]["quarantined"] == len(dropped)
    shown = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, check=True).stdout
    assert f"quarantine: {len(dropped)} item(s) set aside" in shown

    assert process.poll() is None  # named as running twice: never signalled
    assert (run.sched / "jobs" / "running" / f"{busy}.json").read_bytes() == running_bytes
    assert (run.sched / "jobs" / "done" / f"{finished}.json").read_bytes() == done_bytes
    gate.touch()
    assert run.wait_state(busy, "completed")["attempts"][-1]["exit_code"] == 0
    assert run.proc.poll() is None and process.poll() is None


@pytest.mark.parametrize("how", ["renamed over it", "written in place"])
def test_a_forged_file_in_a_jobs_own_place_is_kept_and_rewritten_from_the_journal(
        make_run, tmp_path, victim, how):
    """The sweep trusts a job file as the coordinator wrote it (``Views.wrote``: same
    inode, size and mtime) without reading it back; a forger's rename makes a new
    inode, and a write in its place a new mtime, so either is read and caught."""
    run = make_run()
    run.start()
    gate = tmp_path / "gate"
    busy = run.reply(run.submit(gated("busy", gate)))["job_id"]
    real_pid = run.wait_attempt_field(busy, "pid")
    path = run.sched / "jobs" / "running" / f"{busy}.json"
    real = wait_for(lambda: (data := path.read_bytes()) and
                    json.loads(data)["attempts"][-1]["pid_start"] and data,
                    message="the running job's file")
    process, start = victim
    forged = forged_running(json.loads(real), process.pid, start)
    if how == "renamed over it":
        tmp = path.with_name("forging")
        tmp.write_bytes(forged)
        os.rename(tmp, path)  # in its own place, naming another live process
    else:
        path.write_bytes(forged)  # the same inode

    wait_for(lambda: path.read_bytes() == real, timeout=20,
             message="the job file rewritten from the journal")
    [copy] = wait_for(lambda: kept(run, f"resource_scheduler/jobs/running/{busy}.json"),
                      message="the forged bytes in quarantine")
    assert copy.read_bytes() == forged
    [why] = wait_for(lambda: list(set_aside(run).values()), message="status.json's note")
    assert "said other than the journal" in why
    assert process.poll() is None
    gate.touch()
    job = run.wait_state(busy, "completed")
    assert job["attempts"][-1]["pid"] == real_pid and process.poll() is None


def test_junk_left_while_no_coordinator_ran_is_set_aside_at_start(make_run, tmp_path, victim):
    run = make_run()
    run.start()
    finished = run.reply(run.submit(request("finished")))["job_id"]
    done = run.wait_state(finished, "completed")
    assert run.stop() == 0  # a clean stop: no move of its own is unfinished
    target = tmp_path / "outside.json"
    target.write_text("{}")
    process, start = victim
    running = {**done, "job_id": "other-00000000"}  # a job the journal never had
    dropped = drop_junk(run, done, running, process.pid, start, target)
    del dropped["queued/.ghost.json.4242.1.tmp"]  # at a start: a crashed write, removed
    forged = forged_running(done, process.pid, start)  # in the done job's own place
    (run.sched / "jobs" / "done" / f"{finished}.json").write_bytes(forged)
    dropped[f"done/{finished}.json"] = forged

    run.start()  # jobs/done/ (the run's history) by the sweep that begins with the start
    expected = {f"resource_scheduler/jobs/{path}" for path in dropped}
    wait_for(lambda: set(set_aside(run)) == expected, message="everything set aside")
    wait_for(lambda: (s := run.status()) and s["coordinator"]["pid"] == run.proc.pid and
             s["coordinator"]["quarantined"] == len(dropped),
             message="status.json of the new coordinator counting them")
    assert listing(run, "queued") == [] and listing(run, "running") == []
    assert listing(run, "done") == [f"{finished}.json"]
    assert read_json(run.sched / "jobs" / "done" / f"{finished}.json") == done  # rewritten
    [copy] = kept(run, f"resource_scheduler/jobs/done/{finished}.json")
    assert copy.read_bytes() == forged
    assert process.poll() is None
    assert run.reply(run.submit(request("after")))["outcome"] == "accepted"


def test_after_a_crash_an_unfinished_move_is_finished_not_set_aside(make_run):
    """A crash between writing a job's new file and removing its old one leaves a copy
    behind (PROTOCOL section 5): the coordinator's own leftover, removed at the next start;
    the junk beside it is still set aside."""
    run = make_run()
    run.start()
    finished = run.reply(run.submit(request("finished")))["job_id"]
    done = run.wait_state(finished, "completed")
    run.kill()  # no clean stop
    jobs = run.sched / "jobs"
    (jobs / "running" / f"{finished}.json").write_text(json.dumps(
        {**done, "state": "running", "exit_code": None}))  # where the job was before
    (jobs / "running" / "notes.txt").write_text("junk")
    run.start()
    wait_for(lambda: (s := run.status()) and s["coordinator"]["pid"] == run.proc.pid,
             message="status.json of the new coordinator")
    assert listing(run, "running") == []
    assert set(set_aside(run)) == {"resource_scheduler/jobs/running/notes.txt"}
    assert read_json(jobs / "done" / f"{finished}.json") == done


MANY_SLOTS = TASK.format(slots=4, retries=1).replace("max_concurrent_experiments: 8",
                                                     "max_concurrent_experiments: 4")


def test_a_jobs_own_moves_are_never_set_aside(make_run):
    """Many short jobs move queued -> running -> done while the reconcile sweeps (jobs/done/
    every half second here): no real job's file is ever set aside."""
    run = make_run(task_text=MANY_SLOTS)
    run.start(QUICK_DONE_SWEEP)
    ids = [run.reply(run.submit(request(f"short-{n}", ["sh", "-c", "sleep 0.02"])))["job_id"]
           for n in range(120)]
    for job_id in ids:
        assert run.wait_state(job_id, "completed", timeout=120)["state"] == "completed"
    wait_for(lambda: run.status()["coordinator"]["journal_seq"] and
             run.status()["counts"].get("completed") == len(ids), timeout=20,
             message="status.json counting every job")
    assert not (run.sched / "quarantine").exists()
    assert run.status()["coordinator"]["quarantined"] == 0
    assert listing(run, "done") == sorted(f"{job_id}.json" for job_id in ids)
    assert listing(run, "queued") == [] and listing(run, "running") == []
