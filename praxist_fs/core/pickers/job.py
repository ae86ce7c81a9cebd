"""Job pickers (seed 002's level 2): the order of one tier's queued jobs.

Rank order (``Fcfs``, ``Backfill``), by peer usage (``FairShare``, ``Multifactor``)
and by what the core knows of each job (``ShortestExpectedFirst``,
``LeastAttainedService``). The ones that do not keep rank order merge the backlog's
runs lazily (``Pass.merge``), reading only as far as the pass walks.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping
from functools import partial
from typing import TYPE_CHECKING

from ..backlog import ETA_STEPS
from ..model import Job
from ..policy import Profile
from ..request import PRIORITY_RANGE
from ..starvation import starving
from .base import RANK, JobPicker, JobScope, register_picker

if TYPE_CHECKING:
    from .context import Pass


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
                position += sum(bisect_left(jobs, rank, key=RANK) for jobs in mine
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
    first, after each job's own priority, and the first of them that cannot be placed
    gets an EASY backfill reservation (``Pass.reserve``), so its wait is bounded while
    the cost of reserving is paid only in the tail. Among the starving, those past the
    fixed bound go oldest first and the rest by key (``Starving.order`` says why: by
    key alone, under a backlog that never drains, a narrower starving job always held
    the reservation; oldest first alone cost the wide jobs' p95 where the factor
    starves jobs against a young queue).

    With ``shortest_first_priority_seconds`` the queues of a project share one tier
    (``StrictPriority``) and a job's key is lowered by that many seconds per step of its
    queue's priority: a higher queue's job goes first among jobs alike, not before
    every job of a lower queue."""

    def init(self, ctx: Pass, scope: JobScope) -> None:
        # whose wait is long for the whole queue, not just its own tier's
        self._ctx, self._starving = ctx, starving(ctx.queued, ctx.at, ctx.policy)
        runs = ctx.runs("eta", scope.jobs)  # (class, priority, ETA step, profile) -> jobs
        unknown, lacking = ctx.longest_eta_step(scope.jobs, runs)
        aging, ratio = ctx.policy.shortest_first_aging, ctx.ratio
        by = ctx.policy.shortest_first_by
        width = _widths(ctx.policy.profiles) if by == "gpu_seconds" else {}

        # queue priority as a head start, where the queues share this tier (``StrictPriority``)
        ahead = ctx.policy.shortest_first_priority_seconds
        head_start = {c: ahead * ctx.by_class[c].priority for q in scope.queues
                      for c in q.work_classes} if ahead is not None else {}

        def key(run: Hashable, job: Job, position: int) -> tuple[int, float, int]:
            work_class, priority, step, profile = run  # priority, then by rank
            return -priority, math.pow(2.0, (unknown if step is None else step) / ETA_STEPS) \
                * ratio * width.get(profile, 1) + aging * job.submitted_at \
                - head_start.get(work_class, 0.0), job.order

        # the keys do not change with time: the backlog keeps the runs' heads while
        # aging, calibration, (with jobs that gave no ETA) the longest ETA and the
        # head starts stay
        token = (aging, ratio, unknown if lacking else None, by, ahead)
        heads = ctx.heads("eta", scope.jobs, runs, token, key)
        hungry = self._starving
        if hungry is None:
            order = ctx.merge(scope.jobs, runs, key, type(self), heads)
        else:  # the starving first, then the rest, which the merge reads without them
            order_starving = hungry.order(key)
            first = ctx.merge(scope.jobs, runs, order_starving, type(self),
                              hungry.heads(runs, order_starving), only=hungry.__contains__)
            rest = ctx.merge(scope.jobs, runs, key, type(self), heads, apart=hungry.__contains__)
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


for _name, _cls in (("fcfs", Fcfs), ("fair_share", FairShare), ("backfill", Backfill),
                    ("shortest_expected_first", ShortestExpectedFirst),
                    ("least_attained_service", LeastAttainedService),
                    ("multifactor", Multifactor)):
    register_picker("job", _name, _cls)
