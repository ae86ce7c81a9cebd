"""The scheduling loop's pickers (R-POL-1, seed 002): project -> queue -> job.

Every level is a picker with seed 002's contract: ``init(ctx, scope)`` once per
pass, ``next()`` until it returns None, ``fini()`` once. A project picker gets
no scope and yields ``Project``s; a queue picker gets a project and yields
tiers of its queues, tuples of queues served as one (queues of equal priority,
in submit order, as LSF does); a job picker gets a ``JobScope`` and yields its
jobs. A preempt policy (seed 002's level 3) gets a ``VictimScope`` and yields the
candidates to preempt for one job, in the order they are to be taken.
Pickers only order. Holds, allocation and launches are the loop's
(``Scheduler._pass``), which tells the job picker through ``blocked(job)``
when the first job of a demand it picked could not be placed: EASY backfill
reserves there. Preemption (R-POL-3, ``core/preemption.py``) chooses its victims
at the same point, and resumes suspended work at its queue's turn.

A job picker is chosen per queue, with precedence queue -> project -> global
(``Queue.picker``, ``Project.picker``, ``Policy.job_picker``); the queues of a
tier that resolve to the same picker share one instance. A preempt policy is
chosen by the preempting job's queue, else globally (``Queue.preempt_policy``,
``Policy.preempt_policy``). Pickers are found by name in ``PICKERS``;
``register_picker`` adds one, and ``praxist_fs.config`` also registers those
installed under the ``praxist_fs.pickers`` entry points.

``Pass`` is what a pass knows and has decided so far. It is built from
journaled state and the current host sample only, so a pass is a pure function
of both and replay never needs to re-run one (launches are journaled).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import filterfalse, groupby, islice
from operator import attrgetter
from typing import Any, ClassVar

from . import tenancy
from .backlog import ETA_STEPS, RUNS, Backlog, Heads, RunKey, eta_step, heads_of
from .model import Job
from .request import PRIORITY_RANGE
from .placement import (
    Demand, DeviceLoad, Packing, by_uuid, envelopes_of, fitting, holding, place, refit,
    releasing, unplaced, with_envelopes,
)
from .observations import Envelope, GpuSample, PressureSample
from .policy import Policy, Profile
from .queues import Project, Queue, window_hold
from .starvation import starving, starving_first

KINDS = ("project", "queue", "job", "preempt")
_WORK_CLASS = attrgetter("request.work_class")
def peer_of(job: Job) -> tuple[int | None, str]:
    """Whom a job counts against for ``max_concurrent_per_peer``: its name within its uid."""
    return tenancy.peer_key(job.uid, job.request.peer)
_RANK = attrgetter("rank")


@dataclass(frozen=True, slots=True)
class JobScope:
    """What a job picker orders: the queued jobs of ``queues`` in ``project``, in rank order
    (their own priority, highest first, then oldest first: ``Job.rank``)."""

    project: Project
    queues: tuple[Queue, ...]
    jobs: list[Job]


@dataclass(frozen=True, slots=True)
class VictimScope:
    """What a preempt policy orders: the running jobs that ``job`` (of ``queue``) may
    preempt, in no particular order. A policy may leave some out, judging by the job's
    profile and priority and its queue only: the pass reuses a verdict that none would
    make room for jobs alike in these (R-POL-4)."""

    job: Job
    queue: Queue
    candidates: tuple[Job, ...]


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


class PreemptPolicy(Picker):
    kind = "preempt"


class JobPicker(Picker):
    """Yields each job of its scope at most once (the loop counts what is left to visit:
    ``Openings``), in the order it chooses."""

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
    by the rank of their next jobs. ``ctx.picker_of`` maps each work class to
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
            merged = heapq.merge(*map(_stream, pickers), key=_RANK)
            yield partial(next, merged, None)
    finally:
        for picker in pickers:
            picker.fini()


def _stream(picker: JobPicker) -> Iterator[Job]:
    while (job := picker.next()) is not None:
        yield job


# -- builtins --------------------------------------------------------------------------


class Flat(ProjectPicker):
    """The projects in the order the task file lists them; without a ``projects`` block,
    the one implicit project holding every queue (seed 002's builtin_flat)."""

    def init(self, ctx: Pass, scope: None) -> None:
        self._projects = iter(ctx.policy.project_set())

    def next(self) -> Project | None:
        return next(self._projects, None)


class ProjectFairShare(ProjectPicker):
    """Projects by usage per share, least first (``Pass.project_usage``): slot-seconds, so
    CPU work counts too. Equal ones (no history yet, say) in the order of their
    first-ranked queued jobs. Fixed for the pass, like the peers' ``FairShare``."""

    def init(self, ctx: Pass, scope: None) -> None:
        first: dict[str, int] = {}  # queue -> the rank of its first queued job
        queues = {ctx.by_class[c].name for c, count in ctx.classes.items() if count}
        for job in ctx.queued:  # rank order: stop once every queue with work is seen
            if len(first) == len(queues):
                break
            first.setdefault(ctx.by_class[job.request.work_class].name, job.rank)
        self._projects = iter(sorted(ctx.policy.project_set(), key=lambda p: (
            ctx.project_usage(p) / p.share,
            min((first[q] for q in p.queues if q in first), default=math.inf))))

    def next(self) -> Project | None:
        return next(self._projects, None)


class StrictPriority(QueuePicker):
    """The project's queues by priority, highest first; equal priorities form one tier
    (config order)."""

    def init(self, ctx: Pass, scope: Project) -> None:
        queues = sorted((q for q in ctx.queues if q.name in scope.queues),
                        key=lambda q: -q.priority)
        self._tiers = (tuple(tier) for _, tier in groupby(queues, key=lambda q: q.priority))

    def next(self) -> tuple[Queue, ...] | None:
        return next(self._tiers, None)


class Fcfs(JobPicker):
    """First come, first served, after each job's own priority (R-CTL-5): rank order,
    which is submit order among jobs of one priority. A queue's priority orders the
    queues (``StrictPriority``); a job's orders it inside its queue."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        # the hot path: no frame per job
        self.next = partial(next, ctx.skim(scope.jobs, type(self)), None)


class FairShare(JobPicker):
    """By peer: peers with less decayed GPU usage (``Pass.usages``) first, all of a peer's
    jobs before those of a peer with more; peers of equal usage (no GPU history yet,
    say) take turns, one job each per round, in the order of their first-ranked jobs.
    Each peer's jobs in rank order: a job's priority moves it ahead of its own peer's
    other jobs, never ahead of a peer with less usage. Usage is fixed for the pass, as
    in Slurm's multifactor priority: what a pass starts counts from the next pass on.

    A job's key is (its peer's usage, its round: how many of its peer's jobs rank
    before it, its peer's turn), so the backlog's runs by peer and profile
    (``Pass.runs``) are merged lazily, reading only as far as the pass walks. A peer
    whose usage no other peer here shares is ordered by its usage alone, and its own
    jobs by rank as by round: only peers of equal usage count rounds and take turns."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        runs = ctx.runs("peer", scope.jobs)  # (class, peer, profile, priority) -> jobs
        of_peer: defaultdict[str, list[list[Job]]] = defaultdict(list)
        for (_, peer, _, _), jobs in runs.items():
            of_peer[peer].append(jobs)
        usage = ctx.usages(of_peer)
        alike = Counter(usage.values())
        turn = {peer: index for index, peer in enumerate(sorted(
            (peer for peer in of_peer if alike[usage[peer]] > 1), key=lambda peer: (
                usage[peer], min(jobs[0].rank for jobs in of_peer[peer]))))}

        def key(run: Hashable, job: Job, position: int) -> tuple[float, int, int]:
            peer = run[1]
            if peer not in turn:  # its usage alone orders it against the other peers
                return usage[peer], job.rank, 0
            if len(mine := of_peer[peer]) > 1:  # and the peer's jobs ranked before in the others
                rank, own = job.rank, runs[run]
                position += sum(bisect_left(jobs, rank, key=_RANK) for jobs in mine
                                if jobs is not own)
            return usage[peer], position, turn[peer]

        order = ctx.merge(scope.jobs, runs, key, type(self))
        self.next = partial(next, order, None)


class Backfill(Fcfs):
    """EASY backfill (Slurm's sched/backfill): rank order, and the first job that cannot
    be placed gets a reservation (``Pass.reserve``) that no later job may delay."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        super().init(ctx, scope)
        self._ctx = ctx

    def blocked(self, job: Job) -> None:
        if self._ctx.reservation is None:
            self._ctx.reserve(job)


class ShortestExpectedFirst(JobPicker):
    """Shortest expected run time first (calibrated ETAs, R-SUP-7), with aging: a job's
    key is its expected run time (``eta_s`` x the calibration ratio) plus
    ``shortest_first_aging`` x its submit time (with ``shortest_first_by: gpu_seconds``,
    the expected run time times the job's GPUs), least first, after each job's own
    priority. Waiting lowers a key at the same rate for every job, so the order holds
    from pass to pass, and nothing starves: a job is passed only by jobs submitted less
    than its expected run time / aging after it. A job without an ETA counts as the
    longest known one of its scope (all alike: submit order).

    ETAs are compared to within an eighth of an octave (9 %, ``backlog.eta_step``): jobs
    alike in queue, priority and ETA keep their rank order, so the backlog keeps them in
    runs (``Pass.runs``) that a pass merges lazily, reading only as far as it walks.

    Aging alone lets a wide job be passed for as long as short jobs keep arriving, and
    a wide job needs many devices free at once. A job that has waited a bound is
    starving (``core/starvation.py``: ``shortest_first_starvation_seconds``, or
    ``shortest_first_starvation_factor`` times its queue's median wait): the starving go
    first, in the same order, after each job's own priority, and the first of them that
    cannot be placed gets an EASY backfill reservation (``Pass.reserve``), so its wait
    is bounded while the cost of reserving is paid only in the tail."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        # whose wait is long for the whole queue, not just its own tier's
        self._ctx, self._starving = ctx, starving(ctx.queued, ctx.at, ctx.policy)
        runs = ctx.runs("eta", scope.jobs)  # (class, priority, ETA step, profile) -> jobs
        unknown, lacking = ctx.longest_eta_step(scope.jobs, runs)
        aging, ratio = ctx.policy.shortest_first_aging, ctx.ratio
        by = ctx.policy.shortest_first_by
        width = _widths(ctx.policy.profiles) if by == "gpu_seconds" else {}

        def key(run: Hashable, job: Job, position: int) -> tuple[int, float, int]:
            _, priority, step, profile = run  # priority, then by rank
            return -priority, math.pow(2.0, (unknown if step is None else step) / ETA_STEPS) \
                * ratio * width.get(profile, 1) + aging * job.submitted_at, job.order

        # the keys do not change with time: the backlog keeps the runs' heads while
        # aging, calibration and (with jobs that gave no ETA) the longest ETA stay
        token = (aging, ratio, unknown if lacking else None, by)
        heads = ctx.heads("eta", scope.jobs, runs, token, key)
        hungry = self._starving
        if hungry is None:
            order = ctx.merge(scope.jobs, runs, key, type(self), heads)
        else:  # the starving first: the merge may not drop one later (``skimmed``)
            first = starving_first(runs, heads, key, hungry)
            rest = filterfalse(hungry.__contains__, ctx.merge(
                scope.jobs, runs, key, type(self), heads, droppable=False))
            order = heapq.merge(first, rest, key=lambda job: (job.rank >> 40, job not in hungry))
        self.next = partial(next, order, None)

    def blocked(self, job: Job) -> None:
        if self._starving is not None and job in self._starving and \
                self._ctx.reservation is None:
            self._ctx.reserve(job)


def _widths(profiles: Mapping[str, Profile]) -> dict[str, int]:
    """The GPUs a job of each profile takes, where that is more than one."""
    return {name: shape.gpu_count for name, shape in profiles.items()
            if shape.uses_gpu and shape.gpu_count > 1}


class LeastAttainedService(JobPicker):
    """Least attained service first (Tiresias, NSDI '19), for jobs without ETAs: the
    GPU-seconds (slot-seconds for CPU work) a job's earlier attempts ran, less the time
    they were suspended, least first, after each job's own priority; equal ones (every
    job that never ran) in rank order. A job preempted or requeued after long service
    so waits behind fresh work instead of holding the queue's head."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        served = ctx.served(scope.jobs)
        if not served:  # the common case: rank order is the order
            self.next = partial(next, ctx.skim(scope.jobs, type(self)), None)
            return
        attained = {job.job_id: _attained(job, ctx.at) for job in served}
        key = lambda job: (job.rank >> 40, attained.get(job.job_id, 0.0), job.rank)  # noqa: E731
        fresh = (job for job in scope.jobs if not job.attempts)
        order = heapq.merge(fresh, sorted(served, key=key), key=key)
        self.next = partial(next, order, None)


def _attained(job: Job, at: float) -> float:
    """The service ``job``'s attempts have had: active seconds x devices (at least one)."""
    return sum(a.active_seconds(at if a.ended_at is None else a.ended_at) * max(1, len(a.gpus))
               for a in job.attempts)


class Multifactor(JobPicker):
    """Slurm's multifactor priority: the weighted sum of four factors, each 0..1,
    highest first (ties in rank order). Age: the wait so far over
    ``multifactor_max_age_seconds``, at most 1. Size: 1 - the job's GPUs over the
    devices there are (small jobs first; CPU work 1). Fair share: 2^(-usage / mean
    usage) of its peer, among the peers queued here (``Pass.usages``; 1 while nobody has
    usage). Priority: the job's own priority scaled from its range. Weights are the
    ``multifactor_weight_*`` keys.

    Jobs alike in all but age (same queue, peer, profile and priority) keep their rank
    order, since the older is never lower: the backlog keeps them in runs
    (``Pass.runs``) that a pass merges lazily, reading only as far as it walks."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        policy = ctx.policy
        runs = ctx.runs("peer", scope.jobs)  # (work class, peer, profile, priority) -> jobs
        usage = ctx.usages({peer for _, peer, _, _ in runs})
        mean = sum(usage.values()) / len(usage) if usage else 0.0
        devices = max(1, len(ctx.loads or ()))
        low, high = PRIORITY_RANGE
        w_age = policy.multifactor_weight_age / policy.multifactor_max_age_seconds
        cap, w_priority = policy.multifactor_weight_age, policy.multifactor_weight_priority
        share = {peer: policy.multifactor_weight_fair_share
                 * (math.pow(2.0, -used / mean) if mean > 0 else 1.0)
                 for peer, used in usage.items()}
        size = {}
        for profile in {profile for _, _, profile, _ in runs}:
            shape = policy.profiles.get(profile)
            gpus = shape.gpu_count if shape is not None and shape.uses_gpu else 0
            size[profile] = policy.multifactor_weight_size * (1.0 - min(1.0, gpus / devices))
        at = ctx.at

        def key(run: Hashable, job: Job, position: int) -> tuple[float, int]:
            # summed here, not kept by run: a pass keys about one job per run
            _, peer, profile, priority = run
            age = w_age * (at - job.submitted_at)
            return -(size[profile] + share[peer] + w_priority * (priority - low) / (high - low)
                     + (age if age < cap else cap)), job.rank  # min(cap, age)

        order = ctx.merge(scope.jobs, runs, key, type(self))
        self.next = partial(next, order, None)


class LowestPriorityFirst(PreemptPolicy):
    """The lowest queue priority first, then the youngest attempt (the latest start)."""

    def init(self, ctx: Pass, scope: VictimScope) -> None:
        self._victims = iter(sorted(scope.candidates, key=lambda j: (
            ctx.by_class[j.request.work_class].priority, -j.current.started_at, -j.order)))

    def next(self) -> Job | None:
        return next(self._victims, None)


for _kind, _name, _cls in (("project", "flat", Flat), ("project", "fair_share", ProjectFairShare),
                           ("queue", "strict_priority", StrictPriority),
                           ("job", "fcfs", Fcfs), ("job", "fair_share", FairShare),
                           ("job", "backfill", Backfill),
                           ("job", "shortest_expected_first", ShortestExpectedFirst),
                           ("job", "least_attained_service", LeastAttainedService),
                           ("job", "multifactor", Multifactor),
                           ("preempt", "lowest_priority_first", LowestPriorityFirst)):
    register_picker(_kind, _name, _cls)


# -- what a pass knows -----------------------------------------------------------------


@dataclass(slots=True)
class Usage:
    """Fair share's ledger: GPU-seconds per peer, halving every half-life. The projects'
    is the same, of slot-seconds per queue (``Pass.project_usage``); ``peers`` then
    holds queue names.

    An attempt's GPUs x wall seconds are charged when it ends (``Scheduler._settle``,
    so replay rebuilds the ledger from the journal) and decay from then on; running
    attempts count their GPU-seconds so far, undecayed (``Pass.usages``)."""

    peers: dict[str, tuple[float, float]] = field(default_factory=dict)  # (value, as of)

    def charge(self, peer: str, gpu_seconds: float, at: float, half_life: float) -> None:
        value, as_of = self.peers.get(peer, (0.0, at))
        if at >= as_of:
            self.peers[peer] = (_decay(value, at - as_of, half_life) + gpu_seconds, at)
        else:  # an end seen late: decay the charge, not the ledger
            self.peers[peer] = (value + _decay(gpu_seconds, as_of - at, half_life), as_of)

    def of(self, peer: str, at: float, half_life: float) -> float:
        return self.of_each((peer,), at, half_life)[peer]

    def of_each(self, peers: Iterable[str], at: float, half_life: float) -> dict[str, float]:
        """``of`` of each of ``peers``, in one loop: a pass reads every queued peer's."""
        charged, found = self.peers, {}
        for peer in peers:
            entry = charged.get(peer)
            if entry is None:  # never charged: nothing to decay
                found[peer] = 0.0
            else:
                found[peer] = _decay(entry[0], max(0.0, at - entry[1]), half_life)
        return found

    def to_dict(self) -> dict[str, list[float]]:
        return {peer: list(entry) for peer, entry in sorted(self.peers.items())}


def slot_usage(project: Project, ledger: Usage, running: list[Job],
               by_class: dict[str, Queue], at: float, half_life: float) -> float:
    """Decayed slot-seconds of the ended attempts of ``project``'s queues (``ledger``),
    plus the active seconds so far of its ``running`` ones."""
    return sum(ledger.of(name, at, half_life) for name in project.queues) + \
        sum(job.current.active_seconds(at) for job in running
            if by_class[job.request.work_class].name in project.queues)


def _decay(value: float, seconds: float, half_life: float) -> float:
    return value * math.pow(2.0, -seconds / half_life)


@dataclass(slots=True)
class Reservation:
    """EASY backfill: ``job`` is expected to fit at ``start`` on ``devices``; a later job
    that may still run then must leave it room there. Its slot needs no keeping: every
    job that ends by ``start`` frees one, and the reservation waits for at least one.

    Room, not the devices: ``at_start`` is the load each reserved device is expected
    to carry at ``start`` (plus what the pass has backfilled onto it since), and a job
    that outlasts ``start`` keeps off only the devices where its share would leave
    the reserved ``demand`` no room (``crowded``): fractional work may use the share
    a fractional reservation leaves free until ``start``, instead of idling it."""

    job: Job
    start: float
    devices: tuple[str, ...]
    eta_limit: float  # a job declaring at most this eta_s ends before ``start``
    hold: str         # the reason of a job it keeps from starting
    promise: str      # what the reserved job's reason adds
    demand: Demand
    at_start: dict[str, DeviceLoad]   # reserved device -> its expected load at ``start``
    profiles: Mapping[str, Profile]
    _crowded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # by profile

    def outlasts(self, job: Job) -> bool:
        """Whether ``job``, started now, may still run at ``start`` (its calibrated ETA
        does not end it before; an unknown ETA never ends)."""
        eta = job.request.eta_s
        return eta is None or eta > self.eta_limit

    def avoid(self, job: Job) -> tuple[str, ...]:
        """The devices ``job`` must keep off to start now: none when it ends before
        ``start``, else those its share would crowd (``crowded``)."""
        return self.crowded(job.profile) if self.outlasts(job) else ()

    def crowded(self, profile: str) -> tuple[str, ...]:
        """The reserved devices where one share of ``profile`` would leave the reserved
        job no room at ``start`` (none for work that places nothing on a GPU)."""
        if profile not in self._crowded:
            shape = self.profiles.get(profile)
            if shape is None or not shape.uses_gpu:
                self._crowded[profile] = ()
            elif self.demand.exclusive or Demand.of(shape).exclusive:
                # an exclusive job needs an idle device, and an exclusive share leaves no
                # room: every reserved device, without placing it on each (``fit``)
                self._crowded[profile] = self.devices
            else:
                self._crowded[profile] = tuple(
                    uuid for uuid in self.devices
                    if holding(self.at_start[uuid], envelopes_of(shape, (uuid,), profile))
                    .fit(self.demand)[0] is None)
        return self._crowded[profile]

    def backfilled(self, job: Job, gpus: tuple[str, ...], envelopes: list[Envelope]) -> None:
        """``job`` started now on ``gpus`` holding ``envelopes``: what outlasts ``start``
        on a reserved device is still there then."""
        if not self.outlasts(job) or self.at_start.keys().isdisjoint(gpus):
            return
        for uuid, mine in by_uuid(envelopes).items():
            if uuid in self.at_start:
                self.at_start[uuid] = holding(self.at_start[uuid], mine)
        self._crowded.clear()


@dataclass(slots=True)
class Openings:
    """Which of the jobs a pass has yet to visit could still start, by profile, so that
    the loop stops walking once none could: the rest of the walk would only restate why
    each job waits (``Scheduler._pass`` leaves it until a reason is asked for).

    A profile is open while jobs of it are ``left`` to visit and ``could_start`` (a free
    slot, calm pressure, enough devices that take it) says one may. Once EASY backfill
    reserves devices, a profile that fits only on them stays open while jobs of it that
    end before the reservation (``Reservation.avoid``) are left. Holds by queue rules or
    assessment are not counted: a held job may keep the walk going, never end it early.
    The walk ends only after a job (``exhausted``), so a pass that may start something
    handles its first: its picker hears of it (``JobPicker.blocked``, where backfill
    reserves) before any later job starts. A pass where nothing could start from the
    outset leaves the whole walk to the rest (``Scheduler._pass``)."""

    left: Counter[str]                                   # jobs not visited yet, by profile
    could_start: Callable[[str, tuple[str, ...]], bool]  # (profile, devices to keep off)
    ending_by: Callable[[str, float], int]  # queued jobs of a profile with eta_s <= a limit
    younger: Callable[[str, int], Iterator[Job]]  # a profile's queued jobs after a rank
    # a profile's first queued job after a rank that declares an eta_s of at most a limit
    ending_after: Callable[[str, int, float], Job | None]
    open: set[str] = field(default_factory=set)    # profiles known to open
    unsure: set[str] = field(init=False)           # profiles left not asked since ``update``
    reservation: Reservation | None = None
    short: Counter[str] = field(default_factory=Counter)  # left jobs that end before it
    seen: list[Job] = field(default_factory=list)         # visited before the reservation
    visited: int = 0
    _can: dict[tuple[str, bool], bool] = field(default_factory=dict)  # until loads change

    def __post_init__(self) -> None:
        self.unsure = {profile for profile, count in self.left.items() if count}

    def update(self, reservation: Reservation | None) -> None:
        """After a launch (loads and slots changed) or a reservation: what is open now.
        A pass only takes room away (a launch takes a slot and devices, a reservation
        keeps jobs off some, backfill onto them crowds them more), so a profile found
        closed stays closed: only those open or not asked yet are asked again."""
        self._can.clear()
        if reservation is not None and self.reservation is None:
            self.reservation = reservation  # the pass's own: backfill onto it shows here
            self.short = Counter({profile: self.ending_by(profile, reservation.eta_limit)
                                  for profile, count in self.left.items() if count})
            self.short.subtract(job.profile for job in self.seen if self._ends_first(job))
            self.seen = []
        self.unsure |= self.open
        self.open = set()

    def any_open(self) -> bool:
        """Whether a job still to visit could start. The profiles are asked only until
        one opens: after a launch one mostly does at once, and what a profile answers
        stays the same until the next ``update`` (but for ``short``, which ``visit``
        follows), so asking later answers as asking then."""
        open, unsure = self.open, self.unsure
        while not open and unsure:
            if self._opens(profile := unsure.pop()):
                open.add(profile)
        return bool(open)

    @property
    def exhausted(self) -> bool:
        """No job still to visit could start, and the pass has handled one."""
        return self.visited > 0 and not self.any_open()

    def visit(self, job: Job) -> None:
        profile = job.profile
        self.visited += 1
        self.left[profile] -= 1
        if self.reservation is None:
            self.seen.append(job)
        elif self._ends_first(job):
            self.short[profile] -= 1
            if not self.short[profile] and profile in self.open and not self._opens(profile):
                self.open.discard(profile)
        if not self.left[profile]:
            self.open.discard(profile)
            self.unsure.discard(profile)

    def drop(self, profile: str) -> None:
        """The jobs of ``profile`` left are known held without a visit (``Pass.merge``)."""
        self.left[profile] = 0
        self.open.discard(profile)
        self.unsure.discard(profile)

    def _ends_first(self, job: Job) -> bool:
        return not self.reservation.avoid(job)

    def _opens(self, profile: str) -> bool:
        if self.reservation is None:
            return self._could(profile, False)
        return self._could(profile, True) or (self.short[profile] > 0
                                              and self._could(profile, False))

    def _could(self, profile: str, avoiding: bool) -> bool:
        key = (profile, avoiding)
        if key not in self._can:
            self._can[key] = self.could_start(
                profile, self.reservation.crowded(profile) if avoiding else ())
        return self._can[key]


@dataclass(slots=True, kw_only=True)
class Pass:
    """One scheduling pass: its inputs, and what it has decided so far."""

    at: float
    policy: Policy
    target: int
    free: int
    loads: list[DeviceLoad] | None
    queued: list[Job]                 # rank order (``Job.rank``)
    running: list[Job]
    ledger: Usage
    ratio: float                      # calibrated wall time / eta_s (median)
    coordinator_uid: int | None = None  # whose peers reasons name without a uid
    assessing: bool = False           # a generation is in assessment (its holds apply)
    assessment_holds: dict[str, str] = field(default_factory=dict)  # job id -> why, this pass
    queue_ledger: Usage = field(default_factory=Usage)  # slot-seconds by queue (projects)
    queues: tuple[Queue, ...] = ()
    by_class: dict[str, Queue] = field(default_factory=dict)
    suspended: int = 0                   # suspended jobs: each may resume, taking a slot
    ruled: frozenset[str] = frozenset()  # work classes whose queue has a limit, reserve or window
    picker_of: dict[str, JobPicker] = field(default_factory=dict)  # work class -> picker
    waiting: Counter[str] = field(default_factory=Counter)     # queued, by queue
    running_in: Counter[str] = field(default_factory=Counter)  # running, by queue
    # running, by peer within its uid (R-SUB-5, R-SEC-5: ``peer_of``)
    running_of: Counter[tuple[int | None, str]] = field(default_factory=Counter)
    launched: list[tuple[Job, tuple[str, ...]]] = field(default_factory=list)
    reservation: Reservation | None = None
    unsatisfiable: dict[tuple[Any, ...], str] = field(default_factory=dict)  # R-POL-4
    verdicts: dict[str, str | None] = field(default_factory=dict)  # profile -> once slots are full
    # profile -> what its job needs to start once a slot is free (``Scheduler._could_start``)
    needs: dict[str, Demand | bool] = field(default_factory=dict)
    # preemption (R-POL-3, core/preemption.py): the reasons it may lift (a full house, a
    # failed allocation), the jobs preempted or resumed in this pass, and the attempts
    # being evicted for requeue by the job they make room for (found once per pass)
    liftable: set[str] = field(default_factory=set)
    taken: set[str] = field(default_factory=set)
    evicting: dict[str, list[Job]] | None = None
    classes: Counter[str] | None = None  # queued jobs by work class; counted here if not given
    openings: Openings | None = None     # None: walk every job (or the walk has ended early)
    # The host as the pass began (pressure, the GPU sample): what its rest reads however
    # late it runs, so that a new sample need not finish it first. ``resting``: the walk
    # went on as the rest (``Scheduler._pass``).
    pressure: PressureSample | None = None
    gpus: GpuSample | None = None
    resting: bool = False
    skipped: list[tuple[int, int, type[JobPicker], bool]] = field(default_factory=list)  # skim
    # ``merge``: (profile, picker, runs, where each was read up to, the profile's runs)
    dropped: list[tuple[str, type[JobPicker], dict[Hashable, list[Job]], dict[Hashable, int],
                        list[tuple[Any, Hashable]]]] = field(default_factory=list)
    mix: Counter[str] | None = None  # queued jobs by profile (``packing``); counted if not given
    backlog: Backlog | None = None  # the queue as it is kept; ``queued`` is as it was (``lend``)
    _packing: Packing | None = None
    _running_usage: dict[str, float] | None = None
    _closed: dict[str, str | None] = field(default_factory=dict)  # queue -> window_hold
    _fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] = field(default_factory=dict)
    _fitting_on: list[DeviceLoad] | None = None  # the loads ``_fitting`` counted
    # ``_fitting`` of the loads the pass starts with, kept from pass to pass while they
    # stay the same (``KeptLoads.fitting``); None: not kept
    kept_fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] | None = None
    _loads_at_start: list[DeviceLoad] | None = None
    _cursors: dict[tuple[str, type[JobPicker]], tuple[Iterator[Job], Job | None]] = \
        field(default_factory=dict)  # ``_wanted_after``: (the rest, the next unread job)
    # ``_wanted_after``: by (profile, picker), the rank last asked and the first job after
    # it that ends before the reservation, or None
    _shorts: dict[tuple[str, type[JobPicker]], tuple[int, Job | None]] = \
        field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queues = self.policy.queue_set()
        self.by_class = self.policy.queue_of_class()
        # a reserve holds nothing back in a pass that cannot bring the free slots down to
        # it (each launch or resume takes one): a cluster's cap leaves thousands free
        least_free = self.free - len(self.queued) - self.suspended
        self.ruled = frozenset(c for c, q in self.by_class.items()
                               if q.max_running is not None or q.windows
                               or q.leave_slots and least_free <= q.leave_slots)
        if self.classes is None:
            self.classes = Counter(map(_WORK_CLASS, self.queued))
        for work_class, count in self.classes.items():
            self.waiting[self.by_class[work_class].name] += count
        for job in self.queued if self.assessment_holds else ():
            if job.job_id in self.assessment_holds:  # it cannot start: no slot is kept for it
                self.waiting[self.by_class[job.request.work_class].name] -= 1
        # counted by work class and by peer in C: a pass may follow dozens of running jobs
        for work_class, count in Counter(map(_WORK_CLASS, self.running)).items():
            self.running_in[self.by_class[work_class].name] += count
        self.running_of.update(map(peer_of, self.running))
        self._loads_at_start = self.loads

    def jobs(self, queues: list[Queue]) -> list[Job]:
        """The queued jobs of ``queues`` (each queue is in one project), in rank order;
        read-only."""
        classes = {c for q in queues for c in q.work_classes}.intersection(self.classes)
        if len(classes) == len(self.classes):
            return self.queued
        return [job for job in self.queued if job.request.work_class in classes] if classes else []

    def fitting(self, demand: Demand, avoid: tuple[str, ...] = ()) -> int:
        """How many devices of ``loads`` take one of ``demand``'s shares now
        (``placement.fitting``)."""
        return self._limits(demand, avoid)[""]

    def _limits(self, demand: Demand, avoid: tuple[str, ...]) -> Counter[str]:
        """``placement.fitting`` on ``loads``, counted once per demand shape until the
        loads change (``_refit``); on the loads the pass started with, once until they
        change between passes (``kept_fitting``)."""
        if self._fitting_on is not self.loads:
            self._fitting, self._fitting_on = {}, self.loads
        key = (demand.utilization_pct, demand.memory_mib, avoid)
        if key not in self._fitting:
            kept = self.kept_fitting  # without devices to avoid: a reservation's are its own
            if kept is None or avoid or self.loads is not self._loads_at_start:
                self._fitting[key] = (demand, fitting(demand, self.loads, avoid))
            else:
                if key not in kept:
                    kept[key] = (demand, fitting(demand, self.loads, avoid))
                self._fitting[key] = (demand, Counter(kept[key][1]))  # the pass's to change
        return self._fitting[key][1]

    def _refit(self, before: list[DeviceLoad]) -> None:
        """Carry ``fitting``'s counts from ``before`` to ``loads``: a launch changed only
        its own devices."""
        if self._fitting_on is not before:
            return
        refit(self._fitting, [(old, new) for old, new in zip(before, self.loads) if old is not new])
        self._fitting_on = self.loads

    def skim(self, jobs: list[Job], picker: type[JobPicker]) -> Iterator[Job]:
        """``jobs`` in rank order, for a picker of that order. When they are the whole
        queue and nothing in the pass varies by a job's place but launches (``openings``,
        no queue rules queued), each run of jobs whose demand is known to fail (R-POL-4:
        it failed earlier in the pass) is skipped, since they are held for that reason
        wherever they stand. The runs go to ``skipped``; ``skimmed`` gives them back."""
        return self._skimming(picker) if self.skims(jobs) else iter(jobs)

    def skims(self, jobs: list[Job]) -> bool:
        """Whether a picker of ``jobs`` may pass over the jobs known held (``skim``,
        ``merge``): they are the whole queue, and nothing in the pass varies by a job's
        place but launches (``openings``, no queue rules queued)."""
        return jobs is self.queued and self.openings is not None and \
            self.ruled.isdisjoint(self.classes)

    def skimmed(self) -> Iterator[tuple[Job, str]]:
        """The jobs ``skim`` skipped and ``merge`` dropped, each with the reason it is held
        for."""
        for start, stop, picker, reserved in self.skipped:
            for job in self.queued[start:stop]:
                avoid = reserved and bool(self.reservation.avoid(job))
                known = self.unsatisfiable
                # the reservation a job was skipped under may not be the one asked now:
                # its demand failed either way
                yield job, known.get((job.profile, picker, avoid)) or \
                    known[(job.profile, picker, not avoid)]
        for profile, picker, runs, position, heap in self.dropped:
            reason = self.unsatisfiable[(profile, picker, False)]
            for _, of in heap:  # the profile's runs, read up to ``position``
                for job in islice(runs[of], position.get(of, 0), None):
                    yield job, reason

    def merge(self, jobs: list[Job], runs: dict[Hashable, list[Job]], key: RunKey,
              picker: type[JobPicker], heads: Heads | None = None,
              droppable: bool = True) -> Iterator[Job]:
        """``jobs``, split in ``runs`` of one profile each, in the order of ``key(the run's
        key, job, its place in the run)`` (which no two jobs share), read lazily: the runs
        of each profile are merged, and the profiles by their next jobs. ``heads`` are
        the runs' first jobs by profile (``heads_of``; ``Pass.heads`` keeps them from pass
        to pass where it may). When ``skims`` allows, a profile's jobs are dropped once
        its demand is known to fail (R-POL-4): they are held for that reason wherever
        they stand. They go to ``dropped``; ``skimmed`` gives them back. Not
        ``droppable``: the picker yields some of them apart, so none is dropped."""
        top = [(heap[0][0], profile, heap)
               for profile, heap in (heads_of(runs, key) if heads is None else heads).items()]
        heapq.heapify(top)
        position: dict[Hashable, int] = {}
        droppable, unsatisfiable = droppable and self.skims(jobs), self.unsatisfiable
        while top:
            _, profile, heap = top[0]
            if droppable and self.openings is not None and self.reservation is None and \
                    (profile, picker, False) in unsatisfiable:
                heapq.heappop(top)
                self.dropped.append((profile, picker, runs, position, heap))
                self.openings.drop(profile)
                continue
            of = heap[0][1]
            run, at = runs[of], position.get(of, 0)
            yield run[at]
            at = position[of] = at + 1
            if at < len(run):
                heapq.heapreplace(heap, (key(of, run[at], at), of))
            else:
                heapq.heappop(heap)
            if heap:
                heapq.heapreplace(top, (heap[0][0], profile, heap))
            else:
                heapq.heappop(top)

    def _skimming(self, picker: type[JobPicker]) -> Iterator[Job]:
        jobs, position = self.queued, 0
        while position < len(jobs):
            job = jobs[position]
            if self.openings is not None and self._key(job, picker) in self.unsatisfiable:
                stop = self._wanted_after(job.rank, picker)
                self.skipped.append((position, stop, picker, self.reservation is not None))
                position = stop
            else:
                yield job
                position += 1

    def _key(self, job: Job, picker: type[JobPicker]) -> tuple[str, type[JobPicker], bool]:
        """The demand of ``job`` as ``Scheduler._serve`` keys ``unsatisfiable``."""
        avoid = self.reservation is not None and bool(self.reservation.avoid(job))
        return job.profile, picker, avoid

    def _wanted_after(self, rank: int, picker: type[JobPicker]) -> int:
        """Where in ``queued`` the first job ranked after ``rank`` whose demand is not
        known to fail is (``len(queued)`` when there is none). Each profile's jobs are
        read once a pass (``_cursors``): a demand once known to fail stays so."""
        first, reservation, unsatisfiable = math.inf, self.reservation, self.unsatisfiable
        for profile in self.openings.left:
            # ``_key`` by profile: a job keeps off the devices its share crowds when it
            # outlasts the reservation's start; whether its demand failed so or unhindered
            crowds = reservation is not None and bool(reservation.crowded(profile))
            free = (profile, picker, False) not in unsatisfiable
            kept = crowds and (profile, picker, True) not in unsatisfiable
            if not (free or kept):
                continue  # each of its jobs is known held
            # the jobs wanted: every one (None), or those that do (True) or do not outlast it
            outlasting = None if free and (kept or not crowds) else kept
            if outlasting is False:  # its short jobs alone: found apart, as they may be few
                asked, found = self._shorts.get((profile, picker), (math.inf, None))
                if asked > rank or found is not None and found.rank <= rank:
                    asked, found = self._shorts[(profile, picker)] = (
                        rank, self.openings.ending_after(profile, rank, reservation.eta_limit))
                if found is not None and found.rank < first:
                    first = found.rank
                continue
            jobs, job = self._cursors.get((profile, picker)) or (
                self.openings.younger(profile, rank), None)
            job = job or next(jobs, None)
            while job is not None and (job_rank := job.rank) < first:
                if job_rank > rank and (outlasting is None
                                        or reservation.outlasts(job) is outlasting):
                    first = job_rank
                    break
                job = next(jobs, None)
            self._cursors[(profile, picker)] = (jobs, job)
        return len(self.queued) if first == math.inf else bisect_left(self.queued, first,
                                                                       key=_RANK)

    def queue_hold(self, queue: Queue, freed: int = 0,
                   joining: Counter[str] | None = None) -> str | None:
        """Why the queue's own rules hold its next job now, or None; or, for preemption
        (R-POL-3), once ``freed`` more slots are free and ``joining`` jobs (by queue) are
        queued again."""
        if queue.windows:
            if queue.name not in self._closed:
                self._closed[queue.name] = window_hold(
                    queue, self.at, self.policy.windows_utc_offset_minutes)
            if closed := self._closed[queue.name]:
                return closed
        running = self.running_in[queue.name]
        if queue.max_running is not None and running >= queue.max_running:
            return f"queue {queue.name}: {running} of max_running {queue.max_running} running"
        free, joining = self.free + freed, joining or {}
        if queue.leave_slots and 0 < free <= min(queue.leave_slots, sum(
                self.waiting[q] + joining.get(q, 0) for q in queue.leave_slots_for)):
            if self.policy.queues is None:  # the default queues: today's words
                return f"exploration_reserve: {free} slot(s) kept for queued exploration"
            return (f"queues.{queue.name}.leave_slots: {free} slot(s) kept for queued "
                    + ", ".join(queue.leave_slots_for))
        return None

    def peer_hold(self, job: Job) -> str | None:
        """Why ``job``'s peer may start nothing more now (R-SUB-5), or None. Holding it
        costs the job nothing: no attempt, no failure record; other peers' work goes on."""
        cap, peer = self.policy.max_concurrent_per_peer, peer_of(job)
        if cap is None or self.running_of[peer] < cap:
            return None
        return (f"peer {tenancy.peer_label(job.uid, job.request.peer, self.coordinator_uid)}: "
                f"{self.running_of[peer]} of max_concurrent_per_peer {cap} running")

    def usage(self, peer: str) -> float:
        """Decayed GPU-seconds of ``peer``'s ended attempts plus its running ones so far
        (a plugin picker's, docs/CONFIG.md)."""
        return self.usages((peer,))[peer]

    def usages(self, peers: Iterable[str]) -> dict[str, float]:
        """``usage`` of each of ``peers``, in one go (a pass orders every queued peer)."""
        at = self.at
        if self._running_usage is None:
            self._running_usage = running = {}
            for job in self.running:
                attempt, peer = job.attempts[-1], job.request.peer  # ``Job.current``
                running[peer] = running.get(peer, 0) + \
                    len(attempt.gpus) * max(0.0, at - attempt.started_at)
        running = self._running_usage
        return {peer: used + running.get(peer, 0.0) for peer, used in self.ledger.of_each(
            peers, at, self.policy.fair_share_half_life_seconds).items()}

    def project_usage(self, project: Project) -> float:
        """``slot_usage`` of ``project`` now (``ProjectFairShare``)."""
        return slot_usage(project, self.queue_ledger, self.running, self.by_class, self.at,
                          self.policy.fair_share_half_life_seconds)

    def expected_end(self, job: Job, started_at: float) -> float:
        """When ``job`` started at ``started_at`` should end: its calibrated ETA, never
        before now; an unknown ETA never ends (inf)."""
        eta = job.request.eta_s
        return math.inf if eta is None else max(self.at, started_at + eta * self.ratio)

    def heads(self, kind: str, jobs: list[Job], runs: dict[Hashable, list[Job]],
              token: Hashable, key: RunKey) -> Heads:
        """``heads_of(runs, key)`` for ``merge``: when ``runs`` are the whole queue's
        (``runs``), the backlog's, kept from pass to pass while ``token`` is the same,
        for a ``key`` that depends on nothing else that changes."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.heads(kind, token, key)
        return heads_of(runs, key)

    def longest_eta_step(self, jobs: list[Job], runs: dict[Hashable, list[Job]]
                         ) -> tuple[int, bool]:
        """The ETA step (``backlog.eta_step``) of the longest ETA ``jobs`` declare (0 when
        none does), and whether one of them declares none; ``runs`` are theirs by "eta"."""
        if jobs is self.queued and self.backlog is not None:
            longest, lacking = self.backlog.longest_eta()
            return (0 if longest is None else eta_step(longest)), lacking
        steps = {step for _, _, step, _ in runs}
        return max(steps - {None}, default=0), None in steps

    def served(self, jobs: list[Job]) -> list[Job]:
        """Those of ``jobs`` that ran before, in no order: the backlog's when they are the
        whole queue, so a pass does not look at thousands of jobs to find none."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.served()
        return [job for job in jobs if job.attempts]

    def runs(self, kind: str, jobs: list[Job]) -> dict[Hashable, list[Job]]:
        """``jobs`` (rank order) split by ``backlog.RUNS[kind]``, each run in rank order:
        the backlog's own runs when they are the whole queue, else split here."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.runs(kind)
        runs: dict[Hashable, list[Job]] = {}
        key = RUNS[kind]
        for job in jobs:
            runs.setdefault(key(job), []).append(job)
        return runs

    @property
    def packing(self) -> Packing:
        """The task file's ``placement``, against the demand queued at the start of the
        pass (the fragmentation strategy's mix)."""
        if self._packing is None:
            self._packing = Packing.of(self.policy.placement, self.policy.profiles,
                                       self.mix if self.mix is not None
                                       else Counter(job.profile for job in self.queued))
        return self._packing

    def allocate(self, demand: Demand, avoid: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str]:
        """``placement.place`` on the pass's loads, in the task file's ``placement``. A
        demand that too few devices take fails from ``fitting``'s counts, which the pass
        keeps anyway, without looking at every device again."""
        limits = self._limits(demand, avoid)
        if limits[""] < demand.gpu_count:
            return (), unplaced(demand, len(self.loads), limits)
        return place(demand, self.loads, avoid, self.packing)

    def place(self, job: Job, gpus: tuple[str, ...]) -> None:
        """Account for a launch decided in this pass."""
        queue = self.by_class[job.request.work_class]
        self.free -= 1
        self.waiting[queue.name] -= 1
        self.running_in[queue.name] += 1
        self.running_of[peer_of(job)] += 1
        self.launched.append((job, gpus))
        if gpus:
            before, held = self.loads, envelopes_of(
                self.policy.profiles.get(job.profile), gpus, job.job_id)
            self.loads = with_envelopes(before, held)
            self._refit(before)
            if self.reservation is not None and self.reservation.job is not job:
                self.reservation.backfilled(job, gpus, held)
        if self.openings is not None:
            self.openings.update(self.reservation)

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
        # the loads as running work ends, device by device: only where the demand fits
        # often enough is placement tried (``fitting``)
        loads = list(self.loads)
        where = {load.device.uuid: index for index, load in enumerate(loads)}
        fits = {load.device.uuid for load in loads if load.fit(demand)[0] is not None}
        for end, _, other, gpus in ending:
            if end == math.inf:
                break
            released = envelopes_of(self.policy.profiles.get(other.profile), gpus, other.job_id)
            for uuid, mine in by_uuid(released).items():
                if (index := where.get(uuid)) is not None:
                    loads[index] = releasing(loads[index], mine)
                    if loads[index].fit(demand)[0] is not None:
                        fits.add(uuid)
            if len(fits) < demand.gpu_count:
                continue
            devices, reason = place(demand, loads, packing=self.packing)
            if not reason:
                self.reservation = Reservation(
                    job=job, start=end, devices=devices, eta_limit=(end - self.at) / self.ratio,
                    hold=f"backfill: would delay {job.job_id}, reserved in "
                         f"{end - self.at:.0f}s on {len(devices)} device(s)",
                    promise=f"backfill reservation: expected to start in {end - self.at:.0f}s "
                            f"on {', '.join(devices)}",
                    demand=demand, at_start={uuid: loads[where[uuid]] for uuid in devices},
                    profiles=self.policy.profiles)
                if self.openings is not None:
                    self.openings.update(self.reservation)
                return self.reservation
        return None
