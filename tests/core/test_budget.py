"""The run budget (R-BUD-1): spend from attempt wall time, the advisory verdict journaled
once per change, infrastructure spend kept apart, and a request's hard ``max_cost``."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from praxist_fs.core.budget import (
    Budget, Spend, attempt_spend, estimate, kind_of, verdict,
)
from praxist_fs.core.effects import SpawnAttempt, WriteControlReply
from praxist_fs.core.events import (
    AttemptLaunched, BudgetAlert, BudgetVerdict, ControlSeen, CoordinatorStarted,
    from_record, to_record,
)
from praxist_fs.core.policy import Policy
from praxist_fs.core.request import parse_control
from praxist_fs.errors import BadRequest
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.core.status import render_status

from . import simulation
from .simulation import PROFILES, replay, run_seed

from .helpers import Harness, make_policy

HOUR = 3600.0


class Journaled(Harness):
    """The harness, started as the daemon starts; ``journal``: what the driver committed."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.journal = self.records
        self.handle(CoordinatorStarted(at=self.tick(), policy=policy.to_dict(), pid=1,
                                       host="h", boot_id="boot"))

    def due(self, at: float) -> list[BudgetVerdict | BudgetAlert]:
        """What the daemon's loop does with ``due``: handle every budget decision."""
        events = [e for e in self.sched.due(at) if isinstance(e, (BudgetVerdict, BudgetAlert))]
        for event in events:
            self.handle(event)
        return events

    def start(self, tag: str, gpus: tuple[str, ...] = (), **fields) -> str:
        """Accept a job and launch its first attempt now (on ``gpus``, bypassing placement)."""
        job_id = self.submit(tag, **fields)["job_id"]
        self.handle(AttemptLaunched(at=self.tick(), job_id=job_id, attempt_id="a1", gpus=gpus))
        self.go(job_id, "a1")
        return job_id

    def end(self, job_id: str, attempt_id: str, code: int, at: float) -> None:
        self.now = at - 0.5  # Harness.exit ends the attempt at now + 0.5
        self.exit(job_id, attempt_id, code)


def policy(**budget) -> Policy:
    return make_policy(budget=Budget(**budget))


# -- arithmetic ------------------------------------------------------------------------


def test_an_attempt_spends_its_gpus_times_wall_time_and_costs_rate_per_unit_hour():
    assert attempt_spend(2, 1800, 3.0) == Spend(gpu_seconds=3600, cost=3.0)  # 2 GPUs, 1/2 h
    assert attempt_spend(0, 7200, 0.5) == Spend(gpu_seconds=0, cost=1.0)     # CPU: 1 unit
    assert attempt_spend(4, 900, None) == Spend(gpu_seconds=3600, cost=0.0)  # no rate
    assert attempt_spend(1, -5, 2.0) == Spend()                            # clock skew


def test_infrastructure_is_exit_75_a_released_barrier_or_a_lost_attempt():
    assert kind_of("infra_retry", 75) == kind_of("failed", 75) == "infrastructure"
    assert kind_of("released", None) == kind_of("lost", None) == "infrastructure"
    for outcome, code in (("completed", 0), ("failed", 3), ("cancelled", None),
                          ("failed", 137)):
        assert kind_of(outcome, code) == "experiment"


@pytest.mark.parametrize(("hours", "cost", "expected"), [
    (0.0, 0.0, "under"), (8.9, 0.0, "under"), (9.0, 0.0, "at"), (10.0, 0.0, "at"),
    (10.01, 0.0, "over"), (1.0, 4.5, "at"), (9.5, 5.5, "over"), (0.0, 5.0, "at"),
])
def test_the_verdict_is_the_worst_of_the_limits(hours, cost, expected):
    budget = Budget(gpu_hours=10.0, cost=5.0, rates={"cpu": 1.0}, at_fraction=0.9)
    assert verdict(budget, Spend(hours * HOUR, cost)) == expected


def test_at_fraction_one_is_seed_003s_at_only_when_equal_and_no_limit_no_verdict():
    budget = Budget(gpu_hours=2.0, at_fraction=1.0)
    assert [verdict(budget, Spend(h * HOUR)) for h in (1.99, 2.0, 2.01)] == \
        ["under", "at", "over"]
    assert verdict(Budget(rates={"cpu": 1.0}), Spend(1e9, 1e9)) is None


def test_the_estimate_scales_eta_by_the_calibrated_ratio():
    cost = estimate(eta_s=1800, ratio=1.5, gpus=2, rate=4.0)
    assert cost["cost"] == pytest.approx(6.0)          # 0.75 h x 2 GPUs x 4
    assert cost["gpu_hours"] == pytest.approx(1.5) and cost["wall_s"] == 2700
    assert cost["rate_per"] == "GPU-hour"
    assert estimate(eta_s=3600, ratio=1.0, gpus=0, rate=0.5)["rate_per"] == "hour"


# -- spend and its split -----------------------------------------------------------


def test_spend_accrues_by_kind_and_running_attempts_count_so_far():
    h = Journaled(policy(rates={"gpu": 2.0, "cpu": 1.0}))
    ok = h.start("ok", gpus=("G0", "G1"), profile="gpu")
    flaky = h.start("flaky", gpus=("G2",), profile="gpu")
    cpu = h.start("cpu-work", profile="cpu")
    started = {j: h.sched.jobs[j].current.started_at for j in (ok, flaky, cpu)}
    h.end(ok, "a1", 0, started[ok] + 1800)          # 2 GPUs x 1/2 h = 1 GPU-h, cost 2
    h.end(flaky, "a1", 75, started[flaky] + 3600)   # 1 GPU-h of infrastructure, cost 2
    at = started[cpu] + 7200                        # the CPU job runs on: 2 h, cost 2
    spend = h.sched.spend(at)
    assert spend["experiment"] == Spend(HOUR, 2.0)
    assert spend["infrastructure"] == Spend(HOUR, 2.0)
    assert spend["running"] == Spend(0.0, pytest.approx(2.0))
    assert h.sched.jobs[flaky].state.value == "queued"  # retried, and charged all the same
    doc = render_status(h.sched, at, {})["budget"]
    assert doc["spend"] == {"gpu_hours": 2.0, "cost": 6.0}
    assert doc["experiment"] == {"gpu_hours": 1.0, "cost": 2.0}
    assert doc["infrastructure"] == {"gpu_hours": 1.0, "cost": 2.0}
    assert doc["running"] == {"gpu_hours": 0.0, "cost": 2.0}
    assert doc["limits"] == {"gpu_hours": None, "cost": None, "at_fraction": 0.9}
    assert doc["verdict"] is None and doc["rates"] == {"cpu": 1.0, "gpu": 2.0}


def test_a_released_attempt_is_infrastructure_spend():
    h = Journaled(policy(rates={"cpu": HOUR}))  # 1 per second: easy to read
    job_id = h.submit("never-ran")["job_id"]
    h.handle(AttemptLaunched(at=h.tick(), job_id=job_id, attempt_id="a1"))
    h.observe(job_id, "a1", alive=False)  # gone before GO: the barrier released it
    assert h.sched.jobs[job_id].attempts[0].outcome == "released"
    spend = h.sched.spend(h.now)
    assert spend["infrastructure"].cost == pytest.approx(1.0) and spend["experiment"] == Spend()


# -- the verdict: journaled once per change, advisory ---------------------------------


def budget_run() -> tuple[Journaled, str]:
    """A run with a 1 GPU-hour budget ("at" from a half) and a 2-GPU job running."""
    h = Journaled(policy(gpu_hours=1.0, at_fraction=0.5, cost=4.0, rates={"gpu": 2.0}))
    return h, h.start("wide", gpus=("G0", "G1"), profile="gpu")


def test_the_verdict_changes_are_journaled_once_each():
    h, job_id = budget_run()
    start = h.sched.jobs[job_id].current.started_at
    seen = []
    for minutes in (0, 1, 10, 14, 15, 16, 29, 30, 31, 45, 60):
        at = start + minutes * 60  # 2 GPUs: 1 GPU-h after 30 minutes
        seen += [(minutes, e.verdict) for e in h.due(at)]
        assert h.sched.due(at) == [], "a verdict is proposed again after it was journaled"
    assert seen == [(0, "under"), (15, "at"), (31, "over")]
    events = [r for r in h.journal if r["type"] == "budget_verdict"]
    assert [(r["verdict"], r["at"]) for r in events] == [
        ("under", start), ("at", start + 900), ("over", start + 1860)]
    assert events[2]["gpu_hours"] == pytest.approx(31 / 30) and events[2]["cost"] > 2.0
    assert (h.sched.ledger.verdict, h.sched.ledger.since) == ("over", start + 1860)


def test_over_budget_denies_nothing():
    h, _ = budget_run()
    h.due(h.now + 10 * HOUR)
    assert h.sched.ledger.verdict == "over"
    reply = h.submit("more-work")
    assert reply["outcome"] == "accepted"
    assert [job for job, _ in h.launch_all()] == [reply["job_id"]]


def test_replay_and_a_snapshot_rebuild_spend_and_verdict():
    h, job_id = budget_run()
    start = h.sched.jobs[job_id].current.started_at
    h.due(start + 1000)
    h.end(job_id, "a1", 75, start + 2000)            # infrastructure: retried
    h.launch_all()
    h.due(start + 2500)
    h.submit("capped", max_cost=0.001, eta_s=60, profile="gpu")  # rejected, journaled
    replayed = replay(h.journal)
    assert replayed.snapshot() == h.sched.snapshot()
    assert replayed.snapshot()["budget"]["verdict"] == "over"
    restored = restore(json.loads(json.dumps(capture(h.sched))))
    assert restored.snapshot() == h.sched.snapshot()
    assert restored.spend(start + 5000) == h.sched.spend(start + 5000)


def test_a_new_policy_without_limits_clears_the_verdict():
    h, _ = budget_run()
    h.due(h.now + HOUR)
    restarted = replay(h.journal)
    restarted.policy = make_policy()  # what a CoordinatorStarted without a budget does
    (event,) = restarted.due(h.now + HOUR)
    assert event.verdict is None
    restarted.handle(event)
    assert restarted.due(h.now + 2 * HOUR) == []


def test_the_verdict_event_refuses_an_unknown_verdict_and_round_trips():
    with pytest.raises(ValueError, match="verdict"):
        BudgetVerdict(at=1.0, verdict="broke", gpu_hours=0.0, cost=0.0)
    event = BudgetVerdict(at=1.0, verdict="at", gpu_hours=0.5, cost=1.0)
    assert from_record(json.loads(json.dumps(to_record(event)))) == event


# -- seed 003: raise-only ceilings, a snapshot in each launch, alerts on enqueue -------


def control(h: Journaled, **fields) -> dict:
    """An operator's control file, parsed as the daemon parses it; the reply document."""
    h.counter += 1
    name = f"ctl-{h.counter}.json"
    data = json.dumps(fields).encode()
    effects = h.handle(ControlSeen(at=h.tick(), name=name, digest=str(h.counter),
                                   request_id=f"ctl-{h.counter}",
                                   control=parse_control(name, data)))
    return next(e.document for e in effects if isinstance(e, WriteControlReply))


def test_an_operator_raises_a_ceiling_and_never_lowers_one():
    """seed 003 "Session budget state": "raise(newCeilingUsd): rejects a ceiling lower
    than the current one and otherwise replaces it." A raise outlives a restart with the
    task file's lower limit, and the verdict follows the new ceiling."""
    h, _ = budget_run()  # gpu_hours 1, cost 4
    h.due(h.now + HOUR)
    assert h.sched.ledger.verdict == "over"
    lower = control(h, action="budget_raise", cost=3)
    assert lower["outcome"] == "rejected"
    assert lower["reason"] == ("cost: 3 is lower than the ceiling in force, 4; it can only "
                               "be raised")
    none = control(h, action="budget_raise", cost=5, gpu_hours=0.5)
    assert none["outcome"] == "rejected" and none["reason"].startswith("gpu_hours: 0.5 is lower")
    assert h.sched.budget.cost == 4.0  # all or nothing: the valid cost was not taken either
    raised = control(h, action="budget_raise", cost=40, gpu_hours=10)
    assert raised["outcome"] == "ok", raised
    assert raised["reason"] == "budget ceiling raised: gpu_hours 1 -> 10, cost 4 -> 40"
    assert raised["budget"] == {"gpu_hours": 10.0, "cost": 40.0}
    assert [e.verdict for e in h.due(h.now)] == ["under"]
    status = render_status(h.sched, h.now, {})["budget"]
    assert status["limits"]["cost"] == 40.0 and status["raised"] == {"cost": 40.0,
                                                                        "gpu_hours": 10.0}
    assert control(h, action="budget_raise", cost=20)["outcome"] == "rejected"
    replayed = replay(h.journal)
    assert replayed.snapshot() == h.sched.snapshot()
    assert restore(json.loads(json.dumps(capture(h.sched)))).budget == h.sched.budget
    replayed.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=2,
                                       host="h", boot_id="boot"))  # a restart, same task file
    assert (replayed.budget.cost, replayed.budget.gpu_hours) == (40.0, 10.0)


def test_a_limit_the_run_does_not_have_cannot_be_raised():
    """seed 003 "Session budget state": a raise replaces a ceiling; without a limit there
    is none to raise (no limit is above every ceiling)."""
    h = Journaled(policy(cost=1.0, rates={"gpu": 1.0}))
    reply = control(h, action="budget_raise", gpu_hours=5)
    assert reply["outcome"] == "rejected"
    assert reply["reason"].startswith("gpu_hours: the run has no gpu_hours limit")
    assert h.sched.budget.gpu_hours is None


@pytest.mark.parametrize("fields,field,words", [
    ({"action": "budget_raise"}, "cost", "needs a new ceiling"),
    ({"action": "budget_raise", "cost": 0}, "cost", "a number > 0"),
    ({"action": "budget_raise", "gpu_hours": "lots"}, "gpu_hours", "a number > 0"),
    ({"action": "budget_raise", "cost": True}, "cost", "a number > 0"),
    ({"action": "run_stop", "cost": 5}, "cost", "only budget_raise takes a ceiling"),
])
def test_a_bad_raise_is_refused_by_name(fields, field, words):
    with pytest.raises(BadRequest) as err:
        parse_control("c.json", json.dumps(fields).encode())
    assert err.value.field == field and words in err.value.problem


def test_every_launch_records_where_the_budget_stood():
    """seed 003 "Budget preflight is recorded, not a denial gate": the capacity snapshot of
    each reservation stores the budget's spend and ceiling."""
    h, first = budget_run()  # its 2 GPUs spend 1 GPU-hour in 30 minutes, at 2 per GPU-hour
    h.now += 900
    queued = h.submit("later", profile="gpu")["job_id"]
    effects = h.handle(AttemptLaunched(at=h.tick(), job_id=queued, attempt_id="a1",
                                       gpus=("G2",)))
    hours = 2 * (h.now - h.sched.jobs[first].current.started_at) / HOUR
    record = h.job(queued)["attempts"][0]["budget"]
    assert record == {"verdict": "at", "gpu_hours": pytest.approx(hours, abs=1e-6),
                      "cost": pytest.approx(2 * hours, abs=1e-6),
                      "limits": {"gpu_hours": 1.0, "cost": 4.0}}
    assert h.job(first)["attempts"][0]["budget"]["gpu_hours"] == 0
    (spawn,) = [e for e in effects if isinstance(e, SpawnAttempt)]
    assert spawn.metadata["budget"] == record  # the attempt's attempt.json says it too
    assert replay(h.journal).snapshot() == h.sched.snapshot()


def test_a_run_without_a_budget_records_none():
    h = Journaled(make_policy())
    job_id = h.start("free")
    assert h.job(job_id)["attempts"][0]["budget"] is None


def test_each_enqueue_while_not_under_alerts_at_most_once_a_minute():
    """seed 003 "On each enqueue it calls evaluate() ... then emits BusChannels.BudgetAlert
    with { level, currentUsd, ceilingUsd } whenever the verdict is not 'under'"; here each
    enqueue counts, and the journal holds at most one alert a minute."""
    h, _ = budget_run()
    h.submit("while-under")
    assert [type(e) for e in h.due(h.now)] == [BudgetVerdict]  # under: no alert
    h.now += HOUR
    h.due(h.now)
    assert h.sched.ledger.verdict == "over"
    h.submit("first")
    (alert,) = h.due(h.now)
    assert (alert.level, alert.enqueues, alert.cost_limit, alert.gpu_hours_limit) == (
        "over", 1, 4.0, 1.0)
    assert alert.gpu_hours > 1.0
    for tag in ("second", "third"):
        h.submit(tag)
    assert h.due(h.now + 30) == []  # rate-limited: counted, not journaled yet
    assert render_status(h.sched, h.now, {})["budget"]["alerts"]["pending"] == 2
    (later,) = h.due(alert.at + 60)
    assert later.enqueues == 2
    assert h.due(alert.at + 200) == []  # nothing enqueued since
    alerts = [r for r in h.journal if r["type"] == "budget_alert"]
    assert [r["enqueues"] for r in alerts] == [1, 2]
    shown = render_status(h.sched, h.now, {})["budget"]["alerts"]
    assert shown["count"] == 2 and shown["last"]["enqueues"] == 2
    assert replay(h.journal).snapshot() == h.sched.snapshot()
    assert from_record(json.loads(json.dumps(to_record(alert)))) == alert


# -- max_cost: a hard ceiling per request ---------------------------------------------


def capped() -> Journaled:
    return Journaled(policy(rates={"cpu": 3.6, "gpu": 36.0}))  # 0.001 and 0.01 per second


def test_a_request_over_its_max_cost_is_rejected_with_the_estimate():
    h = capped()
    reply = h.submit("pricey", eta_s=100, max_cost=0.05)  # cpu: 100 s x 0.001 = 0.1
    assert reply["outcome"] == "rejected" and reply["field"] == "max_cost"
    assert reply["estimate"]["cost"] == pytest.approx(0.1)
    assert reply["estimate"]["rate_per"] == "hour" and reply["estimate"]["ratio"] == 1.0
    assert "estimated cost 0.1 is over 0.05" in reply["reason"]
    assert reply["job_id"] is None and not h.sched.jobs
    reply = h.submit("pricey-gpu", eta_s=100, max_cost=0.5, profile="gpu")  # 100 x 0.01
    assert reply["outcome"] == "rejected" and reply["estimate"]["gpus"] == 1


def test_a_request_within_its_max_cost_is_accepted_with_the_estimate():
    h = capped()
    reply = h.submit("cheap", eta_s=10, max_cost=0.5, profile="gpu")
    assert reply["outcome"] == "accepted" and reply["estimate"]["cost"] == pytest.approx(0.1)
    assert reply["estimate"]["rate_per"] == "GPU-hour"
    assert "estimate" not in h.submit("no-ceiling", eta_s=10)


@pytest.mark.parametrize(("fields", "missing"), [
    ({"profile": "cpu"}, "no eta_s"),
    ({"profile": "gpu", "eta_s": 10}, "no rate for profile 'gpu'"),
])
def test_max_cost_without_an_estimate_is_rejected(fields, missing):
    h = Journaled(policy(rates={"cpu": 1.0}))
    reply = h.submit("unknown", max_cost=5, **fields)
    assert reply["outcome"] == "rejected" and reply["field"] == "max_cost"
    assert "an estimate needs eta_s and a rate" in reply["reason"] and missing in reply["reason"]
    assert "estimate" not in reply


def test_the_estimate_follows_the_calibration():
    h = capped()
    slow = h.start("slow", eta_s=100)
    h.end(slow, "a1", 0, h.sched.jobs[slow].current.started_at + 300)  # 3x its eta
    reply = h.submit("next", eta_s=100, max_cost=0.11)
    assert reply["outcome"] == "rejected" and reply["estimate"]["ratio"] > 1.0


def test_max_cost_guards_a_retry_but_not_a_duplicate():
    h = capped()
    job_id = h.start("again", eta_s=100)
    assert h.submit("again", eta_s=100, max_cost=0.01)["outcome"] == "duplicate"
    h.end(job_id, "a1", 3, h.now + 1)
    reply = h.submit("again", eta_s=100, max_cost=0.01, retry_terminal=True)
    assert reply["outcome"] == "rejected" and reply["job_id"] == job_id
    assert h.sched.jobs[job_id].state.value == "failed"
    assert h.submit("again", eta_s=100, max_cost=1, retry_terminal=True)["outcome"] == \
        "retry_accepted"


def test_a_bad_max_cost_is_refused_by_name():
    h = capped()
    for bad in (0, -1, "1", True, 1e16):
        reply = h.submit("bad", max_cost=bad, eta_s=10)
        assert reply["outcome"] == "rejected" and reply["field"] == "max_cost", bad


# -- policy ------------------------------------------------------------------------


def test_the_budget_travels_with_the_policy_and_old_journals_load():
    budget = Budget(gpu_hours=3.0, cost=9.0, rates={"gpu": 2.0, "cpu": 0.0}, at_fraction=0.8)
    with_budget = policy(**{f: getattr(budget, f) for f in ("gpu_hours", "cost", "rates",
                                                               "at_fraction")})
    assert Policy.from_dict(json.loads(json.dumps(with_budget.to_dict()))) == with_budget
    old = with_budget.to_dict()
    del old["budget"]
    assert Policy.from_dict(old).budget == Budget()


# -- the deterministic simulation, with a budget --------------------------------------


RANDOM_POLICY = simulation.random_policy


def budgeted(rng: random.Random) -> Policy:
    """The simulation's random policy with a small budget: verdicts change within a run."""
    return replace(RANDOM_POLICY(rng), budget=Budget(
        gpu_hours=rng.choice([None, 0.002, 0.01]), cost=rng.choice([0.005, 0.05]),
        rates={name: rng.choice([0.0, 1.0, 10.0]) for name in PROFILES if rng.random() < 0.8},
        at_fraction=rng.choice([0.5, 1.0])))


@pytest.mark.parametrize("seed", range(1, 7))
def test_the_simulation_with_a_budget_replays_and_snapshots(seed, monkeypatch):
    """Crashes, restarts and replay == live at every step (the simulation's own checks),
    with verdict changes in the journal; a snapshot plus the tail replays to the same."""
    monkeypatch.setattr(simulation, "random_policy", budgeted)
    journal = run_seed(seed, 300).journal
    assert any(r["type"] == "budget_verdict" for r in journal)
    whole = replay(journal).snapshot()
    for cut in sorted({0, len(journal) // 3, len(journal) // 2, len(journal)}):
        restored = restore(json.loads(json.dumps(capture(replay(journal[:cut])))))
        for record in journal[cut:]:
            restored.handle(from_record(json.loads(json.dumps(record))))
        assert restored.snapshot() == whole, f"seed {seed}: cut at {cut}"
