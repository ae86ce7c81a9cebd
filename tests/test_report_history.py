"""The report's one walk of a run's history (praxist_fs/report_history.py) gives what a
walk of every job in submission order gives, whatever order the shelf yields them in
(issue 31 item 3: the report no longer keeps a row per job to sort)."""

from __future__ import annotations

import random
from collections import Counter

from praxist_fs.core.states import AttemptOutcome, JobState
from praxist_fs.report_history import MAX_FAILURE_ROWS, AttemptRow, History, JobRow


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
