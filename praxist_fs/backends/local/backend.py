"""The local backend: each attempt is a process group on this host, led by a shim.

A shim (backends/shim.py) starts at the barrier, says READY on its status pipe (and
in READY), runs the command once told GO (pipe first, then the GO file for a shim
re-adopted after a restart), tells the exit on its pipe, then records exit.json.
Shims are started ahead of
need (warm: supervisors forked by a shim server, or one prestarted), so a launch
costs no interpreter start; a supervisor serves attempt after attempt, so most
launches cost no fork either. What is watched: each shim's status pipe, the shim server's
socket, and a pidfd for every shim re-adopted after a restart; what is timed (a
cancel's grace, a suspension's SIGTSTP grace, the fence of a dead shim's
processes) waits in ``on_timer``. Every method returns what it saw as events: the
loop feeds them to the core (backends/base.py).
"""

from __future__ import annotations

import logging
import math
import os
import select
import selectors
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, ClassVar

from praxist_fs.adapters import fence, procs
from praxist_fs.adapters.fsio import create, read_json, write_atomic
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.taskreports import task_report
from praxist_fs.backends.attempt_dir import make_durable
from praxist_fs.backends.base import AttemptKey, RunContext
from praxist_fs.backends.local import launcher
from praxist_fs.core.budget import INFRA_EXIT_CODE
from praxist_fs.core.capabilities import ON_THIS_HOST, Capabilities
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, AttemptPhase, Job
from praxist_fs.errors import UnsafeLayout

log = logging.getLogger("praxist_fs")

STOP_GRACE_SECONDS = 10.0  # between TERM and KILL when the run is stopped
TSTP_GRACE_SECONDS = 2.0   # at most this long for SIGTSTP handlers before SIGSTOP (suspend)
FENCE_GRACE_SECONDS = 10.0  # between TERM and KILL for what a dead shim left running
WARM_SHIMS = 2            # warm shims kept ready ahead of need: launches in one pass
# Supervisors kept warm once their attempt is over: at most this many, or as many as the
# most attempts ever in flight at once (running, or ended and not idle yet: waiting for the
# word that their end is journaled, sent once the batch that ends them is out, or writing
# exit.json) and WARM_SHIMS: a loop turn that sees that many ends launches as many, while the
# supervisors that served them are still busy. Fewer, and a busy run closes idle
# supervisors only to fork new ones for its next ends.
IDLE_SUPERVISORS = 16
SERVER_RETRY_SECONDS = 60.0  # between restarts of a shim server that failed or died
# How long a launch that finds no shim warm waits for a fork already asked for: a running
# server answers within a millisecond, one just started once its interpreter is up, the
# very start-up a shim of the launch's own would cost (on a loaded host, some 100 ms).
FORK_WAIT_SECONDS = 0.25


def shim_handle(pid: int, started: int | None, boot: str | None) -> dict[str, Any]:
    """The handle of an attempt led by the shim ``pid``: its identity on this host, under
    the keys the core documents for a process here (core/model.py's PROCESS_KEYS; the
    job file shows ``pid`` and ``pid_start``, R-FS-5)."""
    return {"pid": pid, "pid_start": started, "boot_id": boot}


def _ended(exit_record: Any) -> bool:
    """Whether an exit record (told on the pipe, or exit.json) holds an end: an exit code."""
    return isinstance(exit_record, dict) and isinstance(exit_record.get("exit_code"), int)


def _exit_fields(exit_record: Any, attempt_dir: Path) -> dict[str, Any]:
    """An attempt observation's account of its end, from its exit record (``_ended``) and
    the task's own failure.json."""
    if not _ended(exit_record):
        return {"exited": False}
    return {"exited": True, "exit_code": exit_record["exit_code"],
            "signal": exit_record.get("signal"), "ended_at": exit_record.get("ended_at"),
            "error": exit_record.get("error"),
            "failure": task_report(attempt_dir / "failure.json")}


def shim_of(handle: dict[str, Any] | None) -> fence.Shim | None:
    """The identity of the shim an attempt's handle names, or None: not reported yet, or
    not an attempt on this host."""
    if handle is None or handle.get("pid") is None:
        return None
    return handle["pid"], handle.get("pid_start"), handle.get("boot_id")


class LocalBackend:
    """Attempts as shim-led process groups on this host (R-EXE-*).

    ``lookup``: the core's job by id, read-only (whose attempt a signal is for, and
    whether it already ended); ``disk_errors``: errnos a full disk raises, re-raised
    from ``start`` when nothing was started (the loop waits those out)."""

    name: ClassVar[str] = "local"
    capabilities: ClassVar[Capabilities] = ON_THIS_HOST

    def __init__(self, layout: RunLayout, selector: selectors.BaseSelector,
                 lookup: Callable[[str], Job | None], disk_errors: frozenset[int],
                 environment: Callable[[SpawnAttempt], dict[str, str]],
                 stop_grace: float = STOP_GRACE_SECONDS) -> None:
        self.layout = layout
        self.selector = selector
        self.lookup = lookup
        self.environment = environment  # a launch's, secrets revealed: built at its start
        self.disk_errors = disk_errors
        self.stop_grace = stop_grace  # a stop's TERM to KILL
        self.handles: dict[AttemptKey, launcher.ShimHandle] = {}
        self.server: launcher.ShimServer | None = None  # forks supervisors
        self._server_retry_at = 0.0
        self._server_fd = -1
        self._server_slow = False  # a wait for its fork ran out: not waited for till it answers
        # shims ready ahead of need: fresh forks first, then idle supervisors, latest last
        self.warm: list[launcher.WarmShim] = []
        self.bound: dict[AttemptKey, launcher.WarmShim] = {}  # journaled, not yet told
        # told their attempt before the commit that journals it (launcher.tell), not yet
        # watched: ``start`` watches them once that commit is durable
        self.told: dict[AttemptKey, launcher.ShimHandle] = {}
        self.refused: set[AttemptKey] = set()  # bound to a shim, then refused: no GO to write
        # attempts whose supervisor told its end (``X``), not yet told that it is journaled
        # (``settle``)
        self.ends_told: set[AttemptKey] = set()
        self.pidfds: dict[AttemptKey, int] = {}
        self.most_in_flight = 0  # attempts with a pipe to us at once, at most: IDLE_SUPERVISORS
        self.ending: dict[AttemptKey, tuple[fence.Shim, float]] = {}  # KILL at this time
        # suspensions under way (SIGTSTP sent, not yet wholly stopped), each with the job
        # it makes room for, whose GO (journaled) waits in ``held_go`` until then
        self.suspending: dict[AttemptKey, tuple[fence.Suspension, str]] = {}
        self.held_go: set[AttemptKey] = set()
        # attempts whose shim died while their processes ran: those being terminated, and
        # how the shim ended; the core hears of the attempt once they are gone
        self.fencing: dict[AttemptKey, tuple[fence.Termination, str]] = {}
        self.tstp_grace = float(os.environ.get("PRAXIST_TSTP_GRACE_SECONDS")
                                or TSTP_GRACE_SECONDS)  # a test knob: a slow host's margin
        self.closed = False

    @classmethod
    def made(cls, context: RunContext) -> LocalBackend:
        return cls(context.layout, context.selector, context.lookup, context.disk_errors,
                   context.environment)

    # -- ahead of the launches ------------------------------------------------

    def prepare(self, stopped: bool) -> None:
        """Keep shims started ahead of need: WARM_SHIMS forked by the shim server, so that
        a pass may launch that many at once; without a server one, started once no
        attempt waits for its GO, so that its interpreter's start-up overlaps commands,
        not launches. A stopped run launches nothing: it keeps no shim, and no server."""
        if stopped:
            self._retire_supervisors()
            if self.server is not None:
                self._close_server()
            return
        if (self.server is None or not self.server.alive) and \
                time.monotonic() >= self._server_retry_at:
            self._start_server()
        while self.server is not None and self.server.pending and self._answered(0):
            self._on_server()  # forks answered already: warm before the next select
        try:
            if self.server is not None and self.server.alive:
                while len(self.warm) + len(self.server.pending) < WARM_SHIMS:
                    self.server.request()  # the reply comes through the selector
            elif not self.warm and \
                    all(handle.go_fd is None for handle in self.handles.values()):
                self.warm.append(launcher.prestart(self.layout))
        except OSError as exc:  # launches fall back to starting their own shim
            log.warning("could not start a shim ahead of need: %s", exc)

    def _on_server(self) -> None:
        """The shim server answered a request: one more warm shim, or why not. With no
        request outstanding, its end closed: it exited."""
        if self.server.pending:
            try:
                self.warm.insert(0, self.server.receive().warm())  # below the idle ones
            except OSError as exc:
                log.warning("the shim server could not fork a shim: %s", exc)
        else:
            self.server.close()
        self._server_slow = False
        if not self.server.alive:
            self.selector.unregister(self._server_fd)

    def _await_fork(self, wanted: int) -> None:
        """A launch found no shim warm, with ``wanted`` launches of its pass still to bind
        (the first launches after a start, whose server started with the coordinator; or
        a pass that launches more than WARM_SHIMS, as a busy run's does when several ends
        come in one loop turn, their supervisors not idle yet): ask the server
        for that many forks, less those on their way, and wait for the first, up to
        FORK_WAIT_SECONDS, rather than start a shim, whose interpreter costs more than
        all of those forks. A server that let such a wait run out is not waited for
        again until it answers."""
        if self.server is None or not self.server.alive or self._server_slow:
            return
        try:
            while len(self.server.pending) < wanted:
                self.server.request()
        except OSError as exc:  # no longer alive: what is on its way is dropped
            log.warning("could not ask the shim server for a shim: %s", exc)
            return
        if self._answered(FORK_WAIT_SECONDS):
            self._on_server()
        else:
            self._server_slow = True
            log.warning("the shim server did not fork a shim within %s s; starting one",
                        FORK_WAIT_SECONDS)

    def _answered(self, timeout: float) -> bool:
        """Whether the shim server's socket holds an answer (or its EOF), waiting up to
        ``timeout`` seconds for one."""
        poller = select.poll()
        poller.register(self._server_fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def _close_server(self) -> None:
        """Close the shim server (its supervisors live on, each on its pool socket)."""
        if self._server_fd in self.selector.get_map():
            self.selector.unregister(self._server_fd)
        self.server.close()
        self.server = None
        self._server_slow = False

    def _start_server(self) -> None:
        """(Re)start the shim server, at most once a SERVER_RETRY_SECONDS after a start
        that failed or a server that died; meanwhile warm shims are started one by one."""
        if self.server is not None:
            self._close_server()
            log.warning("the shim server exited; starting a new one")
        self._server_retry_at = time.monotonic() + SERVER_RETRY_SECONDS
        try:
            self.server = launcher.ShimServer.start(self.layout)
        except OSError as exc:
            self.server = None
            log.warning("could not start the shim server: %s", exc)
            return
        self._server_fd = self.server.sock.fileno()  # registered by number: it may close
        self.selector.register(self._server_fd, selectors.EVENT_READ, ("backend", ("server",)))

    def bind(self, effects: list[Effect]) -> list[Event]:
        """Give new attempts the shims started ahead of need, in the commit that decides
        them: each shim's pid is journaled with its intent and, as a warm shim waits at
        the barrier by construction, so is GO. Each is told its attempt now, before that
        commit (launcher.tell), and makes its directories, READY and the command's log
        while the commit's fsync runs; GO, sent once the commit is durable (``go``), is
        then followed by the command's spawn alone: no round trip on the launch path."""
        events: list[Event] = []
        spawns = [effect for effect in effects if isinstance(effect, SpawnAttempt)]
        for index, effect in enumerate(spawns):
            if not self.warm:
                self._await_fork(len(spawns) - index)
            key = (effect.job_id, effect.attempt_id)
            while self.warm and key not in self.bound and key not in self.told:
                warm = self.warm.pop()  # the latest idle: its pages are the likeliest hot
                shim = warm.handle.popen
                started = None if shim.poll() is not None else shim.start_time \
                    if isinstance(shim, launcher.Supervisor) else procs.start_time(shim.pid)
                if started is None:  # it died while it waited: try the next one
                    warm.dismiss()
                    continue
                try:  # told now, it prepares while the commit is on its way
                    told = launcher.tell(self.layout, effect, self.environment(effect), warm)
                except OSError:  # it died just now (and was let go): try the next one
                    continue
                if told is None:  # its spec does not fit its pipe: spec.marshal, after
                    self.bound[key] = warm
                else:
                    self.told[key] = told
                events.append(AttemptObserved(
                    at=time.time(), job_id=effect.job_id, attempt_id=effect.attempt_id,
                    alive=True, handle=shim_handle(shim.pid, started, procs.boot_id()),
                    ready=True))
        return events

    def roll_back(self) -> None:
        """The batch that bound shims was never journaled: they are warm again, but for
        those told their attempt already, which are told ABORT (nothing ran) and let go."""
        self.warm += self.bound.values()
        self.bound.clear()
        for handle in self.told.values():
            handle.release_barrier(b"A")
            handle.close()
            if isinstance(handle.popen, launcher.Supervisor):
                handle.popen.close()  # it exits once it has heard the ABORT
        self.told.clear()

    # -- launching ------------------------------------------------------------

    def start(self, effect: SpawnAttempt) -> list[Event]:
        """Start the attempt's shim: the one bound to it in its commit, else a new one,
        whose pid is then journaled before GO."""
        key = (effect.job_id, effect.attempt_id)
        if (handle := self.told.pop(key, None)) is not None:  # told before the commit
            self._watch(key, handle)
            return []
        bound = self.bound.pop(key, None)
        try:
            handle = launcher.spawn(self.layout, effect, self.environment(effect), bound)
        except UnsafeLayout as exc:  # nothing written through it, nothing started
            if bound is not None:  # its GO, journaled with it, is not written either
                bound.dismiss()
                self.refused.add(key)
            return [AttemptObserved(at=time.time(), job_id=effect.job_id,
                                    attempt_id=effect.attempt_id, alive=False, exited=True,
                                    exit_code=126, error=f"refused to start it: {exc}")]
        except OSError as exc:
            if bound is None and exc.errno in self.disk_errors:
                raise  # nothing started, nothing said: released once there is room
            if bound is not None:  # its pid and GO are journaled: nothing ran, so retry it
                return [AttemptObserved(
                    at=time.time(), job_id=effect.job_id, attempt_id=effect.attempt_id,
                    alive=False, exited=True, exit_code=INFRA_EXIT_CODE,
                    error=f"the shim started for it was gone: {exc}")]
            return [AttemptObserved(at=time.time(), job_id=effect.job_id,
                                    attempt_id=effect.attempt_id, alive=False, exited=True,
                                    exit_code=127, error=f"could not start the shim: {exc}")]
        self._watch(key, handle)
        if bound is not None:
            return []
        pid = handle.popen.pid
        return [AttemptObserved(at=time.time(), job_id=effect.job_id,
                                attempt_id=effect.attempt_id, alive=True,
                                handle=shim_handle(pid, procs.start_time(pid), procs.boot_id()))]

    def _watch(self, key: AttemptKey, handle: launcher.ShimHandle) -> None:
        self.handles[key] = handle
        self.most_in_flight = max(self.most_in_flight, len(self.handles))
        self.selector.register(handle.status_fd, selectors.EVENT_READ, ("backend", ("shim", key)))

    def settle(self) -> None:
        """Once a batch is committed and carried out, every end a supervisor told us
        (``X``) that the core holds as recorded is durable in the journal: tell it so
        (``ShimHandle.confirm_end``), and it writes exit.json without fsyncs. (attempt.json
        is each shim's to write, and a warm shim's directories too.)"""
        for key in self.ends_told:
            handle = self.handles.get(key)
            if handle is not None and self._end_recorded(key):
                handle.confirm_end()
        self.ends_told = {key for key in self.ends_told
                          if key in self.handles and not self.handles[key].end_confirmed}

    def go(self, key: AttemptKey) -> None:
        """GO, journaled already: on the shim's pipe, and the shim writes the GO file as
        its command starts (without fsync: the journal holds the decision), off our
        loop. A shim without a pipe to us (a re-adopted one) polls for the file, which
        we write. Held while a job it
        preempts by suspension is not wholly stopped yet (``_forget_suspension``).

        exit.json, fsynced by the shim into the attempt directory, must not vanish with
        the directory in a power cut: the shim fsyncs the directory into its parents
        itself, once it told the exit on its pipe and before it writes exit.json
        (shim.make_durable; not at all when told that the end is journaled: ``settle``),
        so that no fsync of ours is on the launch path. A re-adopted shim's directory is
        fsynced here before its GO all the same: a shim of an older version, started by
        an earlier coordinator, may count on it."""
        if key in self.refused:  # its directory is not ours: nothing goes through it
            self.refused.discard(key)
            return
        if key not in self.handles:
            make_durable(self.layout, [key])
        if any(by == key[0] for _, by in self.suspending.values()):
            self.held_go.add(key)
            return
        handle = self.handles.get(key)
        if handle is not None:  # told on its pipe, the shim writes the GO file itself
            handle.release_barrier(b"G")
            # A pipe's write wakes its reader as a sync wakeup: the kernel queues the shim
            # on our CPU, as if we were about to sleep, and we are not (the batch's files
            # come next), so its spawn waited behind them while another CPU idled: GO ->
            # spawn p90 0.32-1.5 ms, 0.17-0.24 ms giving way here (150 interleaved jobs,
            # 4 runs each). The shim slept, so it is owed the CPU and runs first (a shim
            # told ahead waits for GO standing aside, shim_command.stand_aside, and
            # runs only so). Only with nothing else runnable but the two of us: else our
            # CPU may go to other work for a slice or more, and the batch's other GOs
            # wait on it.
            if launcher.runnable_now() <= 2:
                os.sched_yield()
            return
        try:  # empty, so created in place: there is no half-written GO to rename over
            create(self.layout.attempt_dir(*key) / "GO", b"")
        except (FileExistsError, FileNotFoundError):
            pass  # given by an earlier coordinator; or the directory is gone

    def abort(self, key: AttemptKey) -> None:
        """ABORT: durably in the attempt directory (a shim that lost its pipe finds it),
        and on the pipe; on the pipe alone while the directory is not made yet (the shim
        makes it once told its attempt: launcher.spawn), which the write finds."""
        self.held_go.discard(key)
        try:
            write_atomic(self.layout.attempt_dir(*key) / "ABORT", b"", durable=True)
        except FileNotFoundError:
            pass
        handle = self.handles.get(key)
        if handle is not None:
            handle.release_barrier(b"A")

    # -- observing ------------------------------------------------------------

    def on_ready(self, token: Any) -> list[Event]:
        kind = token[0]
        if kind == "server":
            self._on_server()
            return []
        if kind == "pidfd":
            self._forget_pidfd(token[1])
            return self._observe_key(token[1])
        return self._on_shim(token[1])

    def _on_shim(self, key: AttemptKey) -> list[Event]:
        handle = self.handles[key]
        said = handle.read_status()
        if handle.exit_record is not None and not handle.end_confirmed:
            self.ends_told.add(key)
        if said is None:
            return []
        if said == b"R":  # READY: news only while GO is still to be decided
            job = self.lookup(key[0])
            if job is not None and job.current is not None and job.current.go:
                return []
        elif not said:  # EOF: the shim is done with the attempt (exit.json, if any, is
            # written; its end, told by ``X`` before, is likely journaled already)
            self.selector.unregister(handle.status_fd)
            shim = handle.popen
            idle = handle.over and isinstance(shim, launcher.Supervisor)
            if not idle:
                shim.wait()  # it exits, or died
            events = self._observe_key(key, death=None if idle else handle.death())
            del self.handles[key]
            handle.close()
            if idle:
                self._reuse(shim)
            elif isinstance(shim, launcher.Supervisor):
                shim.close()
            return events
        return self._observe_key(key)

    def _reuse(self, supervisor: launcher.Supervisor) -> None:
        """A supervisor whose attempt is over is warm again, for the next launch, unless
        as many are already as the run may need at once (IDLE_SUPERVISORS), or it is gone
        or retired (a stop): then it exits."""
        if len(self.warm) >= max(IDLE_SUPERVISORS, self.most_in_flight + WARM_SHIMS) or \
                not supervisor.reusable:
            supervisor.close()
            return
        try:
            self.warm.append(supervisor.warm())
        except OSError:
            supervisor.close()  # it died meanwhile

    def _observe_key(self, key: AttemptKey, death: str | None = "supervisor died"
                     ) -> list[Event]:
        """What an attempt's shim is up to; ``death``: how it ended, should it turn out to
        have died without an exit record (then its processes are fenced first); None for
        a supervisor that said it is done with the attempt: nothing of it runs."""
        if key in self.fencing:
            return []  # its dead shim's processes are being terminated: told once they are gone
        job = self.lookup(key[0])
        if job is None or job.current is None or self._end_recorded(key):
            return []  # not this attempt, or its end is recorded (told by ``X``): no news
        observed = self.observe(job, job.current)
        if not (observed.alive or observed.exited) and death is not None and \
                self._fence(key, death):
            return []
        return [observed]

    def _end_recorded(self, key: AttemptKey) -> bool:
        """Whether the core holds the attempt's end: it ended, or its job has gone on to
        a later attempt. Once a batch is committed (``settle``), the journal does too."""
        job = self.lookup(key[0])
        return job is not None and job.current is not None and (
            job.current.attempt_id != key[1] or job.current.phase == AttemptPhase.ENDED)

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        """What the disk and /proc say about an attempt, as an event for the core.

        An attempt whose command ran and ended, as its shim told on its pipe (``X``), after
        a GO we journaled and sent: its READY and GO are known (the shim writes READY before
        it reads GO, and runs nothing without it), so neither is read back: an open, a
        read and two stats on every job's end, for nothing the core uses of an exit
        (issue 31)."""
        attempt_dir = self.layout.attempt_dir(job.job_id, attempt.attempt_id)
        handle = self.handles.get((job.job_id, attempt.attempt_id))
        told = handle.exit_record if handle is not None else None
        if attempt.go and _ended(told) and told.get("error") is None:
            return AttemptObserved(at=time.time(), job_id=job.job_id,
                                   attempt_id=attempt.attempt_id, alive=False, ready=True,
                                   go=True, **_exit_fields(told, attempt_dir))
        pid, started, boot = shim_of(attempt.handle) or (None, None, None)
        ready = read_json(attempt_dir / "READY")
        if pid is None and isinstance(ready, dict):
            pid, started, boot = ready.get("pid"), ready.get("start_time"), ready.get("boot_id")
        if pid is None and handle is not None:  # its pid's record failed (a full disk)
            pid, started, boot = handle.popen.pid, procs.start_time(handle.popen.pid), \
                procs.boot_id()
        # a supervisor outlives its attempt, and a shim that told the exit on its pipe runs
        # nothing of it any more: asked first, as it spares every end's read of /proc
        alive = (handle is None or (not handle.over and told is None
                                    and handle.popen.poll() is None)) and \
            procs.is_alive(pid, started, boot)
        # Told on its pipe before exit.json is written (``X``): it counts once the commit
        # of this observation is durable, before anything is done about it; should we die
        # before that commit, the shim still writes exit.json for the next coordinator.
        exit_record = told if told is not None else read_json(attempt_dir / "exit.json")
        return AttemptObserved(
            at=time.time(), job_id=job.job_id, attempt_id=attempt.attempt_id, alive=alive,
            handle=shim_handle(pid, started, boot) if alive else None,
            ready=isinstance(ready, dict), go=(attempt_dir / "GO").exists(),
            **_exit_fields(exit_record, attempt_dir))

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        """Re-adopt an attempt found running at start: what it is up to and, while its shim
        lives, a pidfd that tells of its end."""
        key = (job.job_id, attempt.attempt_id)
        events = self._observe_key(key)
        seen = next((e for e in events if isinstance(e, AttemptObserved)), None)
        shim = shim_of(seen.handle) if seen is not None and seen.alive else None
        if shim is None:
            return events
        try:
            pidfd = os.pidfd_open(shim[0])
        except OSError:
            return events + self._observe_key(key)
        if not procs.is_alive(*shim):
            os.close(pidfd)  # the pid was reused or it just exited
            return events + self._observe_key(key)
        self.pidfds[key] = pidfd
        self.selector.register(pidfd, selectors.EVENT_READ, ("backend", ("pidfd", key)))
        return events

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        """Attempts with no pipe to this coordinator (re-adopted, or whose pipe is gone)."""
        events: list[Event] = []
        for job in in_flight:
            key = (job.job_id, job.current.attempt_id)
            if key not in self.handles:
                events += self._observe_key(key)
        return events

    def _forget_pidfd(self, key: AttemptKey) -> None:
        fd = self.pidfds.pop(key)
        self.selector.unregister(fd)
        os.close(fd)

    def _fence(self, key: AttemptKey, death: str) -> bool:
        """A shim found dead without an exit record: never leave its command running with
        nothing to watch it. Whatever of its attempt still runs (the group it led, and what
        carries the attempt's directory in its environment, setsid or not) gets TERM now
        and KILL after FENCE_GRACE_SECONDS (``on_timer``). True if anything did."""
        shim = self._shim(key)
        scope = fence.Scope(self.layout.root, (shim,) if shim is not None else (),
                            attempt_dir=self.layout.attempt_dir(*key))
        termination = fence.Termination([scope], FENCE_GRACE_SECONDS, time.monotonic())
        if not termination.alive:
            return False
        log.warning("attempt %s/%s: %s while its command ran; terminating %s", *key, death,
                    sorted(pid for pid, _ in termination.alive))
        self._forget_suspension(key)  # to be ended, not stopped
        self.fencing[key] = (termination, death)
        return True

    def _shim(self, key: AttemptKey) -> fence.Shim | None:
        """The identity of an attempt's shim, the leader of its process group, if known."""
        job = self.lookup(key[0])
        attempt = job.current if job is not None else None
        if attempt is None or attempt.attempt_id != key[1]:
            return None
        return shim_of(attempt.handle)

    # -- signalling -------------------------------------------------------------

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """ABORT it if still at the barrier, else TERM its group (CONT first if it is
        suspended: a stopped process does not act on TERM), and KILL it once ``grace``
        has passed (``on_timer``) without its end observed."""
        self.abort(key)  # if still there
        self._forget_suspension(key)
        if (shim := self._shim(key)) is not None:
            if suspended:
                fence.signal_group(shim, signal.SIGCONT)
            fence.signal_group(shim, signal.SIGTERM)
            self.ending[key] = (shim, time.monotonic() + grace)

    def suspend(self, key: AttemptKey, by: str) -> None:
        """SIGTSTP now, SIGSTOP once its handlers had their grace (``on_timer``): other
        jobs are served meanwhile, but the job this makes room for gets its GO only once
        every process of the victim is stopped (``go``)."""
        if (shim := self._shim(key)) is None:
            return
        suspension = fence.Suspension(shim, self.tstp_grace, time.monotonic())
        if not suspension.done:
            self.suspending[key] = (suspension, by)

    def resume(self, key: AttemptKey) -> None:
        self._forget_suspension(key)
        if (shim := self._shim(key)) is not None:
            fence.signal_group(shim, signal.SIGCONT)

    def _forget_suspension(self, key: AttemptKey) -> None:
        """A suspension is over (wholly stopped, or overtaken: resumed, ending): the GO
        that waited for it, and for no other, is given now."""
        if self.suspending.pop(key, None) is None:
            return
        waiting = {by for _, by in self.suspending.values()}
        for held in [held for held in self.held_go if held[0] not in waiting]:
            self.held_go.discard(held)
            job = self.lookup(held[0])
            current = job.current if job is not None else None
            if current is not None and current.attempt_id == held[1] and \
                    current.phase != AttemptPhase.ENDED:
                self.go(held)

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """Signal the stopping run's attempts (blocking for the grace period: nothing is
        admitted any more), and return what became of them. A stopping run gives no GO
        that waited for a suspension, and stops nothing it terminates."""
        self.suspending.clear()
        self.held_go.clear()
        self._retire_supervisors()  # each exits as its attempt ends: none outlives the stop
        shims = []
        for key in keys:
            if (shim := self._shim(key)) is not None:
                shims.append(shim)  # suspended ones get CONT with their TERM
            self.abort(key)  # one still at the barrier
        survivors = fence.terminate(shims, self.layout.root, grace=self.stop_grace)
        if survivors:
            log.error("stop: processes still alive after KILL: %s", survivors)
        events: list[Event] = []
        for key in list(self.handles):
            events += self._on_shim(key)
        told = {(e.job_id, e.attempt_id) for e in events if isinstance(e, AttemptObserved)}
        for key in keys:
            if key not in told:
                events += self._observe_key(key)
        return events

    def next_timer(self) -> float:
        """When the signalling under way (``on_timer``) next needs a look (monotonic)."""
        return min([suspension.next_at for suspension, _ in self.suspending.values()]
                   + [deadline for _, deadline in self.ending.values()]
                   + [termination.next_at for termination, _ in self.fencing.values()],
                   default=math.inf)

    def on_timer(self, now: float) -> list[Event]:
        """Signalling that waits on a grace or a process, carried on from the loop so that
        no wait blocks other jobs: suspensions (SIGSTOP after the SIGTSTP grace, until
        every process is stopped), KILL once a cancel's or eviction's grace is over, and
        the termination of what a dead shim left running."""
        for key, (suspension, _) in list(self.suspending.items()):
            if now >= suspension.next_at:
                suspension.step(now)
            if suspension.done:
                self._forget_suspension(key)
        for key, (shim, deadline) in list(self.ending.items()):
            job = self.lookup(key[0])
            if job is None or job.current.attempt_id != key[1] or \
                    job.current.phase == AttemptPhase.ENDED:
                del self.ending[key]  # it ended
            elif now >= deadline:
                log.warning("attempt %s/%s outlived its grace (%s): KILL", *key,
                            "cancelled" if job.current.cancel else "preempted")
                fence.signal_group(shim, signal.SIGKILL, spare_leader=True)  # it records
                del self.ending[key]
        events: list[Event] = []
        for key, (termination, death) in list(self.fencing.items()):
            if now >= termination.next_at:
                termination.step(now)
            if termination.done:
                del self.fencing[key]
                job = self.lookup(key[0])
                if job is not None and job.current.attempt_id == key[1]:
                    observed = self.observe(job, job.current)
                    events.append(replace(observed, fenced=True, error=death))
        return events

    def close(self) -> None:
        """The coordinator leaves: shims keep their commands (re-adopted later). Once."""
        if self.closed:
            return
        self.closed = True
        self._retire_supervisors()
        if self.server is not None:
            self.server.close()
        for handle in [*self.handles.values(), *self.told.values()]:
            handle.close()
            if isinstance(handle.popen, launcher.Supervisor):
                handle.popen.close()
        for fd in self.pidfds.values():
            os.close(fd)

    def _retire_supervisors(self) -> None:
        """Warm shims exit now, and every supervisor once its attempt is over."""
        for warm in self.warm:
            warm.dismiss()
        self.warm.clear()
        for handle in self.handles.values():
            if isinstance(handle.popen, launcher.Supervisor):
                handle.popen.retire()
