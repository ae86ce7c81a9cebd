"""kill -9 of an attempt's shim never leaves its command running with nothing to watch it
(R-RUN-2, R-RUN-3): what the attempt still runs, a descendant that called setsid included,
is terminated, the attempt ends ``lost`` with the supervisor's death as its error, and the
job runs again as an infrastructure failure, within infrastructure_retries. The same when
the shim dies while no coordinator runs."""

from __future__ import annotations

import os
import signal


from .conftest import (
    ENDED, assert_lost_and_terminated, dead, no_exit_json, orphaning, processes_of, request,
    wait_for,
)
from .crashes import CRASH_EXIT, CRASH_TASK, start_crashing


def start_orphaning(run, tmp_path):
    """The job, its shim's pid and its first attempt's directory, once the command has
    left a sleep outside the shim's session."""
    job_id = run.reply(run.submit(request("orphaning", orphaning(tmp_path))))["job_id"]
    escaped = int(wait_for(lambda: (path := tmp_path / "escaped").exists()
                           and path.read_text().strip(), message="the setsid'd sleep"))
    shim = run.wait_attempt_field(job_id, "pid")
    # it left the attempt's session (setsid runs just after its pid is written)
    wait_for(lambda: os.getsid(escaped) == escaped != shim, message="the sleep's own session")
    attempt_dir = run.sched / "attempts" / job_id / "a1"
    assert escaped in processes_of(attempt_dir)
    return job_id, shim, attempt_dir


def test_a_killed_shim_is_fenced_and_its_job_retried(make_run, tmp_path):
    run = make_run(retries=1)
    run.start()
    job_id, shim, attempt_dir = start_orphaning(run, tmp_path)
    os.kill(shim, signal.SIGKILL)
    doc = run.wait_state(job_id, *ENDED)
    assert doc["state"] == "completed", doc["reason"]
    assert [a["outcome"] for a in doc["attempts"]] == ["lost", "completed"]  # a2 ran
    assert_lost_and_terminated(doc, attempt_dir)


def test_without_retries_left_a_fenced_job_fails(make_run, tmp_path):
    """Failed, not drained_unknown: the command was terminated, so it did not finish, and
    retry_terminal may run it again."""
    run = make_run(retries=0)
    run.start()
    job_id, shim, attempt_dir = start_orphaning(run, tmp_path)
    os.kill(shim, signal.SIGKILL)
    doc = run.wait_state(job_id, *ENDED)
    assert doc["state"] == "failed" and len(doc["attempts"]) == 1
    assert "no infrastructure retries left" in doc["reason"]
    assert_lost_and_terminated(doc, attempt_dir)


def test_a_shim_killed_while_the_coordinator_is_down_is_fenced_at_start(make_run, tmp_path):
    run = make_run(retries=1)
    run.start()
    job_id, shim, attempt_dir = start_orphaning(run, tmp_path)
    run.kill()
    os.kill(shim, signal.SIGKILL)
    wait_for(lambda: dead(shim), message="the shim dead")
    assert processes_of(attempt_dir)  # its command runs on, with nothing to watch it
    run.start()
    doc = run.wait_state(job_id, *ENDED)
    assert [a["outcome"] for a in doc["attempts"]] == ["lost", "completed"]
    assert_lost_and_terminated(doc, attempt_dir)


def test_a_shim_that_dies_after_telling_the_exit_on_its_pipe_loses_nothing(make_run, tmp_path):
    """The shim tells the exit on its status pipe before it writes exit.json: one that dies
    in between leaves the coordinator the exit all the same, journaled from the pipe, so
    the job ends with its command's own code (not `drained_unknown`, as an end nobody
    recorded), and nothing runs again. Here exit.json cannot be written at all: the
    command left a directory in its place, and the shim's rename onto it fails."""
    run = make_run(retries=1)
    run.start()
    rid = run.submit(request("told", no_exit_json(tmp_path)))
    job_id = run.reply(rid)["job_id"]
    doc = run.wait_state(job_id, *ENDED)
    assert (doc["state"], doc["exit_code"]) == ("failed", 3), doc["reason"]
    assert [(a["outcome"], a["exit_code"]) for a in doc["attempts"]] == [("failed", 3)]
    attempt_dir = run.sched / "attempts" / job_id / "a1"
    assert (attempt_dir / "exit.json").is_dir()  # no exit.json: the pipe alone told it
    assert (tmp_path / "runs").read_text() == "ran\n"  # it ran once


def test_a_coordinator_that_dies_before_journaling_a_told_exit_runs_nothing_twice(
        make_run, tmp_path):
    """The coordinator read the exit on the pipe and died before its commit, and the shim
    died before exit.json: nobody recorded how the command ended, so the next coordinator
    finds an attempt given GO with no exit record: `drained_unknown`, never run again."""
    run = make_run(task_text=CRASH_TASK)
    proc = start_crashing(run, "journal.before_commit@ended:told/a1")
    rid = run.submit(request("told", no_exit_json(tmp_path)), name="told.json")
    assert proc.wait(timeout=30) == CRASH_EXIT
    run.start()
    doc = run.wait_state(run.reply(rid)["job_id"], *ENDED)
    assert doc["state"] == "drained_unknown", doc["reason"]
    assert [a["outcome"] for a in doc["attempts"]] == ["lost"]
    assert (tmp_path / "runs").read_text() == "ran\n"  # it ran once, and only once
