"""What the run report (report.py) keeps of a run's history: one walk of its jobs that
folds each into the few sums and lists the sections draw, so that a report of 100,000
finished jobs holds neither their documents nor a row per job (issue 31: memory flat in
history; R-OPS-1).

A job is built from its snapshot line (``Shelf.values``), cut down to a ``JobRow``, folded
and let go. What is kept grows only with what the report draws one by one: a row for each
job that ran on a GPU (a bar of the timeline each), the newest failed attempts (the
failures table's ``MAX_FAILURE_ROWS``). The floats of the queue-length curve and the
delay percentiles (~3 a job) go to a temporary file in sorted runs (``Spilled``), read
back merged, in order: what stays in memory is a run's worth. A job still queued, running or
suspended is kept whole until the report's end is known (``History.close``): its waits run
until then. Every section reads the same numbers in the same order as a walk in
submission order would, so the report's bytes do not depend on the shelf's key order.
"""

from __future__ import annotations

import heapq
import os
import sys
import tempfile
import weakref
from array import array
from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

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
        self.queue_in, self.queue_out = Spilled(), Spilled()  # waits' starts, ends
        self.delays: dict[str, Spilled] = defaultdict(Spilled)  # by work class
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


SORTED_RUN = 8192  # values a ``Spilled`` holds (and sorts as Python floats) at once
_READ_VALUES = 256  # values a ``Spilled`` reads back of each run at a time, merging


class Spilled:
    """Floats added in any order and read back sorted (``sorted``, as often as asked),
    holding at most SORTED_RUN of them: each full run is sorted and written to a
    temporary file (made at the first), and the runs are merged as they are read back,
    a few kilobytes of each at a time. The report's waits are ~3 floats a job (the
    queue curve's starts and ends, the delays): 2.4 MB in arrays at 100,000 finished
    jobs, and twice that while sorted (issue 31: memory flat in history)."""

    __slots__ = ("_tail", "_runs", "_file", "_size", "_count", "__weakref__")

    def __init__(self) -> None:
        self._tail = array("d")
        self._runs: list[tuple[int, int]] = []  # (offset in the file, values) of each
        self._file: BinaryIO | None = None
        self._size = self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, value: float) -> None:
        self._tail.append(value)
        self._count += 1
        if len(self._tail) >= SORTED_RUN:
            run = array("d", sorted(self._tail))
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="praxist-report-", buffering=0)
                weakref.finalize(self, self._file.close)  # its last reader may be a section
            os.pwrite(self._file.fileno(), run.tobytes(), self._size)
            self._runs.append((self._size, len(run)))
            self._size += len(run) * run.itemsize
            self._tail = array("d")

    def sorted(self) -> Iterator[float]:
        """Every value, in order (``sorted`` of them all, without them all at once)."""
        tail = sorted(self._tail)
        if not self._runs:
            return iter(tail)
        return heapq.merge(*(self._read(offset, count) for offset, count in self._runs), tail)

    def _read(self, offset: int, count: int) -> Iterator[float]:
        for start in range(0, count, _READ_VALUES):
            values = array("d")
            size = min(_READ_VALUES, count - start) * values.itemsize
            values.frombytes(os.pread(self._file.fileno(), size,
                                      offset + start * values.itemsize))
            yield from values


class Ranked:
    """What ``percentile`` reads of a sorted list (its length, and the values at a few
    ranks), taken from a sorted stream of ``count`` values as it goes by (``see``)."""

    __slots__ = ("_count", "_kept")

    def __init__(self, count: int, ranks: Iterable[int]) -> None:
        self._count, self._kept = count, dict.fromkeys(ranks)

    def see(self, rank: int, value: float) -> None:
        if rank in self._kept:
            self._kept[rank] = value

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, rank: int) -> float:
        return self._kept[rank if rank >= 0 else self._count + rank]


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
    order, from a closed ``history`` (its waits' starts and ends, each read in order):
    no object per step."""
    starts, ends = history.queue_in.sorted(), history.queue_out.sorted()
    start, end, length = next(starts, None), next(ends, None), 0
    while start is not None or end is not None:
        at = start if end is None else end if start is None else min(start, end)
        while end is not None and end == at:
            length, end = length - 1, next(ends, None)
        while start is not None and start == at:
            length, start = length + 1, next(starts, None)
        yield at, length
