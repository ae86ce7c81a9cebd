"""`praxist-fs simulate`: replay a job trace through the real scheduler core.

A policy is judged on real arrival patterns before it meets a cluster, so the
replay drives the very ``Scheduler`` the coordinator runs, with the events the
daemon feeds it: a parsed request at the job's submit time, each launch the
core decides, the shim's READY (the core answers GO), and the exit the trace's
duration implies. The clock is virtual and jumps from one arrival or
completion to the next; the GPUs are N idle H200-like devices in the
documented fake inventory format, placed by the core's own per-device limits.

The task file's concurrency limits hold as on a calm host, where the target sits at
``max_concurrent_experiments`` (``auto``: 8, the cap bound); ``uncapped`` raises them to
the job count, so GPUs are the only constraint. Host pressure, which the trace says
nothing about, is one calm sample. Each trace job gets a generated profile:
``gpus`` devices, exclusive unless the trace declares ``gpu_util_pct`` and
``gpu_mem_gb`` (and placement is ``declared``), and the trace's ``work_class``, which
selects its queue. Preemptions (R-POL-3) are the core's too; the virtual world carries
them out: a suspended job's remaining run time is frozen until it resumes, and a job
preempted for requeue ends at once and later runs again from zero. A core that went on
preempting the same jobs without the clock moving would never let the replay end: it is
reported as a livelock instead (R-SIM-1, ``Watch``). Each job's own record (``JobRecord``:
first start, time off its devices after it, end, preemptions, devices) is what every
summary is computed from. See docs/SIMULATE.md.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .adapters.gpus import parse_fake_inventory
from .backends.memory import MemoryBackend, Run, VirtualHost
from .core.admission import upper_bound
from .core.effects import WriteReply
from .core.events import (
    AttemptLaunched, AttemptPreempted, CoordinatorStarted, Event, HostSampled, RequestSeen,
)
from .core.model import Job
from .core.observations import GpuSample, PressureSample
from .core.policy import WORK_CLASSES, Policy, Profile
from .core.preemption import MAX_PREEMPTIONS_FOR_ONE
from .core.request import NAME_EXPECTED, NAME_RE, parse_request
from .core.scheduler import Scheduler
from .core.states import JobState, PreemptMode
from .driver import VirtualLoop
from .errors import BadRequest, PraxistError
from .simulated_devices import DeviceLedger, Share

REQUIRED_COLUMNS = ("job_id", "submit_s", "duration_s", "gpus", "user")
SHARE_COLUMNS = ("gpu_util_pct", "gpu_mem_gb")
OPTIONAL_COLUMNS = (*SHARE_COLUMNS, "work_class")
PLACEMENTS = ("declared", "exclusive")
H200_MIB = 143771            # what NVML reports for an H200 (fixtures/gpus/eight_h200.json)
H200_MODEL = "NVIDIA H200"
MAX_ETA_S = 365 * 86400      # the request's eta_s limit
METRICS = ("mean_delay_s", "p50_delay_s", "p95_delay_s", "max_delay_s", "mean_jct_s",
           "p95_jct_s",
           "mean_suspended_s", "mean_slowdown", "p95_slowdown", "gpu_utilization",
           "preemptions")
MAX_IDLE_ROUNDS = 50         # decision rounds at one instant that start nothing new
JOB_COLUMNS = ("policy", "placement", "job_id", "user", "work_class", "gpus", "submit_s",
               "start_s", "end_s", "duration_s", "delay_s", "suspended_s", "jct_s",
               "slowdown", "preemptions", "devices")


class TraceError(PraxistError):
    """The trace file is wrong; the message names the file, line and column."""


class Livelock(PraxistError):
    """The core kept preempting the same jobs while the virtual clock stood still."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int
    user: str
    gpu_util_pct: float | None = None
    gpu_mem_gb: float | None = None
    work_class: str | None = None  # None: the request's default
    # what the job's peer declared (a run's history); None: its duration, the exact ETA
    # (noisy with --eta-noise)
    eta_s: float | None = None


# --- the trace ----------------------------------------------------------------


def load_trace(path: str | Path, limit: int | None = None) -> list[TraceJob]:
    """The trace's jobs in submission order (ties keep file order), the first ``limit``."""
    source = str(path)
    try:
        with open(source, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise TraceError(f"{source}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except csv.Error as exc:
        raise TraceError(f"{source}: not CSV ({exc})") from None
    if not rows:
        raise TraceError(f"{source}: empty; expected a header: {','.join(REQUIRED_COLUMNS)}")
    header = [name.strip() for name in rows[0]]
    for name in header:
        if name not in REQUIRED_COLUMNS + OPTIONAL_COLUMNS:
            raise TraceError(f"{source} line 1: unknown column {name!r}; expected "
                             + ", ".join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS))
        if header.count(name) > 1:
            raise TraceError(f"{source} line 1: column {name!r} appears twice")
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise TraceError(f"{source} line 1: missing column {missing[0]!r} "
                         f"(required: {', '.join(REQUIRED_COLUMNS)})")
    jobs: list[TraceJob] = []
    lines: dict[str, int] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise TraceError(f"{source} line {line}: {len(row)} fields; the header has "
                             f"{len(header)}")
        job = _trace_job(dict(zip(header, (cell.strip() for cell in row))),
                         f"{source} line {line}")
        if job.job_id in lines:
            raise TraceError(f"{source} line {line}: column job_id: {job.job_id!r} again "
                             f"(first at line {lines[job.job_id]})")
        lines[job.job_id] = line
        jobs.append(job)
    jobs.sort(key=lambda j: j.submit_s)  # stable: same-second jobs keep file order
    return jobs[:limit] if limit is not None else jobs


def _trace_job(cells: dict[str, str], where: str) -> TraceJob:
    def fail(column: str, expected: str) -> TraceError:
        return TraceError(f"{where}: column {column}: got {cells[column]!r}, expected {expected}")

    def number(column: str, low: float, *, above: bool, high: float = math.inf) -> float:
        try:
            value = float(cells[column])
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > low if above else value >= low)
                and value <= high):
            raise fail(column, f"a number {'>' if above else '>='} {low:g}"
                       + (f" and <= {high:g}" if high < math.inf else ""))
        return value

    for column in ("job_id", "user"):
        if not NAME_RE.fullmatch(cells[column]):
            raise fail(column, NAME_EXPECTED)
    if not (cells["gpus"].isascii() and cells["gpus"].isdigit()) or int(cells["gpus"]) < 1:
        raise fail("gpus", "an integer >= 1")
    optional: dict[str, Any] = {
        column: number(column, 0, above=True, high=100 if column == "gpu_util_pct"
                       else math.inf) if cells.get(column) else None
        for column in SHARE_COLUMNS}
    if cells.get("work_class"):
        if cells["work_class"] not in WORK_CLASSES:
            raise fail("work_class", f"one of {', '.join(WORK_CLASSES)}")
        optional["work_class"] = cells["work_class"]
    return TraceJob(job_id=cells["job_id"], submit_s=number("submit_s", 0, above=False),
                    duration_s=number("duration_s", 0, above=True), gpus=int(cells["gpus"]),
                    user=cells["user"], **optional)


def trace_from_history(jobs: Iterable[Job], profiles: dict[str, Profile],
                       since: float | None = None) -> tuple[list[TraceJob], Counter[str]]:
    """A run's own jobs as a trace (``--from-run``), so a task file can be judged on the
    workload it will meet: each job submitted at or after ``since`` whose last attempt
    ended, with its submit time (the first of them is 0), peer, work class, its profile's
    declared GPU demand, the ETA its peer gave, and the run time it actually had
    (suspensions taken out). The
    jobs left out, counted by why. One walk of ``jobs`` that keeps only what the trace
    needs of each (a run's finished jobs come off its snapshot one at a time)."""
    # (submitted, order), job id, peer, work class, ETA, profile, run time: not the job
    chosen: list[tuple[tuple[float, int], str, str, str, Any, Profile, float]] = []
    left_out: Counter[str] = Counter()
    for job in jobs:
        if since is not None and job.submitted_at < since:
            continue
        ran = [a for a in job.attempts if a.ended_at is not None]
        profile = profiles.get(job.profile)
        if not ran:
            left_out["never ended an attempt (queued, running or cancelled before it ran)"] += 1
        elif profile is None:
            left_out[f"profile {job.profile!r} is no longer in the run's task file"] += 1
        elif profile.accelerator != "gpu" or profile.gpu_count < 1:
            left_out["uses no GPU"] += 1
        else:
            last = ran[-1]
            # a job that ended within the clock's resolution still ran: one millisecond
            request = job.request
            chosen.append(((job.submitted_at, job.order), job.job_id, request.peer,
                           request.work_class, request.eta_s, profile,
                           max(last.active_seconds(last.ended_at), 1e-3)))
    chosen.sort(key=lambda entry: entry[0])
    origin = chosen[0][0][0] if chosen else 0.0
    trace = [TraceJob(job_id=job_id, submit_s=submitted_at - origin, duration_s=run_s,
                      gpus=profile.gpu_count, user=peer,
                      gpu_util_pct=profile.gpu_utilization_pct,
                      gpu_mem_gb=profile.gpu_memory_gb, work_class=work_class, eta_s=eta_s)
             for (submitted_at, _), job_id, peer, work_class, eta_s, profile, run_s in chosen]
    return trace, left_out


# --- one replay -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SimulatedGpu:
    """The simulated device: what ``--gpu-model`` and ``--gpu-memory-gb`` set."""

    model: str = H200_MODEL
    memory_mib: int = H200_MIB


@dataclass(slots=True)
class JobRecord:
    """One trace job as the replay saw it. ``start`` is its first start; every later
    stretch off its devices (suspended, or requeued and waiting again) is
    ``suspended_s``. Its queueing delay is every wait: until its first start and each
    of those stretches (R-SIM-2), so preemption cannot hide waiting; ``suspended_s``
    says how much of it came after the first start."""

    job: TraceJob
    start: float | None = None
    end: float | None = None
    suspended_s: float = 0.0
    preemptions: int = 0
    devices: set[int] = field(default_factory=set)
    off_since: float | None = None  # preempted at, until it runs again

    @property
    def delay_s(self) -> float | None:
        """Every wait: submission to first start, and each stretch off its devices since."""
        return None if self.start is None else self.start - self.job.submit_s + self.suspended_s

    @property
    def jct_s(self) -> float | None:
        return None if self.end is None else self.end - self.job.submit_s

    @property
    def slowdown(self) -> float | None:
        """Completion time over the job's own run time: 1 when it never waited."""
        return None if self.jct_s is None else self.jct_s / self.job.duration_s

    def row(self, policy: str, placement: str) -> dict[str, Any]:
        """Its ``--jobs-csv`` row (``JOB_COLUMNS``); a job that never ended has empty cells."""
        def cell(value: float | None) -> str:  # to the microsecond, no exponent
            return "" if value is None else f"{round(value, 6):.15g}"

        return {"policy": policy, "placement": placement, "job_id": self.job.job_id,
                "user": self.job.user, "work_class": self.job.work_class or "ordinary",
                "gpus": self.job.gpus, "submit_s": cell(self.job.submit_s),
                "start_s": cell(self.start), "end_s": cell(self.end),
                "duration_s": cell(self.job.duration_s), "delay_s": cell(self.delay_s),
                "suspended_s": cell(self.suspended_s), "jct_s": cell(self.jct_s),
                "slowdown": cell(self.slowdown),
                "preemptions": self.preemptions,
                "devices": " ".join(str(d) for d in sorted(self.devices))}


@dataclass(slots=True)
class Result:
    """One policy under one placement mode: the metrics and the curves behind them."""

    policy: str
    placement: str
    gpus: int
    jobs: int
    completed: int
    unrunnable: list[dict[str, str]]
    mean_delay_s: float | None
    p50_delay_s: float | None
    p95_delay_s: float | None
    max_delay_s: float | None
    mean_jct_s: float | None
    p95_jct_s: float | None
    mean_suspended_s: float | None
    mean_slowdown: float | None
    p95_slowdown: float | None
    gpu_utilization: float | None
    preemptions: int
    makespan_s: float | None
    wall_s: float
    # the task file's limits ("task file") or lifted ("uncapped"); the cap and the most
    # jobs that ran at once under it
    concurrency: str
    max_concurrent: int
    peak_running: int
    series: list[tuple[float, int, float]] = field(repr=False)  # (t, queued, busy GPUs)
    # the completed jobs' summaries by GPU count (``size_class``): "1" ... "8", ">8"
    by_gpus: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    # and by work class: "scout", "ordinary", "mature" (those the trace has)
    by_class: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    # (victim, preemptor) trace job ids -> how often the core preempted one for the other
    preempted: Counter[tuple[str, str]] = field(default_factory=Counter)
    records: list[JobRecord] = field(default_factory=list, repr=False)  # every trace job
    # the core's state at the end, for ``--report`` (kept only when asked: it is the
    # whole trace's jobs)
    scheduler: Scheduler | None = field(default=None, repr=False)
    # virtual seconds during which the cap on jobs at once, not the GPUs, held work back:
    # as many jobs ran as it allows, others waited, and a device held nothing
    cap_bound_s: float = 0.0
    # decisions that broke a per-device limit (``DeviceLedger``), and the first of them
    capacity_violations: int = 0
    violations: list[str] = field(default_factory=list)

    def to_dict(self, *, wall: bool = True) -> dict[str, Any]:
        """The JSON result; ``wall=False`` (``--deterministic``) leaves out the one field
        that differs between two runs of the same replay."""
        return {"policy": self.policy, "placement": self.placement, "gpus": self.gpus,
                "jobs": self.jobs, "completed": self.completed,
                **{name: getattr(self, name) for name in METRICS},
                "makespan_s": self.makespan_s,
                **({"wall_s": round(self.wall_s, 3)} if wall else {}),
                "concurrency": self.concurrency, "max_concurrent": self.max_concurrent,
                "peak_running": self.peak_running, "cap_bound_s": self.cap_bound_s,
                "capacity_violations": self.capacity_violations,
                "violations": self.violations,
                "by_gpus": self.by_gpus, "by_class": self.by_class,
                "unrunnable": self.unrunnable,
                "preempted": [{"job_id": victim, "by": by, "times": times}
                              for (victim, by), times in sorted(self.preempted.items())]}


def fake_inventory(count: int, device: SimulatedGpu = SimulatedGpu()) -> GpuSample:
    """``count`` idle ``device``s, through the same parser as ``serve --fake-gpus``."""
    devices = [{"uuid": f"GPU-sim-{i}", "index": i, "name": f"{device.model} (simulated)",
                "memory_total_mib": device.memory_mib} for i in range(count)]
    return GpuSample(source="fake", devices=parse_fake_inventory(json.dumps({"devices": devices})))


def profile_for(job: TraceJob, placement: str) -> Profile:
    """The generated profile of a trace job: its GPU count, its declared share if any."""
    util, mem = (job.gpu_util_pct, job.gpu_mem_gb) if placement == "declared" else (None, None)
    name = f"sim-g{job.gpus}" + (f"-u{util:g}" if util is not None else "") + (
        f"-m{mem:g}" if mem is not None else "")
    return Profile(name=name, accelerator="gpu", gpu_count=job.gpus, gpu_utilization_pct=util,
                   gpu_memory_gb=mem)


def simulation_policy(policy: Policy, profiles: list[Profile], jobs: int,
                      uncapped: bool = False) -> Policy:
    """The policy with the trace's profiles added. Its concurrency target starts where a
    calm host takes it, at its upper bound (the ramp from ``initial_concurrent_experiments``
    takes a few samples, seconds against a trace's hours); ``uncapped`` raises the cap to
    the job count instead."""
    profiles_in = {**policy.profiles, **{p.name: p for p in profiles}}
    if uncapped:
        cap = max(1, jobs, policy.min_concurrent_experiments)
        return replace(policy, profiles=profiles_in, initial_concurrent_experiments=cap,
                       max_concurrent_experiments=cap)
    return replace(policy, profiles=profiles_in,
                   initial_concurrent_experiments=upper_bound(policy, None))


def replay(jobs: list[TraceJob], *, gpus: int, policy: Policy, placement: str = "declared",
           name: str = "default", eta_noise: float = 0.0, seed: int = 0,
           uncapped: bool = False, device: SimulatedGpu = SimulatedGpu(),
           keep_scheduler: bool = False) -> Result:
    """Replay ``jobs`` (in submission order) on ``gpus`` simulated ``device``s, under the
    task file's concurrency limits unless ``uncapped``; ``keep_scheduler``: the result
    keeps the core's final state (``Result.scheduler``, for ``--report``)."""
    started_wall = time.perf_counter()
    too_big = [j for j in jobs if j.gpus > gpus]
    runnable = [j for j in jobs if j.gpus <= gpus]
    profiles = [profile_for(j, placement) for j in runnable]
    policy = simulation_policy(policy, profiles, len(runnable), uncapped)
    sched = Scheduler(policy)
    sched.handle(CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="simulator",
                                    boot_id="simulated"))
    inventory = fake_inventory(gpus, device)
    sched.handle(HostSampled(at=0.0, gpus=inventory, pressure=PressureSample(
        source="simulated", cpu=0.0, memory=0.0, io=0.0)))
    index = {d.uuid: d.index for d in inventory.devices}
    rng = random.Random(seed)
    records: dict[str, JobRecord] = {}  # core job id -> its record, in submission order
    share: dict[str, float] = {}   # core job id -> GPUs of work it does while it runs
    loop = VirtualLoop(sched, MemoryBackend(
        lambda launch: Run(records[launch.job_id].job.duration_s),
        VirtualHost(boot_id="simulated")))
    series: list[tuple[float, int, float]] = []
    watch = Watch(f"policy {name} ({placement})")
    busy, nxt, peak = 0.0, 0, 0
    ledger = DeviceLedger(gpus, device.memory_mib)  # the audit of every decision
    shares: dict[str, Share] = {}         # core job id -> what it holds on each device
    held: dict[str, tuple[int, ...]] = {}  # core job id -> its attempt's devices
    cap, cap_bound_s, bound_since = upper_bound(policy, None), 0.0, None

    def ended(now: float) -> None:
        """The ends the virtual host has reached by ``now``: a completion frees its GPUs
        (an evicted attempt gave them up when it was preempted)."""
        nonlocal busy
        for event in loop.advance(now):
            if sched.jobs[event.job_id].state is JobState.COMPLETED:
                records[event.job_id].end = now
                busy -= share[event.job_id]
                ledger.release(held.pop(event.job_id), shares[event.job_id])

    while nxt < len(runnable) or loop.next_end() < math.inf:
        now = min(runnable[nxt].submit_s if nxt < len(runnable) else math.inf,
                  loop.next_end())
        if bound_since is not None:
            cap_bound_s += now - bound_since
        ended(now)  # free GPUs before arrivals take them
        while nxt < len(runnable) and runnable[nxt].submit_s == now:
            job, profile = runnable[nxt], profiles[nxt]
            core_id = _submit(sched, job, profile.name, now, eta_noise, rng)
            records[core_id] = JobRecord(job)
            share[core_id] = job.gpus * (job.gpu_util_pct or 100.0) / 100
            shares[core_id] = Share.of(profile.gpu_utilization_pct, profile.gpu_memory_gb)
            nxt += 1
        decide = True
        while decide:  # again at the same instant once an evicted job has left
            decide = False
            events = sched.next_launches(now)
            for event in events:
                loop.handle(event)
                core_id = event.job_id
                record = records[core_id]
                watch.saw(now, event, records)
                if isinstance(event, AttemptPreempted):
                    busy -= share[core_id]
                    record.preemptions += 1
                    record.off_since = now
                    if event.mode == PreemptMode.SUSPEND:
                        ledger.pause(held[core_id], shares[core_id])
                    else:  # TERM: it ends now, its work is lost
                        ledger.release(held.pop(core_id), shares[core_id])
                        ended(now)
                        decide = True
                    continue
                if isinstance(event, AttemptLaunched):
                    held[core_id] = tuple(index[uuid] for uuid in event.gpus)
                    record.devices.update(held[core_id])
                    ledger.take(record.job.job_id, held[core_id], shares[core_id], now)
                else:  # resumed on the devices it kept
                    ledger.resume(record.job.job_id, held[core_id], shares[core_id], now)
                if record.start is None:
                    record.start = now
                if record.off_since is not None:
                    record.suspended_s += now - record.off_since
                    record.off_since = None
                busy += share[core_id]
            watch.round(now, events, records)
            peak = max(peak, loop.backend.host.running)
        queued = sched.count(JobState.QUEUED)
        series.append((now, queued, busy))
        # the cap, not the GPUs, holds work back: as many run as it allows, jobs wait,
        # and a device holds nothing
        bound_since = now if (loop.backend.host.running >= cap and queued
                              and ledger.idle) else None
    sched.refresh_reasons()
    unrunnable = [{"job_id": j.job_id, "reason": f"needs {j.gpus} GPUs; the simulated "
                   f"cluster has {gpus}"} for j in too_big]
    unrunnable += [{"job_id": records[j.job_id].job.job_id,
                    "reason": sched.pending.get(j.job_id, j.reason)}
                   for j in (*sched.queued(), *sched.suspended())]
    result = _result(name, placement, gpus, jobs, records, share, unrunnable,
                     series, time.perf_counter() - started_wall, watch.preempted,
                     "uncapped" if uncapped else "task file", cap, peak)
    result.cap_bound_s = cap_bound_s
    result.capacity_violations = ledger.broken
    result.violations = ledger.violations
    result.scheduler = sched if keep_scheduler else None
    return result


@dataclass(slots=True)
class Watch:
    """R-SIM-1's safety net: the replay's decisions, and a livelock reported, not spun.

    The clock stands still while the core decides at one instant. Two ways it could go
    on deciding there for ever, each a ``Livelock`` naming the jobs: the core preempts a
    job more than ``MAX_PREEMPTIONS_FOR_ONE`` times for the same job (a circle that no
    completion or arrival will break), or more than ``MAX_IDLE_ROUNDS`` rounds of
    decisions in a row start no job that had not already run at that instant (jobs
    pushed back and forth among themselves)."""

    label: str  # the policy and placement, for the message
    preempted: Counter[tuple[str, str]] = field(default_factory=Counter)  # whole replay
    at: float = -math.inf
    now: Counter[tuple[str, str]] = field(default_factory=Counter)  # at this instant
    decided: list[str] = field(default_factory=list)                # at this instant
    ran: set[str] = field(default_factory=set)       # jobs started at this instant
    idle_rounds: int = 0                             # rounds in a row that started none anew
    involved: set[str] = field(default_factory=set)  # the jobs those rounds moved

    def saw(self, at: float, event: Event, jobs: dict[str, JobRecord]) -> None:
        """One decision of the core at ``at``; ``jobs`` names them (core id -> record)."""
        self._at(at)
        job = jobs[event.job_id].job.job_id
        if not isinstance(event, AttemptPreempted):
            verb = "starts" if isinstance(event, AttemptLaunched) else "resumes"
            self.decided.append(f"{job} {verb}")
            return
        pair = (job, jobs[event.by].job.job_id)
        decision = f"{pair[1]} preempts {job}"
        self.preempted[pair] += 1
        self.now[pair] += 1
        if self.now[pair] > MAX_PREEMPTIONS_FOR_ONE:
            last = len(self.decided) - self.decided[::-1].index(decision) - 1
            raise Livelock(
                f"{self.label}: livelock at t={at:g} s: job {job} preempted "
                f"{self.now[pair]} times for job {pair[1]} while the clock stood still; "
                f"it goes round: {' -> '.join([*self.decided[last:], decision])}")
        self.decided.append(decision)

    def round(self, at: float, events: list[Event], jobs: dict[str, JobRecord]) -> None:
        """One round of decisions at ``at`` is over: it made progress if it started or
        resumed a job not yet run at this instant."""
        self._at(at)
        names = {jobs[e.job_id].job.job_id for e in events}
        started = {jobs[e.job_id].job.job_id for e in events
                   if not isinstance(e, AttemptPreempted)}
        if started - self.ran or not events:
            self.idle_rounds, self.involved = 0, set()
        else:
            self.idle_rounds += 1
            self.involved |= names
        self.ran |= started
        if self.idle_rounds > MAX_IDLE_ROUNDS:
            raise Livelock(
                f"{self.label}: livelock at t={at:g} s: {self.idle_rounds} rounds of "
                f"decisions in a row started no new job while the clock stood still; "
                f"jobs involved: {', '.join(sorted(self.involved))}")

    def _at(self, at: float) -> None:
        if at != self.at:
            self.at, self.now, self.decided = at, Counter(), []
            self.ran, self.idle_rounds, self.involved = set(), 0, set()


def _submit(sched: Scheduler, job: TraceJob, profile: str, now: float, eta_noise: float,
            rng: random.Random) -> str:
    """One request file's bytes through ``parse_request``, as the spool would read them."""
    noisy = job.duration_s * math.exp(rng.gauss(0.0, eta_noise)) if eta_noise else job.duration_s
    eta = noisy if job.eta_s is None else job.eta_s
    name = f"{job.job_id}.json"
    data = json.dumps({"peer": job.user, "tag": job.job_id, "profile": profile,
                       "argv": ["trace-job", job.job_id], "eta_s": min(eta, MAX_ETA_S),
                       **({"work_class": job.work_class} if job.work_class else {})}).encode()
    try:
        request = parse_request(name, data)
    except BadRequest as exc:
        raise TraceError(f"job {job.job_id}: the core refuses its request: {exc}") from None
    effects = sched.handle(RequestSeen(at=now, name=name, digest=hashlib.sha256(data).hexdigest(),
                                       request_id=request.request_id, request=request))
    reply = next(e.document for e in effects if isinstance(e, WriteReply))
    if reply["outcome"] != "accepted":
        raise TraceError(f"job {job.job_id}: the core answered {reply['outcome']}: "
                         f"{reply['reason']}")
    return reply["job_id"]


def _result(name: str, placement: str, gpus: int, jobs: list[TraceJob],
            records: dict[str, JobRecord], share: dict[str, float],
            unrunnable: list[dict[str, str]], series: list[tuple[float, int, float]],
            wall_s: float, preempted: Counter[tuple[str, str]], concurrency: str,
            max_concurrent: int, peak: int) -> Result:
    done = [r for r in records.values() if r.end is not None]
    makespan = (max(r.end for r in done) - min(r.job.submit_s for r in done)  # type: ignore
                if done else None)
    work = sum(share[c] * r.job.duration_s for c, r in records.items() if r.end is not None)
    submitted = {r.job.job_id: r for r in records.values()}
    whole = summary(done)
    sizes: dict[str, list[JobRecord]] = {}
    for r in sorted(done, key=lambda r: r.job.gpus):
        sizes.setdefault(size_class(r.job.gpus), []).append(r)
    classes: dict[str, list[JobRecord]] = {}
    for r in done:
        classes.setdefault(r.job.work_class or "ordinary", []).append(r)
    return Result(
        policy=name, placement=placement, gpus=gpus, jobs=len(jobs), completed=len(done),
        unrunnable=unrunnable, **{k: v for k, v in whole.items() if k in METRICS},
        gpu_utilization=work / (gpus * makespan) if makespan else None,
        preemptions=preempted.total(), makespan_s=makespan, wall_s=wall_s,
        concurrency=concurrency, max_concurrent=max_concurrent, peak_running=peak,
        series=series, by_gpus={size: summary(rs) for size, rs in sizes.items()},
        by_class={c: summary(classes[c]) for c in WORK_CLASSES if c in classes},
        preempted=preempted, records=[submitted.get(j.job_id) or JobRecord(j) for j in jobs])


def size_class(gpus: int) -> str:
    """A job's row in the per-size breakdown: its GPU count up to 8, then ">8"."""
    return str(gpus) if gpus <= 8 else ">8"


def summary(done: list[JobRecord]) -> dict[str, float | int | None]:
    """What a set of completed jobs went through: queueing delay (every wait, the
    longest too), completion time, time off their devices after their first start, and
    slowdown. Delay and completion time side by side: a policy that starts jobs early
    and then preempts them shows in both."""
    delays = sorted(r.delay_s for r in done)  # type: ignore[type-var]
    jcts = sorted(r.jct_s for r in done)  # type: ignore[type-var]
    slowdowns = sorted(r.slowdown for r in done)  # type: ignore[type-var]
    return {"completed": len(done), "mean_delay_s": mean(delays),
            "p50_delay_s": percentile(delays, 50), "p95_delay_s": percentile(delays, 95),
            "max_delay_s": delays[-1] if delays else None,
            "mean_jct_s": mean(jcts), "p95_jct_s": percentile(jcts, 95),
            "mean_suspended_s": mean([r.suspended_s for r in done]),
            "mean_slowdown": mean(slowdowns), "p95_slowdown": percentile(slowdowns, 95)}


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def write_jobs_csv(results: list[Result], path: str | Path) -> None:
    """``--jobs-csv``: one row per trace job and result (``JOB_COLUMNS``), in trace order."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=JOB_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for result in results:
            writer.writerows(r.row(result.policy, result.placement) for r in result.records)


def percentile(ordered: list[float], pct: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default) of a sorted list."""
    if not ordered:
        return None
    low, high, fraction = percentile_ranks(len(ordered), pct)
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def percentile_ranks(count: int, pct: float) -> tuple[int, int, float]:
    """The two ranks ``percentile`` reads of a sorted list of ``count`` values, and how
    far between them it lies (a caller that streams the values keeps just those two)."""
    pos = (count - 1) * pct / 100
    low = math.floor(pos)
    return low, min(low + 1, count - 1), pos - low
