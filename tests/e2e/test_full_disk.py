"""A finished command's exit status is never lost to a full disk (issue 14): its shim
holds it until exit.json can be written, and tells a connected coordinator meanwhile.

The run's attempts/ and logs/ share one small tmpfs, the rest of the run (its journal
above all) lies elsewhere: a coordinator that cannot journal must not act, which is
another matter."""

from __future__ import annotations

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
