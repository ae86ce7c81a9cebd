"""Whose request it is (R-SEC-3): the uid that owns a request file decides whether the
coordinator runs it, as whom, and whose job its tag names."""

from __future__ import annotations

import json

from praxist_fs.core.effects import SpawnAttempt
from praxist_fs.core.events import CoordinatorStarted, from_record, to_record
from praxist_fs.core.identity import job_id_for
from praxist_fs.core.snapshot import capture, restore

from .helpers import Harness, coordinator


def spawned(h: Harness) -> SpawnAttempt:
    h.launch_all()
    (spawn,) = [e for e in h.last_effects if isinstance(e, SpawnAttempt)]
    return spawn


def test_a_root_coordinator_runs_a_peers_job_as_that_peer():
    h = coordinator(0)
    reply = h.submit("exp", uid=1001)
    assert reply["outcome"] == "accepted" and reply["uid"] == 1001
    assert h.job(reply["job_id"])["uid"] == 1001
    assert spawned(h).uid == 1001


def test_roots_own_request_runs_as_root_that_is_as_the_coordinator():
    h = coordinator(0)
    assert h.submit("exp", uid=0)["uid"] == 0
    assert spawned(h).uid is None


def test_an_unprivileged_coordinator_refuses_another_uid():
    h = coordinator(1000)
    reply = h.submit("exp", uid=1001)
    assert reply["outcome"] == "rejected" and reply["field"] == "uid"
    assert reply["problem"] == (
        "the request file is owned by uid 1001; this coordinator runs as uid 1000, not "
        "root, so it runs commands only for its own uid and the uids the task lists in "
        "trusted_uids")
    assert not h.sched.jobs
    assert h.submit("own", uid=1000)["outcome"] == "accepted"
    assert spawned(h).uid is None


def test_a_trusted_uid_runs_as_the_unprivileged_coordinator():
    h = coordinator(1000, trusted_uids=(1001,))
    reply = h.submit("exp", uid=1001)
    assert reply["outcome"] == "accepted" and h.job(reply["job_id"])["uid"] == 1001
    assert spawned(h).uid is None  # it cannot switch uids: the task trusts 1001 with its own


def test_a_job_root_accepted_keeps_its_uid_under_a_later_unprivileged_coordinator():
    """Never run as the coordinator what another uid submitted: the switch fails instead."""
    h = coordinator(0)
    h.submit("exp", uid=1001)
    h.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=2,
                                host="h", boot_id="boot", uid=1000))
    assert spawned(h).uid == 1001


def test_a_tag_is_each_uids_own():
    """R-SEC-5: a job's identity is (uid, tag): another uid's equal tag is another job,
    so neither uid can squat the other's tag; the coordinator's own keeps its ids."""
    h = coordinator(0)
    first = h.submit("exp", uid=1001)["job_id"]
    second = h.submit("exp", uid=1002)  # the same request, from another uid
    assert second["outcome"] == "accepted" and second["job_id"] != first
    assert h.job(second["job_id"])["uid"] == 1002 and h.job(first)["uid"] == 1001
    assert h.submit("exp", uid=1001)["job_id"] == first
    assert h.submit("exp", uid=1001)["outcome"] == "duplicate"
    assert h.submit("exp", uid=1002)["job_id"] == second["job_id"]
    roots = h.submit("exp", uid=0)["job_id"]
    assert roots == job_id_for("exp") and roots not in (first, second["job_id"])


def test_records_without_a_uid_count_as_the_coordinators():
    """Journals from before uids were observed: their jobs are the coordinator's own."""
    h = coordinator(None)
    job_id = h.submit("exp")["job_id"]
    h.handle(CoordinatorStarted(at=h.tick(), policy=h.sched.policy.to_dict(), pid=2,
                                host="h", boot_id="boot", uid=1000))
    assert h.submit("exp", uid=1000)["outcome"] == "duplicate"
    assert h.submit("exp", uid=1001)["field"] == "uid"
    assert spawned(h).uid is None and h.job(job_id)["uid"] is None


def test_the_uid_survives_the_journal_and_the_snapshot():
    h = coordinator(0)
    event = h.request_event({"peer": "p", "tag": "exp", "argv": ["true"]}, uid=1001)
    record = json.loads(json.dumps(to_record(event)))
    assert record["uid"] == 1001 and from_record(record) == event
    del record["uid"]  # an older journal's record
    assert from_record(record).uid is None
    h.handle(event)
    sched = restore(json.loads(json.dumps(capture(h.sched))))
    assert sched.coordinator["uid"] == 0
    (job,) = sched.jobs.values()
    assert job.uid == 1001 and sched.replies[event.request_id].uid == 1001
