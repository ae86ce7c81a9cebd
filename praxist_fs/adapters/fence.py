"""Terminating a run's process groups safely (R-RUN-3, R-SUP-8).

A target is an attempt's shim, named by (pid, start time, boot id); its pid is
the process group and the session of everything the attempt started. Before
every signal the identity is checked again: a group is signalled while its
leader is the same process, or, once the leader is gone, while a live member
still holds the group id (a group id is not reused while it has members).
Processes that escaped the group (setsid) are found by the run's exact identity
in their environment, never by a command-line match. TERM, a grace period, KILL,
then a bounded rescan until the run's processes are stably absent.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from . import procs

Shim = tuple[int, int, str]  # pid, start time, boot id
RESCAN_SECONDS = 0.1
STABLE_SCANS = 3


def members(shims: list[Shim], run_dir: Path) -> list[tuple[int, int]]:
    """Live processes of the run: in a shim's group or session, or carrying the run's
    PRAXIST_RUN_DIR and an attempt id in their environment. (pid, start time) pairs.

    A shim's pid names our group only while that pid is unused or still the shim: the
    kernel does not reuse a pid while a group or session of that id has members, so a
    different process holding the pid means our group is gone and the id is foreign."""
    groups = {pid for pid, started, boot in shims
              if boot == procs.boot_id() and procs.start_time(pid) in (None, started)}
    marker = f"PRAXIST_RUN_DIR={run_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        info = procs.group_and_session(pid)
        if info is None or pid == os.getpid():
            continue
        pgrp, session, state, started = info
        if state in ("Z", "X"):
            continue
        if pgrp in groups or session in groups or _carries(pid, marker):
            found.append((pid, started))
    return found


def _carries(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            variables = handle.read().split(b"\0")
    except OSError:
        return False
    return marker in variables and any(v.startswith(b"PRAXIST_EXPERIMENT_ATTEMPT_ID=")
                                       for v in variables)


def _signal(pid: int, started: int, signum: int) -> None:
    """Signal one process only if it is still the process we identified."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if procs.start_time(pid) == started:
            signal.pidfd_send_signal(fd, signum)
    except OSError:
        pass
    finally:
        os.close(fd)


def terminate(shims: list[Shim], run_dir: Path, grace: float = 10.0,
              deadline: float = 30.0) -> list[tuple[int, int]]:
    """TERM, wait ``grace``, KILL, rescan until stably absent; returns survivors (if any)."""
    end = time.monotonic() + deadline
    for pid, started in members(shims, run_dir):
        _signal(pid, started, signal.SIGTERM)
    soft_end = time.monotonic() + grace
    while time.monotonic() < soft_end and members(shims, run_dir):
        time.sleep(RESCAN_SECONDS)
    empty_scans = 0
    while time.monotonic() < end:
        alive = members(shims, run_dir)
        if not alive:
            empty_scans += 1
            if empty_scans >= STABLE_SCANS:
                return []
        else:
            empty_scans = 0
            for pid, started in alive:
                _signal(pid, started, signal.SIGKILL)
        time.sleep(RESCAN_SECONDS)
    return members(shims, run_dir)
