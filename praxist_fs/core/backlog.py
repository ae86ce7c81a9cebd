"""The queue as a scheduling pass reads it: the queued jobs in rank order (priority,
then submit order: ``Job.rank``), and counts.

Kept up to date as jobs enter and leave the queue (``Scheduler._transition``) instead
of being sorted and counted once per pass, which at thousands of queued jobs was most
of a pass. A job's profile, work class, ETA and rank do not change while it is in
here (a retry sets them before the job re-enters; ``update`` takes a job out to change
its priority), so what ``add`` counted ``remove`` takes back. Held jobs, and jobs
waiting for a dependency, stay out: no pass could start them.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import attrgetter

from .model import Job

_RANK = attrgetter("rank")  # priority, then arrival (``Job.rank``)


class Backlog:
    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._jobs: list[Job] = sorted(jobs, key=_RANK)
        self.by_class: Counter[str] = Counter(job.request.work_class for job in self._jobs)
        self.by_profile: Counter[str] = Counter(job.profile for job in self._jobs)
        self._of_profile: dict[str, list[Job]] = {}          # profile -> its jobs, by order
        self._etas: dict[str, list[tuple[float, int]]] = {}  # profile -> sorted (eta_s, order)
        for job in self._jobs:
            self._of_profile.setdefault(job.profile, []).append(job)
            if job.request.eta_s is not None:
                self._etas.setdefault(job.profile, []).append((job.request.eta_s, job.order))
        for etas in self._etas.values():
            etas.sort()

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Job) -> None:
        insort(self._jobs, job, key=_RANK)  # a new job of priority 0: an append, as a rule
        self.by_class[job.request.work_class] += 1
        self.by_profile[job.profile] += 1
        insort(self._of_profile.setdefault(job.profile, []), job, key=_RANK)
        if (eta := job.request.eta_s) is not None:
            insort(self._etas.setdefault(job.profile, []), (eta, job.order))

    def remove(self, job: Job) -> None:
        del self._jobs[bisect_left(self._jobs, job.rank, key=_RANK)]
        _take(self.by_class, job.request.work_class)
        _take(self.by_profile, job.profile)
        jobs = self._of_profile[job.profile]
        del jobs[bisect_left(jobs, job.rank, key=_RANK)]
        if (eta := job.request.eta_s) is not None:
            etas = self._etas[job.profile]
            del etas[bisect_left(etas, (eta, job.order))]

    def jobs(self) -> list[Job]:
        """The queued jobs, oldest first: a copy, so the queue may change under it."""
        return self._jobs.copy()

    def younger(self, profile: str, rank: int) -> Iterator[Job]:
        """The queued jobs of ``profile`` ranked after ``rank``, in rank order."""
        jobs = self._of_profile.get(profile, [])
        return islice(jobs, bisect_right(jobs, rank, key=_RANK), None)

    def ending_by(self, profile: str, eta_s: float) -> int:
        """How many queued jobs of ``profile`` declare an ETA of at most ``eta_s``."""
        return bisect_right(self._etas.get(profile, ()), (eta_s, math.inf))


def _take(counts: Counter[str], key: str) -> None:
    """One fewer; a key with none left is dropped, so the keys are what is queued."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
