"""The one interpreter of the core: handle -> journal -> one commit -> effects.

The daemon's loop and the simulator both feed the core through a ``Driver``. For a
batch of events: ``Scheduler.handle`` each (with the scheduling pass inside the batch
when asked, and the handles a backend binds to its launches), journal (uncommitted)
those that changed the core's state, commit once, then carry out the effects, launches
first: attempt effects go to the backend (``carry_out``), file effects to the views.
What the backend answers is the next batch, until nothing is left.

The simulator's driver has no journal and no views: the core's state is all there is
(``VirtualLoop``, around the in-memory backend's virtual host).
The daemon's has both, and its sinks (``sinks.py``: status.json and metrics.prom, the
task's hooks, the vault's scrub), each handed every committed batch once its effects
are out, notices and all (the core's word that a job ended, a generation closed, a hook
is due or a request's secrets may go, which the driver carries out nowhere else); and
leaves to the loop what is the loop's (``waited_out``: a full
disk degrades it; ``watch_generation``).
Crash points (``reach``) mark the commit and every effect, as OPERATIONS.md lists them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from os import PathLike
from typing import TYPE_CHECKING, Any, Protocol

from .adapters import crashpoints
from .adapters.crashpoints import reach
from .core.effects import (
    NOTICES, AbortAttempt, CancelAttempt, Effect, EvictAttempt, JobEnded, ResumeAttempt,
    SpawnAttempt, SuspendAttempt, TerminateAttempts, WriteGenerationFile, WriteGo, WriteJob,
)
from .core.events import AttemptLaunched, AttemptObserved, Event, RequestSeen, to_record
from .core.metrics import COMMIT_BUCKETS, Histogram
from .core.model import Job
from .core.scheduler import Scheduler
from .core.states import JobState
from .sinks import Commit

if TYPE_CHECKING:  # the simulator's driver has neither: it need not import them
    from .backends.base import ExecutionBackend
    from .backends.memory import MemoryBackend
    from .sinks import Sink
    from .views import Views

EVICT_GRACE_SECONDS = 10.0  # between TERM and KILL when requeue preemption evicts an attempt

ATTEMPT_EFFECTS = (SpawnAttempt, WriteGo, AbortAttempt, TerminateAttempts, SuspendAttempt,
                   ResumeAttempt, EvictAttempt, CancelAttempt)

WaitedOut = Callable[[OSError, "str | PathLike[str]"], bool]
CrashHook = Callable[[str], None]  # called at each crash point by name (OPERATIONS.md)


class Journal(Protocol):
    """What the driver needs of a journal (``adapters.journal.Journal``; the crash/replay
    property test has an in-memory twin): records appended uncommitted, one commit per
    batch, a path to name in a full disk's error."""

    path: Any

    def append(self, record: dict[str, Any]) -> Any: ...

    def commit(self) -> Any: ...


def carry_out(backend: ExecutionBackend, effect: Effect, jobs: dict[str, Job],
              evict_grace: float) -> list[Event]:
    """Hand one of the core's attempt effects to ``backend``; what it returns goes back
    to the core."""
    if isinstance(effect, SpawnAttempt):
        return backend.start(effect)
    if isinstance(effect, TerminateAttempts):
        return backend.terminate(list(effect.attempts))
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
    elif isinstance(effect, (EvictAttempt, CancelAttempt)):
        grace = effect.grace if isinstance(effect, CancelAttempt) else evict_grace
        backend.end(key, grace, jobs[effect.job_id].state is JobState.SUSPENDED)
    else:
        raise TypeError(f"no backend call carries out {type(effect).__name__}")
    return []


class Driver:
    """Feeds one core (``sched``; the loop replaces it when a batch is rolled back) and
    carries out what it decides on ``backend``, ``journal`` and ``views``; without a
    journal nothing is committed, without views file effects are dropped."""

    def __init__(self, sched: Scheduler, backend: ExecutionBackend, *,
                 journal: Journal | None = None, views: Views | None = None,
                 evict_grace: float = EVICT_GRACE_SECONDS,
                 clock: Callable[[], float] = time.time,
                 waited_out: WaitedOut | None = None,
                 watch_generation: Callable[[int], None] | None = None,
                 sinks: Sequence[Sink] = (),
                 crash_hook: CrashHook = reach) -> None:
        self.sched = sched
        self.backend = backend
        self.journal = journal
        self.views = views
        self.evict_grace = evict_grace
        self.clock = clock  # the scheduling pass's time: the wall's, or a virtual host's
        self.waited_out = waited_out  # a full disk's error: the loop degrades, not dies
        self.watch_generation = watch_generation  # before a generation's first file
        self.sinks = sinks  # handed a committed batch once its effects are out
        self.reach = crash_hook  # PRAXIST_CRASH_AT's exit, or a test's simulated kill -9
        self.commits = Histogram(COMMIT_BUCKETS)  # journal commit latency

    def process(self, events: list[Event], launch: bool = False) -> bool:
        """handle -> journal the events that changed state -> one commit -> effects, and
        again with what the effects answered, until nothing is left.

        With ``launch`` (a batch that may fill or free slots: requests, exits) the
        scheduling pass runs inside the first batch, so an acceptance or an exit and the
        launch decision it allows share one commit. Returns False when a commit failed on
        a full disk: that batch never happened (none of its effects ran, the backend
        forgot what it bound) and the loop rebuilds the core from the durable records.
        A full disk met by an effect ends the rounds once that batch's effects are out:
        the views are repaired on recovery, and what the backend answered is seen again."""
        while events:
            effects: list[Effect] = []
            journaled: list[Event] = []
            self._handle(events, effects, journaled)
            if launch:
                self._handle(self.sched.next_launches(self.clock()), effects, journaled)
                launch = False
            self._handle(self.backend.bind(effects), effects, journaled)
            committed = bool(journaled)
            if crashpoints.WANTS_MOMENTS:  # PRAXIST_CRASH_AT waits on a moment of a job's life
                crashpoints.within(moments(journaled, effects, self.sched))
            if committed and self.journal is not None:
                # Encoded only now, with the warm shims told their attempts (``bind``): a
                # shim prepares while its records are encoded and the commit is synced,
                # where encoding them as they were handled came before its tell.
                for event in journaled:
                    self.journal.append(to_record(event))
                self.reach("journal.before_commit")
                try:
                    began = time.monotonic()
                    self.journal.commit()
                    self.commits.observe(time.monotonic() - began)
                except OSError as exc:
                    if not self._waited_out(exc, self.journal.path):
                        raise
                    self.backend.roll_back()
                    crashpoints.within(())
                    return False
                self.reach("journal.after_commit")
            batch, events = events, []
            # The launch path first (signals, spawns, GO): it needs neither of what follows
            degraded = self._carry_out_each(sorted(
                (effect for effect in effects if _launch_path_first(effect) < FILES),
                key=_launch_path_first), events)
            if self.views is not None:  # a simulation writes no job files
                # a queued job's reason is soft (never journaled) and only shapes the
                # files written after GO, so GO does not wait for it: at 1 job from idle
                # working it out (the rest of the pass's walk) took ~0.1 ms before GO
                effects += self.sched.reasons_of_written(effects)
            if self.views is not None or self.sinks:
                # a simulation writes no job files: which write of a job is the last
                # does not matter there (60,000 copies of WriteJob on a Philly replay)
                effects = _last_job_writes(effects)
            degraded |= self._carry_out_each(
                [effect for effect in effects if _launch_path_first(effect) == FILES], events)
            degraded |= not self.settle()
            if committed and self.sinks:
                commit = Commit(batch, effects, self.sched)
                for sink in self.sinks:
                    sink.committed(commit)
            if crashpoints.WANTS_MOMENTS:
                crashpoints.within(())
            if degraded:
                break
        return True

    def settle(self) -> bool:
        """Once the batch's commands are on their way (their GO is journaled and sent): the
        backend's work kept off the launch path (``ExecutionBackend.settle``). False on a
        full disk: kept for the recovery's try."""
        try:
            self.backend.settle()
        except OSError as exc:
            if not self._waited_out(exc, exc.filename or self.views.layout.attempts):
                raise
            return False
        return True

    def _carry_out_each(self, effects: list[Effect], events: list[Event]) -> bool:
        """Carry out ``effects`` in order, between their crash points, adding what the
        backend answered to ``events``; True if a full disk kept a view from being
        written (the batch goes on: views are repaired on recovery)."""
        degraded = False
        for effect in effects:
            if isinstance(effect, NOTICES):  # the sinks', once the batch is out
                continue
            point = f"effect.{_effect_name(effect)}"
            self.reach(f"{point}.before")
            try:
                events += self._carry_out(effect)
            except OSError as exc:  # a view: repaired on recovery; the batch goes on
                if not self._waited_out(exc, exc.filename or self.views.layout.scheduler):
                    raise
                degraded = True
            self.reach(f"{point}.after")
        return degraded

    def _handle(self, events: list[Event], effects: list[Effect],
                journaled: list[Event]) -> None:
        """Hand events to the core and add those that changed its state to ``journaled``
        (``process`` journals them, in that order, once the backend has bound its
        launches)."""
        for event in events:
            before = self.sched.version
            effects += self.sched.handle(event)
            if self.sched.version != before:
                journaled.append(event)

    def _carry_out(self, effect: Effect) -> list[Event]:
        """Attempt effects go to the backend; every other effect is a file: a view."""
        if isinstance(effect, ATTEMPT_EFFECTS):
            return carry_out(self.backend, effect, self.sched.jobs,
                             self.evict_grace)
        if self.views is not None:
            if isinstance(effect, WriteGenerationFile) and self.watch_generation is not None:
                self.watch_generation(effect.generation)
            self.views.execute(effect, self.sched)
        return []

    def _waited_out(self, exc: OSError, path: str | PathLike[str]) -> bool:
        return self.waited_out is not None and self.waited_out(exc, path)


def _last_job_writes(effects: list[Effect]) -> list[Effect]:
    """One job-file write per job and batch, the last (what the file must say), in the
    place of the first: an acceptance and its launch write one file, not three, and it is
    there before the reply that says the job was accepted (a peer reads it next)."""
    first: dict[str, WriteJob] = {}
    last: dict[str, WriteJob] = {}
    for effect in effects:
        if isinstance(effect, WriteJob):
            first.setdefault(effect.job_id, effect)
            last[effect.job_id] = effect
    kept: list[Effect] = []
    for effect in effects:
        if not isinstance(effect, WriteJob):
            kept.append(effect)
        elif effect is first[effect.job_id]:
            final = last[effect.job_id]
            found = effect.replaces if effect.replaces is not None else effect.directory
            replaces = found if found != final.directory else None
            # the usual case, one write of a job in the batch, is kept as it is
            kept.append(final if final.replaces == replaces else replace(final, replaces=replaces))
    return kept


def moments(journaled: list[Event], effects: list[Effect], sched: Scheduler) -> set[str]:
    """What a batch journals, in the words of ``PRAXIST_CRASH_AT=NAME@MOMENT``
    (adapters/crashpoints.py): ``request:<file>`` a request file seen; by the job's tag (its
    id if it has none), ``launched:<tag>`` an attempt launched, ``ended:<tag>`` an attempt's
    end (both also as ``<tag>/<attempt id>``), ``done:<tag>`` the job ended."""
    named: set[str] = set()

    def tag(job: Job) -> str:
        return job.request.tag or job.job_id

    for event in journaled:
        if isinstance(event, RequestSeen):
            named.add(f"request:{event.name}")
        elif isinstance(event, (AttemptLaunched, AttemptObserved)):
            job = sched.jobs.peek(event.job_id)
            attempt = next((a for a in job.attempts if a.attempt_id == event.attempt_id),
                           None) if job is not None else None
            if attempt is None:
                continue
            if isinstance(event, AttemptLaunched):
                what = "launched"
            elif attempt.outcome is not None:
                what = "ended"
            else:
                continue
            named |= {f"{what}:{tag(job)}", f"{what}:{tag(job)}/{event.attempt_id}"}
    for effect in effects:
        if isinstance(effect, JobEnded) and (job := sched.jobs.peek(effect.job_id)):
            named.add(f"done:{tag(job)}")
    return named


FILES = 2  # _launch_path_first's last rank: what is not on the launch path


def _launch_path_first(effect: Effect) -> int:
    """Sort key: shims are told their attempt and GO before the batch's files are written
    (replies, job files: nothing waits on them; ranked FILES), so that commands start
    sooner. Signals to running work stay ahead of launches: a victim's suspension is
    under way before the GO of the job that takes its room, which waits for it
    (``ExecutionBackend.go``). The sort is stable: a spawn still precedes its GO."""
    if isinstance(effect, (SuspendAttempt, ResumeAttempt, EvictAttempt)):
        return 0
    return 1 if isinstance(effect, (SpawnAttempt, WriteGo)) else FILES


def _effect_name(effect: Effect) -> str:
    """WriteJob, WriteReply, ...; generation files add their kind (WriteGenerationFile.lease)."""
    name = type(effect).__name__
    return f"{name}.{effect.kind}" if isinstance(effect, WriteGenerationFile) else name


class VirtualLoop(Driver):
    """The daemon's loop in small around a core on a virtual host, for the simulator and
    tests: the one driver, with nothing to journal and no files; an event goes to the
    core, what it decides to the backend, what the backend reports back to the core,
    until nothing is left."""

    def __init__(self, sched: Scheduler, backend: MemoryBackend) -> None:
        super().__init__(sched, backend, clock=lambda: backend.host.now)

    def handle(self, event: Event) -> None:
        self.process([event])

    def advance(self, now: float) -> list[AttemptObserved]:
        """The clock moves to ``now``: the ends reached by then, each handled in turn."""
        ended = self.backend.on_timer(now)
        for event in ended:
            self.handle(event)
        return ended  # type: ignore[return-value]

    def next_end(self) -> float:
        return self.backend.next_timer()
