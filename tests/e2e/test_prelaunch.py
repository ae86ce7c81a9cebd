"""Pre-launch failures stay retryable (R-SUB-4), with a real coordinator and real
processes: a job that cannot start within its admission timeout ends ``expired``,
holding nothing, and the very same request is then accepted as new."""

from __future__ import annotations

import subprocess
import sys

from praxist_fs.core.identity import job_id_for

from .conftest import TASK, request, wait_for

LAUNCH = [sys.executable, "-m", "praxist_fs", "launch"]


def one_slot(make_run, timeout_s: int | None = None):
    """A run with one slot (and a task-wide admission timeout, if given), serving."""
    text = TASK.format(slots=1, retries=1).replace(
        "max_concurrent_experiments: 8", "max_concurrent_experiments: 1")
    if timeout_s is not None:
        text += f"    admission_timeout_seconds: {timeout_s}\n"
    run = make_run(task_text=text)
    run.start()
    return run


def occupy(run, tmp_path):
    """Fill the one slot with a job that runs until ``free()`` is called."""
    flag = tmp_path / "free"
    job_id = run.reply(run.submit(request("blocker", [
        "sh", "-c", f'while [ ! -e "{flag}" ]; do sleep 0.05; done'])))["job_id"]
    run.wait_state(job_id, "running")
    return job_id, flag.touch


def test_a_job_that_cannot_start_in_time_expires_and_the_same_request_runs_later(
        make_run, tmp_path):
    """seed 000 "Submission": "Pre-launch admission timeouts ... release the reservation
    and the same scientific request may be submitted normally after capacity ...
    recovers." """
    run = one_slot(make_run, timeout_s=1)
    blocker, free = occupy(run, tmp_path)
    late = request("late-science", ["sh", "-c", "echo ran"])
    job_id = run.reply(run.submit(dict(late)))["job_id"]
    job = run.wait_state(job_id, "expired")
    assert job["attempts"] == [] and job["exit_code"] is None
    assert job["reason"].startswith("admission timeout: not started by ")
    assert "waiting for a slot" in job["reason"]
    assert run.job_dirs(job_id) == ["done"]
    wait_for(lambda: (run.status() or {}).get("counts", {}).get("expired") == 1,
             message="status counting the expired job")
    free()
    run.wait_state(blocker, "completed")
    again = run.reply(run.submit(dict(late)))  # no retry_terminal: a plain submission
    assert again["outcome"] == "accepted" and again["job_id"] == job_id
    job = run.wait_state(job_id, "completed")
    assert [a["outcome"] for a in job["attempts"]] == ["completed"]
    log = run.sched.parent / "logs" / "experiments"
    assert any("ran" in p.read_text() for p in log.rglob("*") if p.is_file())


def test_launch_exits_75_on_expiry_and_the_same_launch_then_runs(make_run, tmp_path):
    """seed 000 "Submission": the same request may be submitted normally afterwards;
    ``launch --admission-timeout`` says so with exit 75 (EX_TEMPFAIL)."""
    run = one_slot(make_run)  # no task-wide timeout: the request's own
    _, free = occupy(run, tmp_path)
    argv = [*LAUNCH, f"--run-dir={run.root}", "--peer=cli", "--tag=cli-late",
            "--admission-timeout=1", "--", "sh", "-c", "echo hello"]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert first.returncode == 75, first.stderr
    assert "expired: admission timeout" in first.stderr
    free()
    second = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "hello\n"


def test_a_barrier_released_again_and_again_backs_off_and_the_job_still_completes(
        make_run, tmp_path):
    """seed 000 "Submission": "transient accelerator-probe rejections ... release the
    reservation without consuming an experiment attempt". Three coordinators in a row die
    after deciding a launch but before telling the shim (a crash point), so each attempt
    is released: the job backs off, says so, and completes once launches work again (it
    used to fail at the third release)."""
    run = make_run(task_text=TASK.format(slots=1, retries=0))
    crash = {"PRAXIST_CRASH_AT": "effect.SpawnAttempt.before"}
    marker = tmp_path / "ran"
    run.start_raw(env=crash)  # it may die before it serves: no wait for its endpoint
    run.submit(request("flaky-host", ["touch", str(marker)]))
    job_id = job_id_for("flaky-host")  # its reply may wait for the next coordinator
    for releases in (1, 2, 3):
        assert run.proc.wait(timeout=30) == 86  # died with attempt a<releases> decided
        run.proc = None
        run.start_raw(env=None if releases == 3 else crash)
        job = wait_for(lambda: (doc := run.job(job_id)) and
                       doc["barrier_releases"] == releases and doc, timeout=30,
                       message=f"release {releases} recorded")
        assert [a["outcome"] for a in job["attempts"]] == ["released"] * releases
        assert not marker.exists()  # no attempt ran its command
    backing_off = wait_for(lambda: (doc := run.job(job_id)) and doc["reason"].startswith(
        "launch barrier released 3 times in a row") and doc, message="the backoff reason")
    assert f"attempts/{job_id}/a3/shim.log" in backing_off["reason"]
    assert backing_off["state"] == "queued"
    done = run.wait_state(job_id, "completed", timeout=30)  # after a 4 s backoff
    assert [a["outcome"] for a in done["attempts"]] == ["released"] * 3 + ["completed"]
    assert done["barrier_releases"] == 0 and marker.exists()
