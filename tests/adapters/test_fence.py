"""An attempt's processes are found whole (R-RUN-3): those that called setsid under a live
leader, and what outlived a dead one, by the attempt's identity in its environment."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from praxist_fs.adapters import fence, procs
from tests.e2e.conftest import wait_for


@pytest.fixture
def spawned():
    """Start processes in sessions of their own; each one, and every pid it reports on its
    stdout (a setsid'd child, say), is killed at the end (by identity: pids are reused)."""
    started: list[tuple[subprocess.Popen, list[tuple[int, int]]]] = []

    def spawn(script: str, reported: int = 0, env: dict[str, str] | None = None):
        proc = subprocess.Popen(["sh", "-c", script], start_new_session=True,
                                stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
        pids = [int(proc.stdout.readline()) for _ in range(reported)]
        started.append((proc, [(pid, procs.start_time(pid)) for pid in pids]))
        return (proc.pid, procs.start_time(proc.pid), procs.boot_id()), pids

    yield spawn
    for proc, children in started:
        for pid, started_at in children:
            if procs.start_time(pid) == started_at:
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.wait()


def test_holders_reach_a_descendant_that_called_setsid(spawned):
    """A shim's command may leave its session; the shim is its subreaper, so it stays a
    descendant, and suspend, cancel and requeue must reach it there."""
    leader, [escaped] = spawned("setsid sleep 300 & echo $!; wait", reported=1)
    wait_for(lambda: os.getsid(escaped) == escaped, message="the child in its own session")
    assert (escaped, procs.start_time(escaped)) in fence.holders((leader,))


def test_an_attempt_scope_finds_what_its_dead_leader_left_and_terminates_it(
        spawned, tmp_path):
    """Once the leader is dead, its group still holds what stayed in it, and what left it
    carries the attempt's directory in its environment: that attempt's scope finds both
    (and another attempt's finds neither), and a Termination ends them, KILL for the one
    that ignores TERM."""
    attempt_dir = tmp_path / "attempts" / "job" / "a1"
    env = {"PRAXIST_RUN_DIR": str(tmp_path), "PRAXIST_EXPERIMENT_ATTEMPT_ID": "a1",
           "PRAXIST_EXPERIMENT_ATTEMPT_DIR": str(attempt_dir)}
    leader, pids = spawned("setsid sh -c \"trap '' TERM; exec sleep 300\" & echo $!; "
                           "sleep 300 & echo $!; wait", reported=2, env=env)
    os.kill(leader[0], signal.SIGKILL)
    wait_for(lambda: not procs.is_alive(*leader), message="the leader dead")
    wanted = {(pid, procs.start_time(pid)) for pid in pids}
    ours = fence.Scope(tmp_path, (leader,), attempt_dir=attempt_dir)
    assert set(fence.members([ours])) == wanted
    other = fence.Scope(tmp_path, attempt_dir=attempt_dir.with_name("a2"))
    assert fence.members([other]) == {}
    grace = 0.3
    started = time.monotonic()
    termination = fence.Termination([ours], grace, started)
    assert set(termination.alive) == wanted
    while not termination.done:
        time.sleep(max(0.0, termination.next_at - time.monotonic()))
        termination.step(time.monotonic())
    assert time.monotonic() - started >= grace  # the one ignoring TERM waited for KILL
    assert not any(procs.is_alive(pid, started_at) for pid, started_at in wanted)
