"""The in-memory backend: attempts without processes, on a virtual clock (R-DIST-1).

The simulator (``simulate.replay``), the core's tests and bench drive the real core
against it instead of interpreting its effects themselves. A ``VirtualHost`` is the
world the attempts live in; it outlives a ``MemoryBackend``, as a host outlives its
coordinator, so a second backend on the same host adopts what the first started.

What an attempt does once released comes from the caller's ``plan`` (a trace replay's
run time, a test's exit code): a ``Run``. The clock only moves when the caller says
(``on_timer(now)``), and every end due by then comes back in one order: by its time,
then by when it was decided (a completion by its GO or resume, a signal by its
sending). A suspended attempt's clock stops; TERM ends it at once unless its plan
ignores TERM, then KILL does after the grace; ABORT ends it without it ever running.
An end's time stays in the queue when a suspension or a signal makes it void, and
``next_timer`` may name it: waking at it finds nothing to report.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from praxist_fs.core.effects import (
    AbortAttempt, CancelAttempt, Effect, EvictAttempt, ResumeAttempt, SpawnAttempt,
    SuspendAttempt, TerminateAttempts, WriteGo,
)
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, Job
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState

from .base import NO_TIMER, AttemptKey, Capabilities

TERM_EXIT = (143, 15)  # what a command that dies of SIGTERM exits with (128 + signal)
KILL_EXIT = (137, 9)
ABORTED = "aborted"    # an end without an exit: released the other way at the barrier
GRACE_S = 10.0         # between TERM and KILL: the daemon's for a stop and an eviction


@dataclass(frozen=True, slots=True)
class Run:
    """What an attempt's command does once released: ``duration_s`` seconds of running
    (suspensions excluded), then ``exit_code``; ``ignores_term``: only KILL ends it."""

    duration_s: float
    exit_code: int = 0
    ignores_term: bool = False


Plan = Callable[[SpawnAttempt], Run]


@dataclass(slots=True)
class VirtualAttempt:
    """One attempt as the virtual host runs it."""

    key: AttemptKey
    pid: int
    run: Run
    left_s: float           # run time still to go (frozen until GO, and while stopped)
    go: bool = False
    stopped: bool = False
    ends_at: float | None = None  # while its clock runs: when it ends
    serial: int = 0               # which entry of the queue is its end (older ones are void)
    exit: tuple[int, int | None] | None = None  # (code, signal) once exited
    ended_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.ended_at is None


class VirtualHost:
    """The attempts, the clock and the queue of ends they are heading to."""

    def __init__(self, boot_id: str = "memory", start: float = 0.0) -> None:
        self.boot_id = boot_id
        self.now = start
        self.attempts: dict[AttemptKey, VirtualAttempt] = {}
        self.pids = 0
        self.serial = 0
        # (at, serial, key, how): an end ahead; ``how``: None for the plan's exit, else
        # ABORTED or the (code, signal) of a signal's
        self.queue: list[tuple[float, int, AttemptKey, Any]] = []
        self.ended: list[VirtualAttempt] = []  # in the order they ended
        self.running = 0  # attempts whose clock runs now

    def schedule(self, attempt: VirtualAttempt, at: float, how: Any = None) -> None:
        """``attempt`` ends at ``at``: by its plan (``how`` None) or of a signal."""
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
        """Start (or restart) its clock: it ends once what is left of its run has run."""
        if attempt.alive and attempt.go and not attempt.stopped and attempt.ends_at is None:
            self.running += 1
            self.schedule(attempt, self.now + attempt.left_s)

    def finish(self, attempt: VirtualAttempt, at: float,
               exit: tuple[int, int | None] | None) -> None:
        """It ended at ``at``: with ``exit``, or without one (aborted at the barrier)."""
        self.pause(attempt)
        attempt.exit, attempt.ended_at = exit, at

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, ending (``ended``) the attempts due by then."""
        while self.queue and self.queue[0][0] <= to:
            at, serial, key, how = heapq.heappop(self.queue)
            attempt = self.attempts[key]
            if not attempt.alive or (how is None and (attempt.ends_at is None
                                                      or attempt.serial != serial)):
                continue  # void: it was stopped, signalled or ended since
            self.now = max(self.now, at)
            self.finish(attempt, at, (attempt.run.exit_code, None) if how is None
                        else None if how == ABORTED else how)
            self.ended.append(attempt)
        self.now = max(self.now, to)

    def next_end(self) -> float:
        return self.queue[0][0] if self.queue else NO_TIMER


class MemoryBackend:
    """``ExecutionBackend`` on a ``VirtualHost``: no processes, no files, no waiting.

    It reports the ends of what it started or adopted, each once, whoever moved the
    host's clock, and nothing else of the host's."""

    name: ClassVar[str] = "memory"
    capabilities: ClassVar[Capabilities] = Capabilities(can_suspend=True, places_gpus=False)

    def __init__(self, plan: Plan, host: VirtualHost | None = None) -> None:
        self.plan = plan
        self.host = host or VirtualHost()
        self.mine: set[AttemptKey] = set()
        self.told = len(self.host.ended)  # the host's ends up to here are reported

    # -- the contract ----------------------------------------------------------

    def start(self, launch: SpawnAttempt, env: dict[str, str]) -> list[Event]:
        """At the barrier at once, READY: its handle is a fresh pid on the host."""
        host = self.host
        key = (launch.job_id, launch.attempt_id)
        host.pids += 1
        run = self.plan(launch)
        host.attempts[key] = VirtualAttempt(key=key, pid=host.pids, run=run,
                                            left_s=run.duration_s)
        self.mine.add(key)
        return [self._observed(host.attempts[key])]

    def go(self, key: AttemptKey) -> None:
        attempt = self.host.attempts.get(key)
        if attempt is not None and attempt.alive and not attempt.go:
            attempt.go = True
            self.host.proceed(attempt)

    def abort(self, key: AttemptKey) -> None:
        attempt = self.host.attempts.get(key)
        if attempt is not None and attempt.alive and not attempt.go:
            self.host.schedule(attempt, self.host.now, ABORTED)

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        virtual = self.host.attempts.get((job.job_id, attempt.attempt_id))
        if virtual is None or (attempt.pid is not None and attempt.pid != virtual.pid):
            return AttemptObserved(at=self.host.now, job_id=job.job_id,
                                   attempt_id=attempt.attempt_id, alive=False)
        return self._observed(virtual)

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
        if attempt is not None and attempt.stopped:
            attempt.stopped = False
            self.host.proceed(attempt)

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """ABORT at the barrier; else continue it if stopped, and TERM: it dies now, or,
        if its plan ignores TERM, of KILL once ``grace`` has passed (unless it ends first)."""
        host = self.host
        attempt = host.attempts.get(key)
        if attempt is None or not attempt.alive:
            return
        if not attempt.go:
            self.abort(key)
            return
        self.resume(key)
        if attempt.run.ignores_term:
            host.schedule(attempt, host.now + grace, KILL_EXIT)
        else:
            host.schedule(attempt, host.now, TERM_EXIT)

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """End them all and wait out the stop's grace on the virtual clock."""
        for key in keys:
            self.end(key, GRACE_S, False)
        until = self.host.now + GRACE_S if any(
            self.host.attempts[k].run.ignores_term for k in keys
            if k in self.host.attempts) else self.host.now
        return self.on_timer(until)

    def on_ready(self, token: Any) -> list[Event]:
        return []  # it registers nothing in the loop's selector

    def next_timer(self) -> float:
        return self.host.next_end()

    def on_timer(self, now: float) -> list[Event]:
        """The clock moves to ``now``: the ends of this backend's attempts due by then."""
        self.host.advance(now)
        news = self.host.ended[self.told:]
        self.told += len(news)
        return [self._observed(a) for a in news if a.key in self.mine]

    def close(self) -> None:
        self.mine.clear()

    # -- what it reports ------------------------------------------------------------

    def _observed(self, attempt: VirtualAttempt) -> AttemptObserved:
        """What the host shows of ``attempt`` now: its handle while alive, READY (a
        virtual shim is at its barrier at once), GO, and its exit once it ended."""
        job_id, attempt_id = attempt.key
        at = self.host.now if attempt.alive else attempt.ended_at
        if attempt.alive:
            return AttemptObserved(at=at, job_id=job_id, attempt_id=attempt_id, alive=True,
                                   pid=attempt.pid, pid_start=attempt.pid,
                                   boot_id=self.host.boot_id, ready=True, go=attempt.go)
        code, signal = attempt.exit or (None, None)
        return AttemptObserved(at=at, job_id=job_id, attempt_id=attempt_id, alive=False,
                               ready=True, go=attempt.go, exited=attempt.exit is not None,
                               exit_code=code, signal=signal, ended_at=attempt.ended_at)


def carry_out(backend: MemoryBackend, effect: Effect, jobs: dict[str, Job],
              evict_grace: float = GRACE_S) -> list[Event]:
    """Hand one of the core's attempt effects to ``backend``, as the daemon's loop does;
    what it returns goes back to the core. Effects on files are not a backend's: []."""
    if isinstance(effect, SpawnAttempt):
        return backend.start(effect, dict(effect.env))
    if isinstance(effect, TerminateAttempts):
        return backend.terminate(list(effect.attempts))
    if not isinstance(effect, (WriteGo, AbortAttempt, SuspendAttempt, ResumeAttempt,
                               EvictAttempt, CancelAttempt)):
        return []
    key = (effect.job_id, effect.attempt_id)
    if isinstance(effect, WriteGo):
        backend.go(key)
    elif isinstance(effect, AbortAttempt):
        backend.abort(key)
    elif isinstance(effect, SuspendAttempt):
        preemptions = jobs[effect.job_id].current.preemptions
        backend.suspend(key, preemptions[-1]["by"] if preemptions else "")
    elif isinstance(effect, ResumeAttempt):
        backend.resume(key)
    else:
        grace = effect.grace if isinstance(effect, CancelAttempt) else evict_grace
        backend.end(key, grace, jobs[effect.job_id].state is JobState.SUSPENDED)
    return []




class VirtualLoop:
    """The daemon's loop around a core on a virtual host, for the simulator and tests: an
    event goes to the core, what it decides to the backend, what the backend reports back
    to the core, until nothing is left. Nothing is journaled: the core's state is all."""

    def __init__(self, sched: Scheduler, backend: MemoryBackend) -> None:
        self.sched = sched
        self.backend = backend

    def handle(self, event: Event) -> None:
        pending = [event]
        while pending:
            for effect in self.sched.handle(pending.pop(0)):
                pending += carry_out(self.backend, effect, self.sched.jobs)

    def advance(self, now: float) -> list[AttemptObserved]:
        """The clock moves to ``now``: the ends reached by then, each handled in turn."""
        ended = self.backend.on_timer(now)
        for event in ended:
            self.handle(event)
        return ended  # type: ignore[return-value]

    def next_end(self) -> float:
        return self.backend.next_timer()
