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

What the simulation hands the core goes through the daemon's own ``Driver``
(praxist_fs/driver.py): its batches (an acceptance or an exit and the launch it
allows in one commit), its one commit per batch, its effect order and its crash
points, which are where a kill -9 lands. Around it are twins of the journal, the
views and the backend (tests/core/twins.py); the simulation interprets no effect.

The journal holds ``to_record(event)`` (through JSON) of every event that
bumped ``Scheduler.version``, as the driver commits it. A shadow scheduler is fed
the committed records, so it *is* ``replay(journal)`` at every step for the cost
of one event per record: every step compares its snapshot with the live one,
and every restart and the end of a run also replay the whole journal from
scratch. Invariants (tests/core/invariants.py): ``check`` after every step, and
``check_launch`` / ``check_grant`` / ``check_preemption`` at each decision.

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
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from praxist_fs.backends.memory import Run, VirtualHost
from praxist_fs.core.effects import SpawnAttempt
from praxist_fs.core.events import (
    AttemptLaunched, AttemptObserved, AttemptPreempted, AttemptResumed, ClaimsReleased,
    ClaimsSeen, ControlSeen, CoordinatorStarted, DeclineSeen, Event, HostSampled, IdleSeen,
    LeaseGranted, RequestSeen, ResultSeen, RunStopRequested, from_record, to_record,
)
from praxist_fs.core.model import AttemptPhase
from praxist_fs.core.observations import (
    Envelope, GpuDevice, GpuProcess, GpuSample, HostCapacity, PressureSample,
)
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.queues import Queue, default_queues
from praxist_fs.core.replay import replay as replay_into
from praxist_fs.core.request import parse_control, parse_request, request_id_from_filename
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.driver import Driver
from praxist_fs.errors import BadRequest

from .invariants import MIB, Invariants
from .twins import Disk, Files, MemoryJournal, Shims, Watched

BOOT = "boot-sim"
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


def replay(records: list[dict[str, Any]], into: Scheduler | None = None) -> Scheduler:
    """A fresh core (or ``into``) fed ``records`` as a start feeds it (``core.replay``),
    each through JSON as a start reads it."""
    fresh = Scheduler() if into is None else into
    replay_into(fresh, (json.loads(json.dumps(record)) for record in records))
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


class Simulation(Invariants):
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
        self.shims = Shims(self)
        self.now = 1_700_000_000.0 + self.rng.randint(0, 10_000)
        self.step_no = 0
        self.trace: list[str] = []
        self.stats: Counter[str] = Counter()
        # the journal, committed records only, and its incremental replay
        self.journal: list[dict[str, Any]] = []
        self.shadow = Scheduler()
        self.shadowed = 0  # records the shadow has been fed
        self.journal_file = MemoryJournal(self.journal)  # the driver's journal
        self.sched = self.watched(Watched())
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
        self.files = Files(self)  # the driver's views
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

    def plan(self, launch: SpawnAttempt) -> Run:
        """A shim that does nothing until ``act_shim`` moves it on, or fails to start."""
        if self.rng.random() < 0.02:
            return Run(0.0, start_error="could not start the shim: [Errno 12]")
        return Run(math.inf, ready=False)

    # -- the daemon's plumbing: the production driver, on twins of its parts -------

    def opportunity(self, point: str = "") -> None:
        """A crash point (the driver's: before and after a commit and every effect; the
        start's repair; a reason's write): the coordinator may be killed here."""
        if self.crash_in is not None:
            self.crash_in -= 1
            if self.crash_in <= 0:
                self.crash_in = None
                raise Crash

    def decided(self, event: Event) -> None:
        """The checks at the moment of a decision, before the core applies it."""
        if isinstance(event, AttemptLaunched):
            self.check_launch(event)
        elif isinstance(event, (AttemptPreempted, AttemptResumed)):
            self.check_preemption(event)
        elif isinstance(event, LeaseGranted):
            self.check_grant(event)

    def journaled(self, event: Event) -> None:
        """An event that changed the core's state, and so is journaled: the codec keeps it."""
        record = json.loads(json.dumps(to_record(event)))
        assert from_record(record) == event, f"journal codec loses {event}"
        self.stats[record["type"]] += 1

    def process(self, events: list[Event], launch: bool = False) -> None:
        """``Driver.process`` as the daemon's loop calls it (``launch``: the scheduling
        pass inside the batch, for requests and what shims report); then what the pipes of
        evicted shims said, as the daemon's ``on_ready`` hands it over."""
        self.driver.process(events, launch)
        while self.shims.sightings:
            keys, self.shims.sightings = self.shims.sightings, []
            self.driver.process([self.observation(*key) for key in keys], launch=True)
        assert not self.journal_file.pending, \
            f"the driver left {len(self.journal_file.pending)} records uncommitted"

    def observation(self, job_id: str, attempt_id: str) -> AttemptObserved:
        """daemon._observe: what the attempt directory and /proc say."""
        job = self.sched.jobs[job_id]
        return self.shims.observe(job, next(a for a in job.attempts
                                              if a.attempt_id == attempt_id))

    def observe_key(self, key: tuple[str, str], launch: bool = False) -> None:
        """daemon._observe_key: only the job's current attempt is looked at."""
        job = self.sched.jobs.get(key[0])
        if job is None or job.current is None or job.current.attempt_id != key[1]:
            return
        self.process([self.observation(*key)], launch)

    def catch_up(self) -> Scheduler:
        """The shadow scheduler, fed the records committed since it was last asked: it
        *is* ``replay(journal)`` for the cost of one event per record."""
        for record in self.journal[self.shadowed:]:
            self.shadow.handle(from_record(json.loads(json.dumps(record))))
        self.shadowed = len(self.journal)
        return self.shadow

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
            for effect in self.sched.reason_updates():  # views.py, at status cadence
                self.opportunity()
                self.files.execute(effect, self.sched)
            if not launches:
                break
        else:
            raise AssertionError(f"livelock: {PASSES_AT_ONE_INSTANT} passes at one instant "
                                 "and the core still decides")
        self.process(self.sched.due(self.now))
        self.process(list(self.sched.next_grants(self.now)))

    def watched(self, sched: Watched) -> Watched:
        sched.sim = self
        return sched

    def start_coordinator(self) -> None:
        """daemon._start after the replay: journal the start, sample, repair, adopt, scan.
        The coordinator's driver is the daemon's, on twins of its journal, views and
        backend, with a kill -9 at any of its crash points."""
        self.driver = Driver(self.sched, self.shims, journal=self.journal_file,
                             views=self.files, evict_grace=0.0, clock=lambda: self.now,
                             crash_hook=self.opportunity)
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
            self.files.execute(effect, self.sched)
        if self.stop_sentinel and not self.sched.stopped:
            self.process([RunStopRequested(at=self.now, reason="stopped by praxist-fs stop")])
        for job in sorted(self.sched.in_flight(), key=lambda j: j.order):
            self.process(self.shims.adopt(job, job.current))
        self.scan_incoming()
        self.scan_control()
        self.scan_generations()

    def restart(self) -> None:
        """kill -9 happened: a fresh Scheduler() replays the journal and takes over."""
        self.stats["restarts"] += 1
        fresh = replay(self.journal, Watched())
        assert fresh.snapshot() == self.catch_up().snapshot(), "replay is not deterministic"
        if self.clean_crash:  # nothing was handled and left uncommitted
            self.snapshot_check(fresh.snapshot(), self.sched.snapshot(), "at the crash")
        self.clean_crash = False
        assert fresh.version == self.shadow.version
        self.sched = self.watched(fresh)
        self.shims.close()
        self.shims = Shims(self)
        self.journal_file.reopen()
        self.view_gpus, self.view_others, self.view_pressure = None, (), None
        self.results_seen = {}
        if self.rng.random() < 0.15:
            self.crash_in = self.rng.randint(1, 12)  # crash again while starting
        self.start_coordinator()

    # -- scans: the spool, control/ and the generations' inboxes ---------------

    def scan_incoming(self) -> None:
        self.process(self.seen(self.incoming, parse_request, RequestSeen, "request"),
                     launch=True)
        assert not self.incoming, f"requests left unanswered: {sorted(self.incoming)}"

    def scan_control(self) -> None:
        self.process(self.seen(self.control_inbox, parse_control, ControlSeen, "control"))
        assert not self.control_inbox, f"control files left: {sorted(self.control_inbox)}"

    def seen(self, inbox: dict[str, bytes], parse: Callable[[str, bytes], Any],
             kind: type[RequestSeen] | type[ControlSeen], field: str) -> list[Event]:
        """Each file of ``inbox`` (name -> bytes), in name order, as the event of ``kind``
        the daemon's inboxes make of it: what ``parse`` read (as ``field``), or the
        field it got wrong and why."""
        events: list[Event] = []
        for name in sorted(inbox):
            data = inbox[name]
            digest = hashlib.sha256(data).hexdigest()
            try:
                parsed = parse(name, data)
            except BadRequest as exc:
                events.append(kind(at=self.now, name=name, digest=digest,
                                   request_id=request_id_from_filename(name),
                                   error_field=exc.field, error_problem=exc.problem))
            else:
                events.append(kind(at=self.now, name=name, digest=digest,
                                   request_id=parsed.request_id, **{field: parsed}))
        return events

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
            self.observe_key(key, launch=True)

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

def run_seed(seed: int, steps: int, **options: Any) -> Simulation:
    """Run one seed for ``steps`` steps; a failure names the seed and the step."""
    return Simulation(seed, **options).run(steps)
