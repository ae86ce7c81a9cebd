"""Job control in the core (R-CTL-1, R-CTL-5): cancel, hold, release, update, priority and
dependencies, through the same events the daemon journals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from praxist_fs.core.effects import AbortAttempt, CancelAttempt, WriteGo
from praxist_fs.core.events import AttemptObserved, CoordinatorStarted, from_record
from praxist_fs.core.request import parse_control, parse_request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.errors import BadRequest

from .helpers import Harness, control, make_policy


def running(h: Harness, tag: str, **fields: Any) -> str:
    job_id = h.submit(tag, **fields)["job_id"]
    assert (job_id, "a1") in h.launch_all()
    h.go(job_id, "a1")
    return job_id


def restarted(h: Harness) -> Scheduler:
    """The harness's scheduler as a snapshot restore rebuilds it."""
    return restore(json.loads(json.dumps(capture(h.sched))))


# -- parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(("doc", "field"), [
    ({"after": "exp-1"}, "after"),
    ({"after": [{"job": "exp-1", "when": "sometimes"}]}, "after[0].when"),
    ({"after": [{"job": "../x"}]}, "after[0].job"),
    ({"after": [{"job": "a", "extra": 1}]}, "after[0]"),
    ({"after": ["a"] * 65}, "after"),
    ({"priority": 101}, "priority"),
    ({"priority": 1.5}, "priority"),
    ({"priority": True}, "priority"),
    ({"hold": "yes"}, "hold"),
])
def test_bad_job_control_fields_are_rejected_naming_the_field(doc, field):
    data = json.dumps({"peer": "p", "tag": "t", "argv": ["true"], **doc}).encode()
    with pytest.raises(BadRequest) as info:
        parse_request("r.json", data)
    assert info.value.field == field


def test_after_accepts_names_and_objects():
    data = json.dumps({"peer": "p", "tag": "t", "argv": ["true"], "after": [
        "train-1", {"job": "train-2", "when": "notok"}, {"job": "train-3"}]}).encode()
    assert parse_request("r.json", data).after == (
        ("train-1", "ok"), ("train-2", "notok"), ("train-3", "ok"))


@pytest.mark.parametrize(("doc", "field"), [
    ({"action": "cancel"}, "jobs"),
    ({"action": "cancel", "jobs": "exp-1"}, "jobs"),
    ({"action": "cancel", "states": ["done"]}, "states"),
    ({"action": "update", "jobs": ["exp-1"]}, "priority"),
    ({"action": "hold", "jobs": ["exp-1"], "priority": 3}, "priority"),
    ({"action": "cancel", "jobs": ["exp-1"], "grace": -1}, "grace"),
])
def test_bad_job_control_requests_name_the_field(doc, field):
    with pytest.raises(BadRequest) as info:
        parse_control("c.json", json.dumps(doc).encode())
    assert info.value.field == field


# -- cancel ------------------------------------------------------------------------------


def test_cancel_of_a_queued_job_ends_it_at_once():
    h = Harness(make_policy(initial_concurrent_experiments=1))
    running(h, "first")
    job_id = h.submit("second")["job_id"]
    reply = control(h, "cancel", jobs=["second"], by="alice", reason="wrong lr")
    assert reply["outcome"] == "ok"
    assert reply["jobs"] == [{"job_id": job_id, "tag": "second", "result": "cancelled",
                              "state": "cancelled", "reason": "cancelled by alice: wrong lr"}]
    assert h.job(job_id)["state"] == "cancelled"
    assert h.directory(job_id) == "done"
    assert h.launch_all() == []  # it never starts


def test_cancel_of_a_running_job_is_recorded_before_any_signal_and_ends_it_cancelled():
    h = Harness()
    job_id = running(h, "exp")
    reply = control(h, "cancel", jobs=[job_id], grace=3)
    assert reply["jobs"][0]["result"] == "cancelling"
    assert [e for e in h.last_effects if isinstance(e, CancelAttempt)] == [
        CancelAttempt(job_id=job_id, attempt_id="a1", grace=3.0)]
    assert h.sched.jobs[job_id].current.cancel["grace"] == 3.0  # the decision is state
    assert h.job(job_id)["state"] == "running"
    h.exit(job_id, "a1", 143, signal=15)
    doc = h.job(job_id)
    assert doc["state"] == "cancelled" and doc["exit_code"] == 143
    assert doc["attempts"][0]["outcome"] == "cancelled"
    assert doc["reason"] == "cancelled by operator (exit code 143, signal 15)"


def test_a_cancelled_attempt_that_exits_0_anyway_completes():
    h = Harness()
    job_id = running(h, "exp")
    control(h, "cancel", jobs=[job_id])
    h.exit(job_id, "a1", 0)
    assert h.job(job_id)["state"] == "completed"


def test_a_cancelled_attempt_still_at_the_barrier_is_aborted_not_started():
    h = Harness()
    job_id = h.submit("exp")["job_id"]
    h.launch_all()
    h.spawn(job_id, "a1")
    control(h, "cancel", jobs=["exp"])
    effects = h.observe(job_id, "a1", ready=True)
    assert [type(e) for e in effects] == [AbortAttempt]
    h.observe(job_id, "a1", alive=False, ready=True)
    assert h.job(job_id)["state"] == "cancelled"


def test_cancel_of_a_terminal_job_changes_nothing_and_says_so():
    h = Harness()
    job_id = running(h, "exp")
    h.exit(job_id, "a1", 0)
    version = h.sched.version
    reply = control(h, "cancel", jobs=["exp"])
    assert reply["jobs"][0]["result"] == "unchanged"
    assert reply["jobs"][0]["reason"] == "already completed"
    assert h.job(job_id)["state"] == "completed"
    assert h.sched.version == version + 1  # only the reply is recorded


def test_cancel_of_an_unknown_job_is_rejected_and_changes_nothing():
    h = Harness()
    job_id = h.submit("exp")["job_id"]
    reply = control(h, "cancel", jobs=["exp", "nope"])
    assert reply["outcome"] == "rejected" and "'nope'" in reply["reason"]
    assert h.job(job_id)["state"] == "queued"


def test_cancel_by_peer_and_state_selects_only_those():
    h = Harness(make_policy(initial_concurrent_experiments=1))
    running(h, "a-run", peer="alice")
    queued = [h.submit(f"a-{i}", peer="alice")["job_id"] for i in range(2)]
    other = h.submit("b-1", peer="bob")["job_id"]
    reply = control(h, "cancel", peer="alice", states=["queued"])
    assert sorted(r["job_id"] for r in reply["jobs"]) == sorted(queued)
    assert h.job(other)["state"] == "queued"
    assert h.sched.jobs[h.submit("a-run", peer="alice")["job_id"]].state.value == "running"


def test_a_restart_carries_out_a_cancel_under_way_again():
    h = Harness()
    job_id = running(h, "exp")
    control(h, "cancel", jobs=[job_id])
    effects = h.restart(restarted(h))
    assert CancelAttempt(job_id=job_id, attempt_id="a1", grace=10.0) in effects


def test_retry_terminal_reruns_a_cancelled_job():
    h = Harness()
    job_id = h.submit("exp")["job_id"]
    control(h, "cancel", jobs=["exp"])
    assert h.submit("exp", retry_terminal=True)["outcome"] == "retry_accepted"
    assert h.job(job_id)["state"] == "queued"


# -- hold, release, priority ---------------------------------------------------------------


def test_a_held_job_waits_with_its_reason_until_released():
    h = Harness()
    job_id = h.submit("exp", hold=True, peer="alice")["job_id"]
    assert h.launch_all() == []
    assert h.job(job_id)["reason"].startswith("held by alice since ")
    assert h.job(job_id)["hold"]["by"] == "alice"
    reply = control(h, "release", jobs=[job_id])
    assert reply["jobs"][0]["result"] == "released"
    assert h.job(job_id)["hold"] is None
    assert h.launch_all() == [(job_id, "a1")]


def test_hold_applies_to_queued_jobs_only():
    h = Harness(make_policy(initial_concurrent_experiments=1))
    run_id = running(h, "first")
    job_id = h.submit("second")["job_id"]
    reply = control(h, "hold", jobs=["first", "second"], by="ops")
    assert {r["job_id"]: r["result"] for r in reply["jobs"]} == {run_id: "unchanged",
                                                                 job_id: "held"}
    h.exit(run_id, "a1", 0)
    assert h.launch_all() == []
    assert h.job(job_id)["reason"].startswith("held by ops since ")


def test_priority_orders_jobs_inside_their_queue_before_arrival():
    h = Harness(make_policy(initial_concurrent_experiments=1))
    blocker = running(h, "blocker")
    low = h.submit("low")["job_id"]
    high = h.submit("high", priority=50)["job_id"]
    later = h.submit("later")["job_id"]
    control(h, "update", jobs=["later"], priority=80)
    assert h.job(later)["priority"] == 80
    order = []
    current = blocker
    for _ in range(3):
        h.exit(current, "a1", 0)
        ((current, _),) = h.launch_all()
        h.go(current, "a1")
        order.append(current)
    assert order == [later, high, low]


def test_update_of_a_job_not_queued_changes_nothing():
    h = Harness()
    job_id = running(h, "exp")
    reply = control(h, "update", jobs=[job_id], priority=5)
    assert reply["jobs"][0]["result"] == "unchanged"
    assert h.job(job_id)["priority"] == 0


def test_work_class_queues_still_come_before_job_priority():
    h = Harness(make_policy(initial_concurrent_experiments=1, exploration_reserve=0))
    blocker = running(h, "blocker")
    ordinary = h.submit("ordinary", priority=100)["job_id"]
    mature = h.submit("mature", work_class="mature", priority=-100)["job_id"]
    h.exit(blocker, "a1", 0)
    assert h.launch_all() == [(mature, "a1")]
    assert h.sched.jobs[ordinary].state.value == "queued"


# -- dependencies ----------------------------------------------------------------------------


def test_a_dependent_waits_for_its_dependency_then_starts():
    h = Harness(make_policy(initial_concurrent_experiments=2))
    train = h.submit("train")["job_id"]
    evaluate = h.submit("eval", after=["train"])["job_id"]
    assert h.launch_all() == [(train, "a1")]
    assert h.job(evaluate)["reason"] == f"dependency: waiting for {train} (running)"
    assert h.job(evaluate)["after"] == [{"job": train, "when": "ok"}]
    h.go(train, "a1")
    h.exit(train, "a1", 0)
    assert h.launch_all() == [(evaluate, "a1")]


def test_an_unmeetable_dependency_cancels_the_chain():
    h = Harness()
    train = h.submit("train")["job_id"]
    evaluate = h.submit("eval", after=["train"])["job_id"]
    report = h.submit("report", after=[{"job": "eval", "when": "any"}])["job_id"]
    cleanup = h.submit("cleanup", after=[{"job": "train", "when": "notok"}])["job_id"]
    h.launch_all()
    h.go(train, "a1")
    h.exit(train, "a1", 3)
    assert h.job(evaluate)["state"] == "cancelled"
    assert h.job(evaluate)["reason"] == f"dependency {train} ended failed"
    # 'any' is met by the cancelled eval; 'notok' by the failed train
    assert sorted(j for j, _ in h.launch_all()) == sorted([report, cleanup])


def test_with_dependency_failure_hold_the_dependent_waits_for_a_rerun():
    h = Harness(make_policy(dependency_failure="hold"))
    train = running(h, "train")
    evaluate = h.submit("eval", after=["train"])["job_id"]
    h.exit(train, "a1", 3)
    assert h.job(evaluate)["state"] == "queued"
    assert h.job(evaluate)["reason"].startswith(f"dependency {train} ended failed; kept")
    assert h.launch_all() == []
    h.submit("train", retry_terminal=True)
    (launched,) = h.launch_all()
    assert launched == (train, "a2")
    h.go(train, "a2")
    h.exit(train, "a2", 0)
    assert h.launch_all() == [(evaluate, "a1")]


@pytest.mark.parametrize(("after", "words"), [
    (["nope"], "'nope' names no job"),
    (["failed-one"], "can never be met"),
])
def test_a_dependency_that_cannot_be_used_is_rejected_naming_after(after, words):
    h = Harness()
    failed = running(h, "failed-one")
    h.exit(failed, "a1", 1)
    reply = h.submit("eval", after=after)
    assert reply["outcome"] == "rejected" and reply["field"] == "after"
    assert words in reply["problem"]


def test_a_dependency_cycle_through_a_retry_is_rejected():
    h = Harness(make_policy(dependency_failure="hold"))
    a = running(h, "a")
    h.submit("b", after=["a"])
    h.exit(a, "a1", 1)
    reply = h.submit("a", after=["b"], retry_terminal=True)
    assert reply["outcome"] == "rejected" and "dependency cycle" in reply["problem"]


def test_dependencies_holds_and_priorities_survive_replay_and_snapshots():
    h = Harness(make_policy(initial_concurrent_experiments=1))
    train = running(h, "train")
    h.submit("eval", after=["train"])
    h.submit("held", hold=True)
    h.submit("urgent", priority=9)
    control(h, "update", jobs=["held"], priority=-3)
    control(h, "cancel", jobs=["train"])
    replayed = Scheduler(h.sched.policy)
    for record in h.records:  # the journal the driver committed
        replayed.handle(from_record(record))
    assert replayed.snapshot() == h.sched.snapshot()
    restored = restarted(h)
    assert restored.snapshot() == h.sched.snapshot()
    for sched in (replayed, restored, h.sched):
        assert [j.request.tag for j in sched.queued()] == ["urgent", "eval", "held"]
        assert sched.pending[sched.jobcontrol.find_job("held").job_id].startswith("held by")
        sched.handle(AttemptObserved(at=h.tick(), job_id=train, attempt_id="a1", alive=False,
                                     ready=True, go=True, exited=True, exit_code=143,
                                     signal=15))
        assert sched.jobcontrol.find_job("train").state.value == "cancelled"
        assert sched.jobcontrol.find_job("eval").state.value == "cancelled"


def test_go_is_never_written_for_a_cancelled_attempt():
    h = Harness()
    job_id = h.submit("exp")["job_id"]
    h.launch_all()
    h.spawn(job_id, "a1")
    control(h, "cancel", jobs=[job_id])
    assert not [e for e in h.observe(job_id, "a1", ready=True) if isinstance(e, WriteGo)]


# -- whose jobs: a peer acts on its own, operators on any (R-SEC-3) --------------------------


def under_root(operators: tuple[int, ...] = ()) -> Harness:
    """A harness whose coordinator runs as root, as the daemon journals it."""
    h = Harness(make_policy(operators=operators))
    h.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=1, host="h",
                                boot_id="boot", uid=0))
    return h


def test_a_peer_cannot_act_on_another_uids_job():
    h = under_root()
    theirs = h.submit("theirs", uid=1001)["job_id"]
    reply = control(h, "cancel", uid=1002, jobs=[theirs])
    assert reply["outcome"] == "rejected"
    assert f"job {theirs} ('theirs') belongs to uid 1001" in reply["reason"]
    assert "this file is owned by uid 1002" in reply["reason"]
    by_tag = control(h, "cancel", uid=1002, jobs=["theirs"])  # a tag is 1002's own tag
    assert by_tag["outcome"] == "rejected"
    assert by_tag["reason"].startswith("jobs: 'theirs' names no job of this run (expected a "
                                       "job id or a tag of uid 1002)")
    assert h.sched.jobs[theirs].state.value == "queued"


def test_a_selection_without_names_takes_only_the_peers_own_jobs():
    h = under_root()
    mine = h.submit("mine", uid=1002)["job_id"]
    theirs = h.submit("theirs", uid=1001)["job_id"]
    reply = control(h, "hold", uid=1002, states=["queued"])
    assert [job["job_id"] for job in reply["jobs"]] == [mine]
    assert h.sched.jobs[theirs].held is None


@pytest.mark.parametrize("uid", [0, 1003, None])  # root, a listed operator, an older record
def test_operators_act_on_any_job(uid):
    h = under_root(operators=(1003,))
    theirs = h.submit("theirs", uid=1001)["job_id"]
    assert control(h, "cancel", uid=uid, jobs=[theirs])["outcome"] == "ok"
    assert h.sched.jobs[theirs].state.value == "cancelled"


@pytest.mark.parametrize(("action", "fields"), [
    ("generation_open", {"generation": 1}), ("run_stop", {})])
def test_generations_and_the_run_are_for_operators(action, fields):
    h = under_root(operators=(1003,))
    reply = control(h, action, uid=1002, **fields)
    assert reply["outcome"] == "rejected"
    assert reply["reason"] == (f"uid: {action} is for operators (root, the coordinator's "
                               "uid, the task's operators); this control file is owned by "
                               "uid 1002")
    assert not h.sched.stopped and not h.sched.generations
    assert control(h, action, uid=1003, **fields)["outcome"] == "ok"
