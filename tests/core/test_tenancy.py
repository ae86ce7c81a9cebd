"""Whose is what on a shared box (R-SEC-5, core/tenancy.py): request and control ids,
tags, caps, the spool quota and the records of who asked belong to the uid that owns the
file; a name in the file is a label. Pure: the uid is an input, as the daemon reads it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

from praxist_fs.core.effects import RejectRequest, WriteReply
from praxist_fs.core.events import ControlSeen, CoordinatorStarted, from_record, to_record
from praxist_fs.core.request import parse_control

from .helpers import Harness, control, coordinator


def test_another_uid_reusing_a_request_id_is_set_aside_and_the_first_reply_stands():
    h = coordinator(0)
    victim = h.submit("exp", name="req-7.json", uid=1001)
    assert victim["outcome"] == "accepted"
    for doc in ({"peer": "p", "tag": "other", "argv": ["evil"]},   # another request ...
                {"peer": "peer-a", "tag": "exp", "argv": ["python", "train.py"]}):  # ... or its copy
        effects = h.handle(h.request_event(doc, name="req-7.json", uid=1002))
        (filed,) = effects
        assert isinstance(filed, RejectRequest) and filed.error["field"] == "request_id"
        assert filed.error["problem"].startswith("already used by another uid's request; "
                                                 "this file is owned by uid 1002")
    assert h.reply_files["req-7"] == victim  # the first uid's reply is never rewritten
    assert h.submit("exp", name="req-7.json", uid=1001) == victim  # its own retransmission


def test_another_uid_reusing_a_control_id_is_set_aside():
    h = coordinator(0)
    mine = h.submit("exp", uid=1001)["job_id"]
    first = control(h, "hold", uid=1001, jobs=[mine], request_id="ctl-x")
    assert first["outcome"] == "ok" and first["uid"] == 1001
    data = json.dumps({"action": "release", "jobs": [mine], "request_id": "ctl-x"}).encode()
    effects = h.handle(ControlSeen(at=h.tick(), name="ctl-x.json",
                                   digest=hashlib.sha256(data).hexdigest(), request_id="ctl-x",
                                   control=parse_control("ctl-x.json", data), uid=1002))
    assert [type(e).__name__ for e in effects] == ["DisposeControl"]
    assert "another uid's control request" in effects[0].error["reason"]
    assert h.sched.jobs[mine].held is not None  # the squatter's release never happened


def test_a_borrowed_peer_name_counts_against_the_borrowers_own_cap():
    h = coordinator(0, max_concurrent_per_peer=1)
    mallory = h.submit("m1", peer="alice", uid=1002)["job_id"]
    h.submit("m2", peer="alice", uid=1002)
    alice = h.submit("a1", peer="alice", uid=1001)["job_id"]
    launched = {job_id for job_id, _ in h.launch_all()}
    assert launched == {mallory, alice}
    waiting = h.sched.pending[h.sched.jobcontrol.find_job("m2", 1002).job_id]
    assert waiting == "peer alice (uid 1002): 1 of max_concurrent_per_peer 1 running"


def test_a_control_records_the_uid_that_asked_whatever_its_by_says():
    h = coordinator(0, operators=())
    job_id = h.submit("exp", uid=1001)["job_id"]
    reply = control(h, "hold", uid=1001, jobs=["exp"], by="operator")
    assert reply["uid"] == 1001
    held = h.job(job_id)["hold"]
    assert held["uid"] == 1001 and held["by"] == "operator (uid 1001)"
    assert h.job(job_id)["reason"].startswith("held by operator (uid 1001) since ")
    cancel = control(h, "cancel", uid=1001, jobs=[job_id], by="root", reason="oops")
    assert cancel["uid"] == 1001
    assert h.job(job_id)["reason"] == "cancelled by root (uid 1001): oops"


def test_the_coordinators_own_uid_reads_as_before():
    h = coordinator(0)
    job_id = h.submit("exp", uid=0)["job_id"]
    control(h, "hold", uid=0, jobs=["exp"], by="alice")
    assert h.job(job_id)["hold"]["by"] == "alice" and h.job(job_id)["hold"]["uid"] == 0


def test_an_operator_names_another_uids_tags_with_owner():
    h = coordinator(0)
    theirs = h.submit("exp", uid=1001)["job_id"]
    roots = h.submit("exp", uid=0)["job_id"]
    reply = control(h, "cancel", uid=0, jobs=["exp"], owner=1001)
    assert [job["job_id"] for job in reply["jobs"]] == [theirs]
    assert h.sched.jobs[roots].state.value == "queued"
    assert control(h, "cancel", uid=0, jobs=["exp"])["jobs"][0]["job_id"] == roots


def test_a_dependency_by_tag_is_the_requesters_own_tag():
    h = coordinator(0)
    theirs = h.submit("prep", uid=1001)["job_id"]
    rejected = h.submit("train", uid=1002, after=[{"job": "prep", "when": "ok"}])
    assert rejected["outcome"] == "rejected" and rejected["field"] == "after"
    mine = h.submit("prep", uid=1002)["job_id"]
    accepted = h.submit("train", uid=1002, after=[{"job": "prep", "when": "ok"}])
    assert h.sched.jobs[accepted["job_id"]].after == ((mine, "ok"),) and mine != theirs


def quota_event(h: Harness, tag: str, position: tuple[int, int] | None, uid: int = 1001):
    event = h.request_event({"peer": "p", "tag": tag, "argv": ["true"]}, uid=uid)
    return replace(event, spool_position=position)


def test_requests_over_a_uids_spool_quota_are_rejected_and_say_so():
    h = coordinator(0, spool_quota_requests=2, spool_quota_bytes=1000)
    within = h.handle(quota_event(h, "a", (2, 900)))
    assert [e.document["outcome"] for e in within if isinstance(e, WriteReply)] == ["accepted"]
    for position, word in (((3, 900), "spool_quota_requests (2)"),
                           ((1, 1001), "spool_quota_bytes (1000)")):
        effects = h.handle(quota_event(h, f"b{position[0]}", position))
        (reply,) = [e.document for e in effects if isinstance(e, WriteReply)]
        assert reply["outcome"] == "rejected" and reply["field"] == "quota"
        assert word in reply["problem"] and reply["problem"].startswith("uid 1001 has ")
        assert any(isinstance(e, RejectRequest) for e in effects)
    assert [j.request.tag for j in h.sched.queued()] == ["a"]


def test_the_spool_position_survives_the_journal_so_replay_decides_alike():
    h = coordinator(0, spool_quota_requests=2)
    event = quota_event(h, "a", (3, 10))
    record = json.loads(json.dumps(to_record(event)))
    assert from_record(record) == event
    del record["spool_position"]  # an older journal's record: no quota applies
    assert from_record(record).spool_position is None
    effects = h.handle(from_record(record))
    assert [e.document["outcome"] for e in effects if isinstance(e, WriteReply)] == ["accepted"]


def test_a_uids_job_from_before_tags_were_each_uids_is_still_its_own():
    """A job whose id came from its tag alone (a journal of an earlier version, or a run
    served by that uid) is found by its owner's tag, and by nobody else's."""
    h = coordinator(1001)
    job_id = h.submit("exp", uid=1001)["job_id"]
    h.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=2,
                                host="h", boot_id="boot", uid=0))  # served by root now
    assert h.submit("exp", uid=1001)["outcome"] == "duplicate"
    assert h.sched.jobcontrol.find_job("exp", 1001).job_id == job_id
    other = h.submit("exp", uid=1002)
    assert other["outcome"] == "accepted" and other["job_id"] != job_id
