"""Maturity arithmetic and the lease life cycle (R-SUP-2..7), on the pure core."""

from __future__ import annotations

import pytest

from praxist_fs.core.calibration import Calibration
from praxist_fs.core.events import (
    ControlSeen, DeclineSeen, HostSampled, IdleSeen, RequestSeen, ResultSeen,
)
from praxist_fs.core.observations import PressureSample
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.request import ControlRequest, Request
from praxist_fs.core.supply import (
    FRONTIER, MATURE, cooldown_seconds, maturity, plan_priorities,
)


@pytest.mark.parametrize("cohort,fraction,redundancy,quorum,results,peers,commit,expected", [
    # seed defaults, cohort 8: Q=2; no results yet: D=2, A_target=min(8, 6)=6
    (8, 0.25, 3.0, 0.0, 0, 0, 0, dict(q=2, m=0, d=2, a_target=6, room=6)),
    # M counts unique mature results without a hard quorum
    (8, 0.25, 3.0, 0.0, 2, 1, 1, dict(q=2, m=2, d=0, a_target=0, room=0)),
    # a hard quorum larger than Q replaces it, and M becomes distinct mature peers
    (8, 0.25, 3.0, 0.5, 3, 1, 0, dict(q=4, m=1, d=3, a_target=8, room=8, hard=4)),
    # a hard quorum smaller than Q does not lower Q, but M is still peers
    (8, 0.5, 1.0, 0.25, 5, 2, 0, dict(q=4, m=2, d=2, a_target=2, room=2, hard=2)),
    # zero fraction: Q is still max(1, ...) but mature supply is off
    (4, 0.0, 3.0, 0.0, 0, 0, 0, dict(q=1, m=0, d=1, a_target=3, room=0)),
    # zero redundancy: no mature target at all, even with a hard quorum
    (4, 0.25, 0.0, 0.5, 0, 0, 0, dict(q=2, m=0, d=2, a_target=0, room=0, hard=2)),
    # a cohort of one
    (1, 0.25, 3.0, 0.0, 0, 0, 0, dict(q=1, m=0, d=1, a_target=1, room=1)),
    # commitments count against the target
    (8, 0.25, 3.0, 0.0, 0, 0, 4, dict(q=2, m=0, d=2, a_target=6, room=2)),
])
def test_maturity_formulas(cohort, fraction, redundancy, quorum, results, peers, commit, expected):
    m = maturity(cohort_size=cohort, fraction=fraction, redundancy=redundancy,
                 quorum_fraction=quorum, mature_results=results, mature_peers=peers,
                 commitments=commit)
    assert (m.q, m.m, m.d, m.a_target, m.mature_room) == (
        expected["q"], expected["m"], expected["d"], expected["a_target"], expected["room"])
    assert m.hard_quorum == expected.get("hard")


def test_first_wave_keeps_one_explorer_and_caps_mature_at_q():
    m = maturity(cohort_size=4, fraction=0.25, redundancy=3.0, quorum_fraction=0.0,
                 mature_results=0, mature_peers=0, commitments=0)
    assert plan_priorities(4, m, first_wave=True) == [MATURE, FRONTIER, FRONTIER, FRONTIER]
    assert plan_priorities(4, m, first_wave=False) == [MATURE] * 3 + [FRONTIER]
    solo = maturity(cohort_size=1, fraction=0.25, redundancy=3.0, quorum_fraction=0.0,
                    mature_results=0, mature_peers=0, commitments=0)
    assert plan_priorities(1, solo, first_wave=True) == [MATURE]


def test_decline_cooldown_is_exponential_and_bounded():
    assert [cooldown_seconds(n) for n in (1, 2, 3)] == [60.0, 120.0, 240.0]
    assert cooldown_seconds(50) == 3600.0


def test_calibration_starts_neutral_and_learns_slowly():
    fresh = Calibration()
    assert fresh.p_finish(100.0, 100.0) == pytest.approx(0.5)
    assert fresh.p_finish(None, 100.0) is None
    slow = Calibration()
    for _ in range(2):
        slow.observe(wall_s=200.0, eta_s=100.0)  # jobs took twice their ETA
    p_two = slow.p_finish(100.0, 150.0)
    for _ in range(20):
        slow.observe(wall_s=200.0, eta_s=100.0)
    assert fresh.p_finish(100.0, 150.0) > p_two > slow.p_finish(100.0, 150.0)


class Run:
    """A scheduler with a generation, idle peers and host samples, driven by hand."""

    def __init__(self, cohort=("a", "b", "c", "d"), slots=4, **policy):
        profiles = {"cpu": Profile(name="cpu", accelerator="cpu")}
        self.sched = __import__("praxist_fs.core.scheduler", fromlist=["Scheduler"]).Scheduler(
            Policy(profiles=profiles, default_profile="cpu", initial_concurrent_experiments=slots,
                   max_concurrent_experiments=slots, supply_idle_samples=2, **policy))
        self.now = 1000.0
        self.sched.handle(ControlSeen(at=self.now, name="c.json", digest="d", request_id="c",
                                      control=ControlRequest(request_id="c",
                                                             action="generation_open",
                                                             generation=1, cohort=cohort)))
        self.sched.handle(IdleSeen(at=self.now, generation=1, peers=cohort))

    def tick(self, seconds=1.0):
        self.now += seconds
        for event in self.sched.next_launches(self.now):
            self.sched.handle(event)
        self.sched.handle(HostSampled(at=self.now, pressure=PressureSample(source="psi", cpu=0.0)))
        for event in [*self.sched.due(self.now), *self.sched.next_grants(self.now)]:
            self.sched.handle(event)

    def leases(self):
        return {lease.peer: lease for lease in self.sched.generations[1].leases.values()}

    def stats(self):
        return self.sched.generations[1].stats_document()


def test_grants_wait_for_consecutive_idle_samples_and_wake_at_most_the_free_slots():
    run = Run(slots=2)
    run.tick()
    assert run.leases() == {}  # one idle sample is not enough
    run.tick()
    assert len(run.leases()) == 2  # two free slots wake two of the four peers
    run.tick()
    assert len(run.leases()) == 2  # outstanding leases count against capacity


def test_expired_declined_and_cooldown():
    run = Run(supply_lease_seconds=180)
    run.tick(), run.tick()
    leases = run.leases()
    assert len(leases) == 4
    run.sched.handle(DeclineSeen(at=run.now, generation=1, peer="a",
                                 lease_id=leases["a"].lease_id, name="a.decline.json"))
    assert run.sched.generations[1].cooldowns[("a", leases["a"].priority)][0] == 1
    run.tick(30)  # a rests for 60 s after its first decline of that priority
    assert {lease.peer for lease in run.sched.generations[1].outstanding()} == {"b", "c", "d"}
    run.tick(151)  # past expiry: the other three expire unused; a may be woken again
    by_id = run.sched.generations[1].leases
    assert [by_id[leases[p].lease_id].state for p in "abcd"] == [
        "declined", "expired", "expired", "expired"]
    stats = run.stats()
    assert (stats["declined"], stats["expired"]) == (1, 3)
    assert stats["granted"] == 4 + len(run.sched.generations[1].outstanding())


def test_a_new_submission_resets_the_decline_backoff():
    run = Run(cohort=("a",), slots=1)
    run.tick(), run.tick()
    lease = run.leases()["a"]
    run.sched.handle(DeclineSeen(at=run.now, generation=1, peer="a", lease_id=lease.lease_id,
                                 name="a.decline.json"))
    assert run.sched.generations[1].cooldowns
    request = Request(request_id="r1", peer="a", tag="t1", argv=("true",))
    run.sched.handle(RequestSeen(at=run.now, name="r1.json", digest="x", request_id="r1",
                                 request=request))
    assert not run.sched.generations[1].cooldowns



def test_a_changed_priority_resets_the_decline_backoff():
    """seed 000 "Mature Evidence And Idle Supply Feedback": "A new experiment submission,
    a changed priority, or a new generation resets that backoff." A peer that declined
    mature advice and is then offered frontier_followup work has no mature backoff left."""
    run = Run(cohort=("a",), slots=1, supply_lease_seconds=180)
    run.tick(), run.tick()
    first = run.leases()["a"]
    assert first.priority == MATURE  # a cohort of one: the first wave is mature advice
    run.sched.handle(DeclineSeen(at=run.now, generation=1, peer="a", lease_id=first.lease_id,
                                 name="a.decline.json"))
    assert run.sched.generations[1].cooldowns[("a", MATURE)][0] == 1
    run.sched.handle(ResultSeen(at=run.now, generation=1, result_id="m1", peer="a",
                                mature=True))  # the debt is paid: follow-ups are offered now
    run.tick()
    second = run.leases()["a"]
    assert (second.priority, second.state) == (FRONTIER, "granted")
    assert ("a", MATURE) not in run.sched.generations[1].cooldowns
    run.sched.handle(DeclineSeen(at=run.now, generation=1, peer="a", lease_id=second.lease_id,
                                 name="a.decline.json"))
    assert {key: declines for key, (declines, _) in run.sched.generations[1].cooldowns.items()
            } == {("a", FRONTIER): 1}


def test_results_count_until_closed_then_are_quarantined():
    run = Run()
    run.sched.handle(ResultSeen(at=run.now, generation=1, result_id="r1", peer="a", mature=True))
    run.sched.handle(ResultSeen(at=run.now, generation=1, result_id="r1", peer="a", mature=True))
    assert run.sched.maturity(run.sched.generations[1]).m == 1  # unique results
    run.sched.handle(ControlSeen(at=run.now, name="x.json", digest="e", request_id="x",
                                 control=ControlRequest(request_id="x", action="generation_close",
                                                        generation=1)))
    run.tick()  # nothing running: the drain ends at once
    assert run.sched.generations[1].phase == "closed"
    run.sched.handle(ResultSeen(at=run.now, generation=1, result_id="late", peer="b",
                                mature=True))
    assert "late" in run.sched.generations[1].quarantined
    assert run.sched.maturity(run.sched.generations[1]).m == 1


def submit(run, tag, work_class="ordinary", eta=None):
    request = Request(request_id=tag, peer="a", tag=tag, argv=("true",), work_class=work_class,
                      eta_s=eta)
    run.sched.handle(RequestSeen(at=run.now, name=f"{tag}.json", digest=tag, request_id=tag,
                                 request=request))
    return next(j for j in run.sched.jobs.values() if j.request.tag == tag)


def test_mature_work_goes_first_but_leaves_the_exploration_reserve():
    run = Run(slots=2, exploration_reserve=1)
    explore = submit(run, "explore")
    mature_jobs = [submit(run, f"mature-{i}", "mature") for i in range(2)]
    launched = [e.job_id for e in run.sched.next_launches(run.now)]
    assert launched == [mature_jobs[0].job_id, explore.job_id]
    assert run.sched.pending[mature_jobs[1].job_id].startswith("exploration_reserve")


def test_assessment_admits_only_deadline_safe_mature_top_ups():
    run = Run(slots=4)
    gen = run.sched.generations[1]
    gen.phase, gen.deadline = "assessment", run.now + 100.0
    ordinary = submit(run, "ordinary")
    unknown = submit(run, "mature-no-eta", "mature")
    hopeless = submit(run, "mature-long", "mature", eta=10_000.0)
    safe = submit(run, "mature-short", "mature", eta=10.0)
    launched = {e.job_id for e in run.sched.next_launches(run.now)}
    assert launched == {safe.job_id}
    assert "only mature" in run.sched.pending[ordinary.job_id]
    assert "ETA is unknown" in run.sched.pending[unknown.job_id]
    assert "P(finish before the deadline)" in run.sched.pending[hopeless.job_id]
