"""The in-memory backend: attempts without processes, on a virtual clock (R-DIST-1).

The simulator (``simulate.replay``), the core's tests and bench drive the real core
against it instead of interpreting its effects themselves. A ``VirtualHost`` is the
world the attempts live in; it outlives a ``MemoryBackend``, as a host outlives its
coordinator, so a second backend on the same host adopts what the first started.

What an attempt does comes from the caller's ``plan`` (a trace replay's run time, a
test's exit code): a ``Run``; a fault-injecting caller may also script its shim on the
host (READY late, death without an exit record, an exit at a chosen time). The clock
only moves when the caller says (``on_timer(now)``), and every end due by then comes
back in one order: by its time, then by when it was decided (a completion by its GO or
resume). A suspended attempt's clock stops; TERM ends it as its plan answers TERM, at
once or by KILL after the grace; ABORT ends it without it ever running. An end's time
stays in the queue when a suspension or a signal makes it void, and ``next_timer`` may
name it: waking at it finds nothing to report.

``praxist_fs.driver.VirtualLoop`` is the daemon's loop in small around a core on this
backend: the daemon's driver without a journal or views.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import PROCESS_KEYS, Attempt, Job

from .base import NO_TIMER, AttemptKey, Capabilities

TERM_EXIT = (143, 15)  # what a command that dies of SIGTERM exits with (128 + signal)
KILL_EXIT = (137, 9)
GRACE_S = 10.0         # between TERM and KILL: the daemon's for a stop and an eviction


@dataclass(frozen=True, slots=True)
class Run:
    """What an attempt does: ``duration_s`` seconds of running once released (suspensions
    excluded; ``math.inf``: until the caller ends it), then ``exit_code``. ``term_exit``:
    how its command answers TERM (``KILL_EXIT``: it ignores TERM, and KILL ends it once
    the grace has passed). ``ready``: its shim reaches READY at once, else when the caller
    says (``VirtualHost.ready``). ``start_error``: its shim cannot be started at all."""

    duration_s: float
    exit_code: int = 0
    term_exit: tuple[int, int | None] = TERM_EXIT
    ready: bool = True
    start_error: str | None = None


Plan = Callable[[SpawnAttempt], Run]


@dataclass(slots=True)
class VirtualAttempt:
    """One attempt as the virtual host runs it: its shim, its barrier files, its command."""

    launch: SpawnAttempt
    pid: int
    run: Run
    left_s: float           # run time still to go (frozen until GO, and while stopped)
    ready: bool = False     # READY written
    go: bool = False        # GO written (the command runs if its shim was there for it)
    running: bool = False   # the command started
    stopped: bool = False
    ends_at: float | None = None  # while its clock runs: when it ends
    serial: int = 0               # which entry of the queue is its end (older ones are void)
    exit: tuple[int, int | None] | None = None  # (code, signal) once exited
    ended_at: float | None = None

    @property
    def key(self) -> AttemptKey:
        return (self.launch.job_id, self.launch.attempt_id)

    @property
    def alive(self) -> bool:
        return self.ended_at is None


class VirtualHost:
    """The attempts, the clock and the queue of ends they are heading to. Besides the
    plans, a caller may script what happens to a shim (``ready``, ``die``, ``exit``), as
    a fault-injecting test does."""

    def __init__(self, boot_id: str = "memory", start: float = 0.0) -> None:
        self.boot_id = boot_id
        self.now = start
        self.attempts: dict[AttemptKey, VirtualAttempt] = {}
        self.pids = 0
        self.serial = 0
        # (at, serial, key, how): an end ahead; ``how``: None for the plan's exit, else
        # the (code, signal) of a signal's
        self.queue: list[tuple[float, int, AttemptKey, Any]] = []
        self.ended: list[VirtualAttempt] = []  # in the order they ended
        self.running = 0  # attempts whose clock runs now

    # -- what a caller may make happen ---------------------------------------------

    def ready(self, key: AttemptKey) -> None:
        """The shim writes READY (a plan with ``ready=False`` waits for this)."""
        attempt = self.attempts[key]
        if attempt.alive:
            attempt.ready = True
            self.proceed(attempt)

    def die(self, key: AttemptKey) -> None:
        """The shim dies without an exit record (killed, or its machine lost)."""
        attempt = self.attempts[key]
        if attempt.alive:
            self.finish(attempt, self.now, None)

    def exit(self, key: AttemptKey, code: int, signal: int | None, at: float) -> None:
        """The command ended at ``at`` with ``code`` (of ``signal``), and its shim after it."""
        attempt = self.attempts[key]
        if attempt.alive:
            self.finish(attempt, at, (code, signal))

    # -- the clock --------------------------------------------------------------------

    def schedule(self, attempt: VirtualAttempt, at: float, how: Any = None) -> None:
        """``attempt`` ends at ``at``: by its plan (``how`` None) or of a signal; at once
        when that is now."""
        if how is not None and at <= self.now:
            self.finish(attempt, self.now, how)
            return
        self.serial += 1
        if how is None:
            attempt.ends_at, attempt.serial = at, self.serial
        heapq.heappush(self.queue, (at, self.serial, attempt.key, how))

    def pause(self, attempt: VirtualAttempt) -> None:
        """Stop its clock: what is left of its run waits, its queued end is void."""
        if attempt.ends_at is not None:
            attempt.left_s = attempt.ends_at - self.now
            attempt.ends_at = None
            self.running -= 1

    def proceed(self, attempt: VirtualAttempt) -> None:
        """Its command starts once released and READY, and its clock runs while it is not
        stopped: it ends once what is left of its run has run."""
        if not (attempt.alive and attempt.go and attempt.ready):
            return
        attempt.running = True
        if not attempt.stopped and attempt.ends_at is None:
            self.running += 1
            self.schedule(attempt, self.now + attempt.left_s)

    def finish(self, attempt: VirtualAttempt, at: float,
               exit: tuple[int, int | None] | None) -> None:
        """It ended at ``at``: with ``exit``, or without one (aborted, or its shim died)."""
        self.pause(attempt)
        attempt.exit, attempt.ended_at = exit, at
        self.ended.append(attempt)

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, ending (``ended``) the attempts due by then."""
        while self.queue and self.queue[0][0] <= to:
            at, serial, key, how = heapq.heappop(self.queue)
            attempt = self.attempts[key]
            if not attempt.alive or (how is None and (attempt.ends_at is None
                                                      or attempt.serial != serial)):
                continue  # void: it was stopped, signalled or ended since
            self.now = max(self.now, at)
            self.finish(attempt, at, (attempt.run.exit_code, None) if how is None else how)
        self.now = max(self.now, to)

    def next_end(self) -> float:
        return self.queue[0][0] if self.queue else NO_TIMER


class MemoryBackend:
    """``ExecutionBackend`` on a ``VirtualHost``: no processes, no files, no waiting.

    ``observe`` is a look at the host now, as the local backend's at the attempt
    directory and /proc: the barrier files and the exit record are there for anyone,
    the process only for a handle that names it (the journal's, or READY's). The ends
    ``on_timer`` reports are those of what this backend started or adopted, each once,
    whoever moved the host's clock. ``grace_s``: terminate()'s wait before KILL."""

    name: ClassVar[str] = "memory"
    capabilities: ClassVar[Capabilities] = Capabilities(can_suspend=True, places_gpus=False)

    def __init__(self, plan: Plan, host: VirtualHost | None = None,
                 grace_s: float = GRACE_S) -> None:
        self.plan = plan
        self.host = host or VirtualHost()
        self.grace_s = grace_s
        self.mine: set[AttemptKey] = set()
        self.told = len(self.host.ended)  # the host's ends up to here are reported

    # -- the contract ----------------------------------------------------------

    def start(self, launch: SpawnAttempt) -> list[Event]:
        """Its shim at once, with a fresh pid on the host for a handle (READY too, unless
        the plan waits for it); a shim that cannot start is an exit 127 with the error.
        Nothing runs, so the environment is never asked for."""
        host = self.host
        key = (launch.job_id, launch.attempt_id)
        run = self.plan(launch)
        if run.start_error is not None:
            return [AttemptObserved(at=host.now, job_id=key[0], attempt_id=key[1],
                                    alive=False, exited=True, exit_code=127,
                                    error=run.start_error)]
        host.pids += 1
        attempt = host.attempts[key] = VirtualAttempt(launch=launch, pid=host.pids, run=run,
                                                      left_s=run.duration_s, ready=run.ready)
        self.mine.add(key)
        return [self._observed(attempt, host.now)]

    def bind(self, effects: list[Effect]) -> list[Event]:
        return []  # its shims start at once: none waits ahead of need

    def roll_back(self) -> None:
        pass

    def settle(self) -> None:
        pass  # no files to describe, no directories to make durable

    def prepare(self, stopped: bool) -> None:
        pass

    def go(self, key: AttemptKey) -> None:
        """GO is written even where the shim has gone; the command runs if it is there."""
        attempt = self.host.attempts.get(key)
        if attempt is not None and not attempt.go:
            attempt.go = True
            self.host.proceed(attempt)

    def abort(self, key: AttemptKey) -> None:
        attempt = self.host.attempts.get(key)
        if attempt is not None and attempt.alive and not attempt.running:
            self.host.finish(attempt, self.host.now, None)

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        virtual = self.host.attempts.get((job.job_id, attempt.attempt_id))
        if virtual is None:
            return AttemptObserved(at=self.host.now, job_id=job.job_id,
                                   attempt_id=attempt.attempt_id, alive=False)
        known = virtual.pid == attempt.pid or (attempt.pid is None and virtual.ready)
        return self._observed(virtual, self.host.now, known)

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        key = (job.job_id, attempt.attempt_id)
        if key in self.host.attempts:
            self.mine.add(key)
        return [self.observe(job, attempt)]

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        return [self.observe(job, job.current) for job in in_flight if job.current]

    def suspend(self, key: AttemptKey, by: str) -> None:
        """Its clock stops at once: ``by`` may start its command right away."""
        attempt = self.host.attempts.get(key)
        if attempt is not None and attempt.alive and not attempt.stopped:
            attempt.stopped = True
            self.host.pause(attempt)

    def resume(self, key: AttemptKey) -> None:
        attempt = self.host.attempts.get(key)
        if attempt is not None and attempt.alive and attempt.stopped:
            attempt.stopped = False
            self.host.proceed(attempt)

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """ABORT before its command runs; else continue it if stopped, and TERM: it ends
        as its plan answers TERM, at once, or of KILL once ``grace`` has passed."""
        host = self.host
        attempt = host.attempts.get(key)
        if attempt is None or not attempt.alive:
            return
        if not attempt.running:
            self.abort(key)
            return
        self.resume(key)
        if attempt.run.term_exit == KILL_EXIT:
            host.schedule(attempt, host.now + grace, KILL_EXIT)
        else:
            host.schedule(attempt, host.now, attempt.run.term_exit)

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """End them all, waiting out the stop's grace on the virtual clock if need be: a
        look at each then (their ends are news for ``on_timer`` too, as a late sighting)."""
        host = self.host
        for key in keys:
            self.end(key, self.grace_s, False)
        if any(host.attempts[k].alive for k in keys if k in host.attempts):
            host.advance(host.now + self.grace_s)
        return [self._observed(host.attempts[k], host.now) if k in host.attempts else
                AttemptObserved(at=host.now, job_id=k[0], attempt_id=k[1], alive=False)
                for k in keys]

    def on_ready(self, token: Any) -> list[Event]:
        return []  # it registers nothing in the loop's selector

    def next_timer(self) -> float:
        return self.host.next_end()

    def on_timer(self, now: float) -> list[Event]:
        """The clock moves to ``now``: the ends of this backend's attempts due by then."""
        self.host.advance(now)
        news = self.host.ended[self.told:]
        self.told += len(news)
        return [self._observed(a, a.ended_at) for a in news if a.key in self.mine]

    def close(self) -> None:
        self.mine.clear()

    # -- what it reports ------------------------------------------------------------

    def _observed(self, attempt: VirtualAttempt, at: float,
                  known: bool = True) -> AttemptObserved:
        """What the host shows of ``attempt`` at ``at``: its handle while its shim lives
        (and is ``known``), READY, GO, and the exit record once there is one."""
        job_id, attempt_id = attempt.key
        alive = attempt.alive and known
        code, signal = attempt.exit or (None, None)
        return AttemptObserved(
            at=at, job_id=job_id, attempt_id=attempt_id, alive=alive,
            # a virtual shim's, as the local backend's is: pid, its "start", the host's boot
            handle=dict(zip(PROCESS_KEYS, (attempt.pid, attempt.pid, self.host.boot_id)))
            if alive else None,
            ready=attempt.ready, go=attempt.go,
            exited=attempt.exit is not None, exit_code=code, signal=signal,
            ended_at=attempt.ended_at if attempt.exit is not None else None)

