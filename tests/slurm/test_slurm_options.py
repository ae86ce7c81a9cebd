"""Per-job Slurm options (SPEC R-DIST-2): a request's ``slurm`` object, a profile's
defaults, the task file's allowlist and warning signal, what sbatch is asked, and
``launch``'s flags. Against the real Slurm: test_coordinator_slurm.py."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from praxist_fs.backends.slurm.backend import SlurmBackend
from praxist_fs.backends.slurm.client import refused_placements, sbatch_argv
from praxist_fs.backends.slurm.config import parse_slurm_config
from praxist_fs.commands.slurm_flags import megabytes, minutes
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.core.policy import Profile
from praxist_fs.core.request import parse_request
from praxist_fs.errors import BadRequest, PolicyError
from tests.core.helpers import Harness, make_policy
from tests.e2e.conftest import SLURM_CPU, make_run  # noqa: F401 (fixture)

CPU = {"name": "cpu", "accelerator": "cpu", "gpu_count": 0}


def argv_of(config: dict, requested: dict | None = None, profile=CPU, eta=None) -> list[str]:
    return sbatch_argv(parse_slurm_config(config, ("cpu", "big")), "px-x", "c", Path("/a"),
                       profile, eta, [], requested)[:-2]


def pairs(argv: list[str]) -> dict[str, str]:
    """``-t 90`` and ``--mem=2M`` alike, by option."""
    found, rest = {}, list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if "=" in arg:
            found[arg.split("=", 1)[0]] = arg.split("=", 1)[1]
        elif rest and not rest[0].startswith("-"):
            found[arg] = rest.pop(0)
        else:
            found[arg] = ""
    return found


def test_a_requests_options_over_its_profiles_over_the_runs():
    """What sbatch is asked: the request's own, over the profile's defaults
    (``resources.<profile>``), over the run-wide keys; sbatch options the profile and
    the request pass come last, the request's after the profile's."""
    config = {"partition": "main", "account": "lab", "time_limit_minutes": 60,
              "extra_args": ["--nice=1"], "allowed_options": ["--nice", "--exclusive"],
              "resources": {"big": {"cpus": 8, "mem_mb": 64000, "partition": "gpu",
                                    "constraint": "a100", "time_limit_minutes": 600,
                                    "options": ["--exclusive"]}}}
    run_wide = pairs(argv_of(config))
    assert (run_wide["-p"], run_wide["-A"], run_wide["-t"], run_wide["--mem"]) == (
        "main", "lab", "60", "1024M")
    assert run_wide["--signal"] == "B:USR2@90"  # a time limit comes with its warning
    assert "--constraint" not in run_wide and "--qos" not in run_wide
    big = argv_of(config, profile={**CPU, "name": "big"})
    assert pairs(big)["-p"] == "gpu" and pairs(big)["-t"] == "600"
    assert pairs(big)["--constraint"] == "a100" and pairs(big)["--mem"] == "64000M"
    asked = argv_of(config, {"time_limit_minutes": 5, "partition": "debug", "qos": "high",
                             "mem_mb": 2048, "constraint": "a100&ib", "warning_seconds": 30,
                             "options": ["--nice=5"]}, profile={**CPU, "name": "big"})
    shown = pairs(asked)
    assert (shown["-t"], shown["-p"], shown["-A"], shown["--qos"], shown["--mem"]) == (
        "5", "debug", "lab", "high", "2048M")
    assert (shown["--constraint"], shown["--signal"]) == ("a100&ib", "B:USR2@30")
    assert asked[-3:] == ["--nice=1", "--exclusive", "--nice=5"]  # extra_args, profile, request


def test_no_time_limit_no_warning_and_a_warning_can_be_turned_off():
    assert "--signal" not in pairs(argv_of({}))  # the partition's limit: nothing to warn of
    assert "--signal" not in pairs(argv_of({}, {"time_limit_minutes": 5,
                                                "warning_seconds": 0}))
    assert pairs(argv_of({"warning_signal": "USR1", "warning_seconds": 120},
                         {"time_limit_minutes": 5}))["--signal"] == "B:USR1@120"


@pytest.mark.parametrize("slurm, field, words", [
    ("fast", "slurm", "expected an object of Slurm options"),
    ({"time": 5}, "slurm.time", "one of the keys time_limit_minutes"),
    ({"time_limit_minutes": 0}, "slurm.time_limit_minutes", "an integer from 1 to 525600"),
    ({"time_limit_minutes": True}, "slurm.time_limit_minutes", "an integer"),
    ({"partition": "gpu nodes"}, "slurm.partition", "a name matching"),
    ({"constraint": "a100 ib"}, "slurm.constraint", "a Slurm feature expression"),
    ({"mem_mb": -1}, "slurm.mem_mb", "an integer from 1"),
    ({"options": "--exclusive"}, "slurm.options", "a list of sbatch options"),
    ({"options": ["-w node1"]}, "slurm.options[0]", "--name or --name=value"),
    ({"options": ["--x", "--comment=a\nb"]}, "slurm.options[1]", "printable"),
])
def test_a_bad_slurm_object_is_rejected_naming_the_field(slurm, field, words):
    with pytest.raises(BadRequest) as caught:
        parse_request("r.json", json.dumps({"peer": "p", "tag": "t", "argv": ["x"],
                                            "slurm": slurm}).encode())
    assert caught.value.field == field and words in caught.value.problem


def test_the_core_takes_only_what_the_task_allows():
    """A request's Slurm options on a run that is not on Slurm, or an sbatch option the
    task file does not allow, are rejected by name; allowed ones are kept and shown in
    the job file."""
    local = Harness(make_policy())
    reply = local.submit("t1", slurm={"partition": "gpu"})
    assert (reply["outcome"], reply["field"]) == ("rejected", "slurm")
    assert "slurm options need backend: slurm" in reply["problem"]
    on_slurm = Harness(make_policy(backend="slurm", capabilities=SlurmBackend.capabilities,
                                   max_concurrent_experiments=2,
                                   slurm={"allowed_options": ["--exclusive"]}))
    reply = on_slurm.submit("t2", slurm={"options": ["--exclusive", "--nice=5"]})
    assert (reply["outcome"], reply["field"]) == ("rejected", "slurm.options[1]")
    assert reply["problem"] == ("--nice is not allowed by the task file (slurm."
                                "allowed_options: --exclusive)")
    reply = on_slurm.submit("t3", slurm={"options": ["--exclusive"], "time_limit_minutes": 5})
    assert reply["outcome"] == "accepted"
    assert on_slurm.job(reply["job_id"])["slurm"] == {"options": ["--exclusive"],
                                                      "time_limit_minutes": 5}


TASK = SLURM_CPU + "    slurm:\n"


@pytest.mark.parametrize("slurm, key, expected", [
    ("{allowed_options: [--time]}", "slurm.allowed_options[0]", "does not set itself"),
    ("{allowed_options: [--constraint]}", "slurm.allowed_options[0]", "its own key"),
    ("{allowed_options: [-w]}", "slurm.allowed_options[0]", "long name"),
    ("{warning_signal: KILL}", "slurm.warning_signal", "one of USR1, USR2"),
    ("{warning_seconds: -1}", "slurm.warning_seconds", "an integer in 0..86400"),
    ("{resources: {cpu: {partition: 'a b'}}}", "slurm.resources.cpu.partition",
     "a name matching"),
    ("{resources: {cpu: {time: 5}}}", "slurm.resources.cpu.time", "only the keys cpus"),
    ("{notify_host: 'head node'}", "slurm.notify_host", "a host name or an IP address"),
])
def test_the_task_files_slurm_keys_are_checked_by_name(slurm, key, expected):
    with pytest.raises(PolicyError) as caught:
        policy_from_mapping(parse_task_text(TASK.replace("    slurm:\n", f"    slurm: {slurm}\n"),
                                            "task.yaml"))
    assert f"compute_budget.resource_scheduler.{key}" in str(caught.value)
    assert expected in str(caught.value)


def test_sbatch_time_and_memory_spellings():
    assert [minutes(t) for t in ("90", "1:30", "1:30:00", "2-0", "1-2:3", "0:0:1")] == [
        90, 2, 90, 2880, 1563, 1]
    assert [megabytes(m) for m in ("4000", "500M", "64G", "512K", "1T")] == [
        4000, 500, 65536, 1, 1048576]
    for bad in ("", "1h", "0", "-5", "1:2:3:4"):
        with pytest.raises(argparse.ArgumentTypeError):
            minutes(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        megabytes("lots")


def test_serve_finds_what_slurm_refuses_before_any_job(fake_slurm, tmp_path):
    """``sbatch --test-only`` once per partition, account and QOS the task sets (run-wide
    and per profile): a refusal names the key and gives Slurm's words; a Slurm that does
    not answer refuses nothing."""
    config = parse_slurm_config({"partition": "main", "resources": {
        "cpu": {"partition": "nosuch"}, "big": {"mem_mb": 2}}}, ("cpu", "big"))
    fake_slurm.answer("sbatch", err="sbatch: error: invalid partition specified: nosuch\n"
                                    "allocation failure: Invalid partition name specified\n",
                      rc=1)
    refused = refused_placements(config, tmp_path)
    assert refused == [
        "compute_budget.resource_scheduler.slurm: Slurm refuses partition main: sbatch: "
        "error: invalid partition specified: nosuch allocation failure: Invalid partition "
        "name specified",
        "compute_budget.resource_scheduler.slurm.resources.cpu: Slurm refuses partition "
        "nosuch: sbatch: error: invalid partition specified: nosuch allocation failure: "
        "Invalid partition name specified"]
    assert [call["argv"][:3] for call in fake_slurm.calls("sbatch")] == [
        ["--test-only", "-c", "1"]] * 2  # "big" has main's placement: asked once
    fake_slurm.answer("sbatch", err="sbatch: error: Batch job submission failed: Unable to "
                                    "contact slurm controller (connect failure)\n", rc=1)
    assert refused_placements(config, tmp_path) == []


def test_launch_passes_its_slurm_flags(fake_cluster, make_run, tmp_path):
    """``praxist-fs launch --time 1:30:00 --partition p --mem 2G --constraint fast
    --sbatch-option=--nice=5``: the job's sbatch is asked exactly that."""
    run = make_run(task_text=TASK.replace("    slurm:\n", "    slurm: {allowed_options: [--nice], "
                                          "poll_pending_s: 0.2, poll_running_s: 1}\n"))
    run.start()
    done = subprocess.run(
        [sys.executable, "-m", "praxist_fs", "launch", "--run-dir", str(run.root), "--peer",
         "p", "--tag", "flags", "--time", "1:30:00", "--partition", "p", "--mem", "2G",
         "--constraint", "fast", "--warning-seconds", "60", "--sbatch-option=--nice=5",
         "--", "true"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    calls = map(json.loads, (fake_cluster / "calls.jsonl").read_text().splitlines())
    [asked] = [call["argv"] for call in calls
               if call["tool"] == "sbatch" and "--test-only" not in call["argv"]]
    shown = pairs(["sbatch", *asked[:-2]])
    assert (shown["-t"], shown["-p"], shown["--mem"], shown["--constraint"], shown["--nice"],
            shown["--signal"]) == ("90", "p", "2048M", "fast", "5", "B:USR2@60")
    refused = subprocess.run(
        [sys.executable, "-m", "praxist_fs", "launch", "--run-dir", str(run.root), "--peer",
         "p", "--tag", "refused", "--sbatch-option=--exclusive", "--", "true"],
        capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2
    assert ("rejected: slurm.options[0]: --exclusive is not allowed by the task file "
            "(slurm.allowed_options: --nice)") in refused.stderr


def test_a_job_of_several_processes_is_one_allocation_of_its_nodes_and_tasks():
    """R-DIST-3: ``nodes``, ``tasks_per_node``, ``gpus_per_node`` (else the profile's GPUs
    on each node) instead of the one process's ``--gpus``."""
    gpu = {"name": "cpu", "accelerator": "gpu", "gpu_count": 4}
    shown = pairs(argv_of({}, {"nodes": 2, "tasks_per_node": 4}, profile=gpu))
    assert (shown["--nodes"], shown["--ntasks-per-node"], shown["--gpus-per-node"]) == (
        "2", "4", "4")
    assert "--gpus" not in shown
    assert pairs(argv_of({}, {"nodes": 2, "gpus_per_node": 8}, profile=gpu))[
        "--gpus-per-node"] == "8"
    assert "--gpus-per-node" not in pairs(argv_of({}, {"nodes": 3}))  # CPU work
    assert "--nodes" not in pairs(argv_of({}, {"partition": "p"}))  # one process


def test_in_a_run_of_this_host_and_slurm_only_a_job_routed_to_slurm_takes_slurm_options():
    """Issue 28: Slurm options on a job whose profile runs on this host would be ignored;
    they are rejected naming the field, while a job routed to Slurm keeps them."""
    mixed = Harness(make_policy(
        backends={"slurm": SlurmBackend.capabilities}, slurm={},
        profiles={"cpu": Profile(name="cpu", accelerator="cpu"),
                  "big": Profile(name="big", accelerator="cpu", backend="slurm")}))
    here = mixed.submit("t1", profile="cpu", slurm={"time_limit_minutes": 5})
    assert (here["outcome"], here["field"]) == ("rejected", "slurm")
    assert here["problem"] == ("profile cpu runs on local, which submits no Slurm job; "
                               "slurm options need a profile with backend: slurm")
    assert mixed.submit("t2", profile="big", slurm={"time_limit_minutes": 5})["outcome"] \
        == "accepted"
