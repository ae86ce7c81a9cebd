"""praxist-fs stop: freeze admission, terminate the run's process groups, fence a dead
coordinator's run, never signal an unrelated process (R-SUP-8, R-RUN-3)."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import filelock

from .conftest import STOP, alive, pid_in, request, stop, wait_for


def decoys(run, tmp_path):
    """Processes a careless stop would hit: same command line; look-alike environment."""
    same_cmd = subprocess.Popen(["sh", "-c", "echo x; sleep 60"], start_new_session=True)
    env = {**os.environ, "PRAXIST_RUN_DIR": str(run.root) + "-other",
           "PRAXIST_EXPERIMENT_ATTEMPT_ID": "a1"}
    same_env = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    return [same_cmd, same_env]


def test_stop_through_a_live_coordinator(make_run, tmp_path):
    run = make_run(slots=1, max_slots=1)
    run.start()
    body = f"echo $$ > {tmp_path}/pid; sleep 60"
    running = run.reply(run.submit(request("long", ["sh", "-c", body])))["job_id"]
    queued = run.reply(run.submit(request("waiting", ["true"])))["job_id"]
    pid = pid_in(tmp_path / "pid")
    bystanders = decoys(run, tmp_path)
    try:
        code, result = stop(run)
        assert code == 0 and result["stopped_run_ids"] == [str(run.root)]
        assert result["failed_run_ids"] == []
        assert not alive(pid)
        assert run.proc.wait(timeout=30) == 0  # the coordinator exits once its work is gone
        job = run.job(running)
        assert job["state"] == "cancelled" and job["attempts"][0]["outcome"] == "cancelled"
        assert run.job(queued)["state"] == "cancelled"
        assert all(p.poll() is None for p in bystanders)
    finally:
        for p in bystanders:
            os.killpg(p.pid, signal.SIGKILL)  # the shell's sleep too
            p.wait()


def test_stop_fences_the_run_of_a_dead_coordinator(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    # ignores TERM, and leaves a descendant that escaped into its own session
    body = (f"trap '' TERM; setsid sh -c 'echo $$ > {tmp_path}/escaped; sleep 60' & "
            f"echo $$ > {tmp_path}/pid; sleep 60")
    job_id = run.reply(run.submit(request("stubborn", ["sh", "-c", body])))["job_id"]
    pid, escaped = pid_in(tmp_path / "pid"), pid_in(tmp_path / "escaped")
    run.kill()
    code, result = stop(run)
    assert code == 0 and result["stopped_run_ids"] == [str(run.root)]
    assert not alive(pid) and not alive(escaped)
    assert (run.sched / "STOP").exists()
    run.start()
    assert run.wait_state(job_id, "cancelled")["state"] == "cancelled"
    late = run.reply(run.submit(request("after-stop")))
    assert late["outcome"] == "rejected" and "stopped" in late["reason"]
    assert (f"the run {run.root} is stopped (stopped by praxist-fs stop): serving it frozen"
            in run.log_text())  # a start that admits nothing says so


def test_stop_takes_run_dir_as_every_other_command_does(make_run):
    run = make_run(slots=1)
    run.start()
    result = subprocess.run([*STOP, f"--run-dir={run.root}"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["stopped_run_ids"] == [str(run.root)]
    assert run.proc.wait(timeout=30) == 0


def test_a_run_that_cannot_be_fenced_is_reported_and_left_alone(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    job_id = run.reply(run.submit(request("kept", ["sh", "-c",
                                                   f"echo $$ > {tmp_path}/pid; sleep 60"])))["job_id"]
    pid = pid_in(tmp_path / "pid")
    run.wait_state(job_id, "running")  # its file may lag its command's start
    run.kill()
    (run.sched / "endpoint.json").unlink()
    holder = filelock.FileLock(str(run.sched / "owner.lock"), timeout=0)
    holder.acquire()  # someone else holds the run (a coordinator still starting, say)
    try:
        code, result = stop(run)
    finally:
        holder.release()
    assert code != 0 and result["failed_run_ids"] == [str(run.root)]
    assert alive(pid) and run.job(job_id)["state"] == "running"


def test_a_stale_ready_never_targets_the_process_that_reuses_its_pid(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    job_id = run.reply(run.submit(request("gone", ["true"])))["job_id"]
    run.wait_state(job_id, "completed")
    run.stop()
    stranger = subprocess.Popen(["setsid", "sleep", "60"])  # its own group and session
    try:
        ready = next((run.sched / "attempts").glob("*/a1/READY"))
        doc = json.loads(ready.read_text())
        doc["pid"] = stranger.pid  # as if the shim's pid had been reused (start time differs)
        ready.write_text(json.dumps(doc))
        (ready.parent / "exit.json").unlink()
        code, result = stop(run)
        assert code == 0 and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_stop_refuses_a_directory_that_is_not_a_run(tmp_path):
    result = subprocess.run([*STOP, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert json.loads(result.stdout)["failed_run_ids"] == [str(tmp_path)]
    assert not (tmp_path / "resource_scheduler").exists()


def test_stopping_an_already_stopped_run_ends_its_frozen_coordinator(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    run.kill()
    assert stop(run)[0] == 0  # fenced: the STOP sentinel
    run.start()  # serves frozen
    wait_for(lambda: "stopped" in run.status()["coordinator"]["state"])
    code, result = stop(run)
    assert code == 0 and result["stopped_run_ids"] == [str(run.root)]
    assert run.proc.wait(timeout=30) == 0
