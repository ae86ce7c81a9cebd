"""R-API-1: the Python client of a run, against a real coordinator (docs/PYTHON.md). The
documented example (tests/e2e/test_docs.py) covers the common path; here, the edges."""

from __future__ import annotations

import io
import os

import pytest

from praxist_fs import client as protocol
from praxist_fs.api import Client, NoCoordinator, Rejected, TooLarge, UnknownJob
from praxist_fs.core.identity import job_id_for

from .conftest import wait_for


def test_a_request_the_client_writes_is_the_one_launch_writes(run, tmp_path, monkeypatch):
    """Same builder, same fields: argv, the caller's cwd and environment (less the shell's
    bookkeeping), and every option the CLI has."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHLVL", "3")
    monkeypatch.setenv("EXPERIMENT_SEED", "7")
    api = Client(run.root, peer="alice")
    first = api.submit(["true"], tag="base")
    request_id = api.send(["echo", "x"], tag="full", profile="other_cpu", work_class="scout",
                          eta_s=60, after=[first], after_any=["base"], hold=True, priority=7,
                          admission_timeout_s=600)
    reply = api.wait_reply(request_id)
    job = api.job(reply)
    assert (job.profile, job.work_class, job.priority, job.held) == ("other_cpu", "scout", 7,
                                                                     True)
    assert job.after == ({"job": first.job_id, "when": "ok"},
                         {"job": first.job_id, "when": "any"})
    assert job.cwd == str(tmp_path) and job.argv == ("echo", "x") and job.peer == "alice"
    assert job.document["admission_deadline"] is not None


def test_lookups_by_tag_are_this_uids_and_by_id_anyones(run):
    api = Client(run.root, peer="alice")
    reply = api.submit(["true"], tag="mine")
    assert api.job("mine").job_id == api.job(reply.job_id).job_id == reply.job_id
    assert api.find("nobody-submitted-this") is None
    with pytest.raises(UnknownJob, match="nobody-submitted-this"):
        api.job("nobody-submitted-this")
    with pytest.raises(UnknownJob):
        api.wait(["nobody-submitted-this"], timeout=1)
    other_uid = os.geteuid() + 1000  # its equal tag would be another job, not ours
    assert api.find("mine", uid=other_uid) is None


def test_wait_times_out_naming_the_jobs_not_ended(run, tmp_path):
    api = Client(run.root, peer="alice")
    gate = tmp_path / "gate"
    reply = api.submit(["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
                       tag="gated")
    with pytest.raises(TimeoutError, match=reply.job_id):
        api.wait([reply], timeout=0.3)
    gate.touch()
    assert api.wait_job(reply, timeout=30).ok


def test_logs_and_follow_read_every_attempt(make_run, tmp_path):
    run = make_run(retries=1)
    run.start()
    api = Client(run.root, peer="alice")
    marker = tmp_path / "marker"
    script = f"echo attempt; [ -e {marker} ] || {{ touch {marker}; exit 75; }}"
    reply = api.submit(["sh", "-c", script], tag="retried")
    out = io.BytesIO()
    final = api.follow(reply, out)
    assert final.ok and [a.outcome for a in final.attempts] == ["infra_retry", "completed"]
    assert out.getvalue() == b"attempt\nattempt\n"
    assert api.logs(reply) == b"attempt\nattempt\n"
    assert api.logs(reply, attempt="a2") == b"attempt\n"


def test_control_requests_say_per_job_what_they_did(run, tmp_path):
    api = Client(run.root, peer="alice")
    held = api.submit(["true"], tag="held", hold=True)
    assert api.hold([held]).jobs[0].result == "unchanged"  # it is held already
    assert api.update([held], priority=-5).jobs[0].result == "updated"
    assert api.job(held).priority == -5
    released = api.release(["held"])
    assert [(j.job_id, j.result) for j in released.jobs] == [(held.job_id, "released")]
    assert api.wait_job(held, timeout=30).ok
    with pytest.raises(Rejected, match="no-such-job"):
        api.cancel(["no-such-job"])
    with pytest.raises(ValueError, match="name jobs"):
        api.cancel()


def test_what_the_coordinator_refuses_raises_rejected_with_the_field(run):
    api = Client(run.root, peer="alice")
    with pytest.raises(Rejected) as refused:
        api.submit(["true"], tag="x", profile="no-such-profile")
    assert refused.value.field == "profile" and refused.value.reply.outcome == "rejected"
    api.submit(["sleep", "30"], tag="taken")
    shared = api.submit(["false"], tag="taken", cwd=None)  # the tag is the identity
    assert shared.outcome == "duplicate" and shared.differs[0] == "argv"
    with pytest.raises(Rejected) as conflict:  # ... but a changed retry_terminal is refused
        api.submit(["false"], tag="taken", cwd=None, retry_terminal=True)
    assert conflict.value.field == "tag"


def test_what_the_client_refuses_is_never_written(make_run, monkeypatch):
    run = make_run()
    with pytest.raises(ValueError, match="peer: 'bad peer' is not allowed; expected 1-128"):
        Client(run.root, peer="bad peer")
    api = Client(run.root, peer="alice", wait_coordinator=0.2)
    with pytest.raises(NoCoordinator, match="no live coordinator"):
        api.submit(["true"], tag="nobody-serves")
    run.start()
    with pytest.raises(TooLarge, match="larger than 65536 bytes"):
        api.submit(["true"], tag="huge", env={"BIG": "x" * 70_000})
    with pytest.raises(ValueError, match="argv .* or command"):
        api.submit(["true"], tag="both", command="true")
    assert not list((run.sched / "spool" / "incoming").glob("*.json"))
    assert not list((run.sched / "spool" / "replies").glob("*.json"))


def test_a_stopped_run_admits_nothing(run):
    api = Client(run.root, peer="alice")
    assert api.coordinator_alive() and api.status()["coordinator"]["state"] == "serving"
    assert protocol.run_stopped(api.layout) is None
    stop = {"request_id": protocol.new_request_id("alice"), "action": "run_stop"}
    protocol.send_control(api.layout, stop, 30, "the stop")
    assert run.proc.wait(timeout=30) == 0  # a stopped run's coordinator exits
    with pytest.raises(NoCoordinator, match="is stopped"):
        api.submit(["true"], tag="too-late")


def test_jobs_lists_like_praxist_fs_jobs(run):
    api = Client(run.root, peer="alice")
    replies = [api.submit(["true"], tag=f"listed.{i}") for i in range(3)]
    api.wait(replies, timeout=30)
    wait_for(lambda: len(api.jobs(tag="listed.*", states=["completed"])) == 3,
             message="the index to list the three jobs")
    listed = api.jobs(tag="listed.*", limit=2)
    assert [job.tag for job in listed] == ["listed.2", "listed.1"]  # newest first
    assert api.jobs(peer="someone-else") == []
    assert job_id_for("listed.0") in {job.job_id for job in api.jobs()}
