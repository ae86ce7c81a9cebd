"""What the core's tests share (one module: tests import helpers from here, never from
each other).

The harness runs the sans-IO scheduler under the daemon's own ``Driver`` on in-memory
twins (tests/core/twins.py) and builds events the way the daemon does: requests go
through ``parse_request`` (real bytes, real digest), so tests assert the job and reply
files a user would read after the daemon's batching. Around it: control requests, a
coordinator of a given uid, a picker that records what the loop asks, a harness
that journals (preemption), a backfill cluster on a virtual clock, and a workload
driven through the real driver on the in-memory backend, and the state tables as
docs/PROTOCOL.md draws them. The deterministic
simulation lives apart, in simulation.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Any

from praxist_fs.backends.memory import MemoryBackend
from praxist_fs.backends.memory import Run as Plan
from praxist_fs.core.admission import upper_bound
from praxist_fs.core.effects import Effect, WriteJob, WriteReply
from praxist_fs.core.events import (
    AttemptLaunched, AttemptObserved, ControlSeen, CoordinatorStarted, Event, HostSampled,
    RequestSeen, from_record,
)
from praxist_fs.core.model import Job
from praxist_fs.core.observations import GpuDevice, GpuSample, PressureSample
from praxist_fs.core.pickers import JobPicker, JobScope, Pass
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.queues import Queue
from praxist_fs.core.request import (
    Request, parse_control, parse_request, request_id_from_filename,
)
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import TABLES, JobState
from praxist_fs.driver import Driver, VirtualLoop
from praxist_fs.errors import BadRequest

from .twins import Disk, Drawn, Logged, MemoryJournal, Noticed

CALM = PressureSample(source="psi", cpu=0.0, memory=0.0, io=0.0)
CPU = Profile(name="cpu", accelerator="cpu")
GPU = Profile(name="gpu", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
              gpu_utilization_pct=40.0)


def shim(pid: int, started: int = 77, boot: str = "boot") -> dict[str, Any]:
    """The handle the local backend reports for an attempt led by the shim ``pid``."""
    return {"pid": pid, "pid_start": started, "boot_id": boot}


def make_policy(**overrides: Any) -> Policy:
    values: dict[str, Any] = {"profiles": {"cpu": CPU, "gpu": GPU}, "default_profile": "cpu"}
    values.update(overrides)
    return Policy(**values)


class Harness:
    """The core under the daemon's own ``Driver`` (praxist_fs/driver.py), on the twins of
    tests/core/twins.py: each event a test feeds is a batch, as the daemon's loop hands
    it over, journaled (``records``), committed once, its effects carried out launches
    first, a job's writes in the batch merged into one, the job files of jobs left queued
    rewritten with their pending reasons, the notices handed to the sinks. The backend
    starts nothing: a test draws each shim's sightings (``spawn``, ``go``, ``exit``), as
    the backend would report them, as the next batch.

    What a test reads is what the driver carried out: the files on ``disk`` (jobs by
    directory, replies, ...), and ``last_effects``, the effects of the last batch in the
    order they were carried out (the backend's calls and the views' writes, as effects),
    then the batch's notices."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.now = 1000.0
        self.counter = 0
        self.pids = 4000
        self.disk = Disk()
        self.reply_files = self.disk.replies
        self.incoming: dict[str, bytes] = {}  # what the views consume: the spool's requests
        self.control_inbox: dict[str, bytes] = {}
        self.declines: dict[int, dict[str, bytes]] = {}
        self.records: list[dict[str, Any]] = []  # the journal, committed
        self.carried: list[Effect] = []
        self.journal_twin = MemoryJournal(self.records)
        self.backend = Drawn(self.disk, lambda: self.sched, self.carried, self.journal_twin)
        self.driver = Driver(Scheduler(policy or make_policy()), self.backend,
                             journal=self.journal_twin, views=Logged(self, self.carried),
                             clock=lambda: self.now, sinks=(Noticed(self.carried),),
                             crash_hook=self.backend.reached)
        self.last_effects: list[Effect] = []

    @property
    def sched(self) -> Scheduler:
        return self.driver.sched

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    # -- feeding events -------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        """``event`` as one batch; what the driver carried out for it."""
        return self.feed([event])

    def feed(self, events: list[Event], launch: bool = False) -> list[Effect]:
        """One batch through the driver (with the scheduling pass in it, ``launch``), and
        what the backend answered, until nothing is left; what was carried out."""
        self.carried.clear()
        assert self.driver.process(list(events), launch=launch)
        assert not self.journal_twin.pending, "a batch left records uncommitted"
        self.last_effects = list(self.carried)
        for job_id in {e.job_id for e in self.last_effects if isinstance(e, WriteJob)}:
            self._written_as_it_stands(job_id)
        return self.last_effects

    def _written_as_it_stands(self, job_id: str) -> None:
        """A job the batch wrote has one file, in its state's directory, saying what the
        job is once the batch is done (its last write wins); a queued job's reason is
        soft (rewritten when it changes in kind), checked by ``job``."""
        live = self.sched.jobs[job_id]
        assert self.directory(job_id) == live.state.directory, f"{job_id} in the wrong place"
        written = dict(self.disk.jobs[live.state.directory][job_id])
        expected = self.sched.job_document(live)
        if live.state is JobState.QUEUED:
            written.pop("reason", None)
            expected.pop("reason", None)
        assert written == expected, f"{job_id}'s file is stale once its batch is done"

    def restart(self, sched: Scheduler, boot_id: str = "boot") -> list[Effect]:
        """A new coordinator on the run: the driver goes on with ``sched`` (the core rebuilt
        from the journal or a snapshot), started as the daemon starts it; what the start
        carried out (a decision under way is carried out again)."""
        self.driver.sched = sched
        return self.handle(CoordinatorStarted(at=self.tick(), policy=sched.policy.to_dict(),
                                              pid=2, host="h", boot_id=boot_id))

    def core_only(self, event: Event) -> list[Effect]:
        """``Scheduler.handle`` alone, past the driver: for the few tests of the pure core's
        answer to one event (an illegal event raises and changes nothing), and a setup of
        thousands of requests that must not run a pass each. Nothing is journaled,
        committed or carried out."""
        return self.sched.handle(event)

    def request_event(self, doc: dict[str, Any], name: str | None = None,
                      uid: int | None = None) -> RequestSeen:
        """The request file ``name`` in the spool (``uid``: its owner, as the daemon sees
        it, R-SEC-3), as the daemon reads it."""
        if name is None:
            self.counter += 1
            name = f"req-{self.counter}.json"
        data = json.dumps(doc, sort_keys=True).encode()
        digest = hashlib.sha256(data).hexdigest()
        self.incoming[name] = data
        try:
            request = parse_request(name, data)
        except BadRequest as exc:
            # the daemon answers under the explicit id, else the file name's, if safe
            rid = doc.get("request_id")
            if not (isinstance(rid, str) and request_id_from_filename(rid + ".json")):
                rid = request_id_from_filename(name)
            return RequestSeen(at=self.tick(), name=name, digest=digest, request_id=rid,
                               error_field=exc.field, error_problem=exc.problem, uid=uid)
        return RequestSeen(at=self.tick(), name=name, digest=digest,
                           request_id=request.request_id, request=request, uid=uid)

    def submit(self, tag: str, *, argv: Any = ("python", "train.py"), peer: str = "peer-a",
               name: str | None = None, uid: int | None = None,
               **fields: Any) -> dict[str, Any]:
        """Submit one request; return the reply document it produced (or {})."""
        doc: dict[str, Any] = {"peer": peer, "tag": tag}
        if argv is not None:
            doc["argv"] = list(argv)
        doc.update(fields)
        event = self.request_event(doc, name, uid)
        effects = self.handle(event)
        replies = [e.document for e in effects if isinstance(e, WriteReply)]
        return replies[0] if replies else {}

    def launch_all(self) -> list[tuple[str, str]]:
        """One scheduling pass as the daemon runs it (a turn of ``Daemon._launch``): its
        launches one batch; then the pending reasons at status cadence. ``last_effects``:
        all that was carried out."""
        events = self.sched.next_launches(self.tick())
        carried = self.feed(list(events))
        self.carried.clear()
        self.status()
        self.last_effects = carried + self.carried
        return [(event.job_id, event.attempt_id) for event in events]

    def status(self) -> None:
        """What the daemon writes at status cadence besides status.json: the job files of
        queued jobs whose pending reason changed in kind (``StatusSink``)."""
        for effect in self.sched.reason_updates():
            self.driver.views.execute(effect, self.sched)

    def observe(self, job_id: str, attempt_id: str, **fields: Any) -> list[Effect]:
        fields.setdefault("alive", True)
        return self.handle(AttemptObserved(at=self.tick(), job_id=job_id,
                                           attempt_id=attempt_id, **fields))

    def spawn(self, job_id: str, attempt_id: str) -> list[Effect]:
        self.pids += 1
        return self.observe(job_id, attempt_id, handle=shim(self.pids))

    def go(self, job_id: str, attempt_id: str) -> list[Effect]:
        """Spawn the shim, see READY; return the effects of the READY sighting."""
        self.spawn(job_id, attempt_id)
        return self.observe(job_id, attempt_id, ready=True)

    def exit(self, job_id: str, attempt_id: str, code: int, signal: int | None = None,
             error: str | None = None) -> list[Effect]:
        ended_at = self.now + 0.5  # before the observation's own tick
        return self.observe(job_id, attempt_id, alive=False, ready=True, go=True, exited=True,
                            exit_code=code, signal=signal, error=error, ended_at=ended_at)

    # -- views -------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any]:
        """The job file as a user reads it (R-FS-6): one, in its state's directory, and
        what the live state says."""
        live = self.sched.jobs[job_id]
        expected = live.to_dict()
        if live.state.value == "queued" and job_id in self.sched.pending:
            expected["reason"] = self.sched.pending[job_id]  # the soft "why pending"
        assert self.directory(job_id) == live.state.directory
        written = self.disk.jobs[live.state.directory][job_id]
        assert written == expected, "job file is stale"
        return written

    def directory(self, job_id: str) -> str:
        """The one jobs/ directory that holds the job's file."""
        (found,) = [d for d, files in self.disk.jobs.items() if job_id in files]
        return found


# -- control requests, and a coordinator of a given uid ------------------------------


def control(h: Harness, action: str, uid: int | None = None, **fields: Any) -> dict[str, Any]:
    """Send one control request (``uid``: its file's owner); return its reply document."""
    h.counter += 1
    data = json.dumps({"action": action, **fields}).encode()
    name = f"ctl-{h.counter}.json"
    h.control_inbox[name] = data
    parsed = parse_control(name, data)
    effects = h.handle(ControlSeen(at=h.tick(), name=name, digest=hashlib.sha256(data).hexdigest(),
                                   request_id=parsed.request_id, control=parsed, uid=uid))
    (reply,) = [e.document for e in effects if type(e).__name__ == "WriteControlReply"]
    return reply


def coordinator(uid: int | None, **policy) -> Harness:
    """A harness whose coordinator runs as ``uid``, as the daemon journals its start."""
    h = Harness(make_policy(**policy))
    h.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=1, host="h",
                                boot_id="boot", uid=uid))
    return h


# -- pickers -------------------------------------------------------------------------


class Recorder(JobPicker):
    """Last job first; records what the loop asks of it."""

    calls: list[Any] = []

    def init(self, ctx: Pass, scope: JobScope) -> None:
        self._jobs = list(reversed(scope.jobs))
        Recorder.calls.append(("init", tuple(q.name for q in scope.queues)))

    def next(self) -> Job | None:
        return self._jobs.pop(0) if self._jobs else None

    def blocked(self, job: Job) -> None:
        Recorder.calls.append(("blocked", job.request.tag))

    def fini(self) -> None:
        Recorder.calls.append("fini")


def cpu_harness(slots: int = 8, **overrides: Any) -> Harness:
    return Harness(make_policy(initial_concurrent_experiments=slots,
                               max_concurrent_experiments=slots, **overrides))


def launched_tags(h: Harness) -> list[str]:
    return [h.sched.jobs[job_id].request.tag for job_id, _ in h.launch_all()]


def harness(picker: str, slots: int = 8, gpus: int = 0, **overrides: Any) -> Harness:
    profiles = {"cpu": CPU,
                "g1": Profile(name="g1", accelerator="gpu", gpu_count=1),
                "g2": Profile(name="g2", accelerator="gpu", gpu_count=2)}
    h = Harness(Policy(profiles=profiles, default_profile="cpu", job_picker=picker,
                       initial_concurrent_experiments=slots, max_concurrent_experiments=slots,
                       **overrides))
    if gpus:
        h.handle(HostSampled(at=h.now, pressure=CALM, gpus=GpuSample(source="fake", devices=tuple(
            GpuDevice(uuid=f"GPU-{i}", index=i, name="t", memory_total_mib=81920.0,
                      memory_used_mib=0.0, utilization_pct=0.0) for i in range(gpus)))))
    return h


# -- preemption: a harness that feeds back every decision and keeps a journal --------


WIDE = Profile(name="wide", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
               gpu_utilization_pct=70.0)
BIG = Profile(name="big", accelerator="gpu", gpu_count=1, gpu_memory_gb=60.0,
              gpu_utilization_pct=30.0)
MID = Profile(name="mid", accelerator="gpu", gpu_count=1, gpu_memory_gb=30.0,
              gpu_utilization_pct=30.0)
EXCL = Profile(name="excl", accelerator="gpu", gpu_count=1)  # unknown demand: exclusive


def queues(mode: str = "suspend", low_priority: int = 0, **high: Any) -> tuple[Queue, ...]:
    return (Queue(name="high", priority=10, work_classes=("mature",),
                  preemptible_queues=("low",), preempt=mode, **high),
            Queue(name="low", priority=low_priority, work_classes=("scout", "ordinary")))


class PreemptRun(Harness):
    """The harness, with every decision of a pass fed back as the daemon does; ``journal``:
    the records the driver committed, through JSON."""

    def __init__(self, slots: int = 1, mode: str = "suspend", gpus: int = 0,
                 profiles: tuple[Profile, ...] = (), **overrides: Any) -> None:
        overrides.setdefault("queues", queues(mode))
        super().__init__(make_policy(
            profiles={p.name: p for p in (CPU, GPU, WIDE, BIG, MID, EXCL, *profiles)},
            initial_concurrent_experiments=slots, min_concurrent_experiments=1,
            max_concurrent_experiments=slots, **overrides))
        self.journal = self.records
        self.effects: list[Effect] = []
        self.handle(CoordinatorStarted(at=self.tick(), policy=self.sched.policy.to_dict(), pid=1,
                                       host="h", boot_id="boot"))
        if gpus:
            self.handle(HostSampled(at=self.tick(), gpus=GpuSample(source="fake", devices=tuple(
                GpuDevice(uuid=f"GPU-{i}", index=i, name="fake", memory_total_mib=81920.0,
                          memory_used_mib=0.0, utilization_pct=0.0) for i in range(gpus)))))

    def feed(self, events: list[Event], launch: bool = False) -> list[Effect]:
        effects = super().feed(events, launch)
        self.effects += effects
        return effects

    def decide(self) -> list[Event]:
        """One pass, its decisions one batch; then every reason, as status asks."""
        events = list(self.sched.next_launches(self.tick()))
        self.feed(events)
        self.status()
        return events

    def start(self, tag: str, work_class: str = "ordinary", profile: str = "cpu") -> str:
        """Submit a job and run it: launched, its shim seen, GO."""
        job_id = self.submit(tag, work_class=work_class, profile=profile)["job_id"]
        launched = [e for e in self.decide() if isinstance(e, AttemptLaunched)]
        assert [e.job_id for e in launched] == [job_id], self.sched.pending
        self.go(job_id, "a1")
        return job_id

    def state(self, job_id: str) -> str:
        return self.sched.jobs[job_id].state.value


def kinds(events: list[Event]) -> list[tuple[str, str, str]]:
    return [(type(e).__name__, e.job_id, getattr(e, "mode", "")) for e in events]


def replayed(journal: list[dict[str, Any]]) -> Scheduler:
    sched = Scheduler()
    for record in journal:
        sched.handle(from_record(record))
    return sched


# -- the state tables as docs/PROTOCOL.md draws them -------------------------------

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "PROTOCOL.md"


def state_diagram_tool() -> ModuleType:
    """tools/state_diagram.py, the script that draws and checks the tables."""
    spec = importlib.util.spec_from_file_location("state_diagram",
                                                  ROOT / "tools" / "state_diagram.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_table(name: str) -> dict[tuple[Any, Enum], Any]:
    """Machine ``name``'s table as docs/PROTOCOL.md draws it, in the enums of its code
    table (``none``: None): the copy a reader checks, which tests compare the code with."""
    table = TABLES[name]
    trigger_type = type(next(iter(table))[1])
    state_type = type(next(state for state, _ in table if state is not None))
    member = {"none": None, **{state.value: state for state in state_type}}
    text = PROTOCOL.read_text(encoding="utf-8")
    first, last = state_diagram_tool().blocks(text)[name]
    lines = text.splitlines()[first + 1:last]
    drawn = [line.strip() for line in lines if "-->" in line]
    table_drawn = {}
    for line in drawn:
        source, rest = line.split(" --> ")
        target, trigger = rest.split(": ")
        table_drawn[(member[source], trigger_type(trigger))] = member[target]
    assert len(table_drawn) == len(drawn), f"the {name} drawing repeats a move"
    return table_drawn


# -- backfill: a cluster of eight GPUs whose jobs run exactly their ETA --------------


def gpu_profiles(**shapes: tuple[int, float | None, float | None]) -> dict[str, Profile]:
    """"cpu" and GPU profiles by name, each (GPU count, memory GB, utilization %): a
    demand given as None is unknown (R-CFG-5)."""
    return {"cpu": Profile(name="cpu", accelerator="cpu"), **{
        name: Profile(name=name, accelerator="gpu", gpu_count=count, gpu_memory_gb=memory,
                      gpu_utilization_pct=utilization)
        for name, (count, memory, utilization) in shapes.items()}}


BACKFILL_PROFILES = gpu_profiles(g1=(1, 30.0, 60.0), g8=(8, 30.0, 60.0), g2=(2, 30.0, 60.0),
                                 g3=(3, 30.0, 60.0), small=(1, 5.0, 30.0))


def backfill_policy(job_picker: str = "backfill", slots: int = 16, **overrides: Any) -> Policy:
    return Policy(profiles=BACKFILL_PROFILES, default_profile="g1", job_picker=job_picker,
                  initial_concurrent_experiments=slots, max_concurrent_experiments=slots,
                  min_concurrent_experiments=slots, **overrides)


def sample(external: tuple[float, ...]) -> GpuSample:
    """Devices GPU-0.. with this much external utilization each."""
    return GpuSample(source="fake", devices=tuple(
        GpuDevice(uuid=f"GPU-{i}", index=i, name="fake", memory_total_mib=81920.0,
                  memory_used_mib=0.0, utilization_pct=load) for i, load in enumerate(external)))


class Cluster:
    """A harness on (eight idle) GPUs whose jobs run exactly as long as their ETA says."""

    def __init__(self, pol: Policy, external: tuple[float, ...] = (0.0,) * 8) -> None:
        self.h = Harness(pol)
        self.h.handle(HostSampled(at=self.h.now, gpus=sample(external), pressure=CALM))
        self.serial = 0
        self.started: dict[str, float] = {}  # tag -> when it launched

    @property
    def now(self) -> float:
        return self.h.now

    def submit(self, profile: str, eta: float | None, peer: str = "a",
               work_class: str = "ordinary") -> str:
        self.serial += 1
        tag = f"{profile}-{self.serial}"
        fields: dict[str, Any] = {"profile": profile, "work_class": work_class}
        if eta is not None:
            fields["eta_s"] = eta
        assert self.h.submit(tag, peer=peer, **fields)["outcome"] == "accepted"
        return tag

    def schedule(self) -> list[str]:
        launched = []
        events = self.h.sched.next_launches(self.h.now)
        self.h.feed(list(events))
        for event in events:
            self.h.go(event.job_id, event.attempt_id)
            tag = self.h.sched.jobs[event.job_id].request.tag
            self.started[tag] = event.at
            launched.append(tag)
        return launched

    def advance(self, seconds: float) -> None:
        """Let time pass; every job whose ETA is up exits 0 at its ETA."""
        until = self.h.now + seconds
        for job in sorted(self.h.sched.running(), key=lambda j: j.order):
            eta = job.request.eta_s
            if eta is not None and job.current.started_at + eta <= until:
                self.h.now = job.current.started_at + eta - 0.5
                self.h.exit(job.job_id, job.current.attempt_id, 0)
        self.h.now = until

    def reason(self, tag: str) -> str:
        job = next(j for j in self.h.sched.jobs.values() if j.request.tag == tag)
        return self.h.sched.pending.get(job.job_id, "")


def stream(cluster: Cluster, horizon: float, eta: float, every: float = 10.0) -> None:
    """A 1-GPU job every ``every`` seconds, scheduling after each, until ``horizon``."""
    while cluster.now < horizon:
        cluster.submit("g1", eta)
        cluster.advance(every)
        cluster.schedule()


# -- a workload on a virtual host, through the driver --------------------------------


POLICIES = Path(__file__).resolve().parents[2] / "fixtures" / "policies"
FCFS, BACKFILL = POLICIES / "fcfs.yaml", POLICIES / "backfill.yaml"
GPUS = GpuSample(source="fake", devices=tuple(
    GpuDevice(uuid=f"GPU-{i}", index=i, name="fake H200", memory_total_mib=143771.0,
              memory_used_mib=0.0, utilization_pct=0.0) for i in range(8)))


@dataclass(frozen=True)
class Arrival:
    """One job of the workload: when it comes, its request, and how long it runs."""

    at: float
    request: Request
    profile: Profile
    duration_s: float


def busy_trace(seed: int, jobs: int = 400, eta_seed: int | None = 7) -> list[Arrival]:
    """Narrow and wide jobs, some sharing GPUs, arriving faster than 8 GPUs serve them;
    their ETAs are off by a lognormal factor, as a peer's guesses are (drawn from
    ``eta_seed``'s generator, or with the jobs' own when None)."""
    rng = random.Random(seed)
    noise = rng if eta_seed is None else random.Random(eta_seed)
    at, trace = 0.0, []
    for i in range(jobs):
        at += rng.expovariate(1 / 40)
        shared = rng.random() < 0.3
        gpus, duration = rng.choice([1, 1, 1, 2, 4, 8]), rng.choice([30, 300, 3000, 20000])
        util, mem = (rng.choice([30, 50]), rng.choice([20, 70])) if shared else (None, None)
        profile = Profile(name=f"g{gpus}-u{util}-m{mem}", accelerator="gpu", gpu_count=gpus,
                          gpu_utilization_pct=util, gpu_memory_gb=mem)
        request = Request(request_id=f"j{i}", peer=f"u{rng.randint(1, 5)}", tag=f"j{i}",
                          profile=profile.name, argv=("trace-job", f"j{i}"),
                          eta_s=duration * math.exp(noise.gauss(0.0, 0.5)))
        trace.append(Arrival(round(at), request, profile, duration))
    return trace


def drive(policy: Policy, trace: list[Arrival],
          after_pass: Callable[[Scheduler, float, list[str]], None] | None = None
          ) -> Scheduler:
    """The core runs ``trace`` to its end on 8 idle GPUs of a virtual host, its target at
    the task file's cap: every arrival submitted at its time, a pass at each instant,
    after which ``after_pass`` is given the instant and the request ids that arrived."""
    profiles = {**policy.profiles, **{a.profile.name: a.profile for a in trace}}
    policy = replace(policy, profiles=profiles,
                     initial_concurrent_experiments=upper_bound(policy, None))
    sched = Scheduler(policy)
    sched.handle(CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="test",
                                    boot_id="memory"))
    sched.handle(HostSampled(at=0.0, gpus=GPUS, pressure=PressureSample(
        source="simulated", cpu=0.0, memory=0.0, io=0.0)))
    runs = {a.request.request_id: Plan(a.duration_s) for a in trace}
    loop = VirtualLoop(sched, MemoryBackend(lambda launch: runs[launch.metadata["request_id"]]))
    arrivals = deque(trace)
    while arrivals or loop.next_end() < math.inf:
        now = min(arrivals[0].at if arrivals else math.inf, loop.next_end())
        loop.advance(now)
        arrived = []
        while arrivals and arrivals[0].at == now:
            request = arrivals.popleft().request
            loop.handle(RequestSeen(at=now, name=f"{request.request_id}.json",
                                    digest=request.request_id,
                                    request_id=request.request_id, request=request))
            arrived.append(request.request_id)
        for event in sched.next_launches(now):
            loop.handle(event)
        if after_pass is not None:
            after_pass(sched, now, arrived)
    return sched
