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

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from itertools import compress, count, islice
from operator import attrgetter
from typing import Any

from .model import Job

_RANK = attrgetter("rank")  # priority, then arrival (``Job.rank``)
ETA_STEPS = 8  # ETAs are told apart by an eighth of an octave (``eta_step``)


def eta_step(eta_s: float | None) -> int | None:
    """``eta_s`` on a log scale, ``ETA_STEPS`` steps an octave (9 %): None stays None."""
    return None if eta_s is None else round(math.log2(max(eta_s, 1.0)) * ETA_STEPS)


# Runs: the queued jobs split by a key, each run in rank order. Jobs of one run differ
# only by rank for the pickers that read them (``ShortestExpectedFirst``: work class,
# priority, ETA; ``Multifactor`` and ``FairShare``: work class, peer, profile,
# priority), so a pass merges runs instead of sorting the queue. Each run is of one
# profile, so a pass drops a profile's runs once its demand is known to fail
# (``Pass.merge``).
RUNS: dict[str, Callable[[Job], Hashable]] = {
    "eta": lambda job: (job.request.work_class, job.priority, eta_step(job.request.eta_s),
                        job.profile),
    "peer": lambda job: (job.request.work_class, job.request.peer, job.profile, job.priority),
}

# A run's key for a picker: (the run's key in ``RUNS``, the job, its place in the run).
RunKey = Callable[[Hashable, Job, int], Any]
# Per profile, a heap of (the key of a run's first job, the run's key) (``heads``).
Heads = dict[str, list[tuple[Any, Hashable]]]


def heads_of(runs: dict[Hashable, list[Job]], key: RunKey) -> Heads:
    """Per profile, a heap of the first job of each of its ``runs`` by ``key``."""
    heads: Heads = {}
    # grouped as they come (the ranking pickers key every run each pass): a sort on the
    # profile cost a third more
    for of, run in runs.items():
        job = run[0]
        if (heap := heads.get(job.profile)) is None:
            heads[job.profile] = [(key(of, job, 0), of)]
        else:
            heap.append((key(of, job, 0), of))
    for heap in heads.values():
        heapq.heapify(heap)
    return heads


class Backlog:
    def __init__(self, jobs: Iterable[Job] = ()) -> None:
        self._jobs: list[Job] = sorted(jobs, key=_RANK)
        self.by_class: Counter[str] = Counter(job.request.work_class for job in self._jobs)
        self.by_profile: Counter[str] = Counter(job.profile for job in self._jobs)
        self._of_profile: dict[str, list[Job]] = {}          # profile -> its jobs, by order
        # profile -> the ETA each of its jobs declares (inf: none), beside ``_of_profile``
        self._eta_of: dict[str, list[float]] = {}
        self._etas: dict[str, list[tuple[float, int]]] = {}  # profile -> sorted (eta_s, order)
        for job in self._jobs:
            self._of_profile.setdefault(job.profile, []).append(job)
            self._eta_of.setdefault(job.profile, []).append(_eta(job))
            if job.request.eta_s is not None:
                self._etas.setdefault(job.profile, []).append((job.request.eta_s, job.order))
        for etas in self._etas.values():
            etas.sort()
        # the queued jobs that ran before (``served``): no job gains an attempt in here
        self._served = {job.job_id: job for job in self._jobs if job.attempts}
        self._runs: dict[str, dict[Hashable, list[Job]]] = {kind: {} for kind in RUNS}
        for kind, key in RUNS.items():
            for job in self._jobs:
                self._runs[kind].setdefault(key(job), []).append(job)
        # copy on write: the runs not lent out (``runs``) since they were made or copied
        self._own: dict[str, set[Hashable]] = {kind: set(runs)
                                               for kind, runs in self._runs.items()}
        # ``heads`` kept from pass to pass: by kind, (the picker's token, the heads, each
        # run's entry in them), and the runs whose first job changed since
        self._heads: dict[str, tuple[Hashable, Heads, dict[Hashable, tuple[Any, Hashable]]]] = {}
        self._moved: dict[str, set[Hashable]] = {kind: set() for kind in RUNS}
        # ``lend``: while a pass reads ``_jobs``, the jobs added (True) or removed since
        self._lent = False
        self._waiting: list[tuple[bool, Job]] = []

    def __len__(self) -> int:
        return len(self._jobs) + sum(1 if added else -1 for added, _ in self._waiting)

    def add(self, job: Job) -> None:
        self._change(True, job)
        self.by_class[job.request.work_class] += 1
        self.by_profile[job.profile] += 1
        jobs = self._of_profile.setdefault(job.profile, [])
        at = bisect_right(jobs, job.rank, key=_RANK)
        jobs.insert(at, job)
        self._eta_of.setdefault(job.profile, []).insert(at, _eta(job))
        if job.attempts:
            self._served[job.job_id] = job
        if (eta := job.request.eta_s) is not None:
            insort(self._etas.setdefault(job.profile, []), (eta, job.order))
        for kind, key in RUNS.items():
            run = self._run(kind, of := key(job))
            insort(run, job, key=_RANK)
            if run[0] is job and kind in self._heads:
                self._moved[kind].add(of)

    def remove(self, job: Job) -> None:
        self._change(False, job)
        _take(self.by_class, job.request.work_class)
        _take(self.by_profile, job.profile)
        jobs = self._of_profile[job.profile]
        at = bisect_left(jobs, job.rank, key=_RANK)
        del jobs[at], self._eta_of[job.profile][at]
        self._served.pop(job.job_id, None)
        if (eta := job.request.eta_s) is not None:
            etas = self._etas[job.profile]
            del etas[bisect_left(etas, (eta, job.order))]
        for kind, key in RUNS.items():
            run = self._run(kind, of := key(job))
            at = bisect_left(run, job.rank, key=_RANK)
            del run[at]
            if at == 0 and kind in self._heads:
                self._moved[kind].add(of)
            if not run:
                del self._runs[kind][of]
                self._own[kind].discard(of)

    def _change(self, added: bool, job: Job) -> None:
        """``job`` added (True) to ``_jobs`` or removed: once ``settle``d, if lent."""
        if self._lent:
            self._waiting.append((added, job))
        else:
            _changed(self._jobs, [(added, job)])

    def jobs(self) -> list[Job]:
        """The queued jobs, oldest first: a copy, so the queue may change under it."""
        return _changed(self._jobs.copy(), self._waiting)

    def lend(self) -> list[Job]:
        """The queued jobs in rank order, not a copy, for a pass to read until ``settle``:
        the jobs added and removed meanwhile wait till then. A pass's list is read while
        the queue changes (its launches leave the queue before its rest, ``PassDesk._pass``,
        has run), and a copy of thousands of jobs cost every pass about 0.1 ms. The last
        pass's walk is done when the next one borrows it."""
        self.settle()
        self._lent = True
        return self._jobs

    def settle(self) -> None:
        """The list ``lend`` gave is no longer read: what changed since takes effect."""
        self._lent = False
        _changed(self._jobs, self._waiting)
        self._waiting.clear()

    def served(self) -> list[Job]:
        """The queued jobs that ran before (retried or requeued), in no order."""
        return list(self._served.values())

    def runs(self, kind: str) -> dict[Hashable, list[Job]]:
        """The queued jobs split by ``RUNS[kind]``, each run in rank order: a pass reads
        them as they are now, while the queue changes (copy on write, ``_run``)."""
        self._own[kind].clear()
        return self._runs[kind].copy()

    def heads(self, kind: str, token: Hashable, key: RunKey) -> Heads:
        """``heads_of(runs(kind), key)``, kept from call to call while ``token`` is the
        same: a picker whose ``key`` depends on nothing but the run, the job and what
        ``token`` names (``ShortestExpectedFirst``: not on the time) pays per pass for the
        runs whose first job changed since, not for every run. The heaps are the
        caller's to pop."""
        kept, runs, moved = self._heads.get(kind), self._runs[kind], self._moved[kind]
        if kept is None or kept[0] != token:
            heads = heads_of(runs, key)
            self._heads[kind] = kept = (token, heads, {
                entry[1]: (profile, entry) for profile, heap in heads.items() for entry in heap})
        elif moved:
            _, heads, entries = kept
            touched = set()
            for of in moved:
                if (old := entries.pop(of, None)) is not None:
                    heads[old[0]].remove(old[1])
                    touched.add(old[0])
                if (run := runs.get(of)) is not None:
                    entries[of] = (profile, entry) = (run[0].profile, (key(of, run[0], 0), of))
                    heads.setdefault(profile, []).append(entry)
                    touched.add(profile)
            for profile in touched:
                if heads[profile]:
                    heapq.heapify(heads[profile])
                else:
                    del heads[profile]
        moved.clear()
        return {profile: heap.copy() for profile, heap in kept[1].items()}

    def _run(self, kind: str, key: Hashable) -> list[Job]:
        """The run ``key`` of ``kind``, to change: a copy if ``runs`` lent it out."""
        runs, own = self._runs[kind], self._own[kind]
        if key not in own:
            own.add(key)
            runs[key] = runs[key].copy() if key in runs else []
        return runs[key]

    def younger(self, profile: str, rank: int) -> Iterator[Job]:
        """The queued jobs of ``profile`` ranked after ``rank``, in rank order."""
        jobs = self._of_profile.get(profile, [])
        return islice(jobs, bisect_right(jobs, rank, key=_RANK), None)

    def longest_eta(self) -> tuple[float | None, bool]:
        """The longest ETA a queued job declares (None when none does), and whether a
        queued job declares none."""
        etas = [etas[-1][0] for etas in self._etas.values() if etas]
        return max(etas, default=None), sum(map(len, self._etas.values())) < len(self)

    def ending_by(self, profile: str, eta_s: float) -> int:
        """How many queued jobs of ``profile`` declare an ETA of at most ``eta_s``."""
        return bisect_right(self._etas.get(profile, ()), (eta_s, math.inf))

    def ending_after(self, profile: str, rank: int, eta_s: float) -> Job | None:
        """The first queued job of ``profile`` ranked after ``rank`` that declares an ETA of
        at most ``eta_s``, or None. The ETAs are compared in C: under a backfill
        reservation a profile's short jobs may lie thousands of jobs apart."""
        jobs, etas = self._of_profile.get(profile, []), self._eta_of.get(profile, [])
        start = bisect_right(jobs, rank, key=_RANK)
        found = next(compress(count(start), map(float(eta_s).__ge__, islice(etas, start, None))),
                     None)
        return None if found is None else jobs[found]


def _eta(job: Job) -> float:
    """The ETA ``job`` declares; inf when none (it never ends: ``Reservation.outlasts``)."""
    eta = job.request.eta_s
    return math.inf if eta is None else eta


def _changed(jobs: list[Job], waiting: list[tuple[bool, Job]]) -> list[Job]:
    """``jobs`` (rank order) with the jobs ``waiting`` added (True) or removed, in turn."""
    for added, job in waiting:
        if added:
            insort(jobs, job, key=_RANK)  # a new job of priority 0: an append, as a rule
        else:
            del jobs[bisect_left(jobs, job.rank, key=_RANK)]
    return jobs


def _take(counts: Counter[str], key: str) -> None:
    """One fewer; a key with none left is dropped, so the keys are what is queued."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
