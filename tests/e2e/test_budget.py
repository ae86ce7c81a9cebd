"""The run budget with a real coordinator (R-BUD-1): spend from attempt wall time, the
verdict in status.json and in the journal, no work denied; ``launch --max-cost``."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import read_json, request, wait_for

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
    budget:
      cost: 0.001
      rates: {cpu: 36}   # 0.01 per second of a CPU attempt
"""


def journal_verdicts(run) -> list[str]:
    lines = (run.sched / "journal" / "journal.log").read_text().splitlines()
    records = [json.loads(line.split(" ", 2)[2]) for line in lines]
    return [r["verdict"] for r in records if r["type"] == "budget_verdict"]


def test_a_tiny_budget_goes_over_and_denies_nothing(make_run):
    run = make_run(task_text=TASK)
    run.start()
    ids = [run.reply(run.submit(request(f"spend-{i}", ["sleep", "0.3"])))["job_id"]
           for i in range(2)]
    for job_id in ids:
        run.wait_state(job_id, "completed")
    budget = wait_for(lambda: (doc := (run.status() or {}).get("budget")) and
                      doc["verdict"] == "over" and not doc["running"]["cost"] and doc,
                      message="verdict over in status.json, nothing running")
    assert budget["limits"]["cost"] == 0.001 and budget["rates"] == {"cpu": 36.0}
    assert budget["experiment"]["cost"] >= 0.006 and budget["infrastructure"]["cost"] == 0
    assert budget["spend"]["gpu_hours"] == 0 and budget["since"] is not None
    assert journal_verdicts(run)[-1] == "over"
    assert journal_verdicts(run)[0] == "under"  # the first look, before any spend
    # advisory: work is still admitted and runs
    reply = run.reply(run.submit(request("after-over", ["true"])))
    assert reply["outcome"] == "accepted"
    run.wait_state(reply["job_id"], "completed")


def test_launch_max_cost_rejects_with_the_estimate(make_run):
    run = make_run(task_text=TASK)
    run.start()
    launch = [sys.executable, "-m", "praxist_fs", "launch", f"--run-dir={run.root}",
              "--peer=cli", "--tag=capped", "--eta=60"]
    result = subprocess.run([*launch, "--max-cost=0.01", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "max_cost: estimated cost 0.6 is over 0.01" in result.stderr  # 60 s x 0.01
    (reply,) = [doc for path in (run.sched / "spool" / "replies").iterdir()
                if (doc := read_json(path))]
    assert reply["outcome"] == "rejected" and reply["field"] == "max_cost"
    assert reply["estimate"]["cost"] == 0.6 and reply["estimate"]["rate_per"] == "hour"
    result = subprocess.run([*launch, "--max-cost=1", "--", "true"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "(estimated cost 0.6)" in result.stderr
