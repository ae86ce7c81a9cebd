"""Maturity arithmetic and the lease life cycle (R-SUP-2..7), on the pure core."""

from __future__ import annotations

import pytest

from praxist_fs.core.calibration import Calibration
from praxist_fs.core.effects import WriteControlReply
from praxist_fs.core.events import (
    ControlSeen, DeclineSeen, HostSampled, IdleSeen, LeaseRevoked, RequestSeen, ResultSeen,
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

    def __init__(self, cohort=("a", "b", "c", "d"), slots=4, deadline=None, **policy):
        profiles = {"cpu": Profile(name="cpu", accelerator="cpu")}
        self.sched = __import__("praxist_fs.core.scheduler", fromlist=["Scheduler"]).Scheduler(
            Policy(profiles=profiles, default_profile="cpu", initial_concurrent_experiments=slots,
                   max_concurrent_experiments=slots, supply_idle_samples=2, **policy))
        self.now = 1000.0
        self.sched.handle(ControlSeen(at=self.now, name="c.json", digest="d", request_id="c",
                                      control=ControlRequest(request_id="c",
                                                             action="generation_open",
                                                             generation=1, cohort=cohort,
                                                             deadline=deadline)))
        self.sched.handle(IdleSeen(at=self.now, generation=1, peers=cohort))

    def tick(self, seconds=1.0):
        self.now += seconds
        for event in self.sched.next_launches(self.now):
            self.sched.handle(event)
        self.sched.handle(HostSampled(at=self.now, pressure=PressureSample(source="psi", cpu=0.0)))
        for event in [*self.sched.due(self.now), *self.sched.next_grants(self.now)]:
            self.sched.handle(event)

    def control(self, action, **fields):
        """Send an operator's control request; return its reply document."""
        rid = f"{action}-{self.now}"
        effects = self.sched.handle(ControlSeen(
            at=self.now, name=f"{rid}.json", digest=rid, request_id=rid,
            control=ControlRequest(request_id=rid, action=action, **fields)))
        return next(e.document for e in effects if isinstance(e, WriteControlReply))

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


def send(run, tag, request_id=None, peer="a", work_class="ordinary", eta=None, lease=None,
         **fields):
    """Submit a request; return its reply."""
    request_id = request_id or tag
    request = Request(request_id=request_id, peer=peer, tag=tag, argv=("true",),
                      work_class=work_class, eta_s=eta, lease=lease, **fields)
    run.sched.handle(RequestSeen(at=run.now, name=f"{request_id}.json", digest=request_id,
                                 request_id=request_id, request=request))
    return run.sched.replies[request_id]


def submit(run, tag, work_class="ordinary", eta=None):
    send(run, tag, work_class=work_class, eta=eta)
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


def test_the_exploration_reserve_keeps_no_slot_for_exploration_assessment_holds():
    """seed 000 "Timing And Close": "exploration_reserve prevents mature work from
    consuming every slot when exploration is queued" -- exploration that could start: an
    ordinary job the assessment holds cannot take the slot, so a deadline-safe mature
    top-up gets it."""
    run = Run(slots=1, exploration_reserve=1, deadline=1000.0 + 3600)
    ordinary = submit(run, "ordinary")
    mature = submit(run, "mature-top-up", "mature", eta=10.0)
    other = Run(slots=1, exploration_reserve=1, deadline=1000.0 + 3600)  # exploration open
    submit(other, "ordinary"), submit(other, "mature-top-up", "mature", eta=10.0)
    assert [e.job_id for e in other.sched.next_launches(other.now)] == [ordinary.job_id]
    assert run.control("generation_assess", generation=1)["outcome"] == "ok"
    launched = [e.job_id for e in run.sched.next_launches(run.now)]
    assert launched == [mature.job_id]
    assert "only mature top-ups start" in run.sched.pending[ordinary.job_id]


def test_an_assessment_closes_by_itself_at_its_deadline():
    """seed 000 "Timing And Close": "Once the quota is met, or the generation reaches its
    safety bound, the normal strict close path takes over" -- the deadline is that bound,
    whether or not an operator asked to close."""
    run = Run(deadline=1000.0 + 60)
    held = submit(run, "ordinary")
    assert run.control("generation_assess", generation=1)["outcome"] == "ok"
    run.tick(30)
    gen = run.sched.generations[1]
    assert gen.phase == "assessment" and gen.closing_signal is None
    run.tick(31)  # past the deadline: frozen, CLOSING_SIGNAL, and (nothing runs) drained
    assert gen.closing_signal["reason"] == "deadline passed"
    assert held.state.value == "rejected" and "deadline passed" in held.reason
    run.tick()
    assert gen.phase == "closed"
    late = Run(deadline=1000.0 - 1)  # assessed after its deadline: it says it closes now
    assert late.control("generation_assess", generation=1)["reason"] == \
        "generation 1 in assessment; it closes now (deadline passed)"
    late.tick()
    assert late.sched.generations[1].closing_signal["reason"] == "deadline passed"


def test_without_a_deadline_only_the_operator_ends_an_assessment():
    """seed 000 "Timing And Close": "Assessment is not CLOSING_SIGNAL" -- with no deadline
    there is no safety bound, and a met quorum ends only an assessment a close asked for."""
    run = Run(cohort=("a", "b"), mature_quorum_fraction=0.5)
    run.control("generation_assess", generation=1)
    run.sched.handle(ResultSeen(at=run.now, generation=1, result_id="r1", peer="a", mature=True))
    run.tick(10_000)
    assert run.sched.generations[1].phase == "assessment"
    assert "closing" in run.control("generation_close", generation=1)["reason"]


def test_a_duplicate_submission_leaves_the_lease_for_new_work():
    """seed 000 "Mature Evidence And Idle Supply Feedback": "A peer may respond with at
    most one already justified experiment" -- a duplicate or terminal duplicate queues
    nothing, so it uses no lease."""
    run = Run(cohort=("a",), slots=2)
    send(run, "done-before")  # it runs in one slot; the other wakes the idle peer
    send(run, "given-up", hold=True)
    run.control("cancel", jobs=("given-up",))
    run.tick(), run.tick()
    lease = run.leases()["a"]
    assert lease.state == "granted"
    for tag, outcome in (("done-before", "duplicate"), ("given-up", "terminal_duplicate")):
        reply = send(run, tag, request_id=f"{tag}-again", lease=lease.lease_id)
        assert reply.outcome == outcome
        assert reply.lease == {"lease_id": lease.lease_id, "outcome": "duplicate_ignored"}
    assert lease.state == "granted" and run.stats()["consumed"] == 0
    assert send(run, "new-work", lease=lease.lease_id).lease["outcome"] == "consumed"
    assert run.stats()["consumed"] == 1 and run.stats()["reuse_ignored"] == 0


def test_stale_submission_counts_only_expired_leases():
    """seed 000 "Mature Evidence And Idle Supply Feedback": "a submission carrying an
    already expired locator is stale_submission, while reuse_ignored is reserved for a
    lease that was genuinely consumed once" -- declined and revoked leases are counted
    apart."""
    run = Run(supply_lease_seconds=180)
    run.tick(), run.tick()
    leases = {peer: lease.lease_id for peer, lease in run.leases().items()}
    run.sched.handle(DeclineSeen(at=run.now, generation=1, peer="a", lease_id=leases["a"],
                                 name="a.decline.json"))
    run.sched.handle(LeaseRevoked(at=run.now, generation=1, lease_id=leases["b"],
                                  reason="preempted: real work took the capacity"))
    assert send(run, "d-1", peer="d", lease=leases["d"]).lease["outcome"] == "consumed"
    run.tick(181)  # c's lease expires unused
    outcomes = {peer: send(run, f"{peer}-late", peer=peer, lease=leases[peer]).lease["outcome"]
                for peer in "abcd"}
    assert outcomes == {"a": "declined_ignored", "b": "revoked_ignored",
                        "c": "stale_submission", "d": "reuse_ignored"}
    stats = run.stats()
    assert [stats[key] for key in ("stale_submission", "reuse_ignored", "declined_ignored",
                                   "revoked_ignored")] == [1, 1, 1, 1]
