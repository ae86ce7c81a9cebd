"""A stop of a Slurm run without a live coordinator (backends/slurm/stop.py, R-DIST-4),
against the fake cluster of tests/slurm/fake/cluster (its sbatch really runs the batch
script): ABORT for what has not started, scancel for every job of the run, and the
cluster the coordinator recorded, whatever the environment of the stop. The same on a
real Slurm, through a killed coordinator: test_coordinator_slurm.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from praxist_fs.adapters.fsio import dumps, write_atomic
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends.slurm.client import SlurmClient, run_tag
from praxist_fs.backends.slurm.config import parse_slurm_config
from praxist_fs.backends.slurm.stop import end_run_in_slurm, record_cluster
from praxist_fs.stopper import fenced_reason

CPU = {"name": "cpu", "accelerator": "cpu", "gpu_count": 0}


def fake_sbatch(name: str) -> str:
    return subprocess.run(["sbatch", "--parsable", "-J", name, "-o", "/dev/null", "--wrap",
                           "sleep 60"], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()


@pytest.fixture
def layout(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    return layout


def test_a_fenced_slurm_run_aborts_what_has_not_started_and_cancels_every_job(
        layout, fake_cluster, monkeypatch):
    """Two attempts wait in Slurm (the cluster is busy: ``hold``), GO given to one of them;
    a job of the run the journal never named waits too; another user's job does not
    belong to the run. The stop writes ABORT into both attempt directories, cancels the
    three jobs of the run, leaves the other alone, and says so."""
    (fake_cluster / "hold").touch()
    config = parse_slurm_config({"default_resources": {"cpus": 1, "mem_mb": 64}})
    record_cluster(layout, config)
    client = SlurmClient(config, layout.root)
    ids = {}
    for job in ("j1", "j2"):
        attempt = layout.attempt_dir(job, "a1")
        attempt.mkdir(parents=True)
        ids[job] = client.submit(attempt, job, "a1", CPU, None, [])
    client.release(layout.attempt_dir("j1", "a1"), go=True)
    stray = fake_sbatch(f"px-{run_tag(layout.root)}-lost-a1")
    other = fake_sbatch("someone-elses")
    said = end_run_in_slurm(layout, timeout=30)
    assert said == {"aborted": ["j1/a1", "j2/a1"],
                    "cancelled": {ids["j1"]: "CANCELLED", ids["j2"]: "CANCELLED",
                                  stray: "CANCELLED"}}
    assert client.poll([other])[other].state == "PENDING"
    for job in ("j1", "j2"):
        assert (layout.attempt_dir(job, "a1") / "ABORT").exists()
    subprocess.run(["scancel", other], timeout=30, check=True)


def test_the_stop_asks_the_cluster_the_coordinator_submitted_to(layout, fake_slurm,
                                                                monkeypatch):
    """``slurm.json`` names the coordinator's SLURM_CONF: the stop's Slurm commands use it,
    not the one in the environment of whoever runs the stop."""
    monkeypatch.setenv("SLURM_CONF", "/site/coordinators.conf")
    record_cluster(layout, parse_slurm_config({}))
    monkeypatch.setenv("SLURM_CONF", "/home/me/other.conf")
    fake_slurm.answer("squeue", out=f"7|px-{run_tag(layout.root)}-j-a1|PENDING|Priority|\n"
                                    "8|px-0000beef-j-a1|PENDING|Priority|\n")
    with pytest.raises(RuntimeError, match="Slurm jobs still active 0 s after scancel: 7$"):
        end_run_in_slurm(layout, timeout=0)  # the fake's squeue says it waits still
    assert [call["argv"] for call in fake_slurm.calls("scancel")] == [["7"]]
    assert {call["slurm_conf"] for call in fake_slurm.calls()} == {"/site/coordinators.conf"}


def test_a_run_no_slurm_coordinator_served_is_not_asked_of_slurm(layout, monkeypatch):
    """No ``slurm.json``: a local run; Slurm is not asked (none may be installed)."""
    monkeypatch.setenv("PATH", "/nonexistent")
    layout.attempt_dir("j1", "a1").mkdir(parents=True)
    assert end_run_in_slurm(layout, timeout=30) is None
    assert not (layout.attempt_dir("j1", "a1") / "ABORT").exists()


def test_a_slurm_that_does_not_answer_fails_the_stop_with_the_reason(layout, tmp_path,
                                                                     monkeypatch):
    """squeue missing (or slurmctld down): the stop cannot know the run's jobs ended, so
    it fails with why; ``praxist-fs stop`` lists the run in ``failed_run_ids``."""
    record_cluster(layout, parse_slurm_config({"command_timeout_s": 1}))
    layout.journal.touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RuntimeError, match="Slurm did not answer"):
        end_run_in_slurm(layout, timeout=5)
    done = subprocess.run([sys.executable, "-m", "praxist_fs", "stop", "--timeout", "5",
                           str(layout.root)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": str(tmp_path / "empty")})
    assert done.returncode == 1, done.stderr
    assert "Slurm did not answer" in done.stdout
    assert (layout.scheduler / "STOP").exists()  # fenced all the same


def test_fenced_reason(layout):
    """What the next coordinator journals with the stop: what the fence did in Slurm."""
    assert fenced_reason(layout) == "stopped by praxist-fs stop"
    ids = {str(n): "CANCELLED" for n in range(100, 112)}
    write_atomic(layout.stop_sentinel, dumps({"stopped_at": 1.0, "slurm": {
        "aborted": ["j1/a1"], "cancelled": ids}}))
    assert fenced_reason(layout) == (
        "stopped by praxist-fs stop without a coordinator: ABORT for 1 attempt(s) not "
        "started, scancel of 12 Slurm job(s) (100, 101, 102, 103, 104, 105, 106, 107, 108, "
        "109 and 2 more)")
