"""The runs' heads the backlog keeps from pass to pass for shortest expected first
(issue 18 item 5, speed): kept up to date as jobs come and go, they must order exactly
as heads made afresh each pass, or a pass would start other jobs than before."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import pytest

from praxist_fs.config import load_policy
from praxist_fs.core import pickers
from praxist_fs.core.backlog import RUNS, Backlog, heads_of
from praxist_fs.core.scheduler import Scheduler

from .helpers import FCFS, busy_trace, drive, harness, launched_tags


def sorted_heads(heads: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {profile: sorted(heap) for profile, heap in heads.items()}


def churn(h: Any, rng: random.Random, name: str, count: int, peers: tuple[str, ...],
          etas: tuple[float, ...]) -> Any:
    """One round of a queue's life: ``count`` jobs come (most with an ETA), five change
    priority as ``update`` does it, and what can start runs and ends; the queue after."""
    for i in range(count):
        h.submit(f"{name}-{i}", peer=rng.choice(peers), priority=rng.choice((0, 0, 5)),
                 **({"eta_s": rng.choice(etas)} if rng.random() < 0.8 else {}))
    queue = h.sched._queue()
    for job in rng.sample(queue.jobs(), 5):
        queue.remove(job)
        job.priority = rng.choice((0, 3, 7))
        queue.add(job)
    for job_id, attempt_id in h.launch_all():
        h.go(job_id, attempt_id)
        h.exit(job_id, attempt_id, 0)
    return queue


def test_heads_kept_by_the_backlog_equal_heads_made_afresh_as_jobs_come_and_go():
    """Jobs enter, start, leave and change priority between two reads of the kept
    heads (a run's first job changes, runs appear and empty); each read must equal the
    heads of the queue's runs as they are now."""
    rng = random.Random(11)
    h = harness("fcfs", slots=4)  # fcfs reads no heads: only this test's reads keep them

    def key(run: Any, job: Any, position: int) -> tuple[Any, ...]:
        return (job.submitted_at % 7, job.order, position)

    for round_ in range(8):
        queue = churn(h, rng, f"j{round_}", 30, ("a", "b", "c"), (10.0, 11.0, 600.0, 86400.0))
        for kind in RUNS:
            kept = queue.heads(kind, "token", key)
            assert sorted_heads(kept) == sorted_heads(heads_of(queue.runs(kind), key))
            kept[next(iter(kept))].clear()  # the caller's to pop: the backlog's stay whole
            assert sorted_heads(queue.heads(kind, "token", key)) == \
                sorted_heads(heads_of(queue.runs(kind), key))


def decisions(monkeypatch: pytest.MonkeyPatch, seed: int) -> list[tuple[list[Any], dict]]:
    """Every pass's launches and, read right after it, the pending reasons, of a
    shortest-expected-first replay with exact ETAs (the calibration holds still)."""
    seen, decide = [], Scheduler.next_launches

    def recorded(self: Scheduler, at: float) -> list[Any]:
        events = decide(self, at)
        seen.append((events, dict(self.pending)))
        return events

    monkeypatch.setattr(Scheduler, "next_launches", recorded)
    exact = [replace(a, request=replace(a.request, eta_s=float(a.duration_s)))
             for a in busy_trace(seed)]
    drive(replace(load_policy(FCFS), job_picker="shortest_expected_first"), exact)
    monkeypatch.setattr(Scheduler, "next_launches", decide)
    return seen


@pytest.mark.parametrize("seed", [1, 2])
def test_shortest_expected_first_decides_the_same_with_heads_kept_or_made_afresh(
        monkeypatch, seed):
    """seed 002 "job picker": a picker only orders. Keeping its heads from pass to pass
    is a speed-up, so every pass must start the same jobs and give every queued job the
    same reason as with the heads made afresh each pass."""
    tokens: list[Any] = []
    keep = Backlog.heads

    def counted(self: Backlog, kind: str, token: Any, key: Any) -> Any:
        tokens.append(token)
        return keep(self, kind, token, key)

    monkeypatch.setattr(Backlog, "heads", counted)
    kept = decisions(monkeypatch, seed)
    monkeypatch.setattr(pickers.Pass, "heads",
                        lambda self, kind, jobs, runs, token, key: heads_of(runs, key))
    fresh = decisions(monkeypatch, seed)
    reused = sum(a == b for a, b in zip(tokens, tokens[1:]))
    assert reused > 100, f"the backlog's heads were kept {reused} times: nothing was compared"
    assert len(kept) == len(fresh)
    for number, (mine, theirs) in enumerate(zip(kept, fresh)):
        assert mine == theirs, f"pass {number} differs"
    assert sum(len(events) for events, _ in kept) >= 400


def test_a_job_without_an_eta_moves_back_when_a_longer_one_comes():
    """seed 000 "Mature Evidence And Idle Supply Feedback": a job without an ETA counts
    as the longest known one, so a longer ETA arriving moves it back, behind a job it
    went before: heads kept from pass to pass must follow, though its own run did not
    change."""
    h = harness("shortest_expected_first", slots=1)
    for tag, eta in (("short", 10.0), ("unknown", None), ("long", 5000.0)):
        h.submit(tag, **({} if eta is None else {"eta_s": eta}))
    assert launched_tags(h) == ["short"]  # then "unknown" (as long as "long", and older)
    job_id = next(iter(h.sched.jobs))
    h.go(job_id, "a1")
    h.exit(job_id, "a1", 1)  # failed: the calibration holds still, so the heads are kept
    h.submit("longest", eta_s=86400.0)
    assert launched_tags(h) == ["long"]


def test_the_next_short_job_of_a_profile_is_the_first_a_walk_in_rank_order_finds():
    """``Backlog.ending_after`` (backfill's skim under a reservation) finds a profile's
    next job that ends by a limit from the ETAs kept beside its jobs; as jobs come, go
    and change priority, it must be the job a walk of the profile's jobs in rank order
    finds first, or a pass would skip other jobs than before."""
    rng = random.Random(5)
    h = harness("fcfs", slots=4)
    answers = set()
    for round_ in range(6):
        queue = churn(h, rng, f"s{round_}", 40, ("a",), (10.0, 600.0, 3600.0, 86400.0))
        jobs = queue.jobs()
        for profile in {job.profile for job in jobs}:
            for limit in (5.0, 10.0, 700.0, 1e9):
                for rank in [0, *(job.rank for job in rng.sample(jobs, 10))]:
                    walked = next((job for job in queue.younger(profile, rank)
                                   if job.request.eta_s is not None
                                   and job.request.eta_s <= limit), None)
                    assert queue.ending_after(profile, rank, limit) is walked
                    answers.add(walked is None)
    assert answers == {True, False}  # jobs found, and none
