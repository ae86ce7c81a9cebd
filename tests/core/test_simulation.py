"""The deterministic simulation of the pure core (tests/core/simulation.py) over its
seeds: every invariant at every step, through crashes and replays, and the bugs it
found, kept as regression tests. A failure names the seed and the step;
``run_seed(seed, steps)`` reproduces it exactly."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from praxist_fs.core.effects import (
    AbortAttempt, Effect, TerminateAttempts, WriteGenerationFile, WriteGo,
)
from praxist_fs.core.events import (
    AttemptObserved, ClaimsReleased, ControlSeen, CoordinatorStarted, Event, HostSampled,
    IdleSeen, LeaseGranted, RequestSeen, ResultSeen, to_record,
)
from praxist_fs.core.observations import PressureSample
from praxist_fs.core.policy import Policy
from praxist_fs.core.request import parse_control, parse_request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState

from .helpers import shim
from .simulation import (
    BOOT, PEERS, PROFILES, Simulation, SimulationFailure, replay, run_seed,
)

# -- tests ------------------------------------------------------------------------

SEEDS = range(1, 31)
STEPS = 300
_totals: Counter[str] = Counter()


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation_keeps_every_invariant(seed):
    started = time.perf_counter()
    sim = run_seed(seed, STEPS)
    elapsed = time.perf_counter() - started
    _totals.update(sim.stats)
    _totals["seconds_x1000"] += int(elapsed * 1000)
    print(f"seed {seed}: {STEPS / elapsed:.0f} steps/s, {len(sim.journal)} records, "
          f"{sim.stats['crashes']} crashes")


@pytest.mark.parametrize("seed", range(1, 21))
def test_simulation_with_queues_and_pickers_keeps_every_invariant(seed):
    """A random queues block: fcfs, fair share and backfill, limits and reserves, and
    sometimes preemption, through crashes and replays (``replay(journal) == live`` is
    checked at every step)."""
    sim = run_seed(seed, STEPS, queues="random")
    assert sim.policy.queues is not None


PREEMPT_SEEDS = range(1, 11)
_preempt_totals: Counter[str] = Counter()


@pytest.mark.parametrize("seed", PREEMPT_SEEDS)
def test_simulation_with_preemption_keeps_every_invariant(seed):
    """Mature work preempting the rest (R-POL-3), by suspension or requeue: victims,
    suspended GPU memory, resumes and requeues through crashes and replays."""
    sim = run_seed(seed, STEPS, queues="preempt")
    _preempt_totals.update(sim.stats)


TIMEOUT_SEEDS = range(1, 13)


@pytest.mark.parametrize("seed", TIMEOUT_SEEDS)
def test_simulation_with_admission_timeouts_keeps_every_invariant(seed):
    """seed 000 "Submission": pre-launch admission timeouts release the reservation and
    the same request may be submitted again: expiries and resubmissions through crashes
    and replays (``replay(journal) == live`` is checked at every step)."""
    sim = run_seed(seed, STEPS, admission_timeout=True)
    _timeout_totals.update(job.state.value for job in sim.sched.jobs.values())
    _timeout_totals["seeds"] += 1


_timeout_totals: Counter[str] = Counter()


def test_the_admission_timeout_simulation_expires_jobs():
    """Across those seeds some jobs end expired (the timeouts are not vacuous)."""
    totals = Counter(_timeout_totals)
    if totals["seeds"] < len(TIMEOUT_SEEDS):  # run alone, or beside some seeds: gather them
        totals = Counter()
        for seed in TIMEOUT_SEEDS:
            sim = run_seed(seed, STEPS, admission_timeout=True)
            totals.update(job.state.value for job in sim.sched.jobs.values())
    assert totals["expired"], dict(totals)


def test_the_preemption_simulation_reaches_its_interesting_states():
    """Across those seeds, both modes preempt, and suspended work is stopped and resumed."""
    totals = Counter(_preempt_totals)
    if totals["steps"] < len(PREEMPT_SEEDS) * STEPS:  # run alone: gather the stats here
        totals = Counter()
        for seed in PREEMPT_SEEDS:
            totals.update(Simulation(seed, queues="preempt").run(STEPS).stats)
    wanted = ["preempted_suspend", "preempted_requeue", "evicted", "suspend", "resumes",
              "resume", "attempt_preempted", "attempt_resumed"]
    missing = [name for name in wanted if not totals[name]]
    assert not missing, f"never reached: {missing}; totals {dict(totals)}"


def test_the_simulation_reaches_the_interesting_states():
    """Across the CI seeds the driver exercises what the invariants are about."""
    totals = Counter(_totals)
    if totals["steps"] < len(SEEDS) * STEPS:  # run alone: gather the stats here
        totals = Counter()
        for seed in SEEDS:
            totals.update(Simulation(seed).run(STEPS).stats)
    wanted = ["launches", "gpu_launches", "exclusive_launches", "exit_0", "exit_3", "exit_75",
              "died_before_ready", "died_at_barrier", "died_after_go", "spawn_failed", "resend",
              "crashes", "crashes_while_starting", "lease_granted", "lease_expired",
              "lease_revoked", "decline_seen", "generation_phase", "result_seen",
              "control_seen", "attempt_observed", "stopped_steps", "run_stop_requested",
              "terminated"]
    missing = [name for name in wanted if not totals[name]]
    assert not missing, f"never reached: {missing}; totals {dict(totals)}"
    if totals["seconds_x1000"]:
        print(f"{totals['steps'] * 1000 / totals['seconds_x1000']:.0f} steps/s overall")


def test_the_same_seed_gives_the_same_journal():
    first, second = Simulation(11).run(200), Simulation(11).run(200)
    assert first.journal == second.journal
    assert first.sched.snapshot() == second.sched.snapshot()
    assert first.trace == second.trace
    assert Simulation(12).run(200).journal != first.journal


def test_a_failure_names_its_seed_and_step():
    sim = Simulation(3)
    sim.run(20)
    sim.shadow._next_order += 1  # the journal's replay now disagrees with the live state
    expected = r"(?s)seed 3 failed at step 21.*run_seed\(3, 21\)"
    with pytest.raises(SimulationFailure, match=expected):
        sim.run(1)


# -- bugs it found, kept as regression tests -------------------------------------------

T0 = 1_700_000_000.0


def journaled(sched: Scheduler, events: list[Event]) -> tuple[list[dict[str, Any]], list[Effect]]:
    """Feed events as the daemon does; the journal records and every effect, in order."""
    records, effects = [], []
    for event in events:
        version = sched.version
        effects += sched.handle(event)
        if sched.version != version:
            records.append(json.loads(json.dumps(to_record(event))))
    return records, effects


def control(at: float, rid: str, action: str, **fields: Any) -> ControlSeen:
    from praxist_fs.core.request import ControlRequest
    return ControlSeen(at=at, name=f"{rid}.json", digest=rid, request_id=rid,
                       control=ControlRequest(request_id=rid, action=action, generation=1,
                                              **fields))


def started(policy: Policy) -> CoordinatorStarted:
    return CoordinatorStarted(at=T0, policy=policy.to_dict(), pid=1, host="h", boot_id=BOOT)


def test_a_close_is_never_decided_with_soft_idle_peers():
    """Without a named cohort the cohort is what the journal knows, not who is idle now."""
    policy = Policy(profiles=dict(PROFILES), default_profile="cpu", mature_quorum_fraction=0.5)
    live = Scheduler()
    records, _ = journaled(live, [
        started(policy), control(T0 + 1, "open", "generation_open"),     # no cohort
        IdleSeen(at=T0 + 2, generation=1, peers=PEERS),                 # soft: not journaled
        ResultSeen(at=T0 + 3, generation=1, result_id="r1", peer="p1", mature=True),
        control(T0 + 4, "close", "generation_close")])
    replayed = replay(records)
    assert replayed.generations[1].phase == live.generations[1].phase
    assert replayed.snapshot() == live.snapshot()


def test_a_released_claim_never_rewrites_an_old_lease_over_the_current_one():
    from praxist_fs.core.events import LeaseExpired
    policy = Policy(profiles=dict(PROFILES), default_profile="cpu")
    claim = {"uuid": "GPU-0", "utilization_pct": 25.0, "memory_mib": 6144.0, "exclusive": False}
    sched = Scheduler()

    def grant(at: float, lease_id: str) -> LeaseGranted:
        return LeaseGranted(at=at, generation=1, lease_id=lease_id, peer="p1",
                            priority="frontier_followup", profiles=("gpu_small",),
                            expires_at=at + 600, claim=claim)

    _, effects = journaled(sched, [
        started(policy), control(T0 + 1, "open", "generation_open", cohort=("p1",)),
        grant(T0 + 2, "g1-p1-1"), LeaseExpired(at=T0 + 602, generation=1, lease_id="g1-p1-1"),
        ClaimsReleased(at=T0 + 602, pending=("g1-p1-1",)),  # the registry was not writable
        grant(T0 + 603, "g1-p1-2"),
        ClaimsReleased(at=T0 + 604, pending=())])           # now it is
    files = [e.document for e in effects
             if isinstance(e, WriteGenerationFile) and e.kind == "lease" and e.name == "p1"]
    assert files[-1]["lease_id"] == "g1-p1-2" and files[-1]["state"] == "granted", \
        f"p1's lease file last shows {files[-1]['lease_id']} ({files[-1]['state']})"


def test_work_requeued_while_its_generation_closes_is_frozen_not_launched_again():
    """Found by this simulation (seed 17), fixed in 6a5aa50 (R-SUP-8)."""
    policy = Policy(profiles={"cpu": PROFILES["cpu_free"]}, default_profile="cpu")
    sched = Scheduler()
    data = json.dumps({"peer": "p1", "tag": "t0", "argv": ["true"]}).encode()
    journaled(sched, [
        started(policy), control(T0 + 1, "open", "generation_open"),
        RequestSeen(at=T0 + 2, name="r.json", digest="d", request_id="r",
                    request=parse_request("r.json", data))])
    (launch,) = sched.next_launches(T0 + 3)
    job_id = launch.job_id
    journaled(sched, [launch, AttemptObserved(at=T0 + 4, job_id=job_id, attempt_id="a1",
                                              alive=True, handle=shim(77, 1, BOOT)),
                      control(T0 + 5, "close", "generation_close")])
    assert sched.generations[1].phase == "closing"       # the running job drains
    journaled(sched, [AttemptObserved(at=T0 + 6, job_id=job_id, attempt_id="a1",
                                      alive=False)])     # the shim gave up before GO
    journaled(sched, sched.due(T0 + 7))
    phase = sched.generations[1].phase
    assert sched.jobs[job_id].state is JobState.REJECTED, sched.jobs[job_id].state
    assert phase == "closed"
    assert sched.next_launches(T0 + 8) == [], f"{job_id} launched again in a {phase} generation"


def test_a_stopped_run_grants_no_leases():
    """Found by this simulation (seed 47 of an earlier version), fixed in f4758a6."""
    policy = Policy(profiles={"cpu": PROFILES["cpu_free"]}, default_profile="cpu",
                    supply_idle_samples=1)
    sched = Scheduler()
    calm = PressureSample(source="psi", cpu=0.0, memory=0.0, io=0.0)
    journaled(sched, [started(policy), control(T0 + 1, "open", "generation_open",
                                               cohort=("p1",)),
                      IdleSeen(at=T0 + 2, generation=1, peers=("p1",))])
    assert sched.next_launches(T0 + 3) == []  # nothing queued: both slots unused
    journaled(sched, [HostSampled(at=T0 + 4, pressure=calm),
                      ControlSeen(at=T0 + 5, name="stop.json", digest="s", request_id="stop",
                                  control=parse_control("stop.json", b'{"action": "run_stop"}')),
                      HostSampled(at=T0 + 6, pressure=calm)])
    assert sched.stopped
    assert sched.next_grants(T0 + 7) == [], "a stopped run wakes idle peers"


def test_a_stop_interrupted_by_a_crash_is_finished_by_the_next_coordinator():
    """Found by this simulation (seed 196 of an earlier version), fixed in f4758a6."""
    policy = Policy(profiles={"cpu": PROFILES["cpu_free"]}, default_profile="cpu")
    live = Scheduler()
    data = json.dumps({"peer": "p1", "tag": "t0", "argv": ["true"]}).encode()
    records, _ = journaled(live, [started(policy), RequestSeen(
        at=T0 + 1, name="r.json", digest="d", request_id="r",
        request=parse_request("r.json", data))])
    (launch,) = live.next_launches(T0 + 2)
    more, _ = journaled(live, [launch, AttemptObserved(
        at=T0 + 3, job_id=launch.job_id, attempt_id="a1", alive=True,
        handle=shim(77, 1, BOOT))])                                  # spawned, READY not yet written
    stop = ControlSeen(at=T0 + 4, name="stop.json", digest="s", request_id="stop",
                       control=parse_control("stop.json", b'{"action": "run_stop"}'))
    last, effects = journaled(live, [stop])
    assert any(isinstance(e, TerminateAttempts) for e in effects)
    # kill -9 after the commit, before TerminateAttempts ran; the shim then wrote READY
    restarted = replay(records + more + last)
    _, effects = journaled(restarted, [started(policy)])
    assert restarted.stopped
    assert [e for e in effects if isinstance(e, TerminateAttempts)] == [
        TerminateAttempts(attempts=((launch.job_id, "a1"),))]
    _, effects = journaled(restarted, [AttemptObserved(
        at=T0 + 6, job_id=launch.job_id, attempt_id="a1", alive=True,
        handle=shim(77, 1, BOOT), ready=True)])
    assert not any(isinstance(e, WriteGo) for e in effects), "GO written in a stopped run"
    assert AbortAttempt(job_id=launch.job_id, attempt_id="a1") in effects
