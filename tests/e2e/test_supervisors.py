"""Supervisors serve attempt after attempt (PROTOCOL.md section 6, *Supervisors*): a
supervisor reused for a later attempt is never taken for an earlier one's process after
a restart, a crash on the launch path of a reused supervisor runs nothing twice, a
supervisor that dies between attempts loses nothing, and stop and the fence end the
current attempt's whole tree and leave no process of it behind."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys

import psutil
import pytest

from .conftest import (
    ENDED, assert_lost_and_terminated, dead, orphaning, processes_of, read_json, request,
    shim_server, wait_for,
)
from .crashes import CRASH_EXIT, settled_invariants


def ready_pid(run, job_id, attempt_id="a1"):
    return wait_for(lambda: (read_json(run.sched / "attempts" / job_id / attempt_id / "READY")
                             or {}).get("pid"), message=f"READY of {job_id}/{attempt_id}")


def finished_on_one_slot(run) -> tuple[str, int]:
    """A job that ran to completion, and the supervisor that served it (idle now). A job
    that comes before the coordinator's first supervisors are forked gets a shim started
    for it (the coordinator's child, gone with its attempt): the next one is served."""
    for number in range(3):
        job_id = run.reply(run.submit(request(f"first-{number}", ["true"])))["job_id"]
        assert run.wait_state(job_id, *ENDED)["state"] == "completed"
        shim = ready_pid(run, job_id)
        if not dead(shim) and psutil.Process(shim).ppid() != run.proc.pid:
            # the job ends once the shim told its exit on the pipe; the supervisor is idle
            # (its cwd / again) once exit.json is durable and it said D, which the
            # coordinator reads no later than a request dropped after it
            wait_for(lambda: os.readlink(f"/proc/{shim}/cwd") == "/",
                     message="the supervisor idle again")
            return job_id, shim
    raise AssertionError("no job was served by a supervisor")


def orphaning_on_a_reused_supervisor(run, tmp_path) -> tuple[str, int, int]:
    """A job whose command leaves a setsid'd sleep, run by a supervisor that served a job
    before it: its id, the supervisor's pid and the sleep's."""
    _, supervisor = finished_on_one_slot(run)
    job_id = run.reply(run.submit(request("orphaning", orphaning(tmp_path))))["job_id"]
    assert ready_pid(run, job_id) == supervisor
    escaped = int(wait_for(lambda: (path := tmp_path / "escaped").exists()
                           and path.read_text().strip(), message="the setsid'd sleep"))
    return job_id, supervisor, escaped


def test_a_reused_supervisor_is_not_taken_for_its_last_attempt_after_a_restart(
        make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    first, supervisor = finished_on_one_slot(run)
    gate, starts = tmp_path / "gate", tmp_path / "starts"
    second = run.reply(run.submit(request("second", [
        "sh", "-c", f"echo started >> {starts}; until [ -e {gate} ]; do sleep 0.05; done; "
        "exit 3"])))["job_id"]
    assert ready_pid(run, second) == supervisor  # the same process serves it
    wait_for(starts.exists, message="the second command")
    run.kill()
    run.start()
    doc = run.wait_state(second, "running")
    assert doc["attempts"][-1]["pid"] == supervisor  # re-adopted as its running process
    assert run.job(first)["state"] == "completed"  # the first stays over
    gate.touch()
    doc = run.wait_state(second, *ENDED)
    assert doc["state"] == "failed" and doc["exit_code"] == 3
    assert [a["outcome"] for a in doc["attempts"]] == ["failed"]
    assert starts.read_text() == "started\n"  # once
    # its coordinator is gone: it served that attempt to its end, then left
    wait_for(lambda: dead(supervisor), message="the last coordinator's supervisor to exit")
    settled_invariants(run, timeout=10)


def test_an_idle_supervisor_killed_loses_nothing(make_run):
    run = make_run(slots=1)
    run.start()
    first, supervisor = finished_on_one_slot(run)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: dead(supervisor), message="the supervisor dead")
    later = [run.reply(run.submit(request(f"later-{i}", ["true"])))["job_id"] for i in range(3)]
    for job_id in later:
        doc = run.wait_state(job_id, *ENDED)
        assert doc["state"] == "completed"
        assert [a["outcome"] for a in doc["attempts"]] == ["completed"]
    assert run.job(first)["state"] == "completed"
    settled_invariants(run, timeout=10)


def test_a_reused_supervisor_killed_mid_attempt_is_fenced(make_run, tmp_path):
    run = make_run(slots=1, retries=1)
    run.start()
    job_id, supervisor, escaped = orphaning_on_a_reused_supervisor(run, tmp_path)
    wait_for(lambda: os.getsid(escaped) == escaped, message="the sleep's own session")
    os.kill(supervisor, signal.SIGKILL)
    doc = run.wait_state(job_id, *ENDED)
    assert [a["outcome"] for a in doc["attempts"]] == ["lost", "completed"]
    assert_lost_and_terminated(doc, run.sched / "attempts" / job_id / "a1")


def test_stop_ends_a_reused_supervisors_attempt_and_leaves_no_process(make_run, tmp_path):
    run = make_run(slots=1)
    run.start()
    job_id, supervisor, escaped = orphaning_on_a_reused_supervisor(run, tmp_path)
    stopped = subprocess.run([sys.executable, "-m", "praxist_fs", "stop", str(run.root)],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ,
                                  "PRAXIST_HOST_REGISTRY": str(run.root.parent / "host-registry")})
    assert stopped.returncode == 0, stopped.stderr
    doc = run.wait_state(job_id, "cancelled")
    assert doc["attempts"][0]["outcome"] == "cancelled"
    wait_for(lambda: dead(supervisor) and dead(escaped), message="the supervisor and the tree")
    assert processes_of(run.sched / "attempts" / job_id / "a1") == []


# The launch path of the third job: the second's supervisor serves it (the first job's
# too: the start forks supervisors before it serves, so only a failed server leaves the
# first job a shim of its own).
LAUNCH_POINTS = ["effect.SpawnAttempt.before:3", "effect.SpawnAttempt.after:3",
                 "effect.WriteGo.before:3", "effect.WriteGo.after:3"]


@pytest.mark.parametrize("point", LAUNCH_POINTS)
def test_a_crash_on_a_reused_supervisors_launch_path_runs_nothing_twice(make_run, tmp_path,
                                                                         point):
    run = make_run(slots=1)
    run.start(env={"PRAXIST_CRASH_AT": point})
    starts = tmp_path / "starts"
    mark = f'echo "$PRAXIST_EXPERIMENT_ID" >> {starts}; '
    jobs = []
    for tag, code in (("a", 0), ("b", 4), ("c", 0)):
        jobs.append(run.reply(run.submit(request(tag, ["sh", "-c", mark + f"exit {code}"])),
                              timeout=30)["job_id"])
        if tag != "c":
            run.wait_state(jobs[-1], *ENDED)
    assert run.proc.wait(timeout=30) == CRASH_EXIT, f"{point} was never reached"
    run.start()
    docs = [run.wait_state(job_id, *ENDED, timeout=30) for job_id in jobs]
    assert [d["state"] for d in docs] == ["completed", "failed", "completed"]
    assert docs[1]["exit_code"] == 4
    settled_invariants(run, timeout=10, starts=starts)


def test_more_attempts_in_flight_than_sixteen_leave_as_many_supervisors_warm(make_run,
                                                                           tmp_path):
    """Issue 31: the supervisors of more attempts than IDLE_SUPERVISORS (16) that were in
    flight at once all stay warm once those are over, so that the next as many launches
    fork none: no supervisor is closed only to be forked again."""
    many = 20
    run = make_run(slots=many, max_slots=many)
    run.start()
    server, gate = shim_server(run), tmp_path / "gate"
    gate.touch()

    def all_at_once(label: str) -> set[int]:
        """``many`` jobs in flight together, then over: the supervisors left, all idle."""
        with open(gate) as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # each command waits for it: all run at once
            jobs = [run.reply(run.submit(request(f"{label}-{n}", ["flock", "-s", str(gate),
                                                                 "true"])))["job_id"]
                    for n in range(many)]
            wait_for(lambda: all(run.job(job_id)["state"] == "running" for job_id in jobs),
                     timeout=60, message=f"{many} jobs running at once")
        for job_id in jobs:
            assert run.wait_state(job_id, *ENDED, timeout=60)["state"] == "completed"
        wait_for(lambda: all(idle(child) for child in server.children()),
                 message="every supervisor idle")
        return {child.pid for child in server.children()}

    first = all_at_once("first")
    assert len(first) >= many
    assert all_at_once("again") == first


def idle(supervisor: psutil.Process) -> bool:
    """An idle supervisor has left its attempt's directory for /."""
    try:
        return supervisor.cwd() == "/"
    except psutil.NoSuchProcess:
        return True
