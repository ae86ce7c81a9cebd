"""Terminating a run's process groups safely (R-RUN-3, R-SUP-8).

A target is a group leader named by (pid, start time, boot id): an attempt's
shim, or a legacy peer-local command; its pid is the process group and the
session of everything it started. Before every signal the identity is checked
again: a group is signalled while its leader is the same process, or, once the
leader is gone, while a live member still holds the group id (a group id is not
reused while it has members). While the leader lives, its descendants are
members too: a shim is its tree's subreaper, so what called setsid stays under
it. Once it is gone, processes that escaped the group are found by the run's
(or one attempt's) exact identity in their environment, never by a command-line
match; ``stop --all`` adds one narrow fallback, a cleared environment inside
the run's peer workspaces. TERM, a grace period, KILL, then a bounded rescan
until the run's processes are stably absent. We never signal ourselves or an
ancestor (the operator's shell may well sit in a workspace).

Whatever waits (a grace, a stop to take effect) is a stepper that the caller's
loop drives (``Termination``, ``Suspension``: ``step`` at ``next_at`` until
``done``), so that the coordinator serves other jobs meanwhile.
"""

from __future__ import annotations

import os
import signal
import time
from collections import namedtuple
from pathlib import Path

from praxist_fs.adapters import procs
from praxist_fs.adapters.fsio import read_json

Shim = tuple[int, int, str]  # pid, start time, boot id
Process = tuple[int, int]    # pid, start time
RESCAN_SECONDS = 0.1
STABLE_SCANS = 3
STOP_WAIT_SECONDS = 1.0   # after SIGSTOP, at most this long for every member to stop
STOP_POLL_SECONDS = 0.005
STOPPED = ("T", "t", "Z", "X")  # /proc states of a member that runs no more


# A named tuple, not a dataclass: ``praxist-fs stop`` fences with it, and dataclasses'
# import (inspect, ast, dis) is milliseconds of every stop's start (R-PERF-3).
class Scope(namedtuple("Scope", "run_dir leaders workspaces attempt_dir",
                       defaults=((), None, None))):
    """What belongs to one run: the groups and sessions of its leaders and the descendants
    of those alive, processes whose environment holds ``PRAXIST_RUN_DIR=<run_dir>`` (with
    ``attempt_dir``, ``PRAXIST_EXPERIMENT_ATTEMPT_DIR=<attempt_dir>``: that attempt's
    alone) and an attempt id, and, when ``workspaces`` is set, processes without any
    PRAXIST_RUN_DIR whose working directory lies under it (a descendant that cleared its
    environment). Fields: ``run_dir`` (Path), ``leaders`` (Shims), ``workspaces`` and
    ``attempt_dir`` (Path or None)."""

    __slots__ = ()

    @property
    def marker(self) -> bytes:
        if self.attempt_dir is not None:
            return f"PRAXIST_EXPERIMENT_ATTEMPT_DIR={self.attempt_dir}".encode()
        return f"PRAXIST_RUN_DIR={self.run_dir}".encode()


def unfinished(attempts: Path) -> list[Shim]:
    """The shims of attempts that may still run: each READY (it names the shim) without an
    exit.json, under a run's ``attempts/<job>/<attempt>/``."""
    shims = []
    for ready in attempts.glob("*/*/READY"):
        doc = read_json(ready)
        if isinstance(doc, dict) and not (ready.parent / "exit.json").exists():
            shim = (doc.get("pid"), doc.get("start_time"), doc.get("boot_id"))
            if type(shim[0]) is int and type(shim[1]) is int:
                shims.append(shim)
    return shims


def members(scopes: list[Scope]) -> dict[Process, Path]:
    """Live processes of the scopes, each with the run it belongs to.

    A leader's pid names our group only while that pid is unused or still the leader: the
    kernel does not reuse a pid while a group or session of that id has members, so a
    different process holding the pid means our group is gone and the id is foreign."""
    spared = _lineage()
    table = _table()
    prepared = [(scope, *_tree(scope.leaders, table), scope.marker, _roots(scope.workspaces))
                for scope in scopes]
    found: dict[Process, Path] = {}
    for pid, stat in table.items():
        if pid in spared:
            continue
        environ = None
        for scope, groups, descendants, marker, roots in prepared:
            if stat.pgrp in groups or stat.session in groups or pid in descendants:
                found[(pid, stat.start)] = scope.run_dir
                break
            environ = _environ(pid) if environ is None else environ
            if _carries(environ, marker) or _cleared_in(pid, environ, roots):
                found[(pid, stat.start)] = scope.run_dir
                break
    return found


def holders(leaders: tuple[Shim, ...]) -> list[Process]:
    """Live members of the leaders' groups and sessions, and the live descendants of the
    leaders still alive, under the same identity rule."""
    table = _table()
    groups, descendants = _tree(leaders, table)
    return [(pid, stat.start) for pid, stat in table.items()
            if stat.pgrp in groups or stat.session in groups or pid in descendants]


def signal_group(leader: Shim, signum: int, spare_leader: bool = False) -> None:
    """Pass a signal on to every live member of a leader's group and session and to its
    descendants; with ``spare_leader``, to all but the leader (a shim killed with its
    command could not record how the command ended)."""
    for pid, started in holders((leader,)):
        if not (spare_leader and pid == leader[0]):
            _signal(pid, started, signum)


class Suspension:
    """Preemption by suspension (R-POL-3): SIGTSTP, then SIGSTOP, to a leader's members
    (``holders``). The kernel drops a default SIGTSTP in a group with no parent in its
    session (ours: the shim leads a new session), so SIGSTOP does the stopping; SIGTSTP
    first lets a member that handles it (to save its state, say) run its handler, for at
    most ``grace`` seconds, while such a member has not stopped itself. ``done`` once every
    member is stopped (or, logged, STOP_WAIT_SECONDS after SIGSTOP)."""

    def __init__(self, leader: Shim, grace: float, now: float) -> None:
        self.leader = leader
        self.stop_at = now + grace
        self.give_up_at: float | None = None  # set once SIGSTOP is sent
        self.next_at = now
        self.done = False
        signal_group(leader, signal.SIGTSTP)
        self.step(now)

    def step(self, now: float) -> None:
        if self.give_up_at is None:
            if now < self.stop_at and any(_handling_tstp(pid)
                                          for pid, _ in holders((self.leader,))):
                self.next_at = min(now + RESCAN_SECONDS, self.stop_at)
                return
            signal_group(self.leader, signal.SIGSTOP)
            self.give_up_at = now + STOP_WAIT_SECONDS
        # Members are signalled one by one: a child forked meanwhile missed SIGSTOP (its
        # parent, stopped now, forks no more), and one signalled may not have stopped yet.
        # The job this suspension makes room for starts only once none can run on.
        states = {member: _stop_state(member[0]) for member in holders((self.leader,))}
        if all(state == "stopped" for state in states.values()):
            self.done = True
        elif now >= self.give_up_at:
            import logging  # here: only the coordinator suspends, not a stop (R-PERF-3)

            logging.getLogger("praxist_fs").warning(
                "suspended group %s: members still running after SIGSTOP: %s", self.leader[0],
                [pid for (pid, _), state in states.items() if state != "stopped"])
            self.done = True
        else:
            for (pid, started), state in states.items():
                if state == "missed":
                    _signal(pid, started, signal.SIGSTOP)
            self.next_at = now + STOP_POLL_SECONDS


def _stop_state(pid: int) -> str:
    """"stopped" (or gone, or in uninterruptible sleep with SIGSTOP pending: it stops
    before it runs again; a vfork parent whose stopped child never execs stays so),
    "stopping" (SIGSTOP pending), or "missed" (no SIGSTOP on its way)."""
    info = procs.group_and_session(pid)
    if info is None or info[2] in STOPPED:
        return "stopped"
    if procs.pending(pid, signal.SIGSTOP):
        return "stopped" if info[2] == "D" else "stopping"
    return "missed"


def _handling_tstp(pid: int) -> bool:
    info = procs.group_and_session(pid)
    return info is not None and info[2] not in STOPPED and \
        procs.catches(pid, signal.SIGTSTP)


def _table() -> dict[int, procs.Stat]:
    """Every live process (not a zombie) by pid, from one pass over /proc."""
    table = {}
    for pid in procs.pids():
        if (stat := procs.stat(pid)) is not None and stat.state not in ("Z", "X"):
            table[pid] = stat
    return table


def _tree(leaders: tuple[Shim, ...], table: dict[int, procs.Stat]) -> tuple[set[int], set[int]]:
    """The leaders' group (and session) ids, and the pids descended from the leaders that
    are alive (a zombie has no children: they went to a subreaper when it died)."""
    ours = [(pid, started) for pid, started, boot in leaders if boot == procs.boot_id()]
    groups = {pid for pid, started in ours if procs.start_time(pid) in (None, started)}
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    descendants: set[int] = set()
    todo = [pid for pid, started in ours if pid in table and table[pid].start == started]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in descendants:
                descendants.add(child)
                todo.append(child)
    return groups, descendants


def _roots(workspaces: Path | None) -> tuple[str, ...]:
    """The workspace directory as written and resolved (/proc/<pid>/cwd is resolved)."""
    if workspaces is None:
        return ()
    return tuple({os.path.abspath(workspaces), os.path.realpath(workspaces)})


def _lineage() -> set[int]:
    """This process and its ancestors, from procfs (psutil's import is ~15 ms of a stop)."""
    lineage, pid = set(), os.getpid()
    while pid > 0 and pid not in lineage:
        lineage.add(pid)
        pid = stat.ppid if (stat := procs.stat(pid)) is not None else 0
    return lineage


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"{procs.root()}/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []  # gone, or another user's: nothing to match on


def _carries(environ: list[bytes], marker: bytes) -> bool:
    return marker in environ and any(v.startswith(b"PRAXIST_EXPERIMENT_ATTEMPT_ID=")
                                     for v in environ)


def _cleared_in(pid: int, environ: list[bytes], roots: tuple[str, ...]) -> bool:
    """A readable environment without PRAXIST_RUN_DIR, working inside a workspace root."""
    if not roots or not environ or any(v.startswith(b"PRAXIST_RUN_DIR=") for v in environ):
        return False
    try:
        cwd = os.readlink(f"{procs.root()}/{pid}/cwd")
    except OSError:
        return False
    return any(cwd == root or cwd.startswith(root + os.sep) for root in roots)


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


class Termination:
    """TERM, ``grace``, KILL for the scopes' processes (``members``): each gets TERM (and
    CONT) when first seen, KILL at every rescan from the grace on. ``alive``: what the
    last scan found; ``done`` once STABLE_SCANS scans in a row found nothing."""

    def __init__(self, scopes: list[Scope], grace: float, now: float) -> None:
        self.scopes = scopes
        self.kill_at = now + grace
        self.termed: set[Process] = set()
        self.alive: dict[Process, Path] = {}
        self.empty_scans = 0
        self.step(now)

    @property
    def done(self) -> bool:
        return self.empty_scans >= STABLE_SCANS

    def step(self, now: float) -> None:
        self.alive = members(self.scopes)
        self.empty_scans = 0 if self.alive else self.empty_scans + 1
        for process in self.alive:
            if now >= self.kill_at:
                _signal(*process, signal.SIGKILL)
            elif process not in self.termed:
                _signal(*process, signal.SIGTERM)
                _signal(*process, signal.SIGCONT)  # a stopped process (suspended) acts on it
                self.termed.add(process)
        self.next_at = now + RESCAN_SECONDS


def terminate_scopes(scopes: list[Scope], grace: float = 10.0, deadline: float = 30.0
                     ) -> dict[Path, list[Process]]:
    """A ``Termination``, waited for up to ``deadline``; survivors by run (if any)."""
    end = time.monotonic() + deadline
    termination = Termination(scopes, grace, time.monotonic())
    while not termination.done and time.monotonic() < end:
        time.sleep(RESCAN_SECONDS)
        termination.step(time.monotonic())
    survivors: dict[Path, list[Process]] = {}
    for process, run_dir in termination.alive.items():
        survivors.setdefault(run_dir, []).append(process)
    return survivors


def terminate(shims: list[Shim], run_dir: Path, grace: float = 10.0,
              deadline: float = 30.0) -> list[Process]:
    """``terminate_scopes`` for one run's shims and environment identity."""
    return terminate_scopes([Scope(run_dir, tuple(shims))], grace, deadline).get(run_dir, [])
