"""R-BUD-2 on Slurm: a job that Slurm runs but whose shim never says READY within
``slurm.launch_timeout_s`` is an infrastructure failure of its node; the clock starts
when Slurm runs the job, not at sbatch. A real coordinator on the fake cluster of
tests/slurm/fake/cluster, whose sbatch really runs the batch script on node fake0."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import SLURM_TASK, make_run, read_json, wait_for  # noqa: F401 (fixture)

TIMEOUT_S = 60  # for any one thing to show on a loaded host


@pytest.fixture
def cluster_run(fake_cluster, make_run):
    def make(launch_timeout_s: float, python: str | None = None):
        run = make_run(task_text=SLURM_TASK + f"      launch_timeout_s: {launch_timeout_s}\n"
                       + (f"      python: {python}\n" if python else "")
                       + "    infrastructure_retries: 1\n")
        run.start()
        return run
    return make


def submit(run, tag: str, command: str) -> str:
    reply = run.reply(run.submit({"peer": "tester", "tag": tag, "command": command}),
                      timeout=TIMEOUT_S)
    assert reply["outcome"] == "accepted", reply
    return reply["job_id"]


def test_no_ready_within_the_launch_timeout_fails_the_node(cluster_run, fake_cluster,
                                                           tmp_path):
    """The node's interpreter hangs (a stuck shared filesystem): Slurm runs each job but
    no READY comes. Each attempt is cancelled after the launch timeout, retried like
    exit 75, and counted against node fake0, whose status says why; fake0 is the last
    node of its partition, so it stays in rotation as suspect."""
    hang = tmp_path / "hung-python"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(0o755)
    run = cluster_run(launch_timeout_s=1, python=str(hang))
    job_id = submit(run, "stuck", "exit 0")
    doc = run.wait_state(job_id, "failed", timeout=TIMEOUT_S)
    assert [a["outcome"] for a in doc["attempts"]] == ["infra_retry", "failed"]
    for attempt in doc["attempts"]:
        assert attempt["infrastructure"] == ("no READY within the launch timeout (1 s "
                                             "after Slurm started it) on node fake0")
        assert attempt["exit_code"] is None  # its command never ran
        attempt_dir = run.sched / "attempts" / job_id / attempt["attempt_id"]
        assert not (attempt_dir / "READY").exists() and (attempt_dir / "ABORT").exists()
        slurm_job = read_json(fake_cluster / "jobs" / f"{attempt['handle']['job_id']}.json")
        assert slurm_job["state"] == "CANCELLED"
    node = wait_for(lambda: (n := run.status()["nodes"]) and n[0]["consecutive_failures"] == 2
                    and n[0], timeout=TIMEOUT_S, message="fake0's two failures in status")
    assert (node["node"], node["state"]) == ("fake0", "suspect")
    assert node["reason"].startswith("2 infrastructure failures in a row, the last: no READY "
                                     "within the launch timeout")


def test_the_launch_timeout_runs_from_when_slurm_runs_the_job(cluster_run, fake_cluster):
    """A job waits in Slurm's queue (the cluster is busy) for longer than the launch
    timeout: that wait is not counted; once Slurm runs it, it starts and completes, and
    its node is credited, not blamed."""
    (fake_cluster / "hold").touch()
    run = cluster_run(launch_timeout_s=2)
    job_id = submit(run, "queued", "exit 0")
    wait_for(lambda: "waiting in Slurm: Priority" in (run.job(job_id) or {}).get("reason", ""),
             timeout=TIMEOUT_S, message="the job pending in Slurm")
    waited = time.monotonic() + 3  # the launch timeout passes while it waits in the queue
    wait_for(lambda: time.monotonic() > waited, timeout=TIMEOUT_S, message="time to pass")
    assert run.job(job_id)["state"] == "running"  # admitted; Slurm holds it
    (fake_cluster / "hold").unlink()
    doc = run.wait_state(job_id, "completed", timeout=TIMEOUT_S)
    assert len(doc["attempts"]) == 1 and doc["exit_code"] == 0
    node = wait_for(lambda: (n := run.status()["nodes"]) and n[0], timeout=TIMEOUT_S,
                    message="fake0 in status")
    assert (node["node"], node["state"], node["consecutive_failures"]) == ("fake0", "online", 0)
