"""``praxist-fs simulate --from-run``: a run's own history, produced by a real coordinator,
replayed under other placements and task files (issue 18 item 6, R-SIM-1)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from .conftest import request

ROOT = Path(__file__).resolve().parents[2]
TWO_H200 = ROOT / "fixtures" / "gpus" / "two_h200.json"
FCFS = ROOT / "fixtures" / "policies" / "fcfs.yaml"


def simulate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "praxist_fs", "simulate", *argv],
                          capture_output=True, text=True, timeout=120)


def test_a_runs_own_history_replays_under_other_placements(make_run, tmp_path):
    """R-SIM-1 (issue 18 item 6): "what would last week have looked like" on the run's
    own workload. A real coordinator on two fake H200s runs a CPU job and three
    1-GPU jobs of 45 % each (the second and third submitted together, later). Replayed
    on one GPU: declared shares let the two co-located jobs start at once; exclusive
    placement makes one wait for the other, by the run time the run measured."""
    run = make_run(slots=4)
    run.start(env={"PRAXIST_FAKE_GPUS": str(TWO_H200)})
    early = [run.submit(request("cpu-early")),
             run.submit(request("gpu-early", ["sleep", "0.2"], profile="gpu_work"))]
    for rid in early:
        run.wait_state(run.reply(rid)["job_id"], "completed")
    since = datetime.fromtimestamp(time.time()).isoformat()
    late = [run.submit(request(f"gpu-late-{i}", ["sleep", "0.5"], profile="gpu_work"))
            for i in range(2)]
    done = [run.wait_state(run.reply(rid)["job_id"], "completed") for rid in late]
    run.stop()

    out = tmp_path / "jobs.csv"
    replayed = simulate("--from-run", str(run.root), "--gpus", "1", "--placement", "both",
                        "--policy", str(FCFS), "--json", "--deterministic",
                        "--jobs-csv", str(out))
    assert replayed.returncode == 0, replayed.stderr
    assert f"--from-run {run.root}: 3 jobs; left out: 1 uses no GPU" in replayed.stderr
    doc = json.loads(replayed.stdout)
    assert (doc["from_run"], doc["jobs"]) == (str(run.root), 3)
    declared, exclusive = doc["results"]
    assert (declared["completed"], exclusive["completed"]) == (3, 3)
    rows = {(r["placement"], r["job_id"]): r for r in csv.DictReader(out.read_text().splitlines())}
    for job in done:  # each late job ran as long as the run says its attempt did
        attempt = job["attempts"][-1]
        assert float(rows["declared", job["job_id"]]["duration_s"]) == pytest.approx(
            attempt["ended_at"] - attempt["started_at"], abs=1e-6)
    first, second = (rows["exclusive", job["job_id"]] for job in sorted(
        done, key=lambda job: job["submitted_at"]))
    assert float(rows["declared", second["job_id"]]["delay_s"]) == 0
    assert float(second["delay_s"]) > 0.4   # waits for the first's 0.5 s sleep
    assert float(second["start_s"]) == float(first["end_s"])

    only_late = simulate("--from-run", str(run.root), "--gpus", "1", "--since", since,
                         "--json")
    assert only_late.returncode == 0, only_late.stderr
    assert json.loads(only_late.stdout)["jobs"] == 2


def test_from_run_errors_are_clear(tmp_path):
    """Not a run directory, or --since without --from-run: exit 2 and a message."""
    missing = simulate("--from-run", str(tmp_path), "--gpus", "1")
    assert missing.returncode == 2
    assert "not a run directory (no resource_scheduler/journal/journal.log)" in missing.stderr
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,user\na,0,1,1,u\n")
    alone = simulate("--trace", str(trace), "--gpus", "1", "--since", "7d")
    assert alone.returncode == 2 and "--since needs --from-run" in alone.stderr
