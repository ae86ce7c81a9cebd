"""One run, this host and Slurm (issue 28 item 4), with a real coordinator on the fake
cluster of tests/slurm/fake/cluster (whose sbatch really runs the batch script, on node
fake0), so that every ``make test`` drives the routed seam end to end; the real Slurm's
version is test_coordinator_slurm.py's ``test_one_run_runs_cpu_work_here_...``."""

from __future__ import annotations

import subprocess
import sys

import psutil

from tests.e2e.conftest import make_run, wait_for  # noqa: F401 (fixture)

TIMEOUT_S = 60  # for any one thing to show on a loaded host

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    backends: [slurm]
    max_concurrent_experiments: 4
    initial_concurrent_experiments: 2
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
      big: {accelerator: cpu, backend: slurm}
    slurm:
      default_resources: {cpus: 1, mem_mb: 64}
      poll_pending_s: 0.2
      poll_running_s: 1.0
"""


def submit(run, tag: str, command: str, profile: str) -> str:
    reply = run.reply(run.submit({"peer": "tester", "tag": tag, "command": command,
                                  "profile": profile}), timeout=TIMEOUT_S)
    assert reply["outcome"] == "accepted", reply
    return reply["job_id"]


def test_a_mixed_run_routes_by_profile_shows_both_nodes_and_a_stop_ends_both(
        fake_cluster, make_run, tmp_path):
    """The ``big`` job is a (fake) Slurm job, the ``cpu`` job a process here; status
    lists this host first, then the Slurm node with its running job; a stop through the
    coordinator ends both (the local command's group, the Slurm job) and leaves nothing."""
    run = make_run(task_text=TASK)
    run.start()
    hold = tmp_path / "hold"
    wait = f"while [ ! -e {hold} ]; do sleep 0.05; done"
    here = submit(run, "here", wait, "cpu")
    there = submit(run, "there", wait, "big")
    local = run.wait_state(here, "running", timeout=TIMEOUT_S)["attempts"][-1]
    assert local["pid"] and "handle" not in local
    handle = wait_for(lambda: (h := run.job(there)["attempts"][-1].get("handle") or {})
                      .get("node") and h, timeout=TIMEOUT_S, message="the Slurm node")
    assert handle["backend"] == "slurm" and handle["node"] == "fake0"
    nodes = wait_for(lambda: (n := (run.status() or {}).get("nodes", [])) and len(n) == 2
                     and n[1]["running"] == 1 and n, timeout=TIMEOUT_S,
                     message="both nodes in status")
    assert [(n["node"], n["kind"], n["running"]) for n in nodes] == [
        ("local", "local", 1), ("fake0", "cluster", 1)]
    done = subprocess.run([sys.executable, "-m", "praxist_fs", "stop", str(run.root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert run.proc.wait(timeout=TIMEOUT_S) == 0
    run.proc = None
    for job_id in (here, there):
        assert run.wait_state(job_id, "cancelled", timeout=TIMEOUT_S)
    assert not psutil.pid_exists(local["pid"]) or \
        psutil.Process(local["pid"]).status() == psutil.STATUS_ZOMBIE
    left = subprocess.run(["squeue", "-h", "-o", "%i|%T"], capture_output=True, text=True,
                          timeout=30).stdout.split()
    assert not [line for line in left if line.endswith(("PENDING", "RUNNING"))], left
