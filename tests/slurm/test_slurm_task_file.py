"""``backend: slurm`` in the task file: what it turns on, and what a cluster backend
cannot do refused by name (SPEC R-DIST-1, R-CFG-2)."""

from __future__ import annotations

import pytest

from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.errors import PolicyError

BASE = """\
compute_budget:
  resource_scheduler:
    mode: central
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
"""


def policy(extra: str):
    return policy_from_mapping(parse_task_text(BASE + extra, "task.yaml"))


def test_backend_slurm_with_its_mapping_is_kept_and_journaled():
    resolved = policy("    backend: slurm\n    slurm: {partition: gpu, poll_running_s: 5}\n")
    assert (resolved.backend, resolved.capabilities.on_this_host) == ("slurm", False)
    assert not resolved.capabilities.can_suspend and resolved.capabilities.places_gpus
    assert resolved.to_dict()["slurm"] == {"partition": "gpu", "poll_running_s": 5}
    assert resolved.to_dict()["capabilities"] == {
        "can_suspend": False, "places_gpus": True, "on_this_host": False,
        "queues_attempts": True, "takes_slurm_options": True}
    local = policy("")
    assert local.backend == "local" and local.capabilities.on_this_host
    assert local.capabilities.can_suspend and not local.capabilities.places_gpus


@pytest.mark.parametrize("extra, key, expected", [
    ("    backend: pbs\n", "backend", "one of"),
    ("    slurm: {partition: gpu}\n", "slurm", "no slurm mapping unless backend: slurm"),
    ("    backend: slurm\n    slurm: {poll_pending_s: 0}\n", "slurm.poll_pending_s",
     "a number in 0.2..60"),
    ("    backend: slurm\n    max_concurrent_experiments: auto\n",
     "max_concurrent_experiments", "a number with backend: slurm"),
    ("    backend: slurm\n    queues:\n      urgent: {work_classes: [mature], priority: 10, "
     "preemptible_queues: [rest]}\n      rest: {work_classes: [scout, ordinary]}\n",
     "queues.urgent.preempt", "requeue with backend: slurm"),
    ("    backend: slurm\n    queues:\n      urgent: {work_classes: [mature], priority: 10}\n"
     "      rest: {work_classes: [scout, ordinary], preemptible: true}\n",
     "queues.urgent.preempt", "requeue with backend: slurm"),
])
def test_what_a_cluster_backend_cannot_do_is_refused_by_name(extra, key, expected):
    with pytest.raises(PolicyError) as caught:
        policy(extra)
    message = str(caught.value)
    assert f"compute_budget.resource_scheduler.{key}" in message
    assert expected in message


@pytest.mark.parametrize("key, value, expected", [
    ("node_cooldown_s", "-1", "a number in 0..86400"),
    ("node_cooldown_s", "true", "a number in 0..86400"),
    ("launch_timeout_s", "0", "a number in 1..86400"),
    ("launch_timeout_s", "never", "a number in 1..86400"),
    ("probe_new_nodes", "1", "true or false"),
])
def test_the_node_keys_are_refused_out_of_range_by_name(key, value, expected):
    """R-BUD-2's settings are checked like the rest of the mapping: the key path, the
    value and what was expected."""
    with pytest.raises(PolicyError) as caught:
        policy(f"    backend: slurm\n    slurm: {{{key}: {value}}}\n")
    message = str(caught.value)
    assert f"compute_budget.resource_scheduler.slurm.{key}" in message
    assert expected in message


def test_the_node_cooldown_is_the_task_files_and_defaults_to_300_s():
    assert policy("    backend: slurm\n    slurm: {node_cooldown_s: 30}\n").node_cooldown_s == 30
    assert policy("    backend: slurm\n").node_cooldown_s == 300


MIXED = """\
    backends: [slurm]
    profiles:
      cpu: {accelerator: cpu}
      big: {accelerator: gpu, gpu_count: 8, backend: slurm}
"""


BASE_PROFILES = "    profiles:\n      cpu: {accelerator: cpu}\n"


def mixed(extra: str = ""):
    text = BASE.replace(BASE_PROFILES, "")
    return policy_from_mapping(parse_task_text(text + MIXED + extra, "task.yaml"))


def test_a_run_of_this_host_and_slurm_routes_a_profile_to_the_cluster():
    """``backends: [slurm]`` beside this host: the 8-GPU profile's jobs go to Slurm (they
    take none of this host's GPUs), the CPU profile's stay here; both journaled."""
    resolved = mixed("    slurm: {partition: gpu}\n")
    assert resolved.backend_names() == ("local", "slurm")
    assert resolved.backend_of(resolved.profiles["big"]) == "slurm"
    assert resolved.backend_of(resolved.profiles["cpu"]) == "local"
    assert resolved.capabilities_of(resolved.profiles["big"]).places_gpus
    assert resolved.capabilities_of(resolved.profiles["cpu"]).on_this_host
    assert resolved.to_dict()["backends"] == {
        "slurm": {"can_suspend": False, "places_gpus": True, "on_this_host": False,
                  "queues_attempts": True, "takes_slurm_options": True}}
    assert resolved.slurm == {"partition": "gpu"}
    on_cluster = policy("    backend: slurm\n    backends: [slurm]\n")
    assert on_cluster.backend_names() == ("slurm", "local")  # this host is implicit


@pytest.mark.parametrize("extra, key, expected", [
    ("    backends: [slurm, pbs]\n", "backends[1]", "one of local, slurm"),
    ("    backends: slurm\n", "backends", "a non-empty list of backend names"),
    ("    backends: [slurm, slurm]\n", "backends[1]", "each backend listed once"),
    ("    profiles:\n      cpu: {accelerator: cpu, backend: pbs}\n",
     "profiles.cpu.backend", "one of local, slurm"),
    ("    profiles:\n      cpu: {accelerator: cpu, backend: slurm}\n",
     "profiles.cpu.backend", "a backend the run uses (backend: local): local"),
    ("    backend: slurm\n    profiles:\n      cpu: {accelerator: cpu, backend: local}\n",
     "profiles.cpu.backend", "a backend the run uses (backend: slurm): slurm"),
    ("    backends: [slurm]\n    queues:\n      urgent: {work_classes: [mature], "
     "priority: 10, preemptible_queues: [rest]}\n      rest: {work_classes: [scout, "
     "ordinary]}\n", "queues.urgent.preempt", "requeue with backend: slurm in the run"),
])
def test_the_backends_a_run_lists_and_routes_to_are_checked_by_key(extra, key, expected):
    text = BASE if "profiles" not in extra else BASE.replace(BASE_PROFILES, "")
    with pytest.raises(PolicyError) as caught:
        policy_from_mapping(parse_task_text(text + extra, "task.yaml"))
    message = str(caught.value)
    assert f"compute_budget.resource_scheduler.{key}:" in message
    assert expected in message
