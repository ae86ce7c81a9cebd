"""Preemption (R-POL-3) in the pure core: triggers, victim order, suspend and requeue,
GPU memory that suspension keeps, retries it does not use, resumes, and that the
journal, a snapshot and a restart rebuild and carry all of it out again."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from praxist_fs.core.budget import Budget
from praxist_fs.core.effects import (
    EvictAttempt, ResumeAttempt, SpawnAttempt, SuspendAttempt, TerminateAttempts,
)
from praxist_fs.core.events import (
    AttemptObserved, AttemptPreempted, AttemptResumed, ControlSeen,
)
from praxist_fs.core.policy import Profile
from praxist_fs.core.preemption import MAX_PREEMPTIONS_FOR_ONE
from praxist_fs.core.queues import Queue
from praxist_fs.core.request import ControlRequest
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.core.states import JobState
from praxist_fs.core.status import render_status
from praxist_fs.simulate import TraceJob, replay
from praxist_fs.errors import InvalidTransition

from .helpers import PreemptRun, control, kinds, make_policy, queues, replayed


# -- suspend ---------------------------------------------------------------------------


def test_a_full_house_suspends_the_low_job_and_the_high_one_starts_in_the_same_pass():
    run = PreemptRun(slots=1)
    low = run.start("low-1")
    high = run.submit("high-1", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", low, "suspend"),
                                   ("AttemptLaunched", high, "")]
    assert (run.state(low), run.state(high)) == ("suspended", "running")
    assert SuspendAttempt(job_id=low, attempt_id="a1") in run.effects
    spawn = [e for e in run.effects if isinstance(e, SpawnAttempt)]
    assert spawn[-1].job_id == high and run.effects.index(spawn[-1]) > run.effects.index(
        SuspendAttempt(job_id=low, attempt_id="a1"))  # stopped before the new shim starts
    doc = run.job(low)
    assert run.directory(low) == "queued"  # jobs/queued/ holds queued and suspended jobs
    assert doc["reason"] == (f"suspended: preempted by job {high} "
                             "(queue high: waiting for a slot: 1 of 1 running)")
    assert doc["attempts"][0]["preemptions"] == [{
        "at": run.sched.jobs[low].current.preemptions[0]["at"], "mode": "suspend", "by": high,
        "reason": "queue high: waiting for a slot: 1 of 1 running", "resumed_at": None}]
    # it does not resume while the high job holds the slot, and says why
    assert run.decide() == [] and run.sched.pending[low].startswith(
        "suspended, waiting for a slot to resume: 1 of 1 running")
    run.exit(high, "a1", 0)
    assert kinds(run.decide()) == [("AttemptResumed", low, "")]
    assert run.state(low) == "running" and run.job(low)["reason"] == "attempt a1 running (resumed)"
    assert run.last_effects[0] == ResumeAttempt(job_id=low, attempt_id="a1")  # files after
    run.exit(low, "a1", 0)
    assert run.state(low) == "completed" and run.sched.jobs[low].current.outcome == "completed"


def test_victims_are_the_lowest_priority_queue_first_then_the_youngest():
    policy_queues = (
        Queue(name="high", priority=10, work_classes=("mature",),
              preemptible_queues=("mid", "low"), preempt="suspend"),
        Queue(name="mid", priority=5, work_classes=("scout",)),
        Queue(name="low", priority=0, work_classes=("ordinary",)))
    run = PreemptRun(slots=4, queues=policy_queues)
    old_low = run.start("old-low")
    mid = run.start("mid", work_class="scout")
    young_low = run.start("young-low")
    mid2 = run.start("mid-2", work_class="scout")
    first = run.submit("h1", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", young_low, "suspend"),
                                   ("AttemptLaunched", first, "")]
    second = run.submit("h2", work_class="mature")["job_id"]
    third = run.submit("h3", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", old_low, "suspend"),
                                   ("AttemptLaunched", second, ""),
                                   ("AttemptPreempted", mid2, "suspend"),
                                   ("AttemptLaunched", third, "")]
    assert run.state(mid) == "running"


def test_a_queue_of_equal_or_higher_priority_is_never_preempted():
    run = PreemptRun(slots=1, queues=queues(low_priority=10))
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    assert run.decide() == []
    assert run.state(low) == "running"
    assert run.sched.pending[high] == "waiting for a slot: 1 of 1 running"


def test_holds_that_preemption_does_not_lift_preempt_nothing():
    run = PreemptRun(slots=2, queues=queues(max_running=0))  # the high queue is paused
    low = run.start("low")
    run.start("low-2")
    high = run.submit("high", work_class="mature")["job_id"]
    assert run.decide() == []
    assert run.state(low) == "running"
    assert run.sched.pending[high] == "queue high: 0 of max_running 0 running"


def test_suspension_frees_utilization_and_keeps_gpu_memory():
    run = PreemptRun(slots=4, gpus=1)
    low = run.start("low", profile="wide")                    # 70% and 10 GiB on GPU-0
    high = run.submit("high", work_class="mature", profile="wide")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", low, "suspend"),
                                   ("AttemptLaunched", high, "")]
    load = run.sched.real_loads()[0]
    assert (load.declared_util, load.declared_mem) == (70.0, 20 * 1024.0)  # both memories
    assert run.job(low)["reason"].endswith("(queue high: gpu utilization: no device with 70% free)")
    envelopes = {e.owner: e for e in run.sched.held_envelopes()}
    assert (envelopes[low].utilization_pct, envelopes[low].memory_mib) == (0.0, 10 * 1024.0)
    status = render_status(run.sched, run.now, {})
    assert sorted(status["gpus"]["devices"][0]["jobs"]) == sorted([low, high])


def test_suspension_does_not_help_a_job_held_by_gpu_memory_but_requeue_does():
    for mode, expected in (("suspend", []), ("requeue", ["AttemptPreempted"])):
        run = PreemptRun(slots=4, gpus=1, mode=mode)
        low = run.start("low", profile="big")                 # 60 GiB of 80
        high = run.submit("high", work_class="mature", profile="mid")["job_id"]  # needs 30
        assert [type(e).__name__ for e in run.decide()] == expected, mode
        assert run.state(low) == "running"
        assert run.sched.pending[high].startswith("gpu memory: no device with 30 GiB headroom")


def test_suspension_never_frees_an_exclusive_device():
    run = PreemptRun(slots=4, gpus=1)
    run.start("low", profile="excl")
    high = run.submit("high", work_class="mature", profile="gpu")["job_id"]
    assert run.decide() == []
    assert run.sched.pending[high].startswith("gpu")


def test_a_suspended_job_resumes_before_younger_work_of_its_queue():
    run = PreemptRun(slots=1)
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()
    younger = run.submit("younger")["job_id"]
    run.go(high, "a1")
    run.exit(high, "a1", 0)
    assert kinds(run.decide()) == [("AttemptResumed", low, "")]
    assert run.sched.pending[younger] == "waiting for a slot: 1 of 1 running"


def test_a_suspended_job_holds_no_slot_and_resumes_when_one_frees():
    run = PreemptRun(slots=2)
    low = run.start("low")
    other = run.start("other")
    high = run.submit("high", work_class="mature")["job_id"]
    events = run.decide()
    assert kinds(events)[0] == ("AttemptPreempted", other, "suspend")  # the youngest
    assert run.sched.count(JobState.RUNNING) == 2  # low and high: other holds no slot
    run.exit(low, "a1", 0)
    assert kinds(run.decide()) == [("AttemptResumed", other, "")]
    assert run.state(high) == "running"


def start_as(run: PreemptRun, tag: str, peer: str) -> str:
    """``PreemptRun.start`` for a job of ``peer``."""
    job_id = run.submit(tag, peer=peer, work_class="ordinary")["job_id"]
    assert [e.job_id for e in run.decide()] == [job_id]
    run.go(job_id, "a1")
    return job_id


def alice_suspended_for_carol() -> tuple[PreemptRun, str, str, str]:
    """Two slots, one job a peer: bob's and alice's jobs run, carol's mature one suspends
    alice's (the younger) and starts in its place. The run and the three job ids."""
    run = PreemptRun(slots=2, max_concurrent_per_peer=1)
    bob, alice = start_as(run, "bob-1", "bob"), start_as(run, "alice-1", "alice")
    carol = run.submit("carol-1", peer="carol", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", alice, "suspend"),
                                   ("AttemptLaunched", carol, "")]
    run.go(carol, "a1")
    return run, bob, alice, carol


def test_a_resumed_job_counts_against_its_peers_cap_and_waits_for_it():
    """seed 000 "Submission" (R-SUB-5): a peer's cap counts its running jobs; a suspended
    one runs again only within it, and once resumed it counts for the rest of the pass."""
    run, bob, alice, carol = alice_suspended_for_carol()
    later = run.submit("alice-2", peer="alice")["job_id"]  # alice runs nothing now
    run.exit(bob, "a1", 0)
    run.exit(carol, "a1", 0)  # two slots free: alice's suspended job resumes, and fills her cap
    assert kinds(run.decide()) == [("AttemptResumed", alice, "")]
    assert run.sched.pending[later] == "peer alice: 1 of max_concurrent_per_peer 1 running"
    run.exit(alice, "a1", 0)
    assert kinds(run.decide()) == [("AttemptLaunched", later, "")]


def test_a_suspended_job_stays_suspended_while_its_peer_is_at_its_cap():
    """seed 000 "Submission" (R-SUB-5): the cap holds a resume like a launch."""
    run, bob, alice, carol = alice_suspended_for_carol()
    urgent = run.submit("alice-urgent", peer="alice", work_class="mature")["job_id"]
    run.exit(carol, "a1", 0)  # the high queue is served first: alice's mature job starts
    assert kinds(run.decide()) == [("AttemptLaunched", urgent, "")]
    run.go(urgent, "a1")
    run.exit(bob, "a1", 0)
    assert run.decide() == []
    assert run.sched.pending[alice] == (
        "suspended, peer alice: 1 of max_concurrent_per_peer 1 running")
    run.exit(urgent, "a1", 0)
    assert kinds(run.decide()) == [("AttemptResumed", alice, "")]


def test_suspended_time_is_not_spent():
    run = PreemptRun(slots=1, budget=Budget(rates={"cpu": 3600.0}))  # 1 per second of CPU work
    low = run.start("low")
    started = run.sched.jobs[low].current.started_at
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()
    suspended_at = run.sched.jobs[low].current.preemptions[0]["at"]
    run.now += 100
    assert run.sched.spend(run.now)["running"].cost == pytest.approx(
        (suspended_at - started) + (run.now - run.sched.jobs[high].current.started_at))
    run.exit(high, "a1", 0)
    run.decide()
    resumed_at = run.sched.jobs[low].current.preemptions[0]["resumed_at"]
    run.now += 10
    run.exit(low, "a1", 0)
    ended = run.sched.jobs[low].current.ended_at
    assert run.sched.jobs[low].current.active_seconds(ended) == pytest.approx(
        (suspended_at - started) + (ended - resumed_at))


def test_a_suspended_attempt_that_ends_settles_like_a_running_one():
    run = PreemptRun(slots=1)
    low = run.start("low")
    run.submit("high", work_class="mature")
    run.decide()
    run.exit(low, "a1", 137, signal=9)  # killed while stopped (OOM, an operator)
    assert run.state(low) == "failed" and run.directory(low) == "done"
    assert run.sched.jobs[low].current.outcome == "failed"


# -- requeue ---------------------------------------------------------------------------


def test_requeue_terminates_the_victim_and_the_high_job_waits_for_its_end():
    run = PreemptRun(slots=1, mode="requeue", infrastructure_retries=1)
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", low, "requeue")]
    assert run.last_effects[0] == EvictAttempt(job_id=low, attempt_id="a1")  # files after
    assert run.state(low) == "running" and run.job(low)["reason"].endswith(
        ": terminating, to be requeued")
    waiting = f"waiting for a slot: 1 of 1 running; preempting {low}: waiting for it to end"
    assert run.sched.pending[high] == waiting
    run.tick()
    assert run.decide() == [] and run.sched.pending[high] == waiting  # no second victim
    run.exit(low, "a1", 143, signal=15)
    attempt = run.sched.jobs[low].attempts[0]
    assert (run.state(low), attempt.outcome, attempt.exit_code) == ("queued", "preempted", 143)
    assert run.job(low)["attempts"][0]["outcome"] == "preempted"
    assert kinds(run.decide()) == [("AttemptLaunched", high, "")]
    # the requeued job runs again under the same id, and still has its retry
    run.exit(high, "a1", 0)
    assert kinds(run.decide()) == [("AttemptLaunched", low, "")]
    run.go(low, "a2")
    run.exit(low, "a2", 75)
    assert run.state(low) == "queued" and run.sched.jobs[low].attempts[1].outcome == "infra_retry"
    assert run.sched.spend(run.now)["infrastructure"].gpu_seconds == 0  # CPU work


def test_a_victim_killed_at_the_barrier_is_requeued_too():
    run = PreemptRun(slots=1, mode="requeue")
    low = run.submit("low")["job_id"]
    run.decide()
    run.spawn(low, "a1")  # its shim is known, GO not written yet
    run.submit("high", work_class="mature")
    run.decide()
    effects = run.observe(low, "a1", ready=True)
    assert [type(e).__name__ for e in effects] == ["AbortAttempt"]  # never GO once preempted
    run.observe(low, "a1", alive=False, ready=True)
    assert run.state(low) == "queued" and run.sched.jobs[low].current.outcome == "preempted"


def test_a_victim_that_finishes_during_its_grace_completes():
    run = PreemptRun(slots=1, mode="requeue")
    low = run.start("low")
    run.submit("high", work_class="mature")
    run.decide()
    run.exit(low, "a1", 0)
    assert run.state(low) == "completed"


# -- the journal, snapshots, restarts, status --------------------------------------------


def story(mode: str) -> PreemptRun:
    run = PreemptRun(slots=1, mode=mode)
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()
    if mode == "requeue":
        run.exit(low, "a1", 143, signal=15)
        run.decide()
    run.go(high, "a1")
    return run


@pytest.mark.parametrize("mode", ["suspend", "requeue"])
def test_the_journal_and_a_snapshot_rebuild_the_same_scheduler(mode):
    run = story(mode)
    live = run.sched
    assert run.journal[0]["type"] == "coordinator_started"
    again = replayed(run.journal)
    assert again.snapshot() == live.snapshot()
    restored = restore(json.loads(json.dumps(capture(live))))
    assert restored.snapshot() == live.snapshot()
    for sched in (again, restored):
        assert render_status(sched, run.now, {})["preemptions"] == \
            render_status(live, run.now, {})["preemptions"]
    # and they go on deciding alike
    high = next(j.job_id for j in live.jobs.values() if j.request.work_class == "mature")
    end = AttemptObserved(at=run.now + 1, job_id=high, attempt_id="a1", alive=False, go=True,
                          exited=True, exit_code=0, ended_at=run.now + 1)
    decided = []
    for sched in (live, again, restored):
        sched.handle(end)
        decided.append(kinds(sched.next_launches(run.now + 2)))
    assert decided[0] == decided[1] == decided[2]
    assert decided[0][0][0] == ("AttemptResumed" if mode == "suspend" else "AttemptLaunched")


def test_a_restart_carries_out_every_preemption_again():
    run = PreemptRun(slots=2, mode="suspend")
    low = run.start("low")
    resumed = run.start("resumed")
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()                     # resumed (the youngest) is suspended
    run.exit(low, "a1", 0)
    run.decide()                     # ... and resumed
    assert run.state(resumed) == "running"
    second = run.submit("high-2", work_class="mature")["job_id"]
    run.decide()                     # now it is the only low job: suspended again
    assert run.state(resumed) == "suspended" and run.state(second) == "running"
    effects = run.restart(replayed(run.journal))
    assert SuspendAttempt(job_id=resumed, attempt_id="a1") in effects
    run.exit(high, "a1", 0)
    run.exit(second, "a1", 0)
    run.decide()
    assert run.state(resumed) == "running"
    effects = run.restart(replayed(run.journal))
    assert ResumeAttempt(job_id=resumed, attempt_id="a1") in effects


def test_a_restart_terminates_an_eviction_again_and_a_stop_takes_suspended_work_too():
    run = PreemptRun(slots=1, mode="requeue")
    low = run.start("low")
    run.submit("high", work_class="mature")
    run.decide()
    effects = run.restart(replayed(run.journal))
    assert EvictAttempt(job_id=low, attempt_id="a1") in effects
    run = PreemptRun(slots=1)
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()
    stop = ControlSeen(at=run.tick(), name="stop.json", digest="d", request_id="stop",
                       control=ControlRequest(request_id="stop", action="run_stop"))
    terminate = [e for e in run.handle(stop) if isinstance(e, TerminateAttempts)]
    assert terminate == [TerminateAttempts(attempts=((high, "a1"), (low, "a1")))]
    run.exit(low, "a1", 143, signal=15)
    assert run.state(low) == "cancelled"


def test_status_shows_suspended_jobs_victims_and_reasons():
    run = PreemptRun(slots=1)
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    run.decide()
    assert run.decide() == []  # the daemon passes again until nothing starts
    run.now += 30
    status = render_status(run.sched, run.now, {})
    assert status["counts"]["suspended"] == 1 and status["running"] == 1
    [entry] = status["suspended"]
    assert entry["job_id"] == low and entry["by"] == high and entry["suspended_s"] >= 30
    assert entry["reason"] == "queue high: waiting for a slot: 1 of 1 running"
    assert entry["waiting"] == "suspended, waiting for a slot to resume: 1 of 1 running"
    assert status["preemptions"]["suspended"] == 1 and status["preemptions"]["resumed"] == 0
    assert status["preemptions"]["recent"][0]["job_id"] == low


def test_a_preemption_the_state_does_not_allow_is_refused():
    run = PreemptRun(slots=1)
    low = run.start("low")
    run.exit(low, "a1", 0)
    with pytest.raises(InvalidTransition):
        run.handle(AttemptPreempted(at=run.tick(), job_id=low, attempt_id="a1",
                                    mode="suspend", by="x", reason="r"))
    with pytest.raises(InvalidTransition):
        run.handle(AttemptResumed(at=run.tick(), job_id=low, attempt_id="a1"))
    with pytest.raises(ValueError, match="mode"):
        AttemptPreempted(at=1.0, job_id="j", attempt_id="a1", mode="kill", by="x", reason="r")


def test_a_reserve_of_the_preempting_queue_for_its_victims_queue_is_respected():
    """No thrash: a queue that leaves a slot for the queue it preempts does not take that
    slot by preemption (a requeued victim would come back to claim the reserve, run again,
    and be preempted again)."""
    reserve = {"leave_slots": 1, "leave_slots_for": ("low",)}
    run = PreemptRun(slots=1, queues=queues("requeue", **reserve))
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    assert run.decide() == [] and run.state(low) == "running"
    assert run.sched.pending[high] == "waiting for a slot: 1 of 1 running"
    run = PreemptRun(slots=1, queues=queues("suspend", **reserve))  # a suspended job is not queued
    low = run.start("low")
    high = run.submit("high", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", low, "suspend"),
                                   ("AttemptLaunched", high, "")]


# -- no livelock (R-SIM-1) ---------------------------------------------------------------


def share(pct: int) -> Profile:
    return Profile(name=f"u{pct}", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
                   gpu_utilization_pct=float(pct))


def livelock_run() -> tuple[PreemptRun, str, str, str]:
    """Issue 14's four jobs on one GPU: v (30%) and x (40%) run, q (37%) waits for room,
    x ends and m (urgent, 100%) arrives, which makes v's eviction a requeue for m."""
    run = PreemptRun(slots=8, mode="requeue", gpus=1, profiles=tuple(map(share, (30, 40, 37, 100))))
    v = run.start("v", profile="u30")
    x = run.start("x", profile="u40")
    q = run.submit("q", profile="u37")["job_id"]
    assert run.decide() == [] and run.state(q) == "queued"
    run.exit(x, "a1", 0)
    m = run.submit("m", work_class="mature", profile="u100")["job_id"]
    return run, v, q, m


def test_room_freed_by_requeue_stays_with_the_job_it_was_freed_for():
    """Without it q took the room in the same pass, m preempted q, v took it back, and
    so on for ever (``praxist-fs simulate`` never ended)."""
    run, v, q, m = livelock_run()
    assert kinds(run.decide()) == [("AttemptPreempted", v, "requeue")]  # and q waits
    assert run.sched.pending[q].startswith("gpu utilization: no device with 37% free")
    assert run.sched.pending[m].endswith(f"preempting {v}: waiting for it to end")
    assert run.decide() == [] and run.state(q) == "queued"  # a later pass keeps it too
    run.exit(v, "a1", 143, signal=15)
    assert kinds(run.decide()) == [("AttemptLaunched", m, "")]
    run.go(m, "a1")
    run.exit(m, "a1", 0)
    assert kinds(run.decide()) == [("AttemptLaunched", v, ""), ("AttemptLaunched", q, "")]
    assert sum(len(a.preemptions) for j in run.sched.jobs.values() for a in j.attempts) == 1


def test_the_room_is_not_kept_for_a_job_that_gave_up():
    run, v, q, m = livelock_run()
    run.decide()
    assert control(run, "cancel", jobs=[m])["outcome"] == "ok"
    assert run.state(m) == "cancelled"
    assert kinds(run.decide()) == [("AttemptLaunched", q, "")]  # beside v, still ending
    assert run.state(v) == "running"


def test_a_job_is_preempted_at_most_a_bounded_number_of_times_for_the_same_job():
    """p (80%) preempts v (30%); each time p runs, a more urgent h (60%) requeues p, v
    comes back beside h, and once h ends p would preempt v again: p does so three times,
    then waits for v to end, and says why."""
    three = (Queue(name="top", priority=20, work_classes=("mature",),
                   preemptible_queues=("mid", "low"), preempt="requeue"),
             Queue(name="mid", priority=10, work_classes=("scout",),
                   preemptible_queues=("low",), preempt="requeue"),
             Queue(name="low", priority=0, work_classes=("ordinary",)))
    run = PreemptRun(slots=8, gpus=1, queues=three, profiles=tuple(map(share, (30, 60, 80))))
    v = run.start("v", profile="u30")
    p = run.submit("p", work_class="scout", profile="u80")["job_id"]
    for round_ in range(1, MAX_PREEMPTIONS_FOR_ONE + 1):
        assert kinds(run.decide()) == [("AttemptPreempted", v, "requeue")]
        run.exit(v, f"a{round_}", 143, signal=15)
        assert kinds(run.decide()) == [("AttemptLaunched", p, "")]
        run.go(p, f"a{round_}")
        h = run.submit(f"h{round_}", work_class="mature", profile="u60")["job_id"]
        assert kinds(run.decide()) == [("AttemptPreempted", p, "requeue")]
        run.exit(p, f"a{round_}", 143, signal=15)
        assert kinds(run.decide()) == [("AttemptLaunched", h, ""), ("AttemptLaunched", v, "")]
        run.go(h, "a1")
        run.go(v, f"a{round_ + 1}")
        run.exit(h, "a1", 0)
    assert run.decide() == [] and run.state(v) == "running"
    assert run.sched.pending[p] == (
        f"gpu utilization: no device with 80% free; not preempting {v} again: "
        f"{MAX_PREEMPTIONS_FOR_ONE} preemptions for this job")
    run.exit(v, f"a{MAX_PREEMPTIONS_FOR_ONE + 1}", 0)
    assert kinds(run.decide()) == [("AttemptLaunched", p, "")]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, tuple[Queue, ...], list[TraceJob]]:
    """A small cluster, two or three queues that preempt the ones below them (by
    suspension or requeue), and a handful of jobs sharing GPUs by declared shares."""
    gpus = draw(st.integers(1, 2))
    mode = st.sampled_from(["suspend", "requeue"])
    top = Queue(name="top", priority=20, work_classes=("mature",), preempt=draw(mode),
                preemptible_queues=tuple(draw(st.sampled_from([("low",), ("mid", "low")]))))
    mid = Queue(name="mid", priority=10, work_classes=("scout",), preempt=draw(mode),
                preemptible_queues=draw(st.sampled_from([(), ("low",)])))
    low = Queue(name="low", priority=0, work_classes=("ordinary",))
    jobs = [TraceJob(job_id=f"j{i}", submit_s=draw(st.integers(0, 30)),
                     duration_s=draw(st.integers(1, 100)), gpus=draw(st.integers(1, gpus)),
                     user=draw(st.sampled_from(["u", "v"])),
                     gpu_util_pct=draw(st.sampled_from([None, 20.0, 30.0, 37.0, 40.0, 60.0,
                                                        100.0])),
                     gpu_mem_gb=draw(st.sampled_from([10.0, 40.0, 70.0])),
                     work_class=draw(st.sampled_from(["mature", "scout", "ordinary"])))
            for i in range(draw(st.integers(2, 7)))]
    return gpus, (top, mid, low), sorted(jobs, key=lambda j: j.submit_s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_replay_with_preemption_ends_and_respects_the_bound(scenario):
    """R-SIM-1 in the simulator: whatever the arrivals, shares and queues, the replay ends
    (a livelock would raise ``Livelock`` there), every job completes, and no job is
    preempted more than ``MAX_PREEMPTIONS_FOR_ONE`` times for the same job."""
    gpus, queue_set, jobs = scenario
    result = replay(jobs, gpus=gpus, policy=make_policy(queues=queue_set))
    assert (result.completed, result.unrunnable) == (len(jobs), [])
    assert max(result.preempted.values(), default=0) <= MAX_PREEMPTIONS_FOR_ONE
