"""Process identity is (pid, start time); a zombie is not alive (R-RUN-3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from praxist_fs.adapters import procs
from tests.e2e.conftest import wait_for


def test_own_identity_is_alive():
    pid, started, boot = procs.own_identity()
    assert procs.is_alive(pid, started, boot)
    assert not procs.is_alive(pid, started + 1, boot)  # a reused pid has another start time
    assert not procs.is_alive(pid, started, "another-boot")


def test_a_zombie_is_not_alive_and_a_sleeper_is():
    child = subprocess.Popen(["sleep", "30"])
    started = procs.start_time(child.pid)
    assert procs.is_alive(child.pid, started)
    child.kill()
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
    assert os.path.exists(f"/proc/{child.pid}")  # still a zombie, kill(pid, 0) would succeed
    assert not procs.is_alive(child.pid, started)
    child.wait()


def test_comm_with_spaces_and_parentheses_is_parsed(tmp_path):
    script = tmp_path / "odd) name ("
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(0o755)
    child = subprocess.Popen([str(script)])
    try:
        wait_for(lambda: "odd" in Path(f"/proc/{child.pid}/stat").read_text())
        assert procs.start_time(child.pid) is not None
        assert procs.is_alive(child.pid, procs.start_time(child.pid))
    finally:
        child.kill()
        child.wait()


def test_processes_given_an_argument_are_found_until_they_are_zombies(tmp_path):
    """How a start finds the shim of an attempt the journal lost, READY or not."""
    attempt_dir = str(tmp_path / "attempts" / "job" / "a1")
    child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(30)",
                              attempt_dir])  # as a shim is given its attempt directory
    wait_for(lambda: procs.with_argument(attempt_dir) == [child.pid])
    assert procs.with_argument(attempt_dir + "x") == []  # whole arguments only
    child.kill()
    wait_for(lambda: Path(f"/proc/{child.pid}/stat").read_text().split(")")[-1].split()[0] == "Z")
    assert procs.with_argument(attempt_dir) == []
    child.wait()
