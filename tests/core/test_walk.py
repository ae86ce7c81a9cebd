"""A pass that stops walking early, or skips runs of jobs known held, decides and explains
exactly what a whole walk would: the same launches, and the same pending reason for
every queued job once the reasons are asked for."""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import replace
from typing import Any

import pytest

from praxist_fs.backends.memory import MemoryBackend, Run
from praxist_fs.config import load_policy
from praxist_fs.core.events import CoordinatorStarted, HostSampled, RequestSeen
from praxist_fs.core.observations import PressureSample
from praxist_fs.core.passes import PassDesk
from praxist_fs.core.pickers import Pass
from praxist_fs.core.pickers.walk import Openings
from praxist_fs.core.policy import Profile
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.driver import VirtualLoop

from .helpers import BACKFILL, FCFS, GPUS, Arrival, busy_trace, drive


def passes(monkeypatch: pytest.MonkeyPatch, trace: list[Arrival], policy: Any,
           whole: bool, passed_over: list[str]) -> list[tuple[list[Any], dict[str, str]]]:
    """Every pass's decisions and, read right after it, the pending reasons; the jobs
    held without a visit (``Pass.skimmed``) go to ``passed_over``."""
    if whole:  # the walk as it was: every job, every pass
        monkeypatch.setattr(Openings, "exhausted", property(lambda self: False))
        monkeypatch.setattr(Openings, "any_open", lambda self: True)
        monkeypatch.setattr(Pass, "skims", lambda self, jobs: False)
    seen, skimmed = [], Pass.skimmed
    decide = Scheduler.next_launches

    def counted(self: Pass) -> Any:
        for job, reason in skimmed(self):
            passed_over.append(job.job_id)
            yield job, reason

    monkeypatch.setattr(Pass, "skimmed", counted)

    def recorded(self: Scheduler, at: float) -> list[Any]:
        events = decide(self, at)
        # the decisions as the pass returned them, before the pending reasons run its
        # rest: a decision the rest would add to the list comes too late to be carried out
        seen.append((list(events), dict(self.pending)))
        return events

    monkeypatch.setattr(Scheduler, "next_launches", recorded)
    sched = drive(policy, trace)
    monkeypatch.undo()
    assert sched.count(JobState.COMPLETED) == len(trace), "the workload did not run to its end"
    return seen


@pytest.mark.parametrize("picker", ["fcfs", "backfill", "fair_share", "shortest_expected_first",
                                    "multifactor", "least_attained_service"])
@pytest.mark.parametrize("seed", [1, 2])
def test_stopping_and_skimming_change_no_decision_and_no_reason(monkeypatch, picker, seed):
    policy = load_policy(BACKFILL if picker == "backfill" else FCFS)
    if picker != "backfill":
        policy = replace(policy, job_picker=picker)
    fast = same_as_the_whole_walk(monkeypatch, busy_trace(seed), policy)
    assert sum(len(events) for events, _ in fast) >= 400


@pytest.mark.parametrize("seed", [1, 2])
def test_the_starving_jobs_reservation_is_walked_past_in_one_go_deciding_the_same(
        monkeypatch, seed):
    """Shortest expected first with a starvation bound reserves for its first starving
    job that cannot start; the jobs the reservation keeps out, known held, are passed
    over run by run instead of visited one by one, deciding and explaining the same.
    A cluster's cap (recommended.yaml's), so that no pass runs out of slots."""
    policy = replace(load_policy(FCFS), job_picker="shortest_expected_first",
                     shortest_first_starvation_factor=2.0, max_concurrent_experiments=10000)
    under_reservation = []
    merge = Pass.merge

    def counted(self: Pass, *args: Any, **kwargs: Any) -> Any:
        yield from merge(self, *args, **kwargs)
        under_reservation.extend(job for run, start, stop, *_ in self.passed
                                 for job in run[start:stop])

    monkeypatch.setattr(Pass, "merge", counted)
    fast = same_as_the_whole_walk(monkeypatch, busy_trace(seed), policy)
    assert sum(len(events) for events, _ in fast) >= 400
    assert under_reservation, "no job was passed over under a reservation"


def same_as_the_whole_walk(monkeypatch: pytest.MonkeyPatch, trace: list[Arrival],
                           policy: Any) -> list[tuple[list[Any], dict[str, str]]]:
    """The fast walk's passes, once checked equal to the whole walk's, launches and
    reasons, with some job held without a visit (else nothing was compared)."""
    passed_over: list[str] = []
    fast = passes(monkeypatch, trace, policy, False, passed_over)
    whole = passes(monkeypatch, trace, policy, True, [])
    assert len(fast) == len(whole)
    for number, (mine, theirs) in enumerate(zip(fast, whole)):
        assert mine == theirs, f"pass {number} differs"
    assert passed_over, "the fast walk held no job without a visit: nothing was compared"
    return fast


def test_backfill_explains_every_job_its_fast_walk_skimmed(monkeypatch):
    """Found when this test's driver moved to the memory backend and drew the ETAs from
    the jobs' own generator: after backfill's fast pass at t=75031, reading the pending
    reasons (as every status write does) asked ``Pass.unsatisfiable`` for
    ('g8-u50-m20', Backfill, avoid=True), which the pass never filled: a KeyError that
    would end a coordinator writing its status. The job was skipped under the
    reservation the pass had then; its demand failed either way. Now every skimmed job
    has a reason, and the same reasons and launches as the whole walk."""
    same_as_the_whole_walk(monkeypatch, busy_trace(1, eta_seed=None), load_policy(BACKFILL))


def sampled_run(monkeypatch: pytest.MonkeyPatch, seed: int, whole: bool) -> dict[str, Any]:
    """CPU and GPU jobs (some held while CPU pressure is high) on 2 to 6 slots, a host
    sample every 20 s whose pressure wanders from calm to hot, a pass at each instant.
    ``whole``: every sample finishes the last pass's rest first, as it did before a
    sample read only as much of it as it takes to know whether work waits for a slot.
    Recorded: each pass's launches, the controller and idle streak after each sample,
    and, after two samples in three that come alone, the queued jobs' reasons read as a
    status write reads them (which runs the rest the sample left, against the host its
    pass had)."""
    if whole:
        monkeypatch.setattr(PassDesk, "slot_limited_now",
                            lambda self: (self.refresh_reasons(), self.slot_limited)[1])
    rng = random.Random(seed)
    cpu = Profile(name="cpu", accelerator="cpu", pressure_domains=("cpu",))
    loose = Profile(name="loose", accelerator="cpu")
    trace = busy_trace(seed, jobs=120)
    for i, arrival in enumerate(trace):
        if i % 3:
            profile = cpu if i % 3 == 1 else loose
            trace[i] = replace(arrival, profile=profile,
                               request=replace(arrival.request, profile=profile.name))
    policy = load_policy(FCFS)
    profiles = {**policy.profiles, cpu.name: cpu, loose.name: loose,
                **{a.profile.name: a.profile for a in trace}}
    policy = replace(policy, profiles=profiles, initial_concurrent_experiments=2,
                     min_concurrent_experiments=2, max_concurrent_experiments=6)
    sched = Scheduler(policy)
    sched.handle(CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="test",
                                    boot_id="memory"))
    runs = {a.request.request_id: Run(a.duration_s) for a in trace}
    loop = VirtualLoop(sched, MemoryBackend(lambda launch: runs[launch.metadata["request_id"]]))
    arrivals, record, samples, kept = deque(trace), {"passes": [], "samples": []}, 0, 0
    next_sample = 0.0
    while arrivals or loop.next_end() < math.inf:
        now = min(arrivals[0].at if arrivals else math.inf, loop.next_end(), next_sample)
        # nothing but the sample at this instant: every queued job's reason is the last
        # pass's (any other event may requeue a job that no pass has seen since)
        alone = not loop.advance(now) and not (arrivals and arrivals[0].at == now)
        if now == next_sample:
            pressure = rng.choice([0.0, 5.0, 30.0, 95.0])
            sched.handle(HostSampled(at=now, gpus=GPUS, pressure=PressureSample(
                source="simulated", cpu=pressure, memory=0.0, io=0.0)))
            samples += 1
            kept += sched.passes.rest is not None
            controller = sched.controller
            record["samples"].append((now, controller.target, controller.calm,
                                      controller.last_move, sched.idle_streak,
                                      reasons(sched) if alone and samples % 3 else None))
            next_sample += 20.0
        while arrivals and arrivals[0].at == now:
            request = arrivals.popleft().request
            loop.handle(RequestSeen(at=now, name=f"{request.request_id}.json",
                                    digest=request.request_id,
                                    request_id=request.request_id, request=request))
        events = sched.next_launches(now)
        record["passes"].append((now, events))
        for event in events:
            loop.handle(event)
    monkeypatch.undo()
    assert sched.count(JobState.COMPLETED) == len(trace), "the workload did not run to its end"
    record["kept"] = kept
    return record


def reasons(sched: Scheduler) -> dict[str, str | None]:
    """Why each queued job waits, brought up to date as status.json's writer asks."""
    sched.refresh_reasons()
    return {job.job_id: sched.pending.get(job.job_id) for job in sched.queued()}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_sample_reads_of_the_rest_only_what_it_needs_and_changes_no_decision(
        monkeypatch, seed):
    fast = sampled_run(monkeypatch, seed, whole=False)
    whole = sampled_run(monkeypatch, seed, whole=True)
    assert fast["kept"], "no sample left a rest unread: nothing was compared"
    assert fast["passes"] == whole["passes"]
    assert len(fast["samples"]) == len(whole["samples"])
    for mine, theirs in zip(fast["samples"], whole["samples"]):
        assert mine == theirs, f"the sample at {mine[0]} differs"
    moves = {move for *_, move, _, _ in fast["samples"]}
    assert any(move.startswith("raised") for move in moves), moves  # slot-limited counted
    assert any(move.startswith("lowered") for move in moves), moves
