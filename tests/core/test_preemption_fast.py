"""Preemption's fast paths decide exactly what the plain computation does: the loads kept
from pass to pass while jobs are suspended (``KeptLoads`` with suspended holders), the
room every candidate victim makes kept device by device from the last answer, with its
fitting devices counted on the devices that changed (``PreemptionDesk._everyone``,
``_fitting_everyone``), and a blocked job's tries counted on the devices one victim
changed (``preemption._gained``) instead of placed on every device.

Each replay runs twice: as shipped, and with those three made plain (the loads made
anew from every held envelope, the room of every candidate made anew, the fitting
devices counted on every device); every job's start, end, suspended time and devices,
and every preemption, must be the same. The shares are fractions that do not add up
exactly in floating point (33.3 %, 12.7 GiB), so a device whose envelopes were summed in
another order than ``device_loads`` sums them may place a job differently."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from praxist_fs.config import load_policy
from praxist_fs.core import preemption
from praxist_fs.core.passes import PassDesk
from praxist_fs.core.observations import Envelope, GpuDevice, GpuSample
from praxist_fs.core.placement import KeptLoads, device_loads, fitting
from praxist_fs.core.policy import Profile
from praxist_fs.core.preemption import PreemptionDesk
from praxist_fs.core.queues import Queue
from praxist_fs.simulate import TraceJob, replay

from .helpers import POLICIES, PreemptRun, busy_trace, make_policy
from .test_walk import passes


def plain_loads(self: PassDesk) -> Any:
    """``real_loads`` without ``KeptLoads``: every device from every held envelope."""
    board = self.board
    sample = board.host.gpus if board.host else None
    if sample is None or not sample.devices:
        return None
    return device_loads(sample, [*self.held_envelopes(),
                                 *(e for e in board.host.others if not e.speculative)])


def plain_gained(demand: Any, avoid: Any, before: Any, after: Any) -> int:
    """``_gained`` counted on every device."""
    return fitting(demand, after, avoid)[""] - fitting(demand, before, avoid)[""]


def plain_fitting_everyone(self: PreemptionDesk, loads: Any, victims: Any, mode: Any,
                           demand: Any, avoid: Any) -> int:
    """``_fitting_everyone`` on the room of every candidate made anew, counted anew."""
    return fitting(demand, self._room(loads, victims, mode), avoid)[""]


@contextmanager
def plainly() -> Iterator[None]:
    """The three fast paths made plain while in it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PassDesk, "real_loads", plain_loads)
        patch.setattr(PreemptionDesk, "_fitting_everyone", plain_fitting_everyone)
        patch.setattr(preemption, "_gained", plain_gained)
        yield


def outcome(jobs: list[TraceJob], gpus: int, queues: tuple[Queue, ...]) -> Any:
    result = replay(jobs, gpus=gpus, policy=make_policy(queues=queues))
    return ([(r.job.job_id, r.start, r.end, r.suspended_s, r.preemptions, sorted(r.devices))
             for r in result.records], sorted(result.preempted.items()), result.completed)


@st.composite
def busy_clusters(draw: st.DrawFn) -> tuple[int, tuple[Queue, ...], list[TraceJob]]:
    """A few GPUs shared by fractional jobs of three queues, the top one preempting the
    two below it (by suspension or requeue), many more jobs than room: suspensions,
    resumes and blocked urgent jobs in most passes."""
    mode = draw(st.sampled_from(["suspend", "requeue"]))
    top = Queue(name="top", priority=20, work_classes=("mature",), preempt=mode,
                preemptible_queues=("mid", "low"))
    mid = Queue(name="mid", priority=10, work_classes=("scout",))
    low = Queue(name="low", priority=0, work_classes=("ordinary",))
    gpus = draw(st.integers(2, 4))
    jobs = [TraceJob(job_id=f"j{i}", submit_s=draw(st.integers(0, 200)),
                     duration_s=draw(st.integers(5, 150)), gpus=draw(st.integers(1, 2)),
                     user=draw(st.sampled_from(["u", "v", "w"])),
                     gpu_util_pct=draw(st.sampled_from([None, 12.5, 33.3, 41.7, 66.6])),
                     gpu_mem_gb=draw(st.sampled_from([12.7, 33.3, 55.1])),
                     work_class=draw(st.sampled_from(["mature", "scout", "ordinary"])))
            for i in range(draw(st.integers(8, 24)))]
    return gpus, (top, mid, low), sorted(jobs, key=lambda j: j.submit_s)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_clusters())
def test_preemptions_fast_paths_decide_what_the_plain_computation_does(cluster):
    gpus, queues, jobs = cluster
    fast = outcome(jobs, gpus, queues)
    with plainly():
        plain = outcome(jobs, gpus, queues)
    assert fast == plain


def test_the_plain_computation_is_exercised():
    """The comparison above means something only where jobs are suspended and resumed
    and urgent jobs wait for room: a fixed cluster where all of it happens."""
    queues = (Queue(name="top", priority=20, work_classes=("mature",), preempt="suspend",
                    preemptible_queues=("low",)),
              Queue(name="low", priority=0, work_classes=("scout", "ordinary")))
    jobs = [TraceJob(job_id=f"j{i}", submit_s=i * 5, duration_s=40 + (i * 7) % 50, gpus=1,
                     user="u", gpu_util_pct=(33.3, 41.7, 66.6)[i % 3],
                     gpu_mem_gb=(12.7, 33.3)[i % 2],
                     work_class="mature" if i % 5 == 4 else "ordinary")
            for i in range(60)]
    suspended = []
    original = PreemptionDesk.on_preempted

    def counted(self: PreemptionDesk, ev: Any) -> Any:
        suspended.append(ev.job_id)
        return original(self, ev)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PreemptionDesk, "on_preempted", counted)
        fast = outcome(jobs, 3, queues)
    assert len(suspended) >= 10 and fast[2] == len(jobs)
    with plainly():
        assert outcome(jobs, 3, queues) == fast


def test_a_job_that_ends_while_suspended_gives_back_the_memory_it_kept():
    """A suspended job that ends (killed while stopped) never ran again, so no job
    started or stopped running: the loads kept from the last pass must still drop what
    it kept on its device."""
    run = PreemptRun(slots=4, gpus=1)
    low = run.start("low", profile="wide")                    # 70% and 10 GiB on GPU-0
    run.submit("high", work_class="mature", profile="wide")
    run.decide()
    assert run.state(low) == "suspended"
    assert run.sched.real_loads()[0].declared_mem == 20 * 1024.0  # both memories
    run.exit(low, "a1", 137, signal=9)
    assert run.state(low) == "failed"
    load = run.sched.real_loads()[0]
    assert (load.declared_util, load.declared_mem, load.allocations) == (70.0, 10 * 1024.0, 1)


def test_a_holder_between_kept_ones_is_summed_where_device_loads_sums_it():
    """A resumed job goes back among the running ones, before every suspended one: its
    envelope is summed in that place, as ``device_loads`` sums it (0.2 + 0.1 + 0.3 is not
    0.2 + 0.3 + 0.1 in floating point), or a placement could differ from the whole
    computation's."""
    sample = GpuSample(source="fake", devices=(GpuDevice(
        uuid="GPU-0", index=0, name="fake", memory_total_mib=81920.0, memory_used_mib=0.0,
        utilization_pct=0.0),))
    share = {name: Envelope(uuid="GPU-0", utilization_pct=pct, memory_mib=pct, owner=name)
             for name, pct in (("a", 0.2), ("b", 0.3), ("c", 0.1))}
    attempts = {name: object() for name in share}
    kept = KeptLoads.of(sample, (), {name: (attempts[name], [share[name]]) for name in "ab"})
    order = ["a", "c", "b"]
    assert kept.update({name: attempts[name] for name in order},
                       lambda name: (attempts[name], [share[name]]))
    assert kept.loads == device_loads(sample, [share[name] for name in order])
    assert kept.loads[0].declared_util == 0.2 + 0.1 + 0.3 != 0.2 + 0.3 + 0.1


@pytest.mark.parametrize("mode", ["suspend", "requeue"])
def test_a_pass_with_preemption_stops_early_and_skims_deciding_as_the_whole_walk(
        monkeypatch, mode):
    """A pass of a task file that preempts walks job by job only while a job still to
    visit may preempt or a suspended one may still resume; past that (or from the start
    when nothing of either is queued), it stops early and skims runs of jobs known held
    as a pass without preemption does. Its launches, preemptions, resumes and every
    pending reason are the whole walk's.

    Three tiers: urgent work (a quarter of the jobs) preempts the lowest queue, with a
    middle queue between them, so that the walk goes on past the tier where it may
    stop to a tier whose jobs this pass suspends. Every job declares half a GPU, so
    that a full cluster fits no job at all while an urgent one may still preempt, and
    a cluster's cap lets the GPUs, not the slots, hold work back."""
    rng = random.Random(3)
    trace = []
    for arrival in busy_trace(1):
        profile = Profile(name=f"g{arrival.profile.gpu_count}", accelerator="gpu",
                          gpu_count=arrival.profile.gpu_count, gpu_utilization_pct=50.0,
                          gpu_memory_gb=20.0)
        trace.append(replace(arrival, profile=profile, request=replace(
            arrival.request, profile=profile.name,
            work_class=rng.choice(["mature", "scout", "ordinary", "ordinary"]))))
    policy = replace(load_policy(POLICIES / "preempt.yaml"), max_concurrent_experiments=10000,
                     queues=(Queue(name="urgent", priority=10, work_classes=("mature",),
                                   preemptible_queues=("background",), preempt=mode),
                             Queue(name="middle", priority=5, work_classes=("scout",)),
                             Queue(name="background", priority=0,
                                   work_classes=("ordinary",))))
    stopped, walk = [], PassDesk._pass

    def counted(self: PassDesk, at: float) -> Any:
        launches = walk(self, at)
        stopped.append(self.rest is not None and not self.rest_at_capacity)
        return launches

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PassDesk, "_pass", counted)
        fast = passes(monkeypatch, trace, policy, False, [])
    whole = passes(monkeypatch, trace, policy, True, [])
    assert len(fast) == len(whole)
    for number, (mine, theirs) in enumerate(zip(fast, whole)):
        assert mine == theirs, f"pass {number} differs"
    decided = Counter(type(event).__name__ for events, _ in fast for event in events)
    assert decided["AttemptPreempted"] >= 10 and decided["AttemptLaunched"] >= 400
    assert decided["AttemptResumed"] >= 10 or mode == "requeue"
    assert sum(stopped) >= 100, "too few passes stopped early: nothing was compared"
