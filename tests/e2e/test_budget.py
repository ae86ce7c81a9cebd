"""The run budget with a real coordinator (R-BUD-1): spend from attempt wall time, the
verdict in status.json and in the journal, no work denied; ``launch --max-cost``."""

from __future__ import annotations

import json
import os
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


def journal_records(run, kind: str) -> list[dict]:
    lines = (run.sched / "journal" / "journal.log").read_text().splitlines()
    return [r for line in lines if (r := json.loads(line.split(" ", 2)[2]))["type"] == kind]


def test_over_budget_alerts_on_enqueue_records_each_launch_and_raises_only_up(make_run):
    """seed 003 "Session budget state" and "Budget preflight is recorded, not a denial
    gate": raise() "rejects a ceiling lower than the current one and otherwise replaces
    it"; each reservation stores the budget's spend and ceiling; "On each enqueue ...
    emits BusChannels.BudgetAlert with { level, currentUsd, ceilingUsd } whenever the
    verdict is not 'under'"."""
    run = make_run(task_text=TASK)
    run.start()
    spent = run.reply(run.submit(request("spend", ["sleep", "0.3"])))["job_id"]
    run.wait_state(spent, "completed")
    wait_for(lambda: ((run.status() or {}).get("budget") or {}).get("verdict") == "over",
             message="verdict over in status.json")

    late = run.reply(run.submit(request("while-over", ["true"])))
    assert late["outcome"] == "accepted"  # advisory: nothing is denied
    done = run.wait_state(late["job_id"], "completed")
    record = done["attempts"][0]["budget"]
    assert record["verdict"] == "over" and record["cost"] > 0.001
    assert record["limits"] == {"gpu_hours": None, "cost": 0.001}
    attempt = read_json(run.sched / "attempts" / late["job_id"] / "a1" / "attempt.json")
    assert attempt["budget"] == record
    alerts = wait_for(lambda: journal_records(run, "budget_alert"), message="a budget alert")
    assert (alerts[0]["level"], alerts[0]["enqueues"], alerts[0]["cost_limit"]) == (
        "over", 1, 0.001)
    assert wait_for(lambda: run.status()["budget"]["alerts"]["count"] == 1 and
                    run.status()["budget"]["alerts"]["last"]["level"] == "over",
                    message="the alert in status.json")
    shown = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, timeout=60)
    assert "; 1 alert(s): work enqueued while not under" in shown.stdout, shown.stdout

    raise_budget = [sys.executable, "-m", "praxist_fs", "raise-budget", "--run-dir",
                    str(run.root)]
    lower = subprocess.run([*raise_budget, "--cost", "0.0005"], capture_output=True,
                           text=True, timeout=60)
    assert lower.returncode == 2
    assert lower.stdout.strip() == ("rejected: cost: 0.0005 is lower than the ceiling in "
                                    "force, 0.001; it can only be raised")
    # the control-file form, as a shell drops it: a limit the run does not have
    control = run.sched / "control"
    (control / "tmp").mkdir(exist_ok=True)
    (control / "tmp" / "r1.json").write_text(json.dumps({"action": "budget_raise",
                                                         "gpu_hours": 2}))
    os.rename(control / "tmp" / "r1.json", control / "r1.json")
    reply = wait_for(lambda: read_json(control / "replies" / "r1.json"), message="reply r1")
    assert reply["outcome"] == "rejected" and reply["reason"].startswith(
        "gpu_hours: the run has no gpu_hours limit")
    higher = subprocess.run([*raise_budget, "--cost", "100"], capture_output=True,
                            text=True, timeout=60)
    assert higher.returncode == 0, higher.stderr
    assert higher.stdout.strip() == "ok: budget ceiling raised: cost 0.001 -> 100"
    budget = wait_for(lambda: (doc := run.status()["budget"])["verdict"] == "under" and doc,
                      message="verdict under after the raise")
    assert budget["limits"]["cost"] == 100 and budget["raised"] == {"cost": 100}
    assert journal_verdicts(run)[-1] == "under"
