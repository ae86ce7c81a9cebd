"""What the run report (report.py) keeps of a run's history: one walk of its jobs that
folds each into the few sums and lists the sections draw, so that a report of 100,000
finished jobs holds neither their documents nor a row per job (issue 31: memory flat in
history; R-OPS-1).

A job is built from its snapshot line (``Shelf.values``), cut down to a ``JobRow``, folded
and let go. What is kept grows only with what the report draws one by one: a row for each
job that ran on a GPU (a bar of the timeline each), the newest failed attempts (the
failures table's ``MAX_FAILURE_ROWS``), and a float or two per job for the queue-length
curve and the delay percentiles (arrays, not objects). A job still queued, running or
suspended is kept whole until the report's end is known (``History.close``): its waits run
until then. Every section reads the same numbers in the same order as a walk in
submission order would, so the report's bytes do not depend on the shelf's key order.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .core.model import Attempt, Job
from .core.states import AttemptOutcome, JobState, PreemptMode

MAX_FAILURE_ROWS = 300  # the newest; a night of crashes would otherwise dwarf the rest


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """What the report draws of an attempt: its process, host and budget left out."""

    attempt_id: str
    number: int
    round: int
    started_at: float
    ended_at: float | None
    gpus: tuple[str, ...]
    exit_code: int | None
    signal: int | None
    outcome: AttemptOutcome | None
    failure: dict[str, Any] | None
    error: str | None
    preemptions: tuple[dict[str, Any], ...]

    active_seconds = Attempt.active_seconds  # it reads the two fields a row keeps

    @classmethod
    def of(cls, attempt: Attempt) -> AttemptRow:
        return cls(sys.intern(attempt.attempt_id), attempt.number, attempt.round,
                   attempt.started_at, attempt.ended_at, attempt.gpus, attempt.exit_code,
                   attempt.signal, attempt.outcome, attempt.failure, attempt.error,
                   attempt.preemptions)


@dataclass(frozen=True, slots=True)
class JobRow:
    """What the report draws of a job: its request cut down to the three fields it
    shows, its attempts to ``AttemptRow``s. The strings that repeat from job to job
    (peer, work class, profile, reason, attempt ids) are interned: one object each."""

    job_id: str
    order: int
    submitted_at: float
    tag: str
    peer: str
    work_class: str
    profile: str
    state: JobState
    round: int
    reason: str
    attempts: tuple[AttemptRow, ...]

    @classmethod
    def of(cls, job: Job) -> JobRow:
        request = job.request
        return cls(job.job_id, job.order, job.submitted_at, request.tag,
                   sys.intern(request.peer), sys.intern(request.work_class),
                   sys.intern(job.profile), job.state, job.round, sys.intern(job.reason),
                   tuple(map(AttemptRow.of, job.attempts)))

    @property
    def current(self) -> AttemptRow | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def settled(self) -> bool:
        """Nothing of it waits or runs on: what it adds to the report does not depend on
        when the report ends."""
        return self.state is not JobState.QUEUED and all(a.ended_at for a in self.attempts)


class FirstSeen:
    """Counts of keys, kept with each key's least rank (where it first appears in the
    order the old per-row sections walked), so that a ``Counter`` of them is built in
    that order: ``most_common`` breaks ties by it."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[Hashable, list] = {}  # key -> [least rank, count]

    def see(self, key: Hashable, rank: Any) -> None:
        if (seen := self._seen.get(key)) is None:
            self._seen[key] = [rank, 1]
        else:
            seen[0], seen[1] = min(seen[0], rank), seen[1] + 1

    def counter(self) -> Counter:
        return Counter({key: count for key, (_, count) in
                        sorted(self._seen.items(), key=lambda item: item[1][0])})

    def __iter__(self) -> Iterator:
        """The keys in order of their first appearance."""
        return iter(self.counter())


class History:
    """A run's jobs folded for the report (``of``); ``close`` adds the jobs still open
    once the report's end is known. Read by report.py's sections only after ``close``."""

    def __init__(self) -> None:
        self.jobs = self.attempts = self.retried = self.failed = 0
        self.states, self.peers, self.work_classes = FirstSeen(), FirstSeen(), FirstSeen()
        self.spenders = FirstSeen()  # peers with an attempt: GPU-hours rows, in order
        self.outcomes = FirstSeen()  # of the failed attempts, newest first
        self.first_submitted: float | None = None
        self.latest: float | None = None  # the latest instant any job records
        self.gpu_jobs: list[JobRow] = []  # that ran on a GPU: in submission order at close
        self.newest_failures: list[tuple[tuple, AttemptRow, JobRow]] = []
        self.queue_in, self.queue_out = array("d"), array("d")  # waits' starts, ends
        self.delays: dict[str, array] = defaultdict(lambda: array("d"))  # by work class
        self.open: list[JobRow] = []
        self.closed = False

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> History:
        """One walk of ``jobs`` (a run's, its finished ones off the snapshot one at a
        time), in any order."""
        history = cls()
        for job in jobs:
            history.add(JobRow.of(job))
        return history

    def add(self, job: JobRow) -> None:
        order, attempts = job.order, job.attempts
        self.jobs += 1
        self.attempts += len(attempts)
        self.retried += len(attempts) > 1
        self.states.see(job.state.value, order)
        self.peers.see(job.peer, order)
        self.work_classes.see(job.work_class, order)
        times = [job.submitted_at, *(t for a in attempts for t in (a.started_at, a.ended_at)
                                     if t is not None)]
        self.latest = max(times) if self.latest is None else max(self.latest, *times)
        self.first_submitted = (job.submitted_at if self.first_submitted is None
                                else min(self.first_submitted, job.submitted_at))
        if attempts:
            self.spenders.see(job.peer, order)
        if any(a.gpus for a in attempts):
            self.gpu_jobs.append(job)
        for number, attempt in enumerate(attempts):
            if attempt.outcome not in (None, "completed"):
                rank = (-(attempt.ended_at or attempt.started_at), order, number)
                self.failed += 1
                self.outcomes.see(attempt.outcome, rank)
                self.newest_failures.append((rank, attempt, job))
                if len(self.newest_failures) >= 2 * MAX_FAILURE_ROWS:
                    self._keep_newest_failures()
        if job.settled:
            self._add_waits(job, until=0.0)  # never read: every attempt ended
        else:
            self.open.append(job)

    def end(self, last_record: float | None) -> float:
        """The latest instant the state knows of (``last_record``: the journal's last,
        None when none): a stopped run's report ends there, not when it is built."""
        return max((t for t in (self.latest, last_record) if t is not None), default=0.0)

    def span(self, until: float) -> tuple[float, float]:
        """The report's time axis: the first submission (``until`` when none) to ``until``."""
        start = until if self.first_submitted is None else self.first_submitted
        return start, max(until, start + 1e-9)

    def close(self, until: float) -> None:
        """Add the open jobs' waits up to ``until``; sort what the sections draw."""
        if self.closed:
            raise RuntimeError("a report's history is closed once")
        self.closed = True
        end = self.span(until)[1]
        for job in self.open:
            self._add_waits(job, until, queue_end=end)
        self.open = []
        sort_in_place(self.queue_in)
        sort_in_place(self.queue_out)
        self.gpu_jobs.sort(key=lambda job: job.order)
        self._keep_newest_failures()

    def failures(self) -> list[tuple[AttemptRow, JobRow]]:
        """The newest ``MAX_FAILURE_ROWS`` failed attempts, newest first (ties: in
        submission order, then attempt order)."""
        return [(attempt, job) for _, attempt, job in self.newest_failures]

    def _keep_newest_failures(self) -> None:
        self.newest_failures.sort(key=lambda entry: entry[0])
        del self.newest_failures[MAX_FAILURE_ROWS:]

    def _add_waits(self, job: JobRow, until: float, queue_end: float = 0.0) -> None:
        """A job's waits: the queue-length curve's steps (a wait from its submission, or
        the end of an attempt that sent it back, to the start of its next attempt, or to
        ``queue_end`` when it still waits) and its queue delay (``waited``). Waits whose
        start or end the state does not keep are left out: of jobs that left the queue
        without running (cancelled, expired), and of a round that a ``retry_terminal``
        resubmission reopened (it waited from the resubmission, not from the failed
        attempt's end)."""
        since = job.submitted_at
        for attempt, before in zip(job.attempts, [None, *job.attempts]):
            if before is None or before.round == attempt.round:
                self.queue_in.append(since)
                self.queue_out.append(attempt.started_at)
            since = attempt.ended_at if attempt.ended_at is not None else queue_end
        if job.state is JobState.QUEUED and (
                not job.attempts or job.attempts[-1].round == job.round):
            self.queue_in.append(since)
            self.queue_out.append(queue_end)
        if job.attempts:
            self.delays[job.work_class].append(waited(job, until))


SORTED_RUN = 8192  # values ``sort_in_place`` sorts as Python floats at once


def sort_in_place(values: array) -> None:
    """``values[:] = sorted(values)`` without a float object for every value at once
    (``sorted`` of 100,000 waits makes a 4 MB list of them, the report's largest
    passing allocation): runs of SORTED_RUN sorted each, then merged back into
    ``values`` (one float per run live at a time; the runs are its only copy)."""
    if len(values) <= SORTED_RUN:
        values[:] = array(values.typecode, sorted(values))
        return
    runs = [array(values.typecode, sorted(values[start:start + SORTED_RUN]))
            for start in range(0, len(values), SORTED_RUN)]
    del values[:]
    values.extend(heapq.merge(*runs))


def waited(job: JobRow, until: float) -> float:
    """Every wait of a job that started (R-SIM-2): from its submission to its first start,
    from each attempt's end to the next one's start (requeued by a preemption, or
    retried), and each suspension (until ``until`` if it lasts). As the queue curve, the
    wait before the first attempt of a round a ``retry_terminal`` resubmission reopened
    is not kept, so it is left out."""
    total = max(0.0, job.attempts[0].started_at - job.submitted_at)
    for attempt, before in zip(job.attempts, [None, *job.attempts]):
        if before is not None and before.round == attempt.round and before.ended_at is not None:
            total += max(0.0, attempt.started_at - before.ended_at)
        total += sum((p["resumed_at"] or attempt.ended_at or until) - p["at"]
                     for p in attempt.preemptions if p["mode"] == PreemptMode.SUSPEND)
    return total


def queue_lengths(history: History) -> Iterator[tuple[float, int]]:
    """Each instant the queue's length changes and its length after every change then
    (waits that end at an instant leave before those that start there join), in time
    order, from a closed ``history`` (its waits' starts and ends sorted): no object per
    step."""
    starts, ends = history.queue_in, history.queue_out
    i = j = length = 0
    while i < len(starts) or j < len(ends):
        at = min(starts[i] if i < len(starts) else ends[j],
                 ends[j] if j < len(ends) else starts[i])
        while j < len(ends) and ends[j] == at:
            length, j = length - 1, j + 1
        while i < len(starts) and starts[i] == at:
            length, i = length + 1, i + 1
        yield at, length
