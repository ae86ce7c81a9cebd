"""The Slurm backend's pure parts: job names, sbatch's arguments, parsing squeue and
sacct, the state mapping, and the task file's ``slurm`` mapping (SPEC R-DIST-1)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from praxist_fs.backends.slurm.client import (
    ENTRY,
    FinalExit,
    SlurmState,
    job_name,
    outcome,
    parse_sacct,
    parse_squeue,
    sbatch_argv,
)
from praxist_fs.backends.slurm.config import SlurmConfig, parse_slurm_config
from praxist_fs.errors import PolicyError

GPU = {"name": "gpu_work", "accelerator": "gpu", "gpu_count": 1, "gpu_memory_gb": None,
       "gpu_utilization_pct": None}
SHARED = {"name": "shared", "accelerator": "gpu", "gpu_count": 1, "gpu_memory_gb": 8.0,
          "gpu_utilization_pct": 30.0}
CPU = {"name": "cpu_ordinary", "accelerator": "cpu", "gpu_count": 0}


def test_job_name_is_deterministic_slurm_safe_and_per_run(tmp_path):
    """R-DIST-1: the same attempt always gets the same name (found again after a crash
    between sbatch and the journal); two runs never share one. Issue 28: it starts with
    the job id (the tag's start), what plain squeue's 8 characters of name show."""
    run = tmp_path / "run"
    name = job_name(run, "job 1|x", "a1")
    run8 = hashlib.sha256(str(run).encode()).hexdigest()[:8]
    assert name == f"job_1_x-a1-px{run8}"
    assert job_name(run, "job 1|x", "a1") == name
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
    assert job_name(tmp_path / "other", "job 1|x", "a1") != name


def test_sbatch_argv_of_a_gpu_profile(tmp_path):
    """R-DIST-1: one sbatch, never requeued, named, commented, in the attempt directory,
    with the profile's GPUs, CPUs and memory."""
    config = parse_slurm_config({"partition": "gpu", "account": "lab", "qos": "normal",
                                 "extra_args": ["--constraint=a100"],
                                 "resources": {"gpu_work": {"cpus": 8, "mem_mb": 32000}}})
    attempt = tmp_path / "a1"
    argv = sbatch_argv(config, "px-1-j-a", "praxist:1:j:a", attempt, GPU, None, ["n2", "n1"])
    assert argv == ["sbatch", "--parsable", "--no-requeue", "-J", "px-1-j-a",
                    "--comment", "praxist:1:j:a", "-D", str(attempt),
                    "-o", str(attempt / "slurm.out"), "--open-mode=append", "--gpus=1",
                    "-c", "8", "--mem=32000M", "-p", "gpu", "-A", "lab", "--qos", "normal",
                    "--constraint=a100", "--exclude=n1,n2", str(attempt / ENTRY), str(attempt)]


def test_a_job_submitted_before_any_node_passed_its_probe_is_held(tmp_path):
    """Issue 28: ``--hold`` (released once a node has passed its first probe), and no
    ``--exclude``, which could name every node of the partition."""
    config = parse_slurm_config({"probe_new_nodes": True})
    argv = sbatch_argv(config, "px-1-j-a", "c", tmp_path, CPU, None, [], hold=True)
    assert argv[-3] == "--hold" and not any(a.startswith("--exclude") for a in argv)
    assert "--hold" not in sbatch_argv(config, "px-1-j-a", "c", tmp_path, CPU, None, [])
    assert not parse_slurm_config({}).probe_new_nodes  # asked for: one job per new node


@pytest.mark.parametrize("profile, shards, expected", [
    (CPU, 0, []),
    (GPU, 0, ["--gpus=1"]),
    ({**GPU, "gpu_count": 4}, 4, ["--gpus=4"]),
    (SHARED, 0, ["--gpus=1"]),  # fractional demand, but no shards configured: a whole GPU
    (SHARED, 4, ["--gres=shard:2"]),  # 30 % of 4 shards, rounded up
    ({**SHARED, "gpu_utilization_pct": 100.0}, 4, ["--gpus=1"]),
])
def test_gpu_demand_becomes_gpus_or_shards(tmp_path, profile, shards, expected):
    """R-DIST-1 "sbatch with GPU GRES": fractional demand takes shards only where the
    site configured them."""
    argv = sbatch_argv(SlurmConfig(gpu_shards=shards), "n", "c", tmp_path, profile, None, [])
    assert [arg for arg in argv if arg.startswith(("--gpus", "--gres"))] == expected


@pytest.mark.parametrize("config, eta, minutes", [
    (SlurmConfig(), 600.0, None),
    (SlurmConfig(time_limit_minutes=30), None, "30"),
    (SlurmConfig(time_limit_minutes=30, time_limit_factor=2.0), 601.0, "21"),
    (SlurmConfig(time_limit_factor=2.0), None, None),
])
def test_time_limit_from_the_eta(tmp_path, config, eta, minutes):
    argv = sbatch_argv(config, "n", "c", tmp_path, CPU, eta, [])
    assert (argv[argv.index("-t") + 1] if "-t" in argv else None) == minutes


def test_parse_squeue_skips_what_it_cannot_read():
    text = ("12|px-a|PENDING|Resources|\n"
            "garbage line\n"
            "|px-b|RUNNING|None|ci0\n"
            "13|px-b|RUNNING|None|ci0\n"
            "14|px-c|CANCELLED by 0|None|ci0\n")
    assert parse_squeue(text) == {
        "12": SlurmState("12", "px-a", "PENDING", "Resources", ""),
        "13": SlurmState("13", "px-b", "RUNNING", "None", "ci0"),
        "14": SlurmState("14", "px-c", "CANCELLED", "None", "ci0")}


def test_parse_sacct_takes_the_last_record_of_the_id():
    """Ids get reused (a wiped StateSaveLocation): the jobcomp file's last record wins."""
    text = "JobID|State|ExitCode\n7|COMPLETED|0:0\n71|FAILED|1:0\n7|FAILED|4:0\n8|x|y\n"
    assert parse_sacct(text, "7") == FinalExit("FAILED", 4, 0)
    assert parse_sacct(text, "8") is None
    assert parse_sacct("", "7") is None


def running(state, reason="None"):
    return SlurmState("5", "px", state, reason, "ci0")


@pytest.mark.parametrize("state, exit_json, asked, expected", [
    (running("PENDING", "Resources"), None, None, ("launching", "waiting in Slurm: Resources")),
    (running("PENDING"), None, None, ("launching", "waiting in Slurm: PENDING")),  # no reason yet
    (running("RUNNING"), None, None, ("running", "Slurm RUNNING")),
    (running("COMPLETED"), {"exit_code": 0}, None, ("exited", "exit 0")),
    (running("FAILED"), {"exit_code": 3}, None, ("exited", "exit 3")),
    (running("FAILED"), {"exit_code": 137}, None, ("exited", "exit 137")),
    (running("TIMEOUT"), {"exit_code": 143}, None, ("exited", "exit 143 (Slurm TIMEOUT)")),
    (running("OUT_OF_MEMORY"), None, None, ("failed", "Slurm OUT_OF_MEMORY without exit.json")),
    (running("CANCELLED"), {"exit_code": 143}, None, ("failed", "cancelled outside praxist_fs")),
    (running("CANCELLED"), {"exit_code": 143}, "cancel", ("cancelled", "cancelled (cancel)")),
    (running("CANCELLED"), None, "stop", ("cancelled", "cancelled (stop)")),
    (running("CANCELLED"), None, "preempt", ("preempted", "preempted (Slurm job ended)")),
    (running("CANCELLED"), {"exit_code": 0}, "cancel", ("exited", "exit 0")),
    (running("FAILED"), {"exit_code": 143}, "stop", ("cancelled", "cancelled (stop)")),
    (running("FAILED"), {"exit_code": 143}, "preempt", ("preempted", "preempted (Slurm job ended)")),
    (running("RUNNING"), {"exit_code": 143}, "stop", ("cancelled", "cancelled (stop)")),
    (running("RUNNING"), {"exit_code": 1}, None, ("exited", "exit 1")),
    (running("NODE_FAIL"), None, None, ("infrastructure", "Slurm NODE_FAIL")),
    (running("NODE_FAIL"), {"exit_code": 1}, None, ("infrastructure", "Slurm NODE_FAIL")),
    (running("BOOT_FAIL"), {"exit_code": 0}, None, ("exited", "exit 0")),
    (None, {"exit_code": 2}, None, ("exited", "exit 2")),
    (None, None, None, ("lost", "unknown to Slurm and no exit.json")),
    (running("SOMETHING_NEW"), None, None,
     ("running", "Slurm state SOMETHING_NEW (not recognised)")),
    (running("COMPLETED"), {"exit_code": "0"}, None, ("failed", "Slurm COMPLETED without exit.json")),
])
def test_state_mapping(state, exit_json, asked, expected):
    """R-DIST-1: what Slurm says, read against exit.json and what praxist_fs asked; an
    unknown state or a missing job is never taken for success."""
    assert outcome(state, exit_json, asked) == expected


def test_a_scancel_before_ready_is_a_cancel_not_a_failure():
    """Issue 28: a job scancel-ed while pending in Slurm (its shim never wrote READY, so
    its command never ran) is cancelled, not failed; once READY exists, failed."""
    assert outcome(running("CANCELLED"), None, None, ready=False) == (
        "cancelled", "cancelled in Slurm while pending")
    assert outcome(running("CANCELLED"), None, None, ready=True) == (
        "failed", "cancelled outside praxist_fs")


def test_running_without_ready_is_still_launching():
    assert outcome(running("RUNNING"), None, None, ready=False) == (
        "launching", "started in Slurm, waiting for READY")


def test_config_defaults_and_values():
    assert parse_slurm_config(None) == SlurmConfig()
    config = parse_slurm_config({"time_limit_factor": 1.5, "gpu_shards": 4,
                                 "poll_running_s": 30, "default_resources": {"cpus": 2}},
                                profiles=("gpu_work",))
    assert (config.time_limit_factor, config.gpu_shards, config.poll_running_s) == (1.5, 4, 30.0)
    assert config.for_profile("gpu_work").cpus == 2
    assert config.for_profile("gpu_work").mem_mb == 1024


@pytest.mark.parametrize("raw, key_path, expected", [
    ([], "compute_budget.resource_scheduler.slurm", "a mapping of Slurm settings"),
    ({"partiton": "gpu"}, "compute_budget.resource_scheduler.slurm.partiton", "one of the keys"),
    ({"partition": "a b"}, "compute_budget.resource_scheduler.slurm.partition",
     "a partition name"),
    ({"extra_args": "--x"}, "compute_budget.resource_scheduler.slurm.extra_args",
     "a list of sbatch options"),
    ({"extra_args": ["--constraint=x", "--requeue"]},
     "compute_budget.resource_scheduler.slurm.extra_args[1]", "does not set itself"),
    ({"extra_args": ["-J=x"]}, "compute_budget.resource_scheduler.slurm.extra_args[0]",
     "does not set itself"),
    ({"time_limit_minutes": 0}, "compute_budget.resource_scheduler.slurm.time_limit_minutes",
     "an integer in 1..525600"),
    ({"time_limit_factor": True}, "compute_budget.resource_scheduler.slurm.time_limit_factor",
     "a number in 1..100"),
    ({"poll_pending_s": 0.0}, "compute_budget.resource_scheduler.slurm.poll_pending_s",
     "a number in 0.2..60"),
    ({"resources": {"nope": {"cpus": 1}}},
     "compute_budget.resource_scheduler.slurm.resources.nope", "a profile of the task"),
    ({"resources": {"gpu_work": {"cpus": 2.5}}},
     "compute_budget.resource_scheduler.slurm.resources.gpu_work.cpus", "an integer in 1..4096"),
    ({"resources": {"gpu_work": {"gpus": 2}}},
     "compute_budget.resource_scheduler.slurm.resources.gpu_work.gpus", "only the keys"),
    ({"python": "python3"}, "compute_budget.resource_scheduler.slurm.python", "absolute path"),
])
def test_config_errors_name_the_field(raw, key_path, expected):
    """A bad value names its key path and what was expected, as the rest of the task
    file does (R-CFG)."""
    with pytest.raises(PolicyError) as caught:
        parse_slurm_config(raw, profiles=("gpu_work",))
    assert caught.value.key_path == key_path
    assert expected in caught.value.expected


def test_entry_script_runs_the_slurm_shim_of_this_checkout(tmp_path):
    from praxist_fs.backends.slurm.client import PACKAGE_ROOT, entry_script

    script = entry_script("/opt/py/bin/python3").decode()
    assert script.startswith("#!/bin/sh\n")
    assert "exec /opt/py/bin/python3 -S -c " in script
    assert str(PACKAGE_ROOT) in script and (Path(PACKAGE_ROOT) / "praxist_fs").is_dir()


def test_an_attempt_ended_by_its_node_reads_so_in_logs_and_launch():
    """``logs``' header and ``launch``'s retry line say why an attempt ended by a failure
    of its node, then the command's own end, not an exit 75 it never had."""
    from praxist_fs.commands.render import describe_end
    base = {"ended_at": 2.0, "signal": None, "outcome": "infra_retry"}
    assert describe_end({**base, "exit_code": 143, "signal": 15,
                         "infrastructure": "Slurm NODE_FAIL on node ci0"}) == \
        "Slurm NODE_FAIL on node ci0, killed by signal 15"
    assert describe_end({**base, "exit_code": None,
                         "infrastructure": "Slurm NODE_FAIL on node ci0"}) == \
        "Slurm NODE_FAIL on node ci0"
    assert describe_end({**base, "exit_code": 3}) == "exit 3"


def slurm_attempt(launched_at, ended_at, **handle):
    return {"attempt_id": "a1", "started_at": launched_at, "ended_at": ended_at,
            "handle": {"backend": "slurm", "job_id": "431", **handle}}


def test_jobs_count_wall_from_the_commands_start_and_show_slurms_id_and_node():
    """Issue 28: WALL on Slurm runs from the command's start (READY), not from the launch
    decision (Slurm's queue is not run time); an attempt cancelled while it waited in
    Slurm has none; ``jobs`` gains SLURM and NODE columns when a job ran there."""
    from praxist_fs.commands.render import format_jobs, job_row
    ran = job_row({"job_id": "j1", "state": "completed", "attempts": [slurm_attempt(
        100.0, 160.0, node="ci0", started_at=150.0)]}, now=200.0)
    assert (ran["wall_s"], ran["slurm_job_id"], ran["node"]) == (10.0, "431", "ci0")
    waited = job_row({"job_id": "j2", "state": "cancelled",
                      "attempts": [slurm_attempt(100.0, 130.0)]}, now=200.0)
    assert (waited["wall_s"], waited["node"]) == (None, None)
    local = job_row({"job_id": "j3", "state": "completed", "attempts": [
        {"attempt_id": "a1", "started_at": 100.0, "ended_at": 104.0}]}, now=200.0)
    assert (local["wall_s"], local["slurm_job_id"]) == (4.0, None)
    header = format_jobs([ran, waited], 2, 200.0).splitlines()[0].split()
    assert header[-4:] == ["WALL", "SLURM", "NODE", "REASON"]
    assert "SLURM" not in format_jobs([local], 1, 200.0)  # a local run's table is as it was
