"""Legacy peer-local launching (R-DUR-3): ``praxist-fs launch`` for a task without
``mode: central``, which has no coordinator.

The launcher runs the command itself, in a new session (so a process group of its
own, as a central attempt's), and records it in the peer's protected-PID manifest
before anyone can stop the run: it holds the run's owner lock from the STOP check
until the entry is durable, and ``praxist-fs stop`` fences under that same lock.
A coordinator that holds the lock, or has ever served the run, wins: the caller
then submits to it. The launcher is a child subreaper and waits, like a shim, until
the command's whole tree is gone; then it removes its entry and exits with the
command's exit code. TERM, INT and HUP are passed on to the command's group.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

import filelock

from .adapters import fence, manifests, procs, runs
from .adapters.layout import RunLayout
from .adapters.lock import OwnerLock, live_endpoint
from .config import load_policy
from .core.identity import job_id_for
from .errors import OwnerBusy

PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Deferred(Exception):
    """A coordinator owns the run after all: the request goes to it."""


class Refused(Exception):
    """The run cannot take a peer-local launch (it is stopped, or missing)."""


class NotStarted(Refused):
    """The command itself could not be started (exit 127, as a shell says)."""


class Busy(Exception):
    """Someone held the owner lock for the whole wait (a starting coordinator, a stop)."""


def peer_local(layout: RunLayout, task: str | None) -> bool:
    """Whether ``launch`` runs the command itself (call it when no coordinator is live): only
    for a task file that is not ``mode: central``, on a run no coordinator has served.
    Without a task file the run is central, as ``serve`` without ``--config`` is."""
    return task is not None and not served(layout) and load_policy(task).mode != "central"


def served(layout: RunLayout) -> bool:
    """A coordinator has served this run (it journals, and serves only central tasks): it
    stays central for good, whatever a peer's task file or environment says."""
    return layout.journal.exists() or layout.policy.exists()


def launch(layout: RunLayout, *, peer: str, tag: str, argv: list[str],
           host_registry: str | None, wait: float) -> int:
    if not layout.root.is_dir():
        raise Refused(f"{layout.root} is not a directory")
    layout.create_protected_pids()
    received: list[int] = []
    leader: fence.Shim | None = None

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if leader is not None:
            fence.signal_group(leader, signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        started = _start(layout, peer, tag, argv, host_registry, wait, received)
    except BaseException:
        for signum, handler in previous.items():  # not ours to run: Ctrl-C means Ctrl-C again
            signal.signal(signum, handler)
        raise
    if started is None:
        return 128 + received[0]  # interrupted before anything ran
    child, launch_id, leader = started
    for signum in received:  # arrived while the entry was being written
        fence.signal_group(leader, signum)
    code = child.wait()
    _reap_tree()
    manifests.remove(layout, peer, {launch_id})
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N


def _start(layout: RunLayout, peer: str, tag: str, argv: list[str], host_registry: str | None,
           wait: float, received: list[int]
           ) -> tuple[subprocess.Popen, str, fence.Shim] | None:
    """Under the owner lock: check who owns the run, spawn, record durably."""
    owner = _acquire(layout, wait, received)
    if owner is None:
        return None
    try:
        if live_endpoint(layout) is not None or served(layout):
            raise Deferred()
        if layout.stop_sentinel.exists():
            raise Refused(f"the run {layout.root} is stopped (resource_scheduler/STOP)")
        if received:
            return None
        runs.register(layout.root, "launch", host_registry)
        _become_subreaper()
        launch_id = f"local-{time.time_ns()}-{os.getpid()}"
        try:
            child = subprocess.Popen(argv, env=_environment(layout, peer, tag, launch_id),
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise NotStarted(f"cannot run {argv[0]!r}: {exc}") from None
        pid, started, boot = child.pid, procs.start_time(child.pid), procs.boot_id()
        own_pid, own_start, _ = procs.own_identity()
        try:
            manifests.add(layout, peer, {
                "launch_id": launch_id, "tag": tag, "argv": argv, "cwd": os.getcwd(),
                "pid": pid, "start_time": started, "boot_id": boot, "pgid": pid,
                "launcher": {"pid": own_pid, "start_time": own_start, "boot_id": boot},
                "started_at": time.time()})
        except (OSError, filelock.Timeout) as exc:  # unrecorded work must not run on
            fence.signal_group((pid, started, boot), signal.SIGKILL)
            child.wait()
            raise Refused(f"cannot record the launch in {layout.protected_pids}: {exc}") from None
        return child, launch_id, (pid, started, boot)
    finally:
        owner.release()


def _acquire(layout: RunLayout, wait: float, received: list[int]) -> OwnerLock | None:
    """The owner lock, held for milliseconds; a coordinator's lock means it wins. None when
    a signal came meanwhile."""
    owner, deadline = OwnerLock(layout), time.monotonic() + wait
    while not received:
        try:
            owner.acquire()
            return owner
        except OwnerBusy:
            if live_endpoint(layout) is not None or served(layout):
                raise Deferred() from None
            if time.monotonic() >= deadline:
                raise Busy(f"another process holds {layout.owner_lock} (a coordinator starting, "
                           f"or praxist-fs stop); waited {wait:g}s") from None
        time.sleep(0.05)
    return None


def _environment(layout: RunLayout, peer: str, tag: str, launch_id: str) -> dict[str, str]:
    """The caller's environment, less any attempt it copied, plus the run's identity (so
    ``stop`` finds descendants that leave the group, as it finds a central attempt's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PRAXIST_EXPERIMENT", "PRAXIST_ASSIGNED"))}
    env.update(PRAXIST_RUN_DIR=str(layout.root), PRAXIST_PEER_ID=peer,
               PRAXIST_EXPERIMENT_ID=job_id_for(tag), PRAXIST_EXPERIMENT_ATTEMPT_ID=launch_id)
    return env


def _become_subreaper() -> None:
    """Orphaned descendants come back to us, so we wait for the whole tree (best effort)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reap_tree() -> None:
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
