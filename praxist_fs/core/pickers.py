"""The scheduling loop's pickers (R-POL-1, seed 002): project -> queue -> job.

Every level is a picker with seed 002's contract: ``init(ctx, scope)`` once per
pass, ``next()`` until it returns None, ``fini()`` once. A project picker gets
no scope and yields ``Project``s; a queue picker gets a project and yields
tiers, tuples of queues served as one (queues of equal priority, in submit
order, as LSF does); a job picker gets a ``JobScope`` and yields its jobs.
Pickers only order. Holds, allocation and launches are the loop's
(``Scheduler._pass``), which tells the job picker through ``blocked(job)``
when the first job of a demand it picked could not be placed: EASY backfill
reserves there, and preemption (R-POL-3) will choose its victims at the same
point.

A job picker is chosen per queue, with precedence queue -> project -> global
(``Queue.picker``, ``Project.picker``, ``Policy.job_picker``); the queues of a
tier that resolve to the same picker share one instance. Pickers are found by
name in ``PICKERS``; ``register_picker`` adds one, and ``praxist_fs.config``
also registers those installed under the ``praxist_fs.pickers`` entry points.

``Pass`` is what a pass knows and has decided so far. It is built from
journaled state and the current host sample only, so a pass is a pure function
of both and replay never needs to re-run one (launches are journaled).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, groupby, zip_longest
from operator import attrgetter
from typing import Any, ClassVar

from .model import Job
from .placement import Demand, DeviceLoad, envelopes_of, place, with_envelopes, without_envelopes
from .policy import Policy
from .queues import Queue, queue_of_class

KINDS = ("project", "queue", "job")
_WORK_CLASS = attrgetter("request.work_class")


@dataclass(frozen=True, slots=True)
class Project:
    """Who owns the work. There is one implicit project until projects are configured."""

    name: str
    picker: str | None = None  # the job picker of its queues that name none


DEFAULT_PROJECT = Project("default")


@dataclass(frozen=True, slots=True)
class JobScope:
    """What a job picker orders: the queued jobs of ``queues`` in ``project``, oldest first."""

    project: Project
    queues: tuple[Queue, ...]
    jobs: list[Job]


class Picker:
    """Seed 002's picker contract. ``init`` may keep ``ctx``; ``next`` returns None when done."""

    kind: ClassVar[str]

    def init(self, ctx: Pass, scope: Any) -> None:
        raise NotImplementedError

    def next(self) -> Any:
        raise NotImplementedError

    def fini(self) -> None:
        """Release what ``init`` took; called even when the pass stops early."""


class ProjectPicker(Picker):
    kind = "project"


class QueuePicker(Picker):
    kind = "queue"


class JobPicker(Picker):
    kind = "job"

    def blocked(self, job: Job) -> None:
        """``job``, picked last, could not be placed now. Only the first job of each
        demand is reported: later ones are held from the pass's cache (R-POL-4)."""


PICKERS: dict[str, dict[str, type[Picker]]] = {kind: {} for kind in KINDS}


def register_picker(kind: str, name: str, cls: type[Picker]) -> None:
    if kind not in PICKERS:
        raise ValueError(f"picker kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not (isinstance(cls, type) and issubclass(cls, Picker) and cls.kind == kind):
        raise TypeError(f"{kind} picker {name!r}: {cls!r} is not a {kind} Picker subclass")
    PICKERS[kind][name] = cls


def picker_class(kind: str, name: str) -> type[Picker]:
    try:
        return PICKERS[kind][name]
    except KeyError:
        raise LookupError(f"no {kind} picker {name!r} (known: "
                          f"{', '.join(sorted(PICKERS[kind]))})") from None


def each(ctx: Pass, kind: str, name: str, scope: Any) -> Iterator[Any]:
    """Run one project or queue picker through init / next ... / fini."""
    picker = picker_class(kind, name)()
    picker.init(ctx, scope)
    try:
        while (item := picker.next()) is not None:
            yield item
    finally:
        picker.fini()


@contextmanager
def tier_pickers(ctx: Pass, project: Project, tier: tuple[Queue, ...]
                 ) -> Iterator[Callable[[], Job | None]]:
    """``next_job()`` over one tier, with its job pickers initialized (and finished on
    exit). Queues resolving to the same job picker share one; several pickers are merged
    by the submit order of their next jobs. ``ctx.picker_of`` maps each work class to
    its picker, for ``JobPicker.blocked``."""
    groups: dict[str, list[Queue]] = {}
    for queue in tier:
        groups.setdefault(queue.picker or project.picker or ctx.policy.job_picker,
                          []).append(queue)
    pickers: list[JobPicker] = []
    try:
        for name, queues in groups.items():
            picker = picker_class("job", name)()
            pickers.append(picker)
            picker.init(ctx, JobScope(project, tuple(queues), ctx.jobs(queues)))
            ctx.picker_of.update((c, picker) for queue in queues for c in queue.work_classes)
        if len(pickers) == 1:
            yield pickers[0].next
        else:
            merged = heapq.merge(*map(_stream, pickers), key=lambda job: job.order)
            yield partial(next, merged, None)
    finally:
        for picker in pickers:
            picker.fini()


def _stream(picker: JobPicker) -> Iterator[Job]:
    while (job := picker.next()) is not None:
        yield job


# -- builtins --------------------------------------------------------------------------


class Flat(ProjectPicker):
    """One implicit project holding every queue and peer (seed 002's builtin_flat)."""

    def init(self, ctx: Pass, scope: None) -> None:
        self._projects = iter((DEFAULT_PROJECT,))

    def next(self) -> Project | None:
        return next(self._projects, None)


class StrictPriority(QueuePicker):
    """Queues by priority, highest first; equal priorities form one tier (config order)."""

    def init(self, ctx: Pass, scope: Project) -> None:
        queues = sorted(ctx.queues, key=lambda q: -q.priority)
        self._tiers = (tuple(tier) for _, tier in groupby(queues, key=lambda q: q.priority))

    def next(self) -> tuple[Queue, ...] | None:
        return next(self._tiers, None)


class Fcfs(JobPicker):
    """First come, first served. Jobs carry no priority of their own (a queue's priority
    orders queues), so this is submit order."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        self.next = partial(next, iter(scope.jobs), None)  # the hot path: no frame per job


class FairShare(JobPicker):
    """By peer: peers with less decayed GPU usage (``Pass.usage``) first, all of a peer's
    jobs before those of a peer with more; peers of equal usage (no GPU history yet,
    say) take turns, one job each per round, in the order of their oldest jobs. Each
    peer's jobs oldest first. Usage is fixed for the pass, as in Slurm's multifactor
    priority: what a pass starts counts from the next pass on."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        by_peer: defaultdict[str, list[Job]] = defaultdict(list)
        for job in scope.jobs:
            by_peer[job.request.peer].append(job)
        usage = {peer: ctx.usage(peer) for peer in by_peer}
        runs = sorted(by_peer.values(), key=lambda run: (usage[run[0].request.peer],
                                                         run[0].order))
        order: list[Job] = []
        for _, tier in groupby(runs, key=lambda run: usage[run[0].request.peer]):
            # round robin; the None are zip_longest's fill (a Job is always truthy)
            order += filter(None, chain.from_iterable(zip_longest(*tier)))
        self.next = partial(next, iter(order), None)


class Backfill(Fcfs):
    """EASY backfill (Slurm's sched/backfill): submit order, and the first job that cannot
    be placed gets a reservation (``Pass.reserve``) that no later job may delay."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        super().init(ctx, scope)
        self._ctx = ctx

    def blocked(self, job: Job) -> None:
        if self._ctx.reservation is None:
            self._ctx.reserve(job)


for _kind, _name, _cls in (("project", "flat", Flat), ("queue", "strict_priority", StrictPriority),
                           ("job", "fcfs", Fcfs), ("job", "fair_share", FairShare),
                           ("job", "backfill", Backfill)):
    register_picker(_kind, _name, _cls)


# -- what a pass knows -----------------------------------------------------------------


@dataclass(slots=True)
class Usage:
    """Fair share's ledger: GPU-seconds per peer, halving every half-life.

    An attempt's GPUs x wall seconds are charged when it ends (``Scheduler._settle``,
    so replay rebuilds the ledger from the journal) and decay from then on; running
    attempts count their GPU-seconds so far, undecayed (``Pass.usage``)."""

    peers: dict[str, tuple[float, float]] = field(default_factory=dict)  # (value, as of)

    def charge(self, peer: str, gpu_seconds: float, at: float, half_life: float) -> None:
        value, as_of = self.peers.get(peer, (0.0, at))
        if at >= as_of:
            self.peers[peer] = (_decay(value, at - as_of, half_life) + gpu_seconds, at)
        else:  # an end seen late: decay the charge, not the ledger
            self.peers[peer] = (value + _decay(gpu_seconds, as_of - at, half_life), as_of)

    def of(self, peer: str, at: float, half_life: float) -> float:
        value, as_of = self.peers.get(peer, (0.0, at))
        return _decay(value, max(0.0, at - as_of), half_life)

    def to_dict(self) -> dict[str, list[float]]:
        return {peer: list(entry) for peer, entry in sorted(self.peers.items())}


def _decay(value: float, seconds: float, half_life: float) -> float:
    return value * math.pow(2.0, -seconds / half_life)


@dataclass(frozen=True, slots=True)
class Reservation:
    """EASY backfill: ``job`` is expected to fit at ``start`` on ``devices``; a later job
    that may still run then must keep off them. Its slot needs no keeping: every job
    that ends by ``start`` frees one, and the reservation waits for at least one."""

    job: Job
    start: float
    devices: tuple[str, ...]
    eta_limit: float  # a job declaring at most this eta_s ends before ``start``
    hold: str         # the reason of a job it keeps from starting
    promise: str      # what the reserved job's reason adds

    def avoid(self, job: Job) -> tuple[str, ...]:
        """The devices ``job`` must keep off to start now: none when its calibrated ETA
        ends it before ``start``."""
        eta = job.request.eta_s
        return () if eta is not None and eta <= self.eta_limit else self.devices


@dataclass(slots=True, kw_only=True)
class Pass:
    """One scheduling pass: its inputs, and what it has decided so far."""

    at: float
    policy: Policy
    target: int
    free: int
    loads: list[DeviceLoad] | None
    queued: list[Job]                 # submit order
    running: list[Job]
    ledger: Usage
    ratio: float                      # calibrated wall time / eta_s (median)
    assessing: bool = False           # a generation is in assessment (its holds apply)
    queues: tuple[Queue, ...] = ()
    by_class: dict[str, Queue] = field(default_factory=dict)
    ruled: frozenset[str] = frozenset()  # work classes whose queue has a limit or reserve
    picker_of: dict[str, JobPicker] = field(default_factory=dict)  # work class -> picker
    waiting: Counter[str] = field(default_factory=Counter)     # queued, by queue
    running_in: Counter[str] = field(default_factory=Counter)  # running, by queue
    launched: list[tuple[Job, tuple[str, ...]]] = field(default_factory=list)
    reservation: Reservation | None = None
    unsatisfiable: dict[tuple[Any, ...], str] = field(default_factory=dict)  # R-POL-4
    verdicts: dict[str, str | None] = field(default_factory=dict)  # profile -> once slots are full
    _classes: Counter[str] = field(default_factory=Counter)  # queued jobs by work class
    _running_usage: dict[str, float] | None = None

    def __post_init__(self) -> None:
        self.queues = self.policy.queue_set()
        self.by_class = queue_of_class(self.queues)
        self.ruled = frozenset(c for c, q in self.by_class.items()
                               if q.max_running is not None or q.leave_slots)
        self._classes = Counter(map(_WORK_CLASS, self.queued))
        for work_class, count in self._classes.items():
            self.waiting[self.by_class[work_class].name] += count
        for work_class in map(_WORK_CLASS, self.running):
            self.running_in[self.by_class[work_class].name] += 1

    def jobs(self, queues: list[Queue]) -> list[Job]:
        """The queued jobs of ``queues`` (of the one project there is), oldest first;
        read-only."""
        classes = {c for q in queues for c in q.work_classes}.intersection(self._classes)
        if len(classes) == len(self._classes):
            return self.queued
        return [job for job in self.queued if job.request.work_class in classes] if classes else []

    def queue_hold(self, queue: Queue) -> str | None:
        """Why the queue's own rules hold its next job now, or None."""
        running = self.running_in[queue.name]
        if queue.max_running is not None and running >= queue.max_running:
            return f"queue {queue.name}: {running} of max_running {queue.max_running} running"
        if queue.leave_slots and 0 < self.free <= min(
                queue.leave_slots, sum(self.waiting[q] for q in queue.leave_slots_for)):
            if self.policy.queues is None:  # the default queues: today's words
                return f"exploration_reserve: {self.free} slot(s) kept for queued exploration"
            return (f"queues.{queue.name}.leave_slots: {self.free} slot(s) kept for queued "
                    + ", ".join(queue.leave_slots_for))
        return None

    def usage(self, peer: str) -> float:
        """Decayed GPU-seconds of ``peer``'s ended attempts plus its running ones so far."""
        if self._running_usage is None:
            self._running_usage = Counter()
            for job in self.running:
                self._running_usage[job.request.peer] += \
                    len(job.current.gpus) * max(0.0, self.at - job.current.started_at)
        half_life = self.policy.fair_share_half_life_seconds
        return self.ledger.of(peer, self.at, half_life) + self._running_usage.get(peer, 0.0)

    def expected_end(self, job: Job, started_at: float) -> float:
        """When ``job`` started at ``started_at`` should end: its calibrated ETA, never
        before now; an unknown ETA never ends (inf)."""
        eta = job.request.eta_s
        return math.inf if eta is None else max(self.at, started_at + eta * self.ratio)

    def place(self, job: Job, gpus: tuple[str, ...]) -> None:
        """Account for a launch decided in this pass."""
        queue = self.by_class[job.request.work_class]
        self.free -= 1
        self.waiting[queue.name] -= 1
        self.running_in[queue.name] += 1
        self.launched.append((job, gpus))
        if gpus:
            self.loads = with_envelopes(
                self.loads, envelopes_of(self.policy.profiles.get(job.profile), gpus, job.job_id))

    def reserve(self, job: Job) -> Reservation | None:
        """EASY backfill's reservation for ``job``: the earliest time enough running work
        (with an ETA) has ended for it to be placed, and the devices it would get.
        None when no such time exists: running work without an ETA never ends, and
        load that is not ours never leaves."""
        profile = self.policy.profiles.get(job.profile)
        if profile is None or not profile.uses_gpu or self.loads is None:
            return None
        demand = Demand.of(profile)
        ending = sorted(
            (self.expected_end(other, started), other.order, other, gpus)
            for other, started, gpus in (
                *((j, j.current.started_at, j.current.gpus) for j in self.running),
                *((j, self.at, gpus) for j, gpus in self.launched)))
        loads = self.loads
        for end, _, other, gpus in ending:
            if end == math.inf:
                break
            loads = without_envelopes(
                loads, envelopes_of(self.policy.profiles.get(other.profile), gpus, other.job_id))
            devices, reason = place(demand, loads)
            if not reason:
                self.reservation = Reservation(
                    job=job, start=end, devices=devices, eta_limit=(end - self.at) / self.ratio,
                    hold=f"backfill: would delay {job.job_id}, reserved in "
                         f"{end - self.at:.0f}s on {len(devices)} device(s)",
                    promise=f"backfill reservation: expected to start in {end - self.at:.0f}s "
                            f"on {', '.join(devices)}")
                return self.reservation
        return None
