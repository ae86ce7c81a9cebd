"""The Slurm backend against fake sbatch/squeue/scancel/sacct on PATH (tests/slurm/fake),
which record their argv: what praxist_fs asks Slurm, and how it reads the answers
(SPEC R-DIST-1)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from praxist_fs.backends.slurm.client import (
    ENTRY,
    FinalExit,
    SlurmClient,
    SlurmRefused,
    SlurmState,
    SlurmUnavailable,
    run_tag,
)
from praxist_fs.backends.slurm.config import SlurmConfig, parse_slurm_config
from tests.conftest import UNAVAILABLE
from tests.slurm.conftest import HERE

CPU = {"name": "cpu_ordinary", "accelerator": "cpu", "gpu_count": 0}


@pytest.fixture
def backend(tmp_path, fake_slurm, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/site/slurm.conf")
    return SlurmClient(parse_slurm_config({"command_timeout_s": 2}), tmp_path / "run")


def test_submit_runs_one_sbatch_with_the_coordinators_environment(backend, fake_slurm, tmp_path):
    """R-DIST-1: one ``sbatch --parsable --no-requeue`` per attempt; SLURM_CONF of the
    coordinator's environment selects the cluster; the batch script is the shim."""
    fake_slurm.answer("sbatch", out="4242;ci\n")
    attempt = tmp_path / "run" / "attempts" / "j1" / "a1"
    assert backend.submit(attempt, "j1", "a1", CPU, None, []) == "4242"
    [call] = fake_slurm.calls("sbatch")
    assert call["slurm_conf"] == "/etc/site/slurm.conf"
    assert call["argv"][:4] == ["--parsable", "--no-requeue", "-J", backend.job_name("j1", "a1")]
    assert call["argv"][-2:] == [str(attempt / ENTRY), str(attempt)]
    assert (attempt / ENTRY).read_text().startswith("#!/bin/sh\n")


def test_a_refused_job_raises_with_sbatchs_message(backend, fake_slurm, tmp_path):
    """R-DIST-1: what Slurm refuses fails with sbatch's own words."""
    message = ("sbatch: error: Batch job submission failed: "
               "Requested node configuration is not available")
    fake_slurm.answer("sbatch", err=message + "\n", rc=1)
    with pytest.raises(SlurmRefused, match="Requested node configuration is not available"):
        backend.submit(tmp_path / "a", "j", "a", CPU, None, [])


def test_an_sbatch_that_does_not_answer_is_unavailable_not_refused(tmp_path, fake_slurm):
    """A down slurmctld blocks sbatch: after the timeout, the job may or may not exist
    (the caller then finds it by name), so it is not a refusal."""
    backend = SlurmClient(SlurmConfig(command_timeout_s=1.0), tmp_path / "run")
    fake_slurm.answer("sbatch", out="1\n", hang=5)
    started = time.monotonic()
    with pytest.raises(SlurmUnavailable, match="no answer in 1 s"):
        backend.submit(tmp_path / "a", "j", "a", CPU, None, [])
    assert time.monotonic() - started < 4


def test_sbatch_printing_no_id_is_unavailable(backend, fake_slurm, tmp_path):
    fake_slurm.answer("sbatch", out="Submitted somewhere\n")
    with pytest.raises(SlurmUnavailable, match="no job id"):
        backend.submit(tmp_path / "a", "j", "a", CPU, None, [])


def test_poll_asks_once_for_all_ids(backend, fake_slurm):
    """One batched squeue per tick; an id missing from the answer is unknown to Slurm."""
    fake_slurm.answer("squeue", out="11|px-a|RUNNING|None|ci0\n12|px-b|PENDING|Priority|\n"
                                    "99|px-z|RUNNING|None|ci0\n")
    states = backend.poll(["11", "12", "13", "bad;id"])
    assert [call["argv"] for call in fake_slurm.calls("squeue")] == [
        ["--states=all", "-h", "-o", "%i|%j|%T|%r|%N", "-j", "11,12,13"]]
    assert states == {"11": SlurmState("11", "px-a", "RUNNING", "None", "ci0"),
                      "12": SlurmState("12", "px-b", "PENDING", "Priority", "")}
    assert backend.poll([]) == {} and len(fake_slurm.calls("squeue")) == 1


def test_poll_of_a_purged_id_is_empty_but_a_failure_is_not(backend, fake_slurm):
    fake_slurm.answer("squeue", err="slurm_load_jobs error: Invalid job id specified\n", rc=1)
    assert backend.poll(["11"]) == {}
    fake_slurm.answer("squeue", err="slurm_load_jobs error: Unable to contact slurm "
                                    "controller (connect failure)\n", rc=1)
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        backend.poll(["11"])


def test_find_by_name_never_by_id_alone(backend, fake_slurm):
    """A crash between sbatch and the journal: the job is found again by its name, or by
    the name versions before issue 28 gave (a job submitted before an upgrade)."""
    name, legacy = backend.job_name("j1", "a1"), f"px-{run_tag(backend.run_dir)}-j1-a1"
    assert name == f"j1-a1-px{run_tag(backend.run_dir)}"  # squeue's 8 characters: the tag
    fake_slurm.answer("squeue", out=f"7|px-other|RUNNING\n8|{name}|PENDING\n9|{name}|RUNNING\n")
    assert backend.find_attempt("j1", "a1") == ("9", name)
    assert fake_slurm.calls("squeue")[0]["argv"] == [
        "--me", "--states=all", "-h", "-n", f"{name},{legacy}", "-o", "%i|%j|%T"]
    fake_slurm.answer("squeue", out=f"7|px-other|RUNNING\n4|{legacy}|RUNNING\n")
    assert backend.find_attempt("j1", "a1") == ("4", legacy)
    fake_slurm.answer("squeue", out="7|px-other|RUNNING\n")
    assert backend.find_attempt("j1", "a1") is None


def test_the_jobs_of_this_run_only(backend, fake_slurm, tmp_path):
    """What a stop sweeps: this run's jobs by their name (either spelling), not another
    run's, nor a node's probe."""
    mine = backend.job_name("j1", "a1")
    legacy = f"px-{run_tag(backend.run_dir)}-j2-a1"
    theirs = SlurmClient(SlurmConfig(), tmp_path / "other").job_name("j1", "a1")
    fake_slurm.answer("squeue", out=f"5|{mine}|RUNNING|None|ci0\n6|{theirs}|RUNNING|None|ci0\n"
                                    "7|train.sh|PENDING|Priority|\n"
                                    f"8|{legacy}|PENDING|Priority|\n"
                                    f"9|pxprobe-{run_tag(backend.run_dir)}-ci0|PENDING|None|\n")
    assert backend.jobs_of_run() == {"5": SlurmState("5", mine, "RUNNING", "None", "ci0"),
                                     "8": SlurmState("8", legacy, "PENDING", "Priority", "")}
    fake_slurm.answer("squeue", err="squeue: error: Unable to contact slurm controller\n", rc=1)
    with pytest.raises(SlurmUnavailable, match="Unable to contact"):
        backend.jobs_of_run()


def test_final_exit_from_the_job_completion_record(backend, fake_slurm):
    fake_slurm.answer("sacct", out="JobID|State|ExitCode\n21|FAILED|4:0\n")
    assert backend.final_exit("21") == FinalExit("FAILED", 4, 0)
    assert fake_slurm.calls("sacct")[0]["argv"] == [
        "-c", "-j", "21", "-o", "JobID,State,ExitCode", "-P"]
    fake_slurm.answer("sacct", err="Slurm accounting storage is disabled\n", rc=1)
    assert backend.final_exit("21") is None


def test_signal_reaches_every_process_and_cancel_is_plain(backend, fake_slurm):
    assert backend.signal("31", signal.SIGTERM) is True
    assert backend.cancel("31") is True
    fake_slurm.answer("scancel", err="scancel: error: Kill job error on job id 31\n", rc=1)
    assert backend.cancel("31") is False
    assert [call["argv"] for call in fake_slurm.calls("scancel")] == [
        ["--full", "--signal=TERM", "31"], ["31"], ["31"]]


def test_release_writes_go_or_abort(backend, tmp_path):
    """The barrier by files: nothing but the directory reaches another node."""
    go, abort = tmp_path / "go", tmp_path / "abort"
    go.mkdir(), abort.mkdir()
    backend.release(go, True)
    backend.release(abort, False)
    assert sorted(p.name for p in go.iterdir()) == ["GO"]
    assert sorted(p.name for p in abort.iterdir()) == ["ABORT"]


def test_capabilities():
    """Suspend-style preemption is unavailable on Slurm; Slurm places the GPUs."""
    assert SlurmClient.can_suspend is False and SlurmClient.places_gpus is True


def test_setup_without_root_says_why_it_cannot(tmp_path):
    """Where Slurm cannot be had, setup.sh exits 77 with the reason, which the
    ``real_slurm`` fixture turns into a skip that says it (never a silent one).

    As root it runs as ``nobody``, reading the script on its standard input from a
    descriptor root opened: a clone under a directory ``nobody`` cannot enter (any of
    root's under /root, or a ``mktemp -d``) cannot be run from its path."""
    script = HERE / "setup.sh"
    argv = ["sh", "-s"]
    if os.getuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("root without runuser: cannot run setup.sh as another user")
        argv = [runuser, "-u", "nobody", "--", *argv]
    with open(script) as stdin:
        done = subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=60,
                              check=False, cwd="/",
                              env={"PATH": os.defpath, "PRAXIST_SLURM_DIR": str(tmp_path / "s")})
    assert done.returncode == UNAVAILABLE, done.stderr
    assert "needs root" in done.stderr
