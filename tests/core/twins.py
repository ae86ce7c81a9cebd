"""The twins of what the daemon hands its ``Driver``, for the simulation
(tests/core/simulation.py), the replay property test (tests/core/test_replay.py) and the
core tests' ``Harness`` (tests/core/helpers.py):
the journal (``MemoryJournal`` behind ``driver.Journal``), the views (``Files``, onto the
simulated run directory, ``Disk``) and the backend (``Shims``, the memory backend with
what the barrier files and shims show checked; ``Barrier``, the barrier alone, where the
test draws what each shim does; ``Drawn``, the barrier with each signal logged as the
effect the driver carried out), the sinks (``Noticed``: the notices of each commit), and
the core itself (``Watched``: each decision shown to the simulation's checks before it is
applied).

The driver between them is the production one: the crash/replay property test runs the
daemon's batching, commit and effect order, and its crash points."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from praxist_fs.backends.base import AttemptKey
from praxist_fs.backends.memory import MemoryBackend
from praxist_fs.core.effects import (
    NOTICES, AbortAttempt, CancelAttempt, ConsumeDecline, ConsumeRequest, DisposeControl,
    Effect, EvictAttempt, RejectRequest, ResumeAttempt, SpawnAttempt, SuspendAttempt,
    TerminateAttempts, WriteControlReply, WriteGenerationFile, WriteGo, WriteJob, WriteReply,
)
from praxist_fs.core.events import Event
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.sinks import Commit, Sink

if TYPE_CHECKING:
    from .simulation import Simulation


@dataclass
class Disk:
    """What the effects made true: the files a peer or operator reads."""

    jobs: dict[str, dict[str, dict[str, Any]]] = field(
        default_factory=lambda: {"queued": {}, "running": {}, "done": {}})
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    rejected: dict[str, dict[str, Any]] = field(default_factory=dict)
    control_replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    generation: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)
    go: set[tuple[str, str]] = field(default_factory=set)
    abort: set[tuple[str, str]] = field(default_factory=set)


class Watched(Scheduler):
    """The live core, with ``sim`` shown each event before it is handled (the checks at
    the moment of a decision) and each that changed the state (the journal's codec)."""

    sim: Simulation | None = None

    def handle(self, event: Event) -> list[Effect]:
        if self.sim is None:
            return super().handle(event)
        self.sim.decided(event)
        before = self.version
        effects = super().handle(event)
        if self.version != before:
            self.sim.journaled(event)
        return effects


class MemoryJournal:
    """``adapters.journal.Journal``'s twin behind ``driver.Journal``: records through
    JSON, appended uncommitted, then committed to ``records`` in one go. A kill -9 loses
    what was not committed (``reopen``)."""

    path = "journal.log"

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.records = records
        self.pending: list[dict[str, Any]] = []

    def append(self, record: dict[str, Any]) -> None:
        self.pending.append(json.loads(json.dumps(record)))

    def commit(self) -> None:
        self.records += self.pending
        self.pending = []

    def reopen(self) -> None:
        self.pending = []


class Files:
    """``views.Views``' twin for the driver: the core's file effects on the simulation's
    run directory (``Disk``) and its inboxes."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def execute(self, effect: Effect, sched: Scheduler) -> None:
        sim, disk = self.sim, self.sim.disk
        if isinstance(effect, WriteJob):  # only the file a move left behind is removed
            if effect.replaces is not None:
                disk.jobs[effect.replaces].pop(effect.job_id, None)
            disk.jobs[effect.directory][effect.job_id] = sched.written_document(effect)
        elif isinstance(effect, WriteReply):
            disk.replies[effect.request_id] = effect.document
        elif isinstance(effect, ConsumeRequest):
            sim.incoming.pop(effect.name, None)
        elif isinstance(effect, RejectRequest):
            if sim.incoming.pop(effect.name, None) is not None:
                disk.rejected[effect.name] = effect.error
        elif isinstance(effect, WriteControlReply):
            disk.control_replies[effect.request_id] = effect.document
        elif isinstance(effect, DisposeControl):
            sim.control_inbox.pop(effect.name, None)
        elif isinstance(effect, WriteGenerationFile):
            disk.generation[(effect.generation, effect.kind, effect.name)] = effect.document
        elif isinstance(effect, ConsumeDecline):
            sim.declines.get(effect.generation, {}).pop(effect.name, None)
        else:
            raise AssertionError(f"no view writes {effect}")


class Barrier:
    """A backend that starts nothing and keeps each attempt's barrier (GO never twice,
    never after ABORT nor before the attempt's handle is known) on ``disk``: the replay test
    draws what each shim is seen doing. ``sched``: the core as the driver has it now."""

    def __init__(self, disk: Disk, sched: Callable[[], Scheduler]) -> None:
        self.disk, self.sched = disk, sched

    def bind(self, effects: list[Effect]) -> list[Event]:
        return []

    def start(self, launch: SpawnAttempt) -> list[Event]:
        return []

    def go(self, key: AttemptKey) -> None:
        assert key not in self.disk.go, "GO written twice"
        self.write_go(key)

    def write_go(self, key: AttemptKey) -> None:
        assert key not in self.disk.abort, "GO after ABORT"
        attempt = next(a for a in self.sched().jobs[key[0]].attempts if a.attempt_id == key[1])
        # the backend's handle (the local shim's pid, a Slurm job id): the core's to journal
        assert attempt.handle is not None, "GO before the attempt's handle was recorded"
        self.disk.go.add(key)

    def abort(self, key: AttemptKey) -> None:
        assert key not in self.disk.go, "abort after GO"
        self.disk.abort.add(key)

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        pass  # a cancel: the test draws the attempt's end

    def settle(self) -> None:
        pass

    def roll_back(self) -> None:
        pass


class Drawn(Barrier):
    """The barrier twin for the core tests' ``Harness``: it starts nothing (the test draws
    each shim's sightings) and logs each call the driver made as the effect it carried
    out, into ``carried`` (the views' ``Logged`` logs the file effects into the same list,
    in the driver's order). It checks the barrier as ``Barrier`` does, but for a GO
    written again, which a core asks for when a shim shows READY and no GO (the file may
    be lost in a crash); and that a GO goes out only once its batch is committed to
    ``journal``. The driver's crash hook (``reached``) names the effect being carried out:
    it tells an eviction's ``end`` from a cancel's."""

    def __init__(self, disk: Disk, sched: Callable[[], Scheduler], carried: list[Effect],
                 journal: MemoryJournal) -> None:
        super().__init__(disk, sched)
        self.carried = carried
        self.journal = journal
        self.point = ""

    def reached(self, point: str) -> None:
        self.point = point

    def start(self, launch: SpawnAttempt) -> list[Event]:
        self.carried.append(launch)
        return []

    def go(self, key: AttemptKey) -> None:
        assert not self.journal.pending, "GO before its batch was committed"
        self.write_go(key)
        self.carried.append(WriteGo(job_id=key[0], attempt_id=key[1]))

    def abort(self, key: AttemptKey) -> None:
        super().abort(key)
        self.carried.append(AbortAttempt(job_id=key[0], attempt_id=key[1]))

    def suspend(self, key: AttemptKey, by: str) -> None:
        self.carried.append(SuspendAttempt(job_id=key[0], attempt_id=key[1]))

    def resume(self, key: AttemptKey) -> None:
        self.carried.append(ResumeAttempt(job_id=key[0], attempt_id=key[1]))

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        if self.point == "effect.EvictAttempt.before":
            self.carried.append(EvictAttempt(job_id=key[0], attempt_id=key[1]))
        else:
            self.carried.append(CancelAttempt(job_id=key[0], attempt_id=key[1], grace=grace))

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        self.carried.append(TerminateAttempts(attempts=tuple(keys)))
        return []


class Logged(Files):
    """``Files``, logging each file effect it carries out into ``carried``."""

    def __init__(self, sim: Any, carried: list[Effect]) -> None:
        super().__init__(sim)
        self.carried = carried

    def execute(self, effect: Effect, sched: Scheduler) -> None:
        self.carried.append(effect)
        super().execute(effect, sched)


class Noticed(Sink):
    """A sink that logs each committed batch's notices (which the driver hands the sinks
    and carries out nowhere else) into ``carried``, after the batch's effects."""

    def __init__(self, carried: list[Effect]) -> None:
        self.carried = carried

    def committed(self, commit: Commit) -> None:
        self.carried += [e for e in commit.effects if isinstance(e, NOTICES)]


class Shims:
    """A coordinator's backend as the driver sees it: the memory backend on the
    simulation's host (every signal at once, no grace), with what the barrier files and
    the shims would show checked (GO never after ABORT nor in a stopped run, one command
    per job at a time, a spawn once) and how a command answers TERM drawn. An evicted
    shim's end is seen at once (``sightings``: its pipe's EOF) or, as EOF may wait, by a
    later look. Everything else is the memory backend's."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.inner = MemoryBackend(sim.plan, sim.host, grace_s=0.0)
        self.sightings: list[AttemptKey] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def start(self, launch: SpawnAttempt) -> list[Event]:
        sim, key = self.sim, (launch.job_id, launch.attempt_id)
        assert key not in sim.host.attempts, f"{key} spawned twice"
        job = sim.sched.jobs[launch.job_id]
        attempt = job.attempts[-1]
        assert attempt.attempt_id == launch.attempt_id and launch.gpus == attempt.gpus
        assert launch.metadata["gpus"] == list(attempt.gpus)
        assert launch.profile == job.profile and launch.argv == job.request.argv
        events = self.inner.start(launch)
        if key not in sim.host.attempts:
            sim.spawn_failed.add(key)
            sim.stats["spawn_failed"] += 1
        return events

    def go(self, key: AttemptKey) -> None:
        sim, disk = self.sim, self.sim.disk
        assert key not in disk.abort, f"GO after ABORT for {key}"
        assert not sim.sched.stopped, f"GO for {key} after the run was stopped"
        job = sim.sched.jobs[key[0]]
        assert job.current.attempt_id == key[1] and job.current.pid is not None, \
            f"GO for {key}, which is not a current attempt with a known shim"
        shim = sim.host.attempts.get(key)
        if shim is None:  # no attempt directory: GO has nowhere to go
            return
        disk.go.add(key)
        waiting = shim.alive and shim.ready and not shim.running
        self.inner.go(key)
        if waiting:
            assert shim.running and key not in sim.started
            sim.started.add(key)
            running = [k for k in sim.started if k[0] == key[0]
                       and sim.host.attempts[k].alive and sim.host.attempts[k].running]
            assert running == [key], f"two commands of {key[0]} run at once"

    def abort(self, key: AttemptKey) -> None:
        assert key not in self.sim.disk.go, f"ABORT after GO for {key}"
        self.sim.disk.abort.add(key)
        self.inner.abort(key)

    def suspend(self, key: AttemptKey, by: str) -> None:
        self._signal(key, lambda: self.inner.suspend(key, by))

    def resume(self, key: AttemptKey) -> None:
        self._signal(key, lambda: self.inner.resume(key))

    def _signal(self, key: AttemptKey, send: Callable[[], None]) -> None:
        shim = self.sim.host.attempts.get(key)
        if shim is not None and shim.alive:  # idempotent: a start asserts it again
            send()
            self.sim.stats["suspend" if shim.stopped else "resume"] += 1

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """An eviction: TERM the group (ABORT at the barrier), KILL it after the grace. A
        running command dies of TERM, needs KILL or finishes cleanly in it, as drawn."""
        sim = self.sim
        sim.disk.abort.add(key)
        shim = sim.host.attempts.get(key)
        if shim is not None and shim.alive:
            sim.stats["evicted"] += 1
            if shim.running:
                shim.run = replace(shim.run, term_exit=sim.rng.choice(
                    [(143, 15), (137, 9), (0, None)]))
        self.inner.end(key, grace, suspended)
        if sim.rng.random() < 0.7:
            self.sightings.append(key)

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """daemon._terminate: ABORT every barrier, TERM then KILL every known shim's group
        (blocking until they are gone), then look at every one. A running command dies
        of TERM or needs KILL, as drawn."""
        sim = self.sim
        sim.stats["terminated"] += len(keys)
        for key in keys:
            sim.disk.abort.add(key)
            shim = sim.host.attempts.get(key)
            if shim is not None and shim.alive and shim.running:
                shim.run = replace(shim.run, term_exit=sim.rng.choice([(143, 15), (137, 9)]))
        order = {key: sim.sched.jobs[key[0]].order for key in keys}
        return sorted(self.inner.terminate(keys),
                      key=lambda e: order[(e.job_id, e.attempt_id)])


