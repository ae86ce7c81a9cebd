"""A full disk loses nothing and kills nothing (issue 14).

A finished command's exit status: its shim holds it until exit.json can be written,
and tells a connected coordinator meanwhile (the run's attempts/ and logs/ on one small
tmpfs, the journal elsewhere). The coordinator's own files: with the whole run on the
tmpfs it is degraded, not dead, and resumes by itself once there is room."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from praxist_fs.adapters import procs
from tests.disks import Deletions, bound, small_tmpfs

from .conftest import read_json, request, wait_for


@pytest.fixture
def full_disk(make_run, tmp_path):
    run = make_run(slots=1)
    with small_tmpfs(tmp_path / "disk") as disk, \
            bound(disk.root / "attempts", run.sched / "attempts"), \
            bound(disk.root / "logs", run.root / "logs"):
        try:
            yield run, disk
        finally:  # nothing may hold the mounts when they go
            if run.proc is not None and run.proc.poll() is None:
                run.kill()
            run.kill_attempt_groups()


def gated_job(run, gate, code):
    """A job that ends with ``code`` once ``gate`` exists, and its attempt directory, once
    nothing but the shim writes there: the command runs (so READY is written) and the
    coordinator wrote attempt.json, its last file there."""
    started = gate.with_name("started")
    job_id = run.reply(run.submit(request("full", ["sh", "-c", (
        f"touch {started}; while [ ! -e {gate} ]; do sleep 0.02; done; echo done; "
        f"exit {code}")])))["job_id"]
    attempt_dir = run.sched / "attempts" / job_id / "a1"
    wait_for(lambda: started.exists() and (attempt_dir / "attempt.json").exists(),
             message="the attempt under way")
    return job_id, attempt_dir


def temporary_files(run):
    return [path for top in (run.sched / "attempts", run.root / "logs")
            for path in top.rglob("*") if path.name.endswith(".tmp")]


@pytest.mark.parametrize("code, state", [(0, "completed"), (3, "failed")])
def test_a_command_that_ends_on_a_full_disk_ends_its_job_with_its_exit_code(
        full_disk, tmp_path, code, state):
    run, disk = full_disk
    run.start()
    gate = tmp_path / "gate"
    job_id, attempt_dir = gated_job(run, gate, code)
    disk.fill()
    gate.touch()

    job = run.wait_state(job_id, "completed", "failed", "drained_unknown")
    assert (job["state"], job["exit_code"], job["attempts"][-1]["outcome"]) == (
        state, code, state)
    assert not (attempt_dir / "exit.json").exists()  # still full: told on the shim's pipe

    disk.free()
    assert wait_for(lambda: read_json(attempt_dir / "exit.json"))["exit_code"] == code
    assert temporary_files(run) == []
    assert run.job(job_id)["state"] == state


def test_an_exit_the_shim_holds_reaches_a_coordinator_started_later(full_disk, tmp_path):
    """No coordinator hears the exit: the shim keeps trying, the next coordinator adopts
    it as running (not drained_unknown), and ends the job from exit.json."""
    run, disk = full_disk
    run.start()
    gate = tmp_path / "gate"
    job_id, attempt_dir = gated_job(run, gate, 0)
    shim = read_json(attempt_dir / "READY")
    run.kill()
    disk.fill()
    deletions = Deletions(attempt_dir)
    gate.touch()
    wait_for(lambda: deletions.seen(".exit.json.") or not procs.is_alive(
        shim["pid"], shim["start_time"], shim["boot_id"]), message="a failed try at exit.json")
    deletions.close()

    run.start()  # the disk is still full
    assert run.job(job_id)["state"] == "running"
    disk.free()
    job = run.wait_state(job_id, "completed", "failed", "drained_unknown")
    assert (job["state"], job["exit_code"], len(job["attempts"])) == ("completed", 0, 1)
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 0
    assert temporary_files(run) == []


@pytest.fixture
def full_run(make_run):
    """A run whose every file (journal, spool, views, attempts) is on one small tmpfs; the
    coordinator's log is not."""
    run = make_run(slots=2)
    with small_tmpfs(run.root, size="3m") as disk:
        try:
            for sub in ("spool/tmp", "spool/incoming"):
                (run.sched / sub).mkdir(parents=True)
            yield run, disk
        finally:
            if run.proc is not None and run.proc.poll() is None:
                run.kill()
            run.kill_attempt_groups()


def test_a_full_disk_degrades_the_coordinator_which_resumes_once_there_is_room(
        full_run, tmp_path):
    """Jobs run and requests arrive while the disk is full: the same coordinator waits
    (requests stay in incoming/, exits are held), says why, and carries on once there is
    room: every request answered, every job run exactly once (counted by its command),
    and its journal still opens at a restart."""
    run, disk = full_run
    coordinator = run.start().pid
    starts, gate = tmp_path / "starts", tmp_path / "gate"
    starts.mkdir()

    def command(tag, gated):  # large enough that a batch of them overflows a page
        wait = f"while [ ! -e {gate} ]; do sleep 0.02; done; " if gated else ""
        return ["sh", "-c", f"echo x >> {starts / tag}; {wait}exit 0; : {'p' * 1500}"]

    jobs = [run.reply(run.submit(request(tag, command(tag, True))))["job_id"]
            for tag in ("a", "b")]
    wait_for(lambda: all((starts / tag).exists() for tag in "ab"), message="a and b running")
    late = {f"late{n}.json": json.dumps(request(f"late{n}", command(f"late{n}", False)))
            for n in range(3)}
    for name, text in late.items():  # written while there is room, delivered while none
        (run.sched / "spool" / "tmp" / name).write_text(text)
    probes = Deletions(run.sched)
    disk.fill()
    for name in late:
        os.rename(run.sched / "spool" / "tmp" / name, run.sched / "spool" / "incoming" / name)
    log = tmp_path / f"coordinator-{run.root.name}.log"
    wait_for(lambda: "degraded:" in log.read_text(), message="degraded in the log")
    gate.touch()  # a and b end while nothing can be journaled

    def failed_probes():
        probes.seen("")
        return sum(name.startswith(".space-probe.") for name in probes.names)
    after_gate = failed_probes()
    wait_for(lambda: failed_probes() > after_gate, timeout=20, message="a retry after the exits")
    probes.close()
    incoming = run.sched / "spool" / "incoming"
    # The requests wait in incoming/. The coordinator frees some room itself (it removes
    # a job index it cannot write), which a retry may find and use for one of them: it is
    # journaled, never dropped (each is answered and run once, below).
    waiting = {name: (incoming / name).read_text() for name in os.listdir(incoming)}
    assert waiting and waiting.items() <= late.items()
    assert run.proc.poll() is None and run.proc.pid == coordinator

    filler = disk.filler.stat().st_size  # some room, less than a retry asks for
    os.truncate(disk.filler, filler - 128 * 1024)
    said = wait_for(lambda: ((run.status() or {}).get("coordinator") or {}).get("degraded"),
                    timeout=20, message="degraded in status.json")
    assert said.startswith(f"no space left on tmpfs (tmpfs) at {run.root}: ")
    shown = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, check=True).stdout
    assert f"DEGRADED: {said}; requests wait until there is room" in shown

    disk.free()
    replies = [run.reply(name[:-5], timeout=30) for name in late]
    assert [reply["outcome"] for reply in replies] == ["accepted"] * 3
    jobs += [reply["job_id"] for reply in replies]
    for job_id in jobs:
        job = run.wait_state(job_id, "completed", "failed", "drained_unknown", timeout=30)
        assert (job["state"], job["exit_code"], len(job["attempts"])) == ("completed", 0, 1)
    assert {tag.name: tag.read_text() for tag in starts.iterdir()} == {
        tag: "x\n" for tag in ("a", "b", "late0", "late1", "late2")}
    assert os.listdir(incoming) == []
    wait_for(lambda: (run.status() or {}).get("coordinator", {}).get("degraded", 1) is None,
             message="status.json no longer degraded")
    assert run.proc.pid == coordinator
    text = log.read_text()
    assert "Traceback" not in text
    first = next(line for line in text.splitlines() if "No space left" in line)
    assert f"degraded: no space left on tmpfs (tmpfs) at {run.root}: " in first
    assert "resumed:" in text

    assert run.stop() == 0
    run.start()
    assert all(run.job(job_id)["state"] == "completed" for job_id in jobs)
    assert len(list(starts.iterdir())) == 5 and all(
        tag.read_text() == "x\n" for tag in starts.iterdir())


def test_views_that_cannot_be_written_after_their_commit_are_written_once_there_is_room(
        make_run, tmp_path):
    """The journal has room, replies and job files do not: the request is journaled, its
    reply and job file wait, status.json (which has room) says why, and they are written,
    and the job run once, by the same coordinator once there is room."""
    run = make_run(slots=1)
    with small_tmpfs(tmp_path / "disk") as disk, \
            bound(disk.root / "replies", run.sched / "spool" / "replies"), \
            bound(disk.root / "jobs", run.sched / "jobs"):
        try:
            coordinator = run.start().pid
            disk.fill()
            marker = tmp_path / "starts"
            request_id = run.submit(request("views", ["sh", "-c", f"echo x >> {marker}"]))
            said = wait_for(lambda: (run.status() or {}).get("coordinator", {}).get("degraded"),
                            message="degraded in status.json")
            assert said.startswith("no space left on tmpfs (tmpfs) at "
                                   f"{run.sched}/") and said.endswith(".json")
            assert not (run.sched / "spool" / "replies" / f"{request_id}.json").exists()

            disk.free()
            job_id = run.reply(request_id, timeout=30)["job_id"]
            job = run.wait_state(job_id, "completed", "failed", "drained_unknown", timeout=30)
            assert (job["state"], job["exit_code"], marker.read_text()) == ("completed", 0, "x\n")
            wait_for(lambda: run.status()["coordinator"]["degraded"] is None,
                     message="status.json no longer degraded")
            assert run.proc.pid == coordinator and run.proc.poll() is None
        finally:
            if run.proc is not None and run.proc.poll() is None:
                run.kill()
            run.kill_attempt_groups()


def test_a_coordinator_started_on_a_full_disk_says_why_and_loses_nothing(full_run, tmp_path):
    """A start cannot wait out a full disk as a serving coordinator does (it has nothing
    adopted to supervise yet, and writes its own files first): it refuses with the cause,
    exit 74, no traceback, and the request that waits is answered by the next start."""
    run, disk = full_run
    run.start()
    first = run.reply(run.submit(request("first")))
    assert run.wait_state(first["job_id"], "completed")
    run.stop()
    waiting = run.submit(request("waiting"))
    disk.fill()
    proc = run.start_raw()
    assert proc.wait(timeout=60) == 74
    text = (run.root.parent / f"coordinator-{run.root.name}.log").read_text()
    assert "cannot start: no space left on tmpfs" in text and "Traceback" not in text, text
    assert (run.sched / "spool" / "incoming" / f"{waiting}.json").exists()
    disk.free()
    run.start()
    assert run.reply(waiting)["outcome"] == "accepted"
    assert run.reply(first["request_id"])["job_id"] == first["job_id"]
