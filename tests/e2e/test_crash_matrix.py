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

from ..invariants import check_run
from .conftest import request, wait_for

CRASH_EXIT = 86

BASIC = [
    "start.after_journal_open", "start.after_repair", "start.after_adopt",
    "journal.before_commit", "journal.after_commit", "journal.before_commit:4",
    "journal.after_commit:6",
    "effect.WriteJob.before", "effect.WriteJob.after", "effect.WriteJob.before:5",
    "effect.WriteReply.before", "effect.WriteReply.after",
    "effect.ConsumeRequest.before", "effect.ConsumeRequest.after",
    "effect.RejectRequest.before", "effect.RejectRequest.after",
    "effect.SpawnAttempt.before", "effect.SpawnAttempt.after", "effect.SpawnAttempt.after:3",
    "effect.WriteGo.before", "effect.WriteGo.after", "effect.WriteGo.before:3",
    "status.before_write", "status.after_write:3",
]
# With the journal compacted every few records, so snapshots are written (and
# crashed in) throughout the scenario, and the restart reads snapshot + tail.
COMPACTION = [
    "snapshot.before_write", "snapshot.after_write", "snapshot.after_truncate",
    "snapshot.after_write:3", "snapshot.after_truncate:2",
]
COMPACT_OFTEN = {"PRAXIST_COMPACT_AFTER": "4"}
GENERATION = [
    "effect.WriteControlReply.before", "effect.WriteControlReply.after",
    "effect.DisposeControl.before", "effect.DisposeControl.after",
    "effect.WriteGenerationFile.peer.before", "effect.WriteGenerationFile.lease.before",
    "effect.WriteGenerationFile.lease.after", "effect.WriteGenerationFile.stats.after",
    "effect.WriteGenerationFile.closing.before", "effect.WriteGenerationFile.closing.after",
]

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    max_concurrent_experiments: 2
    infrastructure_retries: 1
    supply_idle_samples: 1
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
"""


def start_crashing(run, point: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A coordinator that dies at ``point``; unlike Run.start it may die before serving."""
    return run.start_raw(env={"PRAXIST_CRASH_AT": point, **(env or {})})


def settle(run, tags, timeout=30.0):
    def done():
        docs = [run.job(job_id) for job_id in tags.values()]
        return all(d and d["state"] in ("completed", "failed") for d in docs)
    wait_for(done, timeout, message="every job to finish after the restart")


def basic_scenario(run, tmp_path) -> dict[str, str]:
    """Submit work whose every command marks its start; returns tag -> request id."""
    starts, counter = tmp_path / "starts", tmp_path / "b-count"
    mark = f'echo "$PRAXIST_EXPERIMENT_ID" >> {starts}; '
    docs = {
        "a": request("a", ["sh", "-c", mark + "exit 0"]),
        "b": request("b", ["sh", "-c", mark + f"[ -e {counter} ] || {{ touch {counter}; exit 75; }}"]),
        "c": request("c", ["sh", "-c", mark + "exit 3"]),
        "d": request("d", ["sh", "-c", mark + "sleep 0.3"]),
    }
    ids = {tag: run.submit(doc, name=f"{tag}.json") for tag, doc in docs.items()}
    run.submit(docs["a"], name="a-again.json")
    run.drop_raw("bad.json", b'{"peer": "p", "tag": "../x", "argv": ["true"]}')
    return ids


def job_ids(run, ids):
    return {tag: run.reply(rid, timeout=30)["job_id"] for tag, rid in ids.items()}


@pytest.mark.parametrize("point, env", [(p, {}) for p in BASIC] +
                         [(p, COMPACT_OFTEN) for p in COMPACTION])
def test_crash_at_point_loses_nothing_and_runs_nothing_twice(make_run, tmp_path, point, env):
    run = make_run(task_text=TASK)
    proc = start_crashing(run, point, env)
    ids = basic_scenario(run, tmp_path)
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


def settled_invariants(run, timeout: float, **checks) -> None:
    """Wait until every invariant holds (views such as status.json lag the job files a
    little); else fail with the problems as they stand then, and the coordinator's state."""
    try:
        wait_for(lambda: not check_run(run.root, **checks), timeout=timeout,
                 message="invariants")
    except AssertionError:
        log = run.root.parent / f"coordinator-{run.root.name}.log"
        alive = run.proc is not None and run.proc.poll() is None
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
        raise AssertionError(f"after {timeout}s: {check_run(run.root, **checks)}; the "
                             f"coordinator {'serves' if alive else 'has exited'}; its log "
                             "ends:\n" + "\n".join(tail)) from None


def cli(run, *args):
    return subprocess.run([sys.executable, "-m", "praxist_fs", *args, f"--run-dir={run.root}"],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("point", GENERATION)
def test_crash_in_a_generation_keeps_leases_and_stats_consistent(make_run, tmp_path, point):
    run = make_run(task_text=TASK)
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
