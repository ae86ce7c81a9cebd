"""Which queued jobs are starving, for shortest expected first (``pickers``).

Shortest expected first with aging lets a wide job be passed for as long as short jobs
keep arriving: once it leads it may still not fit, and each device that frees goes to
the next job that does. A *starving* job goes first (among the starving, in the
picker's own order) and, the first of them that cannot be placed, gets an EASY backfill
reservation (``Pass.reserve``). A job starves once it has waited

- ``shortest_first_starvation_seconds``, a fixed bound; or
- ``shortest_first_starvation_factor`` times as long as the median job of its priority
  in the picker's queue has waited: a bound from the queue's own scale, which needs no
  tuning to a trace's backlog. Under a backlog of weeks it is weeks, in a queue that
  drains in minutes minutes; a queue whose median job has not waited at all starves
  nobody.

Each priority's jobs are in submit order (``Job.rank``), so its starving jobs are its
first ones: ``Starving`` keeps, per priority, the rank of the last of them, and whether
a job is starving is a comparison. So are the starving jobs of each of the backlog's
runs (``Pass.runs``) its first ones, and ``starving_first`` merges just those, lazily,
reading only as far as a pass walks.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from operator import attrgetter

from .backlog import Heads, RunKey
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


def starving_first(runs: dict[Hashable, list[Job]], heads: Heads, key: RunKey,
                   starving: Starving) -> Iterator[Job]:
    """The starving jobs of ``runs`` (each run in rank order, so its starving jobs come
    first) in the order of ``key``, read lazily. ``heads`` are the runs' first jobs with
    their keys (``heads_of``): read now, so that a merge may pop them afterwards."""
    heap = [(entry_key, of) for heap in heads.values() for entry_key, of in heap
            if runs[of][0] in starving]
    heapq.heapify(heap)
    return _merged(runs, heap, key, starving)


def _merged(runs: dict[Hashable, list[Job]], heap: list[tuple[object, Hashable]],
            key: RunKey, starving: Starving) -> Iterator[Job]:
    position: dict[Hashable, int] = {}
    while heap:
        of = heap[0][1]
        run, at = runs[of], position.get(of, 0)
        yield run[at]
        position[of] = at = at + 1
        if at < len(run) and run[at] in starving:
            heapq.heapreplace(heap, (key(of, run[at], at), of))
        else:
            heapq.heappop(heap)
