"""With every slot taken, a job accepted in a batch is held for its own reason at once
(``PassDesk.reasons_of``), without a walk of the whole queue at each acceptance: the
reason is the one the whole walk gives it, and the other jobs' reasons, which an
arrival may change (a queue's reserve), are restated at status's cadence as before."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from praxist_fs.config import load_policy
from praxist_fs.core.policy import Profile
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState

from .helpers import FCFS, busy_trace, drive

CPU = Profile(name="cpu", accelerator="cpu")


def held_alone_and_by_the_walk(seed: int) -> tuple[int, int]:
    """A busy workload on 4 slots and 8 GPUs (GPU and CPU jobs of three work classes,
    five peers capped at 2 running each, the exploration reserve): after each instant's
    pass, when no slot is free, every job that arrived at that instant and still waits is
    held alone, then the whole walk is run and must give each the same reason. Returns
    (arrivals compared, those held for something other than the slot itself)."""
    rng = random.Random(seed)
    trace = busy_trace(seed, jobs=240)
    for i, arrival in enumerate(trace):
        work_class = rng.choice(["mature", "scout", "ordinary"])
        profile = CPU if i % 4 == 0 else arrival.profile
        trace[i] = replace(arrival, profile=profile, request=replace(
            arrival.request, work_class=work_class, profile=profile.name))
    policy = replace(load_policy(FCFS), initial_concurrent_experiments=4,
                     min_concurrent_experiments=4, max_concurrent_experiments=4,
                     max_concurrent_per_peer=2)
    compared: dict[str, str] = {}

    def held_alone(sched: Scheduler, now: float, arrived: list[str]) -> None:
        waiting = [job for job in sched.queued() if job.request.request_id in arrived]
        if not waiting or not sched.passes._no_slot():
            return
        for job in waiting:
            sched._pending.pop(job.job_id, None)
        sched.reasons_of_written([sched._write_job(job) for job in waiting])
        assert sched.passes.reasons_stale, "the arrivals were not held alone"
        alone = {job.job_id: sched._pending[job.job_id] for job in waiting}
        sched.refresh_reasons()  # the whole walk, as status's writer asks
        assert alone == {job.job_id: sched.pending[job.job_id] for job in waiting}, now
        compared.update(alone)

    sched = drive(policy, trace, held_alone)
    assert sched.count(JobState.COMPLETED) == len(trace), "the workload did not run to its end"
    return len(compared), sum(not reason.startswith("waiting for a slot")
                              for reason in compared.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_an_arrival_with_no_slot_free_is_held_for_what_the_whole_walk_says(seed):
    compared, not_the_slot = held_alone_and_by_the_walk(seed)
    assert compared >= 50, "few arrivals found every slot taken: nothing was compared"
    assert not_the_slot >= 10, "every arrival waited only for the slot: little was compared"
