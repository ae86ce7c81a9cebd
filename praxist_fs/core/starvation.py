"""Which queued jobs are starving, for shortest expected first (``pickers``).

Shortest expected first with aging lets a wide job be passed for as long as short jobs
keep arriving: once it leads it may still not fit, and each device that frees goes to
the next job that does. A *starving* job goes first (among the starving, oldest
first: ``oldest_first``) and, the first of them that cannot be placed, gets an EASY
backfill reservation (``Pass.reserve``). A job starves once it has waited

- ``shortest_first_starvation_seconds``, a fixed bound; or
- ``shortest_first_starvation_factor`` times as long as the median job of its priority
  in the picker's queue has waited: a bound from the queue's own scale, which needs no
  tuning to a trace's backlog. Under a backlog of weeks it is weeks, in a queue that
  drains in minutes minutes; a queue whose median job has not waited at all starves
  nobody.

Each priority's jobs are in submit order (``Job.rank``), so its starving jobs are its
first ones: ``Starving`` keeps, per priority, the rank of the last of them, and whether
a job is starving is a comparison. So are the starving jobs of each of the backlog's
runs (``Pass.runs``) its first ones: ``Pass.merge`` reads just those (``starving_heads``),
lazily, as far as a pass walks, and the rest apart.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Hashable
from dataclasses import dataclass
from operator import attrgetter

from .backlog import Heads, heads_of
from .model import Job
from .policy import Policy

_RANK = attrgetter("rank")
_SUBMITTED = attrgetter("submitted_at")


@dataclass(frozen=True, slots=True)
class Starving:
    """Per priority (``Job.rank >> 40``), the rank of its last starving job."""

    last: dict[int, int]

    def __contains__(self, job: Job) -> bool:
        rank = job.rank
        return rank <= self.last.get(rank >> 40, -1)


def starving(jobs: list[Job], at: float, policy: Policy) -> Starving | None:
    """The starving jobs of ``jobs`` (rank order) at ``at``; None when none is (or no
    bound is set). Per priority: those submitted at least
    ``shortest_first_starvation_seconds`` before ``at``, and those that have waited more
    than ``shortest_first_starvation_factor`` times as long as its median job."""
    seconds = policy.shortest_first_starvation_seconds
    factor = policy.shortest_first_starvation_factor
    if seconds is None and factor is None:
        return None
    last: dict[int, int] = {}
    low = 0
    while low < len(jobs):
        tier = jobs[low].rank >> 40
        high = bisect_left(jobs, (tier + 1) << 40, lo=low, key=_RANK)
        end = low
        if seconds is not None:
            end = bisect_right(jobs, at - seconds, lo=low, hi=high, key=_SUBMITTED)
        if factor is not None:
            median = jobs[low + (high - low - 1) // 2]
            bound = factor * (at - median.submitted_at)
            end = max(end, bisect_left(jobs, at - bound, lo=low, hi=high, key=_SUBMITTED))
        if end > low:
            last[tier] = jobs[end - 1].rank
        low = high
    return Starving(last) if last else None


def oldest_first(run: Hashable, job: Job, position: int) -> int:
    """The starving jobs' order (a ``RunKey``): rank order, which is each priority's
    submit order, so the job that has waited longest holds the reservation."""
    return job.rank


def starving_heads(runs: dict[Hashable, list[Job]], starving: Starving) -> Heads:
    """``heads_of`` the runs that begin with a starving job, ``oldest_first``: a merge of
    the starving jobs (``Pass.merge`` with ``only``) reads just those."""
    return heads_of({of: run for of, run in runs.items() if run[0] in starving}, oldest_first)
