"""kill -9 at every named crash point, restart, and check every promise (R-DUR-1, R-DUR-2).

Each case starts a coordinator with PRAXIST_CRASH_AT naming one point, drives a
scenario through real files until the coordinator dies there, starts a normal
coordinator on the same run, lets the work settle, and then runs the independent
invariant checker: every acknowledged request maps to one job in one state
directory, no command ran twice, exit codes come from exit.json, status agrees,
no terminal job holds a GPU allocation, lease counts add up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from .conftest import request, wait_for
from .crashes import (
    BASIC, COMPACTION, COMPACT_OFTEN, CRASH_EXIT, CRASH_TASK, GENERATION, basic_scenario,
    job_ids, more_records_until_it_dies, settle, settled_invariants, start_crashing,
)


@pytest.mark.parametrize("point, env", [(p, {}) for p in BASIC] +
                         [(p, COMPACT_OFTEN) for p in COMPACTION])
def test_crash_at_point_loses_nothing_and_runs_nothing_twice(make_run, tmp_path, point, env):
    run = make_run(task_text=CRASH_TASK)
    proc = start_crashing(run, point, env)
    ids = basic_scenario(run, tmp_path)
    if point in COMPACTION:
        more_records_until_it_dies(run, proc, tmp_path / "starts")
    assert proc.wait(timeout=30) == CRASH_EXIT, f"{point} was never reached"
    run.start(env)
    jobs = job_ids(run, ids)
    settle(run, jobs)
    outcome = {tag: run.job(job_id) for tag, job_id in jobs.items()}
    assert outcome["a"]["state"] == "completed" and outcome["d"]["state"] == "completed"
    assert [a["exit_code"] for a in outcome["b"]["attempts"]
            if a["outcome"] != "released"] == [75, 0]
    assert outcome["c"]["state"] == "failed" and outcome["c"]["exit_code"] == 3
    assert run.reply("a-again")["job_id"] == jobs["a"]
    assert run.reply("bad")["outcome"] == "rejected"
    settled_invariants(run, timeout=10, starts=tmp_path / "starts",
                       registry=run.root.parent / "host-registry")


def cli(run, *args):
    return subprocess.run([sys.executable, "-m", "praxist_fs", *args, f"--run-dir={run.root}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point", GENERATION)
def test_crash_in_a_generation_keeps_leases_and_stats_consistent(make_run, tmp_path, point):
    run = make_run(task_text=CRASH_TASK)
    proc = start_crashing(run, point)
    wait_for(lambda: (run.sched / "endpoint.json").exists() or proc.poll() is not None)
    control = run.sched / "control"
    (control / "tmp").mkdir(parents=True, exist_ok=True)
    (control / "tmp" / "open.json").write_text(json.dumps(
        {"action": "generation_open", "generation": 1, "cohort": ["p1"]}))
    (control / "tmp" / "open.json").rename(control / "open.json")
    idle = run.root / "gen_1" / "resource_supply" / "idle"
    idle.mkdir(parents=True, exist_ok=True)
    (idle / "p1.json").write_text(json.dumps({"peer": "p1", "generation": 1, "at": time.time()}))
    lease_file = run.root / "gen_1" / "resource_supply" / "leases" / "p1.json"
    if proc.poll() is None:
        lease = wait_for(lambda: proc.poll() is not None or
                         ((doc := _read(lease_file)) and doc["state"] == "granted" and doc),
                         timeout=30)
        if isinstance(lease, dict) and proc.poll() is None:
            run.submit(request("leased", lease=lease["lease_id"], peer="p1"))  # may die now
            (control / "tmp" / "close.json").write_text(json.dumps(
                {"action": "generation_close", "generation": 1}))
            (control / "tmp" / "close.json").rename(control / "close.json")
    assert proc.wait(timeout=30) == CRASH_EXIT, f"{point} was never reached"
    run.start()
    wait_for(lambda: (run.sched / "control" / "replies" / "open.json").exists(), timeout=30)
    settled_invariants(run, timeout=15, settled=False)
    stats = _read(run.root / "gen_1" / "resource_supply" / "stats.json")
    assert stats is not None and stats["granted"] >= stats["consumed"]


def _read(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
