"""The shim tests' shim server, on a fresh run layout (tests/conftest.py's ``layout``), and
the helpers they share: spawn an attempt, release its barrier, read a shim to its end,
and the processes /proc shows."""

from __future__ import annotations

import os
import select
import time
from pathlib import Path

import pytest

from praxist_fs.adapters.fsio import write_atomic
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt
from tests.e2e.conftest import read_json, wait_for


@pytest.fixture(autouse=True)
def no_end_confirmed(monkeypatch):
    """These tests play the coordinator only as far as each needs, and none confirms an
    end journaled (launcher.END_JOURNALED), unless it says so: the supervisors they start
    wait for no confirmation and fsync exit.json at once, as for a coordinator that is
    gone."""
    monkeypatch.setattr(launcher, "END_WAIT_S", 0)


@pytest.fixture
def server(layout):
    server = launcher.ShimServer.start(layout)
    yield server
    server.close()


@pytest.fixture(params=["popen", "server"])
def prestart(request, layout):
    """Start a warm shim of either kind: by Popen, or forked by a ShimServer."""
    return prestarter(request, layout)


def prestarter(request, layout):
    """What starts a warm shim of ``request.param``'s kind (None for "cold"): by Popen, or
    a supervisor forked by the test's ShimServer, closed at the test's end."""
    if request.param == "cold":
        return lambda: None
    if request.param == "popen":
        return lambda: launcher.prestart(layout)
    server, supervisors = request.getfixturevalue("server"), []
    request.addfinalizer(lambda: [supervisor.close() for supervisor in supervisors])

    def prestart():
        warm = launcher.prestart(layout, server)
        supervisors.append(warm.handle.popen)
        return warm
    return prestart


def spawn(layout, tmp_path, body="echo started", env=None, gpus=(), warm=None):
    marker = tmp_path / "marker"
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None,
                          command=f"touch {marker}; {body}", cwd=str(tmp_path),
                          env=env or {"PATH": "/usr/bin:/bin"}, profile="cpu", gpus=gpus,
                          metadata={"peer": "p"})
    handle = launcher.spawn(layout, effect, attempt_environment(layout, effect), warm)
    return handle, layout.attempt_dir("job-1", "a1"), marker


def finish(handle, timeout=15.0):
    """What the shim said on its status pipe (``D`` aside) until the EOF that ends its
    attempt: a shim started for it has exited then; a supervisor said ``D`` (nothing of
    the attempt runs) and lives on, idle, alone in its process group."""
    said, deadline = b"", time.monotonic() + timeout
    told = handle.exit_record
    while (word := handle.read_status()) != b"":
        said += word or b""
        left = deadline - time.monotonic()
        assert left > 0, f"the shim did not finish its attempt in {timeout}s (said {said!r})"
        select.select([handle.status_fd], [], [], left)
    if handle.exit_record is not told and b"X" not in said:
        said += b"X"  # it came in one read with ``D`` and the EOF, which read_status returns
    if isinstance(handle.popen, launcher.Supervisor):
        assert handle.over and handle.popen.poll() is None
        assert group_members(handle.popen.pid) == [handle.popen.pid]
        assert not [pid for pid in live_pids() if parent_pid(pid) == handle.popen.pid]  # reaped all
    else:
        assert handle.popen.wait(timeout=timeout) == 0
    return said


def group_members(pgid):
    """The live members of a process group."""
    return [pid for pid in live_pids() if (fields := stat_fields(pid)) and
            fields[1][0] != b"Z" and int(fields[1][2]) == pgid]


def go_and_wait(handle, attempt_dir):
    said = b""

    def ready_told():
        """READY told on the pipe, not only its file: a shim that finds GO given already
        when it looks (just after writing READY) tells no READY news at all."""
        nonlocal said
        said += handle.read_status() or b""
        return said == b"R"

    wait_for(ready_told)
    assert (attempt_dir / "READY").exists()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    assert said + finish(handle) == b"RX"  # READY, then the exit, told before exit.json
    record = read_json(attempt_dir / "exit.json")
    assert record == handle.exit_record
    handle.close()
    assert set(record) == {"exit_code", "signal", "started_at", "ended_at", "error"}
    assert record["started_at"] <= record["ended_at"]
    return record


def live_pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def stat_fields(pid):
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[:data.rfind(b")")].split(b"(", 1)[1].decode(), data[data.rfind(b")") + 2:].split()


def parent_pid(pid):
    fields = stat_fields(pid)
    return int(fields[1][1]) if fields and fields[1][0] != b"Z" else None
