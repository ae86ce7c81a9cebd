"""An attempt's processes are found whole (R-RUN-3): those that called setsid under a live
leader too."""

from __future__ import annotations

import os
import signal
import subprocess

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
