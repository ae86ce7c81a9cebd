"""Which queued jobs are starving, for shortest expected first (``pickers``).

Shortest expected first with aging lets a wide job be passed for as long as short jobs
keep arriving: once it leads it may still not fit, and each device that frees goes to
the next job that does. A *starving* job goes first and, the first of them that cannot
be placed, gets an EASY backfill reservation (``Pass.reserve``). A job starves once it
has waited

- ``shortest_first_starvation_seconds``, a fixed bound (a backstop): it is *overdue*; or
- ``shortest_first_starvation_factor`` times as long as the median job of its priority
  in the picker's queue has waited: a bound from the queue's own scale, which needs no
  tuning to a trace's backlog. Under a backlog of weeks it is weeks, in a queue that
  drains in minutes minutes; a queue whose median job has not waited at all starves
  nobody by it.

Among the starving, the overdue go first, oldest first, and the rest by the picker's
own key (``Starving.order``). Oldest first, because the backstop is reached only under
a backlog that never drains, and there by key a narrower, younger overdue job was
always the first blocked one and held the reservation pass after pass (issue 32: on
the whole Philly trace at 443 GPUs an 8-GPU job waited 21 days after it reached the
backstop). By key for the rest, because the factor starves jobs against a young queue
too (a backlog that drains, a burst of arrivals), where oldest first handed the
reservation to the widest, longest jobs and cost the wide jobs' p95 (1.02 of greedy
co-location's at 831 GPUs against 0.87 by key).

Each priority's jobs are in submit order (``Job.rank``), so its starving jobs are its
first ones, and its overdue ones the first of those: ``Starving`` keeps, per priority,
the rank of the last of each, and whether a job is starving or overdue is a
comparison. So are the starving jobs of each of the backlog's runs (``Pass.runs``) its
first ones: ``Pass.merge`` reads just those (``Starving.heads``), lazily, as far as a
pass walks, and the rest apart.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from .backlog import Heads, RunKey, heads_of
from .model import Job
from .policy import Policy

_RANK = attrgetter("rank")
_SUBMITTED = attrgetter("submitted_at")


@dataclass(frozen=True, slots=True)
class Starving:
    """Per priority (``Job.rank >> 40``), the rank of its last starving job and of its
    last overdue one (past ``shortest_first_starvation_seconds``)."""

    last: dict[int, int]
    last_overdue: dict[int, int]

    def __contains__(self, job: Job) -> bool:
        """Whether ``job`` starves: its priority's starving jobs are its first ones (the
        module's docstring), so it does if its rank is not past the last of them."""
        rank = job.rank
        return rank <= self.last.get(rank >> 40, -1)

    def overdue(self, job: Job) -> bool:
        """Whether ``job`` is past the fixed bound (the backstop), not only the factor:
        those go oldest first (``order``)."""
        rank = job.rank
        return rank <= self.last_overdue.get(rank >> 40, -1)

    def order(self, key: RunKey) -> RunKey:
        """The starving jobs' order (a ``RunKey``), each priority apart: the overdue
        first, in rank order (each priority's submit order, so the one that has waited
        longest holds the reservation), then the rest by ``key``. Each run's starving
        jobs stay in rank order by it: its overdue ones are its first."""
        def starving_order(run: Hashable, job: Job, position: int) -> tuple[int, int, Any]:
            if self.overdue(job):
                return job.rank >> 40, 0, job.rank
            return job.rank >> 40, 1, key(run, job, position)
        return starving_order

    def heads(self, runs: dict[Hashable, list[Job]], order: RunKey) -> Heads:
        """``heads_of`` the runs that begin with a starving job, by ``order``
        (``Starving.order``): a merge of the starving jobs (``Pass.merge`` with
        ``only``) reads just those."""
        return heads_of({of: run for of, run in runs.items() if run[0] in self}, order)


def starving(jobs: list[Job], at: float, policy: Policy) -> Starving | None:
    """The starving jobs of ``jobs`` (rank order) at ``at``; None when none is (or no
    bound is set). Per priority: those submitted at least
    ``shortest_first_starvation_seconds`` before ``at`` (overdue), and those that have
    waited more than ``shortest_first_starvation_factor`` times as long as its median
    job, while that one has waited at all."""
    seconds = policy.shortest_first_starvation_seconds
    factor = policy.shortest_first_starvation_factor
    if seconds is None and factor is None:
        return None
    last: dict[int, int] = {}
    last_overdue: dict[int, int] = {}
    low = 0
    while low < len(jobs):
        tier = jobs[low].rank >> 40
        high = bisect_left(jobs, (tier + 1) << 40, lo=low, key=_RANK)
        end = low
        if seconds is not None:
            end = bisect_right(jobs, at - seconds, lo=low, hi=high, key=_SUBMITTED)
            if end > low:
                last_overdue[tier] = jobs[end - 1].rank
        median = jobs[low + (high - low - 1) // 2]
        if factor is not None and median.submitted_at < at:
            bound = factor * (at - median.submitted_at)
            end = max(end, bisect_left(jobs, at - bound, lo=low, hi=high, key=_SUBMITTED))
        if end > low:
            last[tier] = jobs[end - 1].rank
        low = high
    return Starving(last, last_overdue) if last else None
