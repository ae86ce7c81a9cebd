"""Pre-launch failures stay retryable (R-SUB-4): the admission timeout, and a launch
barrier that keeps failing backs off instead of failing the job.

Seed 000 "Submission": "Pre-launch admission timeouts and transient accelerator-probe
rejections are the exception: no experiment attempt ran, so they release the
reservation and the same scientific request may be submitted normally after capacity
or host inventory recovers."
"""

from __future__ import annotations

import json

import pytest

from praxist_fs.core.effects import AbortAttempt
from praxist_fs.core.events import (
    AdmissionExpired, CoordinatorStarted, HostSampled, from_record, to_record,
)
from praxist_fs.core.passes import RELEASE_BACKOFF_CAP_SECONDS, release_backoff
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.snapshot import capture, restore

from .helpers import Harness, make_policy


def expire_due(h: Harness, at: float) -> list[AdmissionExpired]:
    """Run the core's time-driven decisions at ``at``, as the daemon's loop does."""
    h.now = at
    events = [e for e in h.sched.due(at) if isinstance(e, AdmissionExpired)]
    for event in events:
        h.handle(event)
    return events


def unplaceable(h: Harness) -> None:
    """A host without GPUs: a gpu job waits for ever, which the timeout bounds."""
    h.handle(HostSampled(at=h.tick()))


def test_a_job_that_never_started_expires_and_its_tag_is_free_again():
    """seed 000 "Submission": an admission timeout releases the reservation without
    consuming an attempt; the same request may be submitted normally afterwards."""
    h = Harness(make_policy(admission_timeout_seconds=60.0))
    unplaceable(h)
    reply = h.submit("exp-gpu", profile="gpu")
    job_id = reply["job_id"]
    submitted = h.sched.jobs[job_id].submitted_at
    assert h.job(job_id)["admission_deadline"] == submitted + 60
    assert h.launch_all() == []
    assert expire_due(h, submitted + 59) == []
    (event,) = expire_due(h, submitted + 60)
    assert "no GPU inventory" in event.waited_for
    job = h.job(job_id)
    assert job["state"] == "expired" and h.directory(job_id) == "done"
    assert job["attempts"] == [] and job["exit_code"] is None
    assert job["reason"].startswith("admission timeout: not started by ")
    assert "no GPU inventory" in job["reason"] and "submit it again" in job["reason"]
    assert expire_due(h, submitted + 120) == []  # once
    # the very same request, submitted normally (no retry_terminal): accepted as new
    again = h.submit("exp-gpu", profile="gpu")
    assert again["outcome"] == "accepted" and again["job_id"] == job_id
    assert h.job(job_id)["state"] == "queued" and h.sched.jobs[job_id].round == 2
    assert h.sched.jobs[job_id].admission_deadline == h.now + 60  # a new timeout


def test_a_request_field_overrides_the_task_default_and_a_changed_request_is_accepted():
    """seed 000 "Submission": the tag is not bound by a job that never ran, so even a
    changed request under it is a plain new submission."""
    h = Harness(make_policy())  # no task-wide timeout: the request's own applies
    unplaceable(h)
    job_id = h.submit("exp-gpu", profile="gpu", admission_timeout_s=5)["job_id"]
    h.launch_all()
    (_,) = expire_due(h, h.sched.jobs[job_id].submitted_at + 5)
    changed = h.submit("exp-gpu", profile="cpu", argv=["python", "other.py"])
    assert changed["outcome"] == "accepted"
    assert h.launch_all() == [(job_id, "a1")]  # a cpu job starts: no attempt was used
    assert h.sched.jobs[job_id].admission_deadline is None  # no timeout this round


def test_without_a_timeout_a_job_waits_for_ever():
    """seed 000 "Submission": the admission timeout is optional; the default keeps
    today's behaviour (CONFIG.md admission_timeout_seconds: null)."""
    h = Harness(make_policy())
    unplaceable(h)
    job_id = h.submit("exp-gpu", profile="gpu")["job_id"]
    assert h.job(job_id)["admission_deadline"] is None
    assert expire_due(h, h.now + 10 ** 7) == []
    assert h.job(job_id)["state"] == "queued"


def test_a_job_that_started_no_longer_expires_even_when_requeued():
    """seed 000 "Submission": only pre-launch waits are the exception. Only a job none of whose attempts ran expires: one that ran (exit 75, requeued)
    holds its identity like any other."""
    h = Harness(make_policy(admission_timeout_seconds=30.0, infrastructure_retries=1))
    job_id = h.submit("exp-1")["job_id"]
    assert h.launch_all() == [(job_id, "a1")]
    h.go(job_id, "a1")
    assert h.job(job_id)["admission_deadline"] is None  # the job file says so at once
    h.exit(job_id, "a1", 75)
    assert h.job(job_id)["state"] == "queued"
    assert expire_due(h, h.now + 3600) == []


class Journaled(Harness):
    """Keeps, as the daemon journals them, the events that changed the state."""

    def __init__(self, policy) -> None:
        super().__init__(policy)
        self.records: list[dict] = []
        self.handle(CoordinatorStarted(at=self.now, policy=policy.to_dict(), pid=1, host="h",
                                       boot_id="boot"))

    def handle(self, event):
        version = self.sched.version
        effects = super().handle(event)
        if self.sched.version != version:
            self.records.append(json.loads(json.dumps(to_record(event))))
        return effects


def test_an_expiry_and_a_resubmission_replay_and_survive_a_snapshot():
    """seed 000 "Submission" through replay: the expiry is an event of its own,
    carrying the soft pending reason it records."""
    policy = make_policy(admission_timeout_seconds=10.0)
    h = Journaled(policy)
    unplaceable(h)
    first = h.submit("exp-a", profile="gpu")["job_id"]
    h.submit("exp-b", profile="gpu", admission_timeout_s=1000)
    h.launch_all()
    restored = restore(capture(h.sched))  # the deadlines come back from the job records
    assert restored.snapshot() == h.sched.snapshot()
    assert [e.job_id for e in restored.due(h.now + 10)
            if isinstance(e, AdmissionExpired)] == [first]
    assert [e.job_id for e in expire_due(h, h.now + 10)] == [first]
    assert h.submit("exp-a", profile="gpu")["outcome"] == "accepted"
    replayed = Scheduler()
    for record in h.records:
        replayed.handle(from_record(record))
    assert replayed.snapshot() == h.sched.snapshot()
    assert replayed.jobs[first].reason == h.sched.jobs[first].reason


def test_a_barrier_that_keeps_failing_backs_off_and_never_fails_the_job():
    """seed 000 "Submission": a transient pre-launch rejection consumes no attempt; the
    job retries with a growing backoff, its count and reason in the job file."""
    h = Harness(make_policy(infrastructure_retries=0))
    job_id = h.submit("exp-1")["job_id"]
    for n in range(1, 6):
        assert h.launch_all() == [(job_id, f"a{n}")]
        effects = h.observe(job_id, f"a{n}", alive=False)  # gone before READY
        assert [e for e in effects if isinstance(e, AbortAttempt)]
        job = h.job(job_id)
        assert job["state"] == "queued" and job["barrier_releases"] == n
        if n == 1:
            continue  # the first release may be transient: the next try is at once
        assert h.launch_all() == []  # within the backoff
        job = h.job(job_id)
        assert job["reason"].startswith(f"launch barrier released {n} times in a row")
        assert f"attempts/{job_id}/a{n}/shim.log" in job["reason"]
        h.now += release_backoff(n)
        h.handle(HostSampled(at=h.now))  # the daemon samples every second
    assert [a["outcome"] for a in h.job(job_id)["attempts"]] == ["released"] * 5
    h.launch_all()
    h.go(job_id, "a6")
    h.exit(job_id, "a6", 0)
    job = h.job(job_id)
    assert job["state"] == "completed" and job["barrier_releases"] == 0


@pytest.mark.parametrize(("releases", "seconds"), [(1, 0), (2, 2), (3, 4), (4, 8),
                                                   (30, RELEASE_BACKOFF_CAP_SECONDS)])
def test_release_backoff_doubles_up_to_its_cap(releases, seconds):
    """seed 000 "Submission": a transient rejection is retried at once; repeated ones
    back off, boundedly."""
    assert release_backoff(releases) == seconds


def test_a_backing_off_job_expires_at_its_admission_timeout():
    """seed 000 "Submission", both exceptions together: a barrier that never recovers ends in a retryable expiry."""
    h = Harness(make_policy(admission_timeout_seconds=100.0))
    job_id = h.submit("exp-1")["job_id"]
    for n in (1, 2):
        h.launch_all()
        h.observe(job_id, f"a{n}", alive=False)
    h.launch_all()
    (event,) = expire_due(h, h.sched.jobs[job_id].submitted_at + 100)
    assert event.waited_for.startswith("launch barrier released 2 times in a row")
    assert h.job(job_id)["state"] == "expired"
    assert h.submit("exp-1")["outcome"] == "accepted"
