"""The report's one walk of a run's history (praxist_fs/report_history.py) gives what a
walk of every job in submission order gives, whatever order the shelf yields them in
(issue 31 item 3: the report no longer keeps a row per job to sort)."""

from __future__ import annotations

import random
import tracemalloc
from collections import Counter

from praxist_fs.core.states import AttemptOutcome, JobState
from praxist_fs.report_history import (
    MAX_FAILURE_ROWS, SORTED_RUN, AttemptRow, History, JobRow, Spilled, queue_lengths,
    waited,
)


def failed_job(order: int, ends: list[float], rng: random.Random) -> JobRow:
    attempts = tuple(
        AttemptRow(f"a{n}", n, 1, end - 1.0, end, (), 1, None,
                   rng.choice([AttemptOutcome.FAILED, AttemptOutcome.INFRA_RETRY]),
                   None, None, ()) for n, end in enumerate(ends, start=1))
    return JobRow(f"job-{order}", order, 0.0, f"tag-{order}", rng.choice("pq"), "ordinary",
                  "cpu_light", JobState.FAILED, 1, "", attempts)


def test_the_failures_table_keeps_the_newest_in_the_order_a_full_sort_gives():
    """More failed attempts than the table shows, many ending at the same instant, fed
    in shuffled order: the newest MAX_FAILURE_ROWS, newest first, ties in submission
    then attempt order, and the outcomes counted in that order, as sorting every
    attempt of the jobs in submission order did."""
    rng = random.Random(31)
    jobs = [failed_job(order, [float(rng.randrange(50)) for _ in range(rng.randrange(1, 4))],
                       rng) for order in range(1, 700)]
    by_submission = [(attempt, job) for job in jobs for attempt in job.attempts]
    newest = sorted(by_submission, key=lambda pair: -pair[0].ended_at)
    shuffled = jobs[:]
    rng.shuffle(shuffled)
    history = History()
    for job in shuffled:
        history.add(job)
    history.close(100.0)
    assert len(newest) > 2 * MAX_FAILURE_ROWS and history.failed == len(newest)
    assert history.failures() == newest[:MAX_FAILURE_ROWS]
    expected = Counter(attempt.outcome for attempt, _ in newest)  # in first-seen order
    assert list(history.outcomes.counter().items()) == list(expected.items())


def ran_job(order: int, rng: random.Random) -> JobRow:
    """A completed job that waited and ran once or twice (a retry waits again)."""
    submitted, attempts, at = float(rng.randrange(10_000)), [], None
    at = submitted
    for number in range(1, rng.choice((2, 2, 2, 3))):
        started = at + rng.choice((0.0, 0.5, float(rng.randrange(300))))
        at = started + rng.randrange(1, 600)
        attempts.append(AttemptRow("a1", number, 1, started, at, (), 0, None,
                                   AttemptOutcome.COMPLETED, None, None, ()))
    return JobRow(f"job-{order}", order, submitted, f"tag-{order}", "p",
                  rng.choice(("ordinary", "urgent")), "cpu_light", JobState.COMPLETED, 1,
                  "", tuple(attempts))


def folded(count: int) -> tuple[History, list[JobRow]]:
    rng = random.Random(count)
    jobs = [ran_job(order, rng) for order in range(count)]
    history = History()
    for job in jobs:
        history.add(job)
    history.close(20_000.0)
    return history, jobs


def test_the_queue_curve_and_delays_read_back_as_a_sort_of_every_wait_gives():
    """More waits than a sorted run holds (SORTED_RUN, spilled to a file), many at the
    same instant: the queue's length at each instant and each work class's delays, in
    order, are those that sorting every wait in memory gives, read twice alike."""
    history, jobs = folded(3 * SORTED_RUN + 17)
    starts = sorted(t for job in jobs for t in (job.submitted_at, *(
        a.ended_at for a in job.attempts[:-1])))
    ends = sorted(a.started_at for job in jobs for a in job.attempts)
    expected = sorted(set(starts) | set(ends))
    curve = list(queue_lengths(history))
    assert [at for at, _ in curve] == expected and curve == list(queue_lengths(history))
    changes = Counter(starts)
    changes.subtract(Counter(ends))
    lengths, length = [], 0
    for at in expected:
        length += changes[at]
        lengths.append(length)
    assert [n for _, n in curve] == lengths and lengths[-1] == 0
    for work_class in ("ordinary", "urgent"):
        waits = sorted(waited(job, 0.0) for job in jobs if job.work_class == work_class)
        assert list(history.delays[work_class].sorted()) == waits


def test_waits_spilled_in_sorted_runs_hold_a_runs_worth_however_many():
    """issue 31 item 3 (report: memory flat in history): a report's waits (~3 floats a
    job: the queue curve's starts and ends, the delays) go to a file in sorted runs.
    Eight times as many (32 runs against 4) keep at most a few dozen bytes more a run
    (its place in the file: ~75), and are read back in order through at most 4 KB more a
    run (2 KB of each read at a time, and the merge's floats: ~2.8 KB), where the arrays
    of every wait the report kept grew 8 bytes a wait (64 KB a run's worth), and sorting
    them passed through 8 more."""
    kept, peaks = {}, {}
    for runs in (4, 32):
        count = runs * SORTED_RUN
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            waits = Spilled()
            for n in range(count):
                waits.append(float(n * 7919 % 100_003) / 8)
            kept[runs] = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.reset_peak()
            previous, read = -1.0, 0
            for value in waits.sorted():
                assert value >= previous
                previous, read = value, read + 1
            peaks[runs] = tracemalloc.get_traced_memory()[1] - before - kept[runs]
        finally:
            tracemalloc.stop()
        assert read == len(waits) == count
        del waits
    assert kept[32] - kept[4] <= 28 * 100, kept
    assert peaks[32] - peaks[4] <= 28 * 4096, peaks
