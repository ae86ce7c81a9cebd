"""`praxist-fs simulate`: replay a job trace through the real scheduler core.

A policy is judged on real arrival patterns before it meets a cluster, so the
replay drives the very ``Scheduler`` the coordinator runs, with the events the
daemon feeds it: a parsed request at the job's submit time, each launch the
core decides, the shim's READY (the core answers GO), and the exit the trace's
duration implies. The clock is virtual and jumps from one arrival or
completion to the next; the GPUs are N idle H200-like devices in the
documented fake inventory format, placed by the core's own per-device limits.

What the replay neutralizes, because the trace says nothing about it: the
concurrency cap (raised to the job count, so GPUs are the only constraint)
and host pressure (one calm sample). Each trace job gets a generated profile:
``gpus`` devices, exclusive unless the trace declares ``gpu_util_pct`` and
``gpu_mem_gb`` (and placement is ``declared``), and the trace's ``work_class``, which
selects its queue. Preemptions (R-POL-3) are the core's too; the virtual world carries
them out: a suspended job's remaining run time is frozen until it resumes, and a job
preempted for requeue ends at once and later runs again from zero. A core that went on
preempting the same jobs without the clock moving would never let the replay end: it is
reported as a livelock instead (R-SIM-1, ``Watch``). See docs/SIMULATE.md.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .adapters.gpus import parse_fake_inventory
from .core.effects import WriteReply
from .core.events import (
    AttemptLaunched, AttemptObserved, AttemptPreempted, CoordinatorStarted, Event,
    HostSampled, RequestSeen,
)
from .core.observations import GpuSample, PressureSample
from .core.policy import WORK_CLASSES, Policy, Profile
from .core.preemption import MAX_PREEMPTIONS_FOR_ONE
from .core.request import NAME_EXPECTED, NAME_RE, parse_request
from .core.scheduler import Scheduler
from .core.states import JobState
from .errors import BadRequest, PraxistError

REQUIRED_COLUMNS = ("job_id", "submit_s", "duration_s", "gpus", "user")
SHARE_COLUMNS = ("gpu_util_pct", "gpu_mem_gb")
OPTIONAL_COLUMNS = (*SHARE_COLUMNS, "work_class")
PLACEMENTS = ("declared", "exclusive")
H200_MIB = 143771            # what NVML reports for an H200 (fixtures/gpus/eight_h200.json)
MAX_ETA_S = 365 * 86400      # the request's eta_s limit
METRICS = ("mean_delay_s", "p50_delay_s", "p95_delay_s", "mean_jct_s", "gpu_utilization",
           "preemptions")


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


# --- one replay -----------------------------------------------------------------


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
    mean_jct_s: float | None
    gpu_utilization: float | None
    preemptions: int
    makespan_s: float | None
    wall_s: float
    series: list[tuple[float, int, float]] = field(repr=False)  # (t, queued, busy GPUs)
    # the delays of the completed jobs by GPU count (``size_class``): "1" ... "8", ">8"
    by_gpus: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    # (victim, preemptor) trace job ids -> how often the core preempted one for the other
    preempted: Counter[tuple[str, str]] = field(default_factory=Counter)
    # the core's state at the end, for ``--report`` (kept only when asked: it is the
    # whole trace's jobs)
    scheduler: Scheduler | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "placement": self.placement, "gpus": self.gpus,
                "jobs": self.jobs, "completed": self.completed,
                **{name: getattr(self, name) for name in METRICS},
                "makespan_s": self.makespan_s, "wall_s": round(self.wall_s, 3),
                "by_gpus": self.by_gpus, "unrunnable": self.unrunnable,
                "preempted": [{"job_id": victim, "by": by, "times": times}
                              for (victim, by), times in sorted(self.preempted.items())]}


def fake_inventory(count: int) -> GpuSample:
    """``count`` idle H200s, through the same parser as ``serve --fake-gpus``."""
    devices = [{"uuid": f"GPU-sim-{i}", "index": i, "name": "NVIDIA H200 (simulated)",
                "memory_total_mib": H200_MIB} for i in range(count)]
    return GpuSample(source="fake", devices=parse_fake_inventory(json.dumps({"devices": devices})))


def profile_for(job: TraceJob, placement: str) -> Profile:
    """The generated profile of a trace job: its GPU count, its declared share if any."""
    util, mem = (job.gpu_util_pct, job.gpu_mem_gb) if placement == "declared" else (None, None)
    name = f"sim-g{job.gpus}" + (f"-u{util:g}" if util is not None else "") + (
        f"-m{mem:g}" if mem is not None else "")
    return Profile(name=name, accelerator="gpu", gpu_count=job.gpus, gpu_utilization_pct=util,
                   gpu_memory_gb=mem)


def simulation_policy(policy: Policy, profiles: list[Profile], jobs: int) -> Policy:
    """The policy with the trace's profiles added and no slot cap below the job count."""
    cap = max(1, jobs, policy.min_concurrent_experiments)
    return replace(policy, profiles={**policy.profiles, **{p.name: p for p in profiles}},
                   initial_concurrent_experiments=cap, max_concurrent_experiments=cap)


def replay(jobs: list[TraceJob], *, gpus: int, policy: Policy, placement: str = "declared",
           name: str = "default", eta_noise: float = 0.0, seed: int = 0,
           keep_scheduler: bool = False) -> Result:
    """Replay ``jobs`` (in submission order) on ``gpus`` simulated devices;
    ``keep_scheduler``: the result keeps the core's final state (``Result.scheduler``)."""
    started_wall = time.perf_counter()
    too_big = [j for j in jobs if j.gpus > gpus]
    runnable = [j for j in jobs if j.gpus <= gpus]
    profiles = [profile_for(j, placement) for j in runnable]
    policy = simulation_policy(policy, profiles, len(runnable))
    sched = Scheduler(policy)
    sched.handle(CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="simulator",
                                    boot_id="simulated"))
    sched.handle(HostSampled(at=0.0, gpus=fake_inventory(gpus), pressure=PressureSample(
        source="simulated", cpu=0.0, memory=0.0, io=0.0)))
    rng = random.Random(seed)
    by_core_id: dict[str, TraceJob] = {}
    share: dict[str, float] = {}   # core job id -> GPUs of work it does while it runs
    start: dict[str, float] = {}   # the first start: a requeued job's delay ends there
    finish: dict[str, float] = {}
    completions: list[tuple[float, int, str, str]] = []
    ends: dict[str, tuple[float, int]] = {}  # core job id -> its completion in the heap
    left: dict[str, float] = {}              # core job id -> run time left while suspended
    series: list[tuple[float, int, float]] = []
    watch = Watch(f"policy {name} ({placement})")
    busy, launches, serial, nxt = 0.0, 0, 0, 0
    while nxt < len(runnable) or completions:
        now = min(runnable[nxt].submit_s if nxt < len(runnable) else math.inf,
                  completions[0][0] if completions else math.inf)
        while completions and completions[0][0] == now:  # free GPUs before arrivals take them
            end, number, core_id, attempt_id = heapq.heappop(completions)
            if ends.get(core_id) != (end, number):
                continue  # preempted since: a completion that no longer comes
            del ends[core_id]
            sched.handle(AttemptObserved(at=now, job_id=core_id, attempt_id=attempt_id,
                                         alive=False, ready=True, go=True, exited=True,
                                         exit_code=0, ended_at=now))
            finish[core_id] = now
            busy -= share[core_id]
        while nxt < len(runnable) and runnable[nxt].submit_s == now:
            job, profile = runnable[nxt], profiles[nxt]
            core_id = _submit(sched, job, profile.name, now, eta_noise, rng)
            by_core_id[core_id] = job
            share[core_id] = job.gpus * (job.gpu_util_pct or 100.0) / 100
            nxt += 1
        decide = True
        while decide:  # again at the same instant once an evicted job has left
            decide = False
            for event in sched.next_launches(now):
                sched.handle(event)
                core_id = event.job_id
                watch.saw(now, event, by_core_id)
                if isinstance(event, AttemptPreempted):
                    busy -= share[core_id]
                    remaining = ends.pop(core_id)[0] - now
                    if event.mode == "suspend":
                        left[core_id] = remaining
                        continue
                    sched.handle(AttemptObserved(  # TERM: it ends now, its work is lost
                        at=now, job_id=core_id, attempt_id=event.attempt_id, alive=False,
                        ready=True, go=True, exited=True, exit_code=143, signal=15,
                        ended_at=now))
                    decide = True
                    continue
                if isinstance(event, AttemptLaunched):
                    launches += 1
                    sched.handle(AttemptObserved(at=now, job_id=core_id,
                                                 attempt_id=event.attempt_id, alive=True,
                                                 pid=launches, pid_start=launches,
                                                 boot_id="simulated", ready=True))
                    start.setdefault(core_id, now)
                    run_s = by_core_id[core_id].duration_s
                else:  # AttemptResumed
                    run_s = left.pop(core_id)
                serial += 1
                busy += share[core_id]
                ends[core_id] = (now + run_s, serial)
                heapq.heappush(completions, (now + run_s, serial, core_id, event.attempt_id))
        series.append((now, sched.count(JobState.QUEUED), busy))
    sched.refresh_reasons()
    unrunnable = [{"job_id": j.job_id, "reason": f"needs {j.gpus} GPUs; the simulated "
                   f"cluster has {gpus}"} for j in too_big]
    unrunnable += [{"job_id": by_core_id[j.job_id].job_id,
                    "reason": sched.pending.get(j.job_id, j.reason)}
                   for j in (*sched.queued(), *sched.suspended())]
    result = _result(name, placement, gpus, len(jobs), by_core_id, share, start, finish,
                     unrunnable, series, time.perf_counter() - started_wall, watch.preempted)
    result.scheduler = sched if keep_scheduler else None
    return result


@dataclass(slots=True)
class Watch:
    """R-SIM-1's safety net: the replay's decisions, and a livelock reported, not spun.

    The clock stands still while the core decides at one instant, and the core preempts
    a job at most ``MAX_PREEMPTIONS_FOR_ONE`` times for the same job. A job preempted
    more often than that for the same job at one instant is the core going round in a
    circle that no completion or arrival will break: ``Livelock``, naming the circle."""

    label: str  # the policy and placement, for the message
    preempted: Counter[tuple[str, str]] = field(default_factory=Counter)  # whole replay
    at: float = -math.inf
    now: Counter[tuple[str, str]] = field(default_factory=Counter)  # at this instant
    decided: list[str] = field(default_factory=list)                # at this instant

    def saw(self, at: float, event: Event, jobs: dict[str, TraceJob]) -> None:
        """One decision of the core at ``at``; ``jobs`` names them (core id -> trace job)."""
        if at != self.at:
            self.at, self.now, self.decided = at, Counter(), []
        job = jobs[event.job_id].job_id
        if not isinstance(event, AttemptPreempted):
            verb = "starts" if isinstance(event, AttemptLaunched) else "resumes"
            self.decided.append(f"{job} {verb}")
            return
        pair = (job, jobs[event.by].job_id)
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


def _submit(sched: Scheduler, job: TraceJob, profile: str, now: float, eta_noise: float,
            rng: random.Random) -> str:
    """One request file's bytes through ``parse_request``, as the spool would read them."""
    eta = job.duration_s * math.exp(rng.gauss(0.0, eta_noise)) if eta_noise else job.duration_s
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


def _result(name: str, placement: str, gpus: int, jobs: int, by_core_id: dict[str, TraceJob],
            share: dict[str, float], start: dict[str, float], finish: dict[str, float],
            unrunnable: list[dict[str, str]], series: list[tuple[float, int, float]],
            wall_s: float, preempted: Counter[tuple[str, str]]) -> Result:
    done = sorted(finish)
    delays = sorted(start[c] - by_core_id[c].submit_s for c in done)
    jcts = [finish[c] - by_core_id[c].submit_s for c in done]
    makespan = (max(finish.values()) - min(by_core_id[c].submit_s for c in done)
                if done else None)
    work = sum(share[c] * by_core_id[c].duration_s for c in done)
    sizes: dict[int, list[float]] = {}
    for c in done:
        sizes.setdefault(by_core_id[c].gpus, []).append(start[c] - by_core_id[c].submit_s)
    return Result(
        policy=name, placement=placement, gpus=gpus, jobs=jobs, completed=len(done),
        unrunnable=unrunnable,
        mean_delay_s=sum(delays) / len(delays) if delays else None,
        p50_delay_s=percentile(delays, 50), p95_delay_s=percentile(delays, 95),
        mean_jct_s=sum(jcts) / len(jcts) if jcts else None,
        gpu_utilization=work / (gpus * makespan) if makespan else None,
        preemptions=preempted.total(), makespan_s=makespan, wall_s=wall_s, series=series,
        by_gpus=by_gpus(sizes), preempted=preempted)


def size_class(gpus: int) -> str:
    """A job's row in the per-size breakdown: its GPU count up to 8, then ">8"."""
    return str(gpus) if gpus <= 8 else ">8"


def by_gpus(delays: dict[int, list[float]]) -> dict[str, dict[str, float | int | None]]:
    """Queueing delay by size class (``size_class``), smallest first: what a policy does
    to wide jobs is lost in the overall mean when narrow ones are most of the trace."""
    classes: dict[str, list[float]] = {}
    for gpus in sorted(delays):
        classes.setdefault(size_class(gpus), []).extend(delays[gpus])
    breakdown = {}
    for name, values in classes.items():
        values.sort()
        breakdown[name] = {"completed": len(values), "mean_delay_s": sum(values) / len(values),
                           "p50_delay_s": percentile(values, 50),
                           "p95_delay_s": percentile(values, 95)}
    return breakdown


def percentile(ordered: list[float], pct: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default) of a sorted list."""
    if not ordered:
        return None
    pos = (len(ordered) - 1) * pct / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)
