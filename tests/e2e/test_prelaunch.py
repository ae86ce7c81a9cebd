"""Pre-launch failures stay retryable (R-SUB-4), with a real coordinator and real
processes: a job that cannot start within its admission timeout ends ``expired``,
holding nothing, and the very same request is then accepted as new."""

from __future__ import annotations

import subprocess
import sys

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
