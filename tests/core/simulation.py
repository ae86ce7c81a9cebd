"""Deterministic simulation of the pure core: one seed, one exact history.

``Simulation(seed)`` plays the daemon's role around a live ``Scheduler`` with
nothing but ``random.Random(seed)``: a fake clock; a fake GPU inventory (2-4
devices, sometimes one in MIG mode, whose external load drifts; processes
attributed to running jobs or not, hidden processes, failed NVML samples;
other runs' envelopes and lease claims); PSI pressure and an ``auto`` capacity;
peers that submit (profiles with known and unknown GPU demand, gpu_count 1-2,
work classes, ETAs, retry_terminal, explicit request ids and generations),
retransmit, clash, send garbage, carry leases from their lease files, decline,
register idle and publish results; an operator who opens (with a cohort and a
deadline), assesses and closes generations and sometimes stops the run (a
run_stop control file, or ``praxist-fs stop`` fencing a dead coordinator);
shims that go spawn -> READY -> GO -> exit 0/3/75/137, fail to spawn, or die
before READY, at the barrier or after GO without an exit record (on the memory
backend's virtual host, which carries out the core's attempt effects as the
coordinator's backends do; the simulation draws what each shim does); minutes that
pass (lease expiry, deadlines); and kill -9: before a commit, between effects,
between steps or while starting, after which a fresh ``Scheduler()`` replays
the journal, a new ``CoordinatorStarted`` is journaled, derived files are
repaired and running attempts re-adopted, in ``daemon._start``'s order.

The journal holds ``to_record(event)`` (through JSON) of every event that
bumped ``Scheduler.version``. A shadow scheduler is fed each committed record
as it is committed, so it *is* ``replay(journal)`` at every step for the cost
of one event per record: every step compares its snapshot with the live one,
and every restart and the end of a run also replay the whole journal from
scratch. Invariants: ``Simulation.check`` after every step, and
``Simulation.check_launch`` / ``check_grant`` at each decision, recomputed
from the sample the scheduler decided with (R-GPU-2's hard limits, exclusive
devices, MIG, pressure, the concurrency target, assessment, stop).

A failure message names the seed and the step; ``run_seed(seed, steps)``
reproduces it exactly. Bugs found and still open are listed in KNOWN_BUGS:
the property runs tolerate exactly those, and strict xfail tests show each.
tests/soak.py runs the same simulation over many seeds for longer.

This module is the simulation alone (a support module, no tests):
tests/core/test_simulation.py runs it over its seeds; test_budget.py, test_pickers.py
and test_snapshot.py drive it or replay what it journals.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from praxist_fs.backends.memory import MemoryBackend, Run, VirtualHost
from praxist_fs.core.effects import (
    AbortAttempt, ConsumeDecline, ConsumeRequest, DisposeControl, Effect, EvictAttempt,
    RejectRequest, ResumeAttempt, SpawnAttempt, SuspendAttempt, TerminateAttempts,
    WriteControlReply, WriteGenerationFile, WriteGo, WriteJob, WriteReply,
)
from praxist_fs.core.events import (
    AttemptLaunched, AttemptObserved, AttemptPreempted, AttemptResumed, ClaimsReleased,
    ClaimsSeen, ControlSeen,
    CoordinatorStarted, DeclineSeen, Event, HostSampled, IdleSeen, LeaseGranted, RequestSeen,
    ResultSeen, RunStopRequested, from_record, to_record,
)
from praxist_fs.core.model import AttemptPhase
from praxist_fs.core.observations import (
    Envelope, GpuDevice, GpuProcess, GpuSample, HostCapacity, PressureSample,
)
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.preemption import MAX_PREEMPTIONS_FOR_ONE, times_preempted
from praxist_fs.core.queues import Queue, default_queues, queue_of_class
from praxist_fs.core.request import parse_control, parse_request, request_id_from_filename
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.core.status import render_status
from praxist_fs.core.supply import LEASE_OUTCOMES, PRIORITIES
from praxist_fs.errors import BadRequest

BOOT = "boot-sim"
MIB = 1024.0
PEERS = ("p1", "p2", "p3", "p4")
TAGS = tuple(f"t{i}" for i in range(10))
ARGVS = (["python", "a.py"], ["python", "b.py"])
PROFILES = {
    "cpu": Profile(name="cpu", accelerator="cpu", pressure_domains=("cpu",)),
    "cpu_io": Profile(name="cpu_io", accelerator="cpu", pressure_domains=("io", "memory")),
    "cpu_free": Profile(name="cpu_free", accelerator="cpu"),
    "gpu_small": Profile(name="gpu_small", accelerator="gpu", gpu_count=1, gpu_memory_gb=6.0,
                         gpu_utilization_pct=25.0),
    "gpu_big": Profile(name="gpu_big", accelerator="gpu", gpu_count=1, gpu_memory_gb=30.0,
                       gpu_utilization_pct=60.0, pressure_domains=("memory",)),
    "gpu_pair": Profile(name="gpu_pair", accelerator="gpu", gpu_count=2, gpu_memory_gb=10.0,
                        gpu_utilization_pct=40.0),
    "gpu_excl": Profile(name="gpu_excl", accelerator="gpu", gpu_count=1,
                        gpu_utilization_pct=50.0),            # memory unknown: exclusive
    "gpu_excl_pair": Profile(name="gpu_excl_pair", accelerator="gpu", gpu_count=2),
}
PROFILE_CHOICES = (None, None, *PROFILES, "cpu", "gpu_small", "nope")
EXIT_CODES = ((0, None), (0, None), (3, None), (75, None), (75, None), (137, 9))
# R-SIM-1: far more passes than a loop at one instant needs (the CI seeds need at most
# 12), far fewer than a livelock would run
PASSES_AT_ONE_INSTANT = 100


# Bugs this simulation found that are still open. The property tests run with them
# tolerated (the comparison leaves out exactly what each one spoils, nothing more); the
# strict xfail tests at the bottom run one seed each with nothing tolerated, so they start
# to pass, and fail as XPASS, the moment a bug is fixed: then delete its entry here.
KNOWN_BUGS: dict[str, str] = {}  # both bugs it found last were fixed; see the tests below


class Crash(Exception):
    """kill -9 of the simulated coordinator."""


class SimulationFailure(AssertionError):
    """A broken invariant (or any exception) at ``step`` of ``seed``."""

    def __init__(self, seed: int, step: int, message: str) -> None:
        super().__init__(message)
        self.seed, self.step = seed, step

    def __str__(self) -> str:
        return self.args[0]


def replay(records: list[dict[str, Any]]) -> Scheduler:
    fresh = Scheduler()
    for record in records:
        fresh.handle(from_record(json.loads(json.dumps(record))))
    return fresh


def random_policy(rng: random.Random) -> Policy:
    initial = rng.randint(1, 4)
    maximum: int | str = rng.randint(initial, 6) if rng.random() < 0.8 else "auto"
    return Policy(
        initial_concurrent_experiments=initial,
        min_concurrent_experiments=rng.randint(1, initial),
        max_concurrent_experiments=maximum,
        supply_signal_enabled=rng.random() < 0.9,
        supply_idle_samples=rng.randint(1, 3),
        supply_lease_seconds=rng.randint(180, 900),   # config clamps to [180, 3600]
        mature_supply_fraction=rng.choice([0.0, 0.25, 0.5]),
        mature_supply_redundancy=rng.choice([0.0, 1.0, 3.0]),
        mature_assessment_min_completion_probability=rng.choice([0.0, 0.25, 0.9]),
        exploration_reserve=rng.randint(0, 1),
        infrastructure_retries=rng.randint(0, 2),
        default_profile=rng.choice(sorted(PROFILES)),
        profiles=dict(PROFILES),
        mature_quorum_fraction=rng.choice([0.0, 0.0, 0.5, 1.0]),
        calm_samples=rng.randint(1, 3),
    )


JOB_PICKERS = ("fcfs", "fair_share", "backfill")
QUEUE_HOLDS = ("queue ", "queues.", "backfill")  # reasons a queue's own rules give
BACKOFF = "launch barrier released"  # a job whose barrier keeps failing waits (R-SUB-4)


def queued_policy(policy: Policy, rng: random.Random) -> Policy:
    """``policy`` with a queues block (R-POL-1) drawn from ``rng``: the work classes as
    queues or mature + one exploration queue, random priorities, pickers, limits and
    reserves, and a random global job picker."""
    def picker() -> str | None:
        return rng.choice([None, *JOB_PICKERS])

    def limit() -> int | None:
        return rng.choice([None, None, 1, 2])

    if rng.random() < 0.5:
        explore = (Queue(name="scout", priority=rng.randint(0, 1), picker=picker(),
                         work_classes=("scout",), max_running=limit()),
                   Queue(name="ordinary", priority=rng.randint(0, 1), picker=picker(),
                         work_classes=("ordinary",), max_running=limit()))
    else:
        explore = (Queue(name="explore", priority=rng.randint(0, 1), picker=picker(),
                         work_classes=("scout", "ordinary"), max_running=limit()),)
    mature = Queue(name="mature", priority=rng.randint(0, 2), picker=picker(),
                   work_classes=("mature",), max_running=limit(),
                   leave_slots=rng.randint(0, 1),
                   leave_slots_for=tuple(q.name for q in explore),
                   preemptible_queues=(explore[0].name,), preempt=rng.choice(["suspend",
                                                                               "requeue"]))
    return replace(policy, queues=(mature, *explore), job_picker=rng.choice(JOB_PICKERS),
                   fair_share_half_life_seconds=rng.choice([60.0, 3600.0]))


def preempting_policy(policy: Policy, rng: random.Random) -> Policy:
    """``policy`` with mature work in a queue above the rest that preempts it (R-POL-3),
    by suspension or by requeue, each queue with a random picker."""
    return replace(policy, queues=(
        Queue(name="urgent", priority=1, work_classes=("mature",),
              picker=rng.choice([None, *JOB_PICKERS]), preemptible_queues=("explore",),
              preempt=rng.choice(["suspend", "requeue"])),
        Queue(name="explore", work_classes=("scout", "ordinary"),
              picker=rng.choice([None, *JOB_PICKERS]))))


@dataclass
class FakeGpu:
    uuid: str
    index: int
    total: float
    mig: bool = False
    ext_util: float = 0.0
    ext_mem: float = 0.0


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


class Simulation:
    def __init__(self, seed: int, *, check_every: int = 1,
                 tolerate: frozenset[str] | set[str] = frozenset(KNOWN_BUGS),
                 queues: str | None = None, admission_timeout: bool = False) -> None:
        """``queues``: None for no queues block; "default" for one that spells out the
        default queues; "random" for one drawn (from its own generator, so that the rest
        of the run draws as without it); "preempt" for ``preempting_policy``, likewise.
        ``admission_timeout``: a task-wide one (R-SUB-4), drawn likewise."""
        self.seed = seed
        self.tolerate = frozenset(tolerate)
        self.rng = random.Random(seed)
        self.check_every = check_every
        self.policy = random_policy(self.rng)
        if queues == "default":
            self.policy = replace(self.policy,
                                  queues=default_queues(self.policy.exploration_reserve))
        elif queues == "random":
            self.policy = queued_policy(self.policy, random.Random(f"queues-{seed}"))
        elif queues == "preempt":
            self.policy = preempting_policy(self.policy, random.Random(f"queues-{seed}"))
        if admission_timeout:
            self.policy = replace(self.policy, admission_timeout_seconds=random.Random(
                f"timeout-{seed}").choice([10.0, 60.0, 300.0]))
        self.uses_gpu = any(p.uses_gpu for p in self.policy.profiles.values())
        # the host: its shims live in the memory backend's virtual host, and its clock is
        # the simulation's; a coordinator's backend ends and a fresh one adopts at a restart
        self.host = VirtualHost(boot_id=BOOT)
        self.host.pids = 5000
        self.backend = self.new_backend()
        self.now = 1_700_000_000.0 + self.rng.randint(0, 10_000)
        self.step_no = 0
        self.trace: list[str] = []
        self.stats: Counter[str] = Counter()
        # the journal, committed records only, and its incremental replay
        self.journal: list[dict[str, Any]] = []
        self.shadow = Scheduler()
        self.sched = Scheduler()
        self.crash_in: int | None = None   # crash at the n-th crash opportunity from now
        self.clean_crash = False
        self.coordinator_pid = 100
        # the host
        self.devices = [FakeGpu(uuid=f"GPU-{self.seed}-{i}", index=i,
                                total=self.rng.choice([24576.0, 40960.0, 81920.0]))
                        for i in range(self.rng.randint(2, 4))]
        if self.rng.random() < 0.2:
            self.devices[-1].mig = True
        self.others: tuple[Envelope, ...] = ()
        self.other_serial = 0
        self.levels = {"cpu": 0.0, "memory": 0.0, "io": 0.0}
        self.capacity_limit = self.rng.randint(1, 6)
        self.started: set[tuple[str, str]] = set()      # commands that began (after GO)
        self.spawn_failed: set[tuple[str, str]] = set()
        # what the live scheduler was last shown (soft; lost at a crash)
        self.view_gpus: GpuSample | None = None
        self.view_others: tuple[Envelope, ...] = ()
        self.view_pressure: PressureSample | None = None
        self.results_seen: dict[int, set[str]] = {}
        # the run directory
        self.disk = Disk()
        self.incoming: dict[str, bytes] = {}
        self.sent: list[tuple[str, bytes]] = []
        self.control_inbox: dict[str, bytes] = {}
        self.control_sent: list[tuple[str, bytes]] = []
        self.results: dict[int, dict[str, tuple[str, bool]]] = {}
        self.idle: dict[int, set[str]] = {}
        self.declines: dict[int, dict[str, bytes]] = {}
        self.serial = 0
        self.next_generation = 1
        self.stop_sentinel = False  # resource_scheduler/STOP, written by praxist-fs stop
        self.start_coordinator()

    @property
    def now(self) -> float:
        return self.host.now

    @now.setter
    def now(self, at: float) -> None:
        self.host.now = at

    def new_backend(self) -> MemoryBackend:
        """A coordinator's backend on the host. Every signal is carried out at once (no
        grace), and what the shims do is the simulation's to draw (``act_shim``)."""
        return MemoryBackend(self.plan, self.host, grace_s=0.0)

    def plan(self, launch: SpawnAttempt) -> Run:
        """A shim that does nothing until ``act_shim`` moves it on, or fails to start."""
        if self.rng.random() < 0.02:
            return Run(0.0, start_error="could not start the shim: [Errno 12]")
        return Run(math.inf, ready=False)

    # -- the daemon's plumbing -------------------------------------------------

    def opportunity(self) -> None:
        """A point where the coordinator may be killed (before a commit, before an effect)."""
        if self.crash_in is not None:
            self.crash_in -= 1
            if self.crash_in <= 0:
                self.crash_in = None
                raise Crash

    def process(self, events: list[Event]) -> None:
        """Driver.process: handle a batch, journal what changed state, commit, then effects."""
        while events:
            effects: list[Effect] = []
            pending: list[dict[str, Any]] = []
            for event in events:
                if isinstance(event, AttemptLaunched):
                    self.check_launch(event)
                elif isinstance(event, (AttemptPreempted, AttemptResumed)):
                    self.check_preemption(event)
                elif isinstance(event, LeaseGranted):
                    self.check_grant(event)
                before = self.sched.version
                effects += self.sched.handle(event)
                if self.sched.version != before:
                    record = json.loads(json.dumps(to_record(event)))
                    assert from_record(record) == event, f"journal codec loses {event}"
                    pending.append(record)
                    self.stats[record["type"]] += 1
            if pending:
                self.opportunity()  # journal.before_commit: the batch is lost
                for record in pending:
                    self.journal.append(record)
                    self.shadow.handle(from_record(json.loads(json.dumps(record))))
            events = []
            for effect in effects:
                self.opportunity()  # effect.X.before / after the previous one
                events += self.execute(effect)

    def execute(self, effect: Effect) -> list[Event]:
        disk = self.disk
        if isinstance(effect, WriteJob):  # only the file a move left behind is removed
            if effect.replaces is not None:
                disk.jobs[effect.replaces].pop(effect.job_id, None)
            disk.jobs[effect.directory][effect.job_id] = effect.document
        elif isinstance(effect, WriteReply):
            disk.replies[effect.request_id] = effect.document
        elif isinstance(effect, ConsumeRequest):
            self.incoming.pop(effect.name, None)
        elif isinstance(effect, RejectRequest):
            if self.incoming.pop(effect.name, None) is not None:
                disk.rejected[effect.name] = effect.error
        elif isinstance(effect, SpawnAttempt):
            return self.spawn(effect)
        elif isinstance(effect, WriteGo):
            key = (effect.job_id, effect.attempt_id)
            assert key not in disk.abort, f"GO after ABORT for {key}"
            assert not self.sched.stopped, f"GO for {key} after the run was stopped"
            job = self.sched.jobs[effect.job_id]
            assert job.current.attempt_id == effect.attempt_id and job.current.pid is not None, \
                f"GO for {key}, which is not a current attempt with a known shim"
            shim = self.host.attempts.get(key)
            if shim is not None:  # the attempt directory exists
                disk.go.add(key)
                waiting = shim.alive and shim.ready and not shim.running
                self.backend.go(key)
                if waiting:
                    assert shim.running and key not in self.started
                    self.started.add(key)
                    job_started = [k for k in self.started if k[0] == key[0]
                                   and self.host.attempts[k].alive
                                   and self.host.attempts[k].running]
                    assert job_started == [key], f"two commands of {key[0]} run at once"
        elif isinstance(effect, AbortAttempt):
            key = (effect.job_id, effect.attempt_id)
            assert key not in disk.go, f"ABORT after GO for {key}"
            disk.abort.add(key)
            self.backend.abort(key)
        elif isinstance(effect, TerminateAttempts):
            return self.terminate(effect.attempts)
        elif isinstance(effect, (SuspendAttempt, ResumeAttempt)):
            key = (effect.job_id, effect.attempt_id)
            shim = self.host.attempts.get(key)
            if shim is not None and shim.alive:  # idempotent: a start asserts it again
                if isinstance(effect, SuspendAttempt):
                    preemptions = self.sched.jobs[effect.job_id].current.preemptions
                    self.backend.suspend(key, preemptions[-1]["by"])
                else:
                    self.backend.resume(key)
                self.stats["suspend" if shim.stopped else "resume"] += 1
        elif isinstance(effect, EvictAttempt):
            return self.evict(effect)
        elif isinstance(effect, WriteControlReply):
            disk.control_replies[effect.request_id] = effect.document
        elif isinstance(effect, DisposeControl):
            self.control_inbox.pop(effect.name, None)
        elif isinstance(effect, WriteGenerationFile):
            disk.generation[(effect.generation, effect.kind, effect.name)] = effect.document
        elif isinstance(effect, ConsumeDecline):
            self.declines.get(effect.generation, {}).pop(effect.name, None)
        else:
            raise AssertionError(f"no adapter for {effect}")
        return []

    def spawn(self, effect: SpawnAttempt) -> list[Event]:
        key = (effect.job_id, effect.attempt_id)
        assert key not in self.host.attempts, f"{key} spawned twice"
        job = self.sched.jobs[effect.job_id]
        attempt = job.attempts[-1]
        assert attempt.attempt_id == effect.attempt_id and effect.gpus == attempt.gpus
        assert effect.metadata["gpus"] == list(attempt.gpus)
        assert effect.profile == job.profile and effect.argv == job.request.argv
        events = self.backend.start(effect, dict(effect.env))
        if key not in self.host.attempts:
            self.spawn_failed.add(key)
            self.stats["spawn_failed"] += 1
        return events

    def terminate(self, attempts: tuple[tuple[str, str], ...]) -> list[Event]:
        """daemon._terminate: ABORT every barrier, TERM then KILL every known shim's group
        (blocking until they are gone), then look at every running job. A running command
        dies of TERM or needs KILL, as drawn."""
        self.stats["terminated"] += len(attempts)
        for key in attempts:
            self.disk.abort.add(key)
            shim = self.host.attempts.get(key)
            if shim is not None and shim.alive and shim.running:
                shim.run = replace(shim.run, term_exit=self.rng.choice([(143, 15), (137, 9)]))
        order = {key: self.sched.jobs[key[0]].order for key in attempts}
        return sorted(self.backend.terminate(list(attempts)),
                      key=lambda e: order[(e.job_id, e.attempt_id)])

    def evict(self, effect: EvictAttempt) -> list[Event]:
        """daemon: TERM the group (ABORT at the barrier), KILL it after a grace; the shim's
        end is seen at once or, as the pipe's EOF may wait, by a later look. A running
        command dies of TERM, needs KILL or finishes cleanly in the grace, as drawn."""
        key = (effect.job_id, effect.attempt_id)
        self.disk.abort.add(key)
        shim = self.host.attempts.get(key)
        if shim is not None and shim.alive:
            self.stats["evicted"] += 1
            if shim.running:
                shim.run = replace(shim.run, term_exit=self.rng.choice(
                    [(143, 15), (137, 9), (0, None)]))
        self.backend.end(key, 0.0, False)
        return [self.observation(*key)] if self.rng.random() < 0.7 else []

    def observation(self, job_id: str, attempt_id: str) -> AttemptObserved:
        """daemon._observe: what the attempt directory and /proc say."""
        job = self.sched.jobs[job_id]
        return self.backend.observe(job, next(a for a in job.attempts
                                              if a.attempt_id == attempt_id))

    def observe_key(self, key: tuple[str, str]) -> None:
        """daemon._observe_key: only the job's current attempt is looked at."""
        job = self.sched.jobs.get(key[0])
        if job is None or job.current is None or job.current.attempt_id != key[1]:
            return
        self.process([self.observation(*key)])

    # -- the host --------------------------------------------------------------

    def drift(self) -> None:
        rng = self.rng
        for device in self.devices:
            if rng.random() < 0.3:
                kind = rng.choice(["idle", "idle", "light", "heavy"])
                if kind == "idle":
                    device.ext_util, device.ext_mem = 0.0, 0.0
                elif kind == "light":
                    device.ext_util = round(rng.uniform(0, 20), 2)
                    device.ext_mem = round(rng.uniform(0, 0.1) * device.total, 1)
                else:
                    device.ext_util = round(rng.uniform(40, 100), 2)
                    device.ext_mem = round(rng.uniform(0.3, 0.9) * device.total, 1)
        if rng.random() < 0.2:
            self.others = self.draw_others()
        thresholds = self.policy.pressure_thresholds
        for domain, threshold in thresholds.items():
            if rng.random() < 0.3:
                kind = rng.choices(["calm", "mid", "hot", None], [0.6, 0.22, 0.15, 0.03])[0]
                self.levels[domain] = {
                    "calm": lambda: round(rng.uniform(0, threshold.low * 0.9), 2),
                    "mid": lambda: round(rng.uniform(threshold.low, threshold.high), 2),
                    "hot": lambda: round(rng.uniform(threshold.high + 0.5, 100), 2),
                    None: lambda: None}[kind]()
        if rng.random() < 0.1:
            self.capacity_limit = rng.randint(1, 6)

    def draw_others(self) -> tuple[Envelope, ...]:
        """Other runs' envelopes from the host registry, real ones and lease claims."""
        others = []
        for _ in range(self.rng.choice([0, 0, 1, 2])):
            device = self.rng.choice(self.devices)
            self.other_serial += 1
            others.append(Envelope(
                uuid=device.uuid, utilization_pct=round(self.rng.uniform(5, 50), 1),
                memory_mib=round(self.rng.uniform(512, 0.3 * device.total)),
                exclusive=self.rng.random() < 0.15, owner=f"other-{self.other_serial}",
                speculative=self.rng.random() < 0.3))
        return tuple(others)

    def gpu_sample(self) -> GpuSample:
        rng = self.rng
        if rng.random() < 0.04:
            return GpuSample(source="fake", error="NVML Shared Library Not Found")
        visible = rng.random() > 0.1
        devices = []
        for device in self.devices:
            processes = []
            for shim in self.host.attempts.values():
                if not (shim.alive and shim.running) or device.uuid not in shim.launch.gpus:
                    continue
                profile = self.policy.profiles[shim.launch.profile]
                if profile.demand_known:
                    mem = profile.gpu_memory_gb * MIB * rng.uniform(0.3, 1.3)
                    util = profile.gpu_utilization_pct * rng.uniform(0.2, 1.2)
                else:
                    mem, util = rng.uniform(500, 0.5 * device.total), rng.uniform(0, 100)
                if shim.stopped:
                    util = 0.0
                processes.append(GpuProcess(
                    pid=shim.pid * 10, used_memory_mib=round(mem, 1), sm_util_pct=round(util, 1),
                    owner=shim.launch.job_id if rng.random() < 0.85 else None,
                    in_namespace=True))
            for envelope in self.others:
                if envelope.uuid == device.uuid and not envelope.speculative:
                    processes.append(GpuProcess(
                        pid=90000 + int(envelope.owner.split("-")[1]),
                        used_memory_mib=round(envelope.memory_mib * rng.uniform(0.5, 1.1), 1),
                        sm_util_pct=round(envelope.utilization_pct * rng.uniform(0.3, 1.1), 1),
                        owner=envelope.owner, in_namespace=True))
            util = min(100.0, device.ext_util + sum(p.sm_util_pct for p in processes))
            mem = min(device.total, device.ext_mem + sum(p.used_memory_mib for p in processes))
            devices.append(GpuDevice(
                uuid=device.uuid, index=device.index, name="Fake H100",
                memory_total_mib=device.total, memory_used_mib=round(mem, 1),
                utilization_pct=round(util, 2), processes=tuple(processes) if visible else (),
                mig_mode=device.mig, processes_visible=visible))
        return GpuSample(source="fake", devices=tuple(devices))

    def sample(self) -> None:
        """daemon._sample: one HostSampled with pressure, GPUs, capacity and other runs."""
        pressure = PressureSample(source="psi", **self.levels)
        gpus = self.gpu_sample()
        capacity = None
        if self.policy.max_concurrent_experiments == "auto":
            capacity = HostCapacity(limit=self.capacity_limit,
                                    bound=f"memory-bound at {self.capacity_limit}")
        self.view_gpus, self.view_others, self.view_pressure = gpus, self.others, pressure
        self.process([HostSampled(at=self.now, pressure=pressure, gpus=gpus, capacity=capacity,
                                  others=self.others)])

    # -- the daemon loop -----------------------------------------------------

    def loop(self) -> None:
        """The top of daemon._loop: launch passes, due decisions, grants. The passes end:
        a core that went on deciding without the clock moving would be a livelock."""
        for _ in range(PASSES_AT_ONE_INSTANT):
            if self.uses_gpu and self.sched.count(JobState.QUEUED):
                if self.rng.random() < 0.15:
                    self.others = self.draw_others()
                if self.view_gpus is not None:  # ClaimsSeen changes nothing before a sample
                    self.view_others = self.others
                self.sched.handle(ClaimsSeen(at=self.now, others=self.others))
            launches = self.sched.next_launches(self.now)
            self.process(list(launches))
            for effect in self.sched.reason_updates():
                self.opportunity()
                self.execute(effect)
            if not launches:
                break
        else:
            raise AssertionError(f"livelock: {PASSES_AT_ONE_INSTANT} passes at one instant "
                                 "and the core still decides")
        self.process(self.sched.due(self.now))
        self.process(list(self.sched.next_grants(self.now)))

    def start_coordinator(self) -> None:
        """daemon._start after the replay: journal the start, sample, repair, adopt, scan."""
        self.coordinator_pid += 1
        self.process([CoordinatorStarted(at=self.now, policy=self.policy.to_dict(),
                                         pid=self.coordinator_pid, host="sim", boot_id=BOOT)])
        self.sample()
        for job in self.sched.jobs.values():  # the repair removes copies in other directories
            for directory, folder in self.disk.jobs.items():
                if directory != job.state.directory:
                    folder.pop(job.job_id, None)
        for effect in self.sched.derived_views():
            self.opportunity()
            self.execute(effect)
        if self.stop_sentinel and not self.sched.stopped:
            self.process([RunStopRequested(at=self.now, reason="stopped by praxist-fs stop")])
        for job in sorted(self.sched.in_flight(), key=lambda j: j.order):
            self.process(self.backend.adopt(job, job.current))
        self.scan_incoming()
        self.scan_control()
        self.scan_generations()

    def restart(self) -> None:
        """kill -9 happened: a fresh Scheduler() replays the journal and takes over."""
        self.stats["restarts"] += 1
        fresh = replay(self.journal)
        assert fresh.snapshot() == self.shadow.snapshot(), "replay is not deterministic"
        if self.clean_crash:  # nothing was handled and left uncommitted
            self.snapshot_check(fresh.snapshot(), self.sched.snapshot(), "at the crash")
        self.clean_crash = False
        assert fresh.version == self.shadow.version
        self.sched = fresh
        self.backend.close()
        self.backend = self.new_backend()
        self.view_gpus, self.view_others, self.view_pressure = None, (), None
        self.results_seen = {}
        if self.rng.random() < 0.15:
            self.crash_in = self.rng.randint(1, 12)  # crash again while starting
        self.start_coordinator()

    # -- scans: the spool, control/ and the generations' inboxes ---------------

    def scan_incoming(self) -> None:
        events = []
        for name in sorted(self.incoming):
            data = self.incoming[name]
            digest = hashlib.sha256(data).hexdigest()
            try:
                request = parse_request(name, data)
            except BadRequest as exc:
                events.append(RequestSeen(at=self.now, name=name, digest=digest,
                                          request_id=request_id_from_filename(name),
                                          error_field=exc.field, error_problem=exc.problem))
            else:
                events.append(RequestSeen(at=self.now, name=name, digest=digest,
                                          request_id=request.request_id, request=request))
        self.process(events)
        assert not self.incoming, f"requests left unanswered: {sorted(self.incoming)}"

    def scan_control(self) -> None:
        events = []
        for name in sorted(self.control_inbox):
            data = self.control_inbox[name]
            digest = hashlib.sha256(data).hexdigest()
            try:
                control = parse_control(name, data)
            except BadRequest as exc:
                events.append(ControlSeen(at=self.now, name=name, digest=digest,
                                          request_id=request_id_from_filename(name),
                                          error_field=exc.field, error_problem=exc.problem))
            else:
                events.append(ControlSeen(at=self.now, name=name, digest=digest,
                                          request_id=control.request_id, control=control))
        self.process(events)
        assert not self.control_inbox, f"control files left: {sorted(self.control_inbox)}"

    def scan_generations(self) -> None:
        events: list[Event] = []
        for number, gen in self.sched.generations.items():
            seen = self.results_seen.setdefault(number, set())
            for result_id, (peer, mature) in sorted(self.results.get(number, {}).items()):
                if result_id not in seen:
                    events.append(ResultSeen(at=self.now, generation=number,
                                             result_id=result_id, peer=peer, mature=mature))
                    seen.add(result_id)
            if not gen.accepting:
                continue
            events.append(IdleSeen(at=self.now, generation=number,
                                   peers=tuple(sorted(self.idle.get(number, ())))))
            for name, data in sorted(self.declines.get(number, {}).items()):
                doc = json.loads(data)
                events.append(DeclineSeen(at=self.now, generation=number, peer=doc["peer"],
                                          lease_id=doc["lease_id"], name=name))
        self.process(events)

    # -- actions -----------------------------------------------------------------

    def lease_files(self, peer: str | None = None) -> list[dict[str, Any]]:
        return [doc for (gen, kind, name), doc in sorted(self.disk.generation.items())
                if kind == "lease" and (peer is None or name == peer)]

    def act_submit(self) -> None:
        rng = self.rng
        mode = rng.choices(["fresh", "resend", "clash", "bad"], [12, 3, 1, 1])[0]
        if mode == "resend" and self.sent:
            name, data = rng.choice(self.sent)
            self.stats["resend"] += 1
        else:
            peer = rng.choice(PEERS)
            doc: dict[str, Any] = {"peer": peer, "tag": rng.choice(TAGS)}
            if rng.random() < 0.85:
                doc["argv"] = list(rng.choice(ARGVS))
            else:
                doc["command"] = "python c.py --fast"
            if (profile := rng.choice(PROFILE_CHOICES)) is not None:
                doc["profile"] = profile
            if rng.random() < 0.6:
                doc["work_class"] = rng.choice(["scout", "ordinary", "mature"])
            if rng.random() < 0.5:
                doc["eta_s"] = rng.choice([5, 30, 120, 600])
            if rng.random() < 0.25:
                doc["retry_terminal"] = True
            if rng.random() < 0.15:
                doc["env"] = {"SEED": str(rng.randint(0, 1))}
            if rng.random() < 0.1:
                doc["generation"] = rng.randint(1, self.next_generation)
            leases = self.lease_files(peer)
            if leases and rng.random() < 0.7:
                doc["lease"] = rng.choice(leases)["lease_id"]
            elif rng.random() < 0.03:
                doc["lease"] = "g1-nobody-1"
            self.serial += 1
            if mode == "clash" and self.sent:
                name = rng.choice(self.sent)[0]
                doc["argv"] = ["python", "clash.py", str(self.serial)]
                doc.pop("command", None)
            else:
                name = f"{peer}-{self.serial}.json"
            if rng.random() < 0.1:
                doc["request_id"] = f"rid-{self.serial}"
            if mode == "bad":
                doc["tag"] = rng.choice(["../escape", ".hidden", ""])
            data = json.dumps(doc).encode()
            self.sent.append((name, data))
        self.incoming[name] = data
        if rng.random() < 0.7:  # the inotify hint; else a later scan finds it
            self.scan_incoming()

    def act_use_lease(self) -> None:
        """A peer woken by a granted lease submits under it, declines it, or ignores it."""
        granted = [doc for doc in self.lease_files() if doc["state"] == "granted"]
        if not granted:
            return
        lease = self.rng.choice(granted)
        choice = self.rng.choices(["submit", "decline", "ignore"], [5, 3, 1])[0]
        if choice == "submit":
            self.serial += 1
            doc = {"peer": lease["peer"], "tag": self.rng.choice(TAGS), "argv": list(ARGVS[0]),
                   "profile": self.rng.choice(lease["profiles"]), "lease": lease["lease_id"],
                   "work_class": "mature" if lease["priority"] == "mature" else "scout",
                   "eta_s": 60}
            name = f"{lease['peer']}-{self.serial}.json"
            self.incoming[name] = json.dumps(doc).encode()
            self.sent.append((name, self.incoming[name]))
            self.scan_incoming()
        elif choice == "decline":
            lease_id = lease["lease_id"] if self.rng.random() < 0.9 else "g1-p1-999"
            self.declines.setdefault(lease["generation"], {})[f"{lease['peer']}.decline.json"] = \
                json.dumps({"peer": lease["peer"], "lease_id": lease_id}).encode()
            self.scan_generations()

    def act_control(self) -> None:
        rng = self.rng
        mode = rng.choices(["open", "assess", "close", "resend", "bad", "stop"],
                           [4, 2, 3, 1, 1, 0.15])[0]
        if mode == "resend" and self.control_sent:
            name, data = rng.choice(self.control_sent)
        else:
            self.serial += 1
            name = f"c{self.serial}.json"
            if mode == "open":
                number = self.next_generation if rng.random() < 0.9 else \
                    rng.randint(1, self.next_generation)
                self.next_generation = max(self.next_generation, number + 1)
            else:
                number = rng.randint(1, self.next_generation)
            doc: dict[str, Any] = {"action": f"generation_{mode}", "generation": number}
            if mode == "stop":
                doc = {"action": "run_stop"}
                if rng.random() < 0.3:
                    doc["generation"] = number  # allowed, and ignored
                if rng.random() < 0.3:  # the crash points around a stop matter most
                    self.crash_in = rng.randint(1, 3)
            if mode == "open":
                doc["cohort"] = sorted(rng.sample(PEERS, rng.randint(0, len(PEERS))))
                if rng.random() < 0.6:
                    deadline = self.now + rng.uniform(30, 3000)
                    doc["deadline"] = datetime.fromtimestamp(deadline, timezone.utc).isoformat()
            if mode == "bad":
                doc["action"] = "generation_explode"
            data = json.dumps(doc).encode()
            self.control_sent.append((name, data))
        self.control_inbox[name] = data
        self.scan_control()

    def act_result(self) -> None:
        if not self.sched.generations:
            return
        number = self.rng.choice(sorted(self.sched.generations))
        result_id = f"res-{self.rng.randint(0, 15)}"
        self.results.setdefault(number, {}).setdefault(
            result_id, (self.rng.choice(PEERS), self.rng.random() < 0.5))
        self.scan_generations()

    def act_idle(self) -> None:
        accepting = sorted(n for n, g in self.sched.generations.items() if g.accepting)
        if not accepting:
            return
        number = self.rng.choice(accepting)
        peers = self.idle.setdefault(number, set())
        peer = self.rng.choice(PEERS)
        if peer in peers and self.rng.random() < 0.4:
            peers.discard(peer)
        else:
            peers.add(peer)
        self.scan_generations()

    def act_shim(self) -> None:
        """One shim moves on, and its status pipe makes the daemon look at it."""
        running = sorted(self.sched.running(), key=lambda j: j.order)
        if not running:
            return
        job = self.rng.choice(running)
        key = (job.job_id, job.current.attempt_id)
        shim = self.host.attempts.get(key)
        if shim is None:  # never spawned (lost to a crash): only a restart releases it
            return
        rng, host = self.rng, self.host
        if shim.alive and not shim.ready:
            if rng.random() < 0.85:
                host.ready(key)
            else:
                host.die(key)
                self.stats["died_before_ready"] += 1
        elif shim.alive and not shim.running:
            if rng.random() < 0.15:  # barrier timeout, or killed while waiting
                host.die(key)
                self.stats["died_at_barrier"] += 1
        elif shim.alive:
            if rng.random() < 0.07:
                host.die(key)  # gone after GO, without an exit record
                self.stats["died_after_go"] += 1
            else:
                code, signal = rng.choice(EXIT_CODES)
                host.exit(key, code, signal, self.now - rng.uniform(0, 1))
                self.stats[f"exit_{code}"] += 1
        if rng.random() < 0.85:
            self.observe_key(key)

    def act_reconcile(self) -> None:
        """daemon._reconcile: look at every running or suspended job's current attempt."""
        for job in sorted(self.sched.in_flight(), key=lambda j: j.order):
            self.observe_key((job.job_id, job.current.attempt_id))

    def act_late_sighting(self) -> None:
        ended = sorted((j.job_id, a.attempt_id) for j in self.sched.jobs.values()
                       for a in j.attempts if a.phase == AttemptPhase.ENDED)
        if not ended:
            return
        key = self.rng.choice(ended)
        version = self.sched.version
        self.process([AttemptObserved(at=self.now, job_id=key[0], attempt_id=key[1],
                                      alive=False, go=True, exited=True, exit_code=0)])
        assert self.sched.version == version, f"a late sighting of {key} changed state"

    def act_sample(self) -> None:
        self.drift()
        self.sample()

    def act_claims_released(self) -> None:
        """The host registry could not drop some ended leases' claims, or now could."""
        ended = sorted(lease.lease_id for gen in self.sched.generations.values()
                       for lease in gen.leases.values() if not lease.outstanding and lease.claim)
        pending = () if not ended or self.rng.random() < 0.5 else \
            tuple(sorted(self.rng.sample(ended, self.rng.randint(1, min(2, len(ended))))))
        self.process([ClaimsReleased(at=self.now, pending=pending)])

    def act_tick(self) -> None:
        self.now += round(self.rng.uniform(0.05, 5.0), 3)
        if self.rng.random() < 0.5:
            self.act_sample()

    def act_jump(self) -> None:
        """Minutes pass (leases expire, deadlines pass)."""
        self.now += round(self.rng.uniform(100, 1000), 3)
        self.act_sample()

    def act_stop_fenced(self) -> None:
        """praxist-fs stop found the coordinator dead, fenced the run and wrote STOP."""
        self.stop_sentinel = True
        self.clean_crash = True
        for shim in self.host.attempts.values():  # fence: every process group is gone
            if shim.alive and shim.running:
                self.host.exit(shim.key, 137, 9, self.now)
            else:
                self.host.die(shim.key)
        raise Crash

    def act_crash(self) -> None:
        if self.rng.random() < 0.4:
            self.clean_crash = True
            raise Crash  # between two loop iterations
        self.crash_in = self.rng.randint(1, 8)  # somewhere in the coming work

    ACTIONS: tuple[tuple[str, int], ...] = (
        ("submit", 14), ("use_lease", 4), ("control", 3), ("result", 2), ("idle", 3),
        ("shim", 22), ("reconcile", 3), ("late_sighting", 1), ("sample", 8),
        ("claims_released", 1), ("tick", 8), ("jump", 1), ("crash", 2),
        ("stop_fenced", 0.05),
    )

    # -- the run -----------------------------------------------------------------

    def step(self) -> None:
        self.step_no += 1
        names, weights = zip(*self.ACTIONS)
        action = self.rng.choices(names, weights)[0]
        self.trace.append(f"{self.step_no}:{action}")
        self.stats["steps"] += 1
        try:
            getattr(self, f"act_{action}")()
            self.loop()
        except Crash:
            self.recover()
        if self.step_no % self.check_every == 0:
            self.check()

    def recover(self) -> None:
        self.stats["crashes"] += 1
        while True:
            try:
                self.restart()
                self.loop()
                return
            except Crash:
                self.stats["crashes_while_starting"] += 1

    def run(self, steps: int) -> Simulation:
        options = "" if self.tolerate == frozenset(KNOWN_BUGS) else \
            f", tolerate={sorted(self.tolerate)!r}"
        for _ in range(steps):
            try:
                self.step()
            except Exception as exc:
                raise SimulationFailure(
                    self.seed, self.step_no,
                    f"seed {self.seed} failed at step {self.step_no}: "
                    f"{type(exc).__name__}: {exc}\n"
                    f"reproduce: run_seed({self.seed}, {self.step_no}{options}) in "
                    f"tests/core/simulation.py\n"
                    f"last actions: {' '.join(self.trace[-25:])}") from exc
        try:
            self.check()
            self.snapshot_check(replay(self.journal).snapshot(), self.sched.snapshot(),
                                "replayed from scratch at the end")
        except Exception as exc:
            raise SimulationFailure(self.seed, self.step_no,
                                    f"seed {self.seed} failed at the end (step "
                                    f"{self.step_no}): {exc}\nreproduce: run_seed("
                                    f"{self.seed}, {self.step_no}{options})") from exc
        return self

    # -- invariants --------------------------------------------------------------

    def snapshot_check(self, replayed: dict[str, Any], live: dict[str, Any],
                       when: str = "") -> None:
        if replayed == live:
            return
        raise AssertionError(f"replay(journal) != live state {when}: " + diff(replayed, live))

    def check_launch(self, ev: AttemptLaunched) -> None:
        """At the moment of each placement decision, from the sample it was taken with."""
        s = self.sched
        job = s.jobs[ev.job_id]
        profile = self.policy.profiles[job.profile]
        assert job.state is JobState.QUEUED, f"launching {job.job_id} in state {job.state}"
        running = s.count(JobState.RUNNING)
        assert running < s.concurrency_target(), (
            f"launch of {job.job_id} with {running} running and target "
            f"{s.concurrency_target()}")
        by_class = queue_of_class(self.policy.queue_set())
        queue = by_class[job.request.work_class]
        if queue.max_running is not None:
            in_queue = sum(1 for j in s.running() if by_class[j.request.work_class] is queue)
            assert in_queue < queue.max_running, (
                f"launch of {job.job_id} with {in_queue} running in queue {queue.name} "
                f"(max_running {queue.max_running})")
        for domain in profile.pressure_domains:
            value = self.view_pressure.get(domain) if self.view_pressure else None
            high = self.policy.pressure_thresholds[domain].high
            assert value is None or value <= high, (
                f"{job.job_id} ({job.profile}) launched with {domain} pressure {value} > {high}")
        gen = s.generations.get(job.generation) if job.generation is not None else None
        assert not s.stopped, f"{job.job_id} launched in a stopped run"
        if gen is not None:
            assert gen.accepting, \
                f"{job.job_id} launched in generation {gen.number}, which is {gen.phase}"
        if gen is not None and gen.phase == "assessment":
            assert job.request.work_class == "mature", \
                f"{job.job_id} ({job.request.work_class}) launched during assessment"
        self.stats["launches"] += 1
        if not profile.uses_gpu:
            assert ev.gpus == (), f"CPU job {job.job_id} got GPUs {ev.gpus}"
            return
        self.stats["gpu_launches"] += 1
        assert self.view_gpus is not None and self.view_gpus.devices, \
            f"GPU job {job.job_id} launched without a GPU inventory"
        assert len(ev.gpus) == profile.gpu_count == len(set(ev.gpus)), ev
        devices = {d.uuid: d for d in self.view_gpus.devices}
        held = self.held_envelopes() + [e for e in self.view_others if not e.speculative]
        exclusive = not profile.demand_known
        if exclusive:
            self.stats["exclusive_launches"] += 1
        for uuid in ev.gpus:
            device = devices[uuid]
            assert not device.mig_mode, f"{job.job_id} placed on MIG device {uuid}"
            mine = [e for e in held if e.uuid == uuid]
            ext_util, ext_mem = external_load(device, mine)
            where = f"{job.job_id} ({job.profile}) on {uuid}"
            assert not any(e.exclusive for e in mine), f"{where}: device held exclusively"
            if exclusive:
                assert not mine, f"{where}: exclusive job shares the device with {mine}"
                assert ext_util < 5.0 and ext_mem < 0.02 * device.memory_total_mib, \
                    f"{where}: exclusive job on a busy device ({ext_util}%, {ext_mem} MiB)"
                continue
            util = sum(e.utilization_pct for e in mine) + ext_util + profile.gpu_utilization_pct
            mem = sum(e.memory_mib for e in mine) + ext_mem + profile.gpu_memory_gb * MIB
            assert util <= 100.0 + 1e-6, f"{where}: utilization {util:.3f}% > 100%"
            assert mem < 0.95 * device.memory_total_mib + 1e-6, (
                f"{where}: memory {mem:.1f} MiB >= 95% of {device.memory_total_mib}")

    def held_envelopes(self) -> list[Envelope]:
        """This run's running jobs' envelopes, computed from the policy (not the scheduler);
        a suspended job keeps its memory (and an exclusive device), not its utilization."""
        envelopes = []
        for job in self.sched.in_flight():
            profile = self.policy.profiles[job.profile]
            suspended = job.state is JobState.SUSPENDED
            for uuid in job.current.gpus:
                if profile.demand_known:
                    envelopes.append(Envelope(uuid=uuid,
                                              utilization_pct=0.0 if suspended else
                                              profile.gpu_utilization_pct,
                                              memory_mib=profile.gpu_memory_gb * MIB,
                                              owner=job.job_id))
                else:
                    envelopes.append(Envelope(uuid=uuid, utilization_pct=100.0, memory_mib=0.0,
                                              exclusive=True, owner=job.job_id))
        return envelopes

    def check_preemption(self, ev: AttemptPreempted | AttemptResumed) -> None:
        """At each preemption or resume decision (R-POL-3), before it is applied."""
        s = self.sched
        job = s.jobs[ev.job_id]
        by_class = queue_of_class(self.policy.queue_set())
        profile = self.policy.profiles[job.profile]
        if isinstance(ev, AttemptResumed):
            assert job.state is JobState.SUSPENDED, f"resuming {job.job_id} in {job.state}"
            assert s.count(JobState.RUNNING) < s.concurrency_target(), \
                f"resuming {job.job_id} with every slot taken"
            self.stats["resumes"] += 1
            if not profile.uses_gpu or not profile.demand_known:
                return
            devices = {d.uuid: d for d in self.view_gpus.devices}
            held = self.held_envelopes() + [e for e in self.view_others if not e.speculative]
            for uuid in job.current.gpus:
                mine = [e for e in held if e.uuid == uuid]
                util = sum(e.utilization_pct for e in mine) + external_load(
                    devices[uuid], mine)[0] + profile.gpu_utilization_pct
                assert util <= 100.0 + 1e-6, f"{job.job_id} resumed on {uuid} at {util:.3f}%"
            return
        beneficiary = s.jobs[ev.by]
        victim_queue = by_class[job.request.work_class]
        queue = by_class[beneficiary.request.work_class]
        assert job.state is JobState.RUNNING and job.current.pid is not None, \
            f"preempting {job.job_id} ({job.state}, pid {job.current.pid})"
        assert beneficiary.state is JobState.QUEUED, f"{ev.by} preempts while {beneficiary.state}"
        assert times_preempted(job, ev.by) < MAX_PREEMPTIONS_FOR_ONE, (
            f"{job.job_id} preempted for {ev.by} once more than the bound")
        assert victim_queue.name in queue.preemptible_queues and \
            victim_queue.priority < queue.priority and ev.mode == queue.preempt, (
                f"{queue.name} (priority {queue.priority}) preempted {job.job_id} of "
                f"{victim_queue.name} (priority {victim_queue.priority}) by {ev.mode}")
        self.stats[f"preempted_{ev.mode}"] += 1

    def check_grant(self, ev: LeaseGranted) -> None:
        gen = self.sched.generations[ev.generation]
        assert gen.accepting, f"lease {ev.lease_id} granted in a {gen.phase} generation"
        assert not self.sched.stopped, f"lease {ev.lease_id} granted in a stopped run"
        assert ev.lease_id not in gen.leases, f"lease id {ev.lease_id} granted twice"
        assert not any(lease.peer == ev.peer for lease in gen.outstanding()), \
            f"{ev.peer} got a second outstanding lease"
        assert ev.expires_at >= ev.at + 180
        assert ev.profiles, f"lease {ev.lease_id} names no profile"

    def check(self) -> None:
        s, shadow = self.sched, self.shadow
        self.snapshot_check(shadow.snapshot(), s.snapshot())
        assert s.version == shadow.version, \
            f"live version {s.version} != replayed version {shadow.version}"
        # each job in exactly one state, and its file in exactly one directory
        assert sum(s.count(state) for state in JobState) == len(s.jobs)
        for state, view in ((JobState.RUNNING, s.running), (JobState.QUEUED, s.queued),
                            (JobState.SUSPENDED, s.suspended)):
            indexed = {j.job_id for j in view()}
            assert indexed == {jid for jid, j in s.jobs.items() if j.state is state}, state
        for job_id, job in s.jobs.items():
            holders = [d for d, folder in self.disk.jobs.items() if job_id in folder]
            assert holders == [job.state.directory], (job_id, holders, job.state)
            written = dict(self.disk.jobs[holders[0]][job_id])
            expected = job.to_dict()
            if job.state is JobState.QUEUED:  # the soft "why pending" is in the file
                written.pop("reason")
                expected.pop("reason")
            assert written == expected, f"stale job file for {job_id}"
            ids = [a.attempt_id for a in job.attempts]
            assert ids == [f"a{n}" for n in range(1, len(ids) + 1)], (job_id, ids)
            open_attempts = [a for a in job.attempts if a.phase != AttemptPhase.ENDED]
            assert len(open_attempts) <= 1, f"{job_id} has two attempts in flight"
            if job.state in (JobState.RUNNING, JobState.SUSPENDED):
                assert open_attempts == [job.current], job_id
                last = job.current.preemptions[-1] if job.current.preemptions else {}
                assert (last.get("mode") == "suspend" and last["resumed_at"] is None) is (
                    job.state is JobState.SUSPENDED), job_id
            else:
                assert open_attempts == [], (job_id, job.state)
            for attempt in job.attempts:
                key = (job_id, attempt.attempt_id)
                if attempt.outcome == "released":
                    assert key not in self.started, f"{key} released but its command ran"
                if attempt.outcome in ("completed", "infra_retry") or (
                        attempt.outcome == "failed" and key not in self.spawn_failed and
                        attempt.exit_code is not None and key in self.host.attempts and
                        self.host.attempts[key].exit is not None):
                    assert key in self.started, f"{key} has an exit code but never ran"
                    assert attempt.exit_code == self.host.attempts[key].exit[0], key
            profile = self.policy.profiles[job.profile]
            for attempt in job.attempts:
                if attempt.round == job.round and attempt.phase != AttemptPhase.ENDED:
                    assert len(attempt.gpus) == (profile.gpu_count if profile.uses_gpu else 0)
        assert sum(len(folder) for folder in self.disk.jobs.values()) == len(s.jobs)
        if s.stopped:
            self.stats["stopped_steps"] += 1
            assert not s.queued(), f"the run is stopped with {len(s.queued())} queued"
            assert not any(g.outstanding() for g in s.generations.values()), \
                "the run is stopped with outstanding leases"
        # liveness: a free slot is never left empty while a CPU job that nothing holds waits
        for job in s.queued():
            profile = self.policy.profiles[job.profile]
            gen = s.generations.get(job.generation) if job.generation is not None else None
            if profile.uses_gpu or job.request.work_class == "mature" or (
                    gen is not None and gen.phase != "open") or \
                    s.pending.get(job.job_id, "").startswith((*QUEUE_HOLDS, BACKOFF)) or any(
                    (self.view_pressure.get(d) or 0.0) > self.policy.pressure_thresholds[d].high
                    for d in profile.pressure_domains):
                continue
            assert s.count(JobState.RUNNING) >= s.concurrency_target(), (
                f"{job.job_id} waits ({s.pending.get(job.job_id)!r}) with "
                f"{s.count(JobState.RUNNING)} running of {s.concurrency_target()}")
        # status.json agrees with the state it renders
        status = render_status(s, self.now, {"state": "serving"})
        assert status["counts"] == {state.value: s.count(state) for state in JobState}
        assert status["running"] == s.count(JobState.RUNNING) == len(status["active"])
        assert status["queue_length"] == s.count(JobState.QUEUED)
        for device in status["gpus"]["devices"]:
            assert sorted(device["jobs"]) == sorted(
                e.owner for e in self.held_envelopes() if e.uuid == device["uuid"])
        # exclusive (unknown-demand) jobs never share a device with this run's other jobs
        per_device: dict[str, list[Envelope]] = {}
        for envelope in self.held_envelopes():
            per_device.setdefault(envelope.uuid, []).append(envelope)
        for uuid, envelopes in per_device.items():
            owners = [e.owner for e in envelopes]
            assert len(owners) == len(set(owners)), f"a job holds {uuid} twice: {owners}"
            if any(e.exclusive for e in envelopes):
                assert len(envelopes) == 1, f"exclusive device {uuid} shared by {owners}"
        # replies: each names a job that exists, and the file says what the state says
        for rid, reply in s.replies.items():
            assert reply.job_id is None or reply.job_id in s.jobs, (rid, reply.job_id)
            if reply.job_id is None:
                assert reply.outcome == "rejected", reply
        assert self.disk.replies == {rid: r.to_dict() for rid, r in s.replies.items()}
        for rid, reply in self.disk.replies.items():
            assert reply["job_id"] is None or reply["job_id"] in s.jobs
        assert self.disk.control_replies == {rid: c["document"]
                                             for rid, c in s.control_replies.items()}
        # leases: every grant is accounted for, none outlives its generation or expiry
        for number, gen in s.generations.items():
            outstanding = gen.outstanding()
            for priority in PRIORITIES:
                stats = gen.stats[priority]
                mine = sum(1 for lease in outstanding if lease.priority == priority)
                assert stats["granted"] == sum(stats[k] for k in LEASE_OUTCOMES) + mine, \
                    f"gen {number} {priority}: {stats} with {mine} outstanding"
            assert len(gen.leases) == sum(gen.stats[p]["granted"] for p in PRIORITIES)
            if not gen.accepting:
                assert not outstanding, f"gen {number} is {gen.phase} with outstanding leases"
            if gen.phase == "closed":
                left = [j.job_id for j in (*s.queued(), *s.in_flight())
                        if j.generation == number]
                assert not left, f"gen {number} is closed with {left} queued or running"
            for lease in outstanding:
                assert lease.expires_at > self.now, f"lease {lease.lease_id} outlived expiry"
            assert self.disk.generation.get((number, "stats", "stats")) == \
                gen.stats_document(), f"gen {number}: stale stats.json"
            latest: dict[str, Any] = {}
            for lease in gen.leases.values():
                if lease.peer not in latest or lease.granted_at >= latest[lease.peer].granted_at:
                    latest[lease.peer] = lease
            for peer, lease in latest.items():
                written = self.disk.generation.get((number, "lease", peer))
                assert written is not None and written["lease_id"] == lease.lease_id, (
                    f"gen {number}: {peer}'s lease file shows "
                    f"{written and written['lease_id']}, its latest lease is {lease.lease_id}")
                assert written == {**lease.to_dict(),
                                   "release_pending": lease.lease_id in s.release_pending}
            if gen.closing_signal is not None:
                assert self.disk.generation.get((number, "closing", "CLOSING_SIGNAL")) == \
                    gen.closing_signal


def external_load(device: GpuDevice, held: list[Envelope]) -> tuple[float, float]:
    """R-GPU-2's external load, from the sample alone: what the device shows beyond the
    processes attributed to praxist jobs, plus whatever a job uses beyond its envelope;
    everything when the driver hides its processes."""
    if not device.processes_visible:
        return device.utilization_pct, device.memory_used_mib
    used_util: Counter[str] = Counter()
    used_mem: Counter[str] = Counter()
    for process in device.processes:
        if process.owner is not None:
            used_util[process.owner] += process.sm_util_pct or 0.0
            used_mem[process.owner] += process.used_memory_mib or 0.0
    declared_util: Counter[str] = Counter()
    declared_mem: Counter[str] = Counter()
    for envelope in held:
        declared_util[envelope.owner] += 100.0 if envelope.exclusive else envelope.utilization_pct
        declared_mem[envelope.owner] += envelope.memory_mib
    util = max(0.0, device.utilization_pct - sum(used_util.values())) + sum(
        max(0.0, used - declared_util[owner]) for owner, used in used_util.items())
    mem = max(0.0, device.memory_used_mib - sum(used_mem.values())) + sum(
        max(0.0, used - declared_mem[owner]) for owner, used in used_mem.items())
    return util, mem


def diff(expected: Any, actual: Any, path: str = "") -> str:
    """The first place two plain values differ, as a short path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual), key=str):
            if expected.get(key, "<missing>") != actual.get(key, "<missing>"):
                return diff(expected.get(key, "<missing>"), actual.get(key, "<missing>"),
                            f"{path}/{key}")
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (a, b) in enumerate(zip(expected, actual)):
            if a != b:
                return diff(a, b, f"{path}[{i}]")
    return f"{path or '/'}: replayed {expected!r} != live {actual!r}"


def run_seed(seed: int, steps: int, **options: Any) -> Simulation:
    """Run one seed for ``steps`` steps; a failure names the seed and the step."""
    return Simulation(seed, **options).run(steps)
