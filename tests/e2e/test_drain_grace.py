"""The adaptive drain grace after CLOSING_SIGNAL, with a real coordinator and a real
experiment that outlives it."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import read_json, request, scheduler_task, wait_for

TASK = scheduler_task("""\
initial_concurrent_experiments: 2
max_concurrent_experiments: 2
default_profile: cpu
drain_grace_min_seconds: 1
drain_grace_max_seconds: 2
profiles:
  cpu: {accelerator: cpu}
""")

CLI = [sys.executable, "-m", "praxist_fs"]


def generation(run, action: str) -> None:
    result = subprocess.run([*CLI, "generation", action, "1", f"--run-dir={run.root}"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_close_waits_the_drain_grace_then_closes_leaving_the_experiment_running(
        make_run, tmp_path):
    """seed 000 "Timing And Close": already-running process groups continue to drain;
    the adaptive drain grace bounds the wait and "does not kill evaluator processes"."""
    run = make_run(task_text=TASK)
    run.start()
    generation(run, "open")
    gate, pid_file = tmp_path / "gate", tmp_path / "pid"
    job_id = run.reply(run.submit(request("long-eval", [
        "sh", "-c", f'echo $$ > "{pid_file}"; while [ ! -e "{gate}" ]; do sleep 0.05; done'])))[
        "job_id"]
    run.wait_state(job_id, "running")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                       message="the experiment's pid"))
    generation(run, "close")
    signal_doc = wait_for(lambda: read_json(run.root / "gen_1" / "CLOSING_SIGNAL"),
                          message="CLOSING_SIGNAL")
    drain = signal_doc["drain"]
    # nothing of the generation completed yet: the upper bound, 2 s
    assert drain["grace_s"] == 2 and drain["deadline"] == signal_doc["at"] + 2
    assert drain["rule"] == "no run time observed: the upper bound, 2 s"
    shown = wait_for(lambda: next((g for g in (run.status() or {}).get("generations", [])
                                   if g["number"] == 1 and g["drain"]), None),
                     message="the drain deadline in status.json")
    assert shown["drain"]["deadline"] == drain["deadline"]
    closed = wait_for(lambda: next((g for g in run.status()["generations"]
                                    if g["number"] == 1 and g["phase"] == "closed"), None),
                      timeout=20, message="the generation closed by its drain grace")
    assert closed["drain"] == drain
    # the experiment was not killed: still running, still its process
    assert run.job(job_id)["state"] == "running"
    os.kill(pid, 0)  # raises if it is gone
    gate.touch()
    assert run.wait_state(job_id, "completed")["exit_code"] == 0
