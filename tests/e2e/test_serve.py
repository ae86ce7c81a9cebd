"""serve: layout, owner lock, policy.json, status.json and the status command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import read_json, request, wait_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tasks"


def test_serve_creates_the_layout_and_policy(run):
    for path in ("endpoint.json", "owner.lock", "policy.json", "status.json", "journal",
                 "spool/tmp", "spool/incoming", "spool/replies", "spool/rejected",
                 "jobs/queued", "jobs/running", "jobs/done", "attempts", "control"):
        assert (run.sched / path).exists(), path
    assert (run.root / "logs" / "experiments").is_dir()
    endpoint = read_json(run.sched / "endpoint.json")
    assert endpoint["pid"] == run.proc.pid and endpoint["protocol_version"] == 1
    assert {"start_time", "host", "boot_id", "spool"} <= set(endpoint)
    policy = read_json(run.sched / "policy.json")
    assert policy["default_profile"] == "cpu" and policy["initial_concurrent_experiments"] == 2


def test_second_coordinator_exits_quickly_naming_the_owner(run):
    started = time.monotonic()
    second = subprocess.run(run.serve_command(), capture_output=True, text=True, timeout=10)
    assert second.returncode != 0
    assert time.monotonic() - started < 2.0 + 1.0  # interpreter start-up on a loaded CI box
    assert f"pid {run.proc.pid}" in second.stderr and "since" in second.stderr
    assert run.proc.poll() is None


@pytest.mark.parametrize("fixture,key_path", [
    ("bad_unknown_key.yaml", "max_concurent_experiments"),
    ("bad_bool_ture.yaml", "supply_signal_enabled"),
    ("bad_number_eight.yaml", "max_concurrent_experiments"),
    ("bad_pressure_domain.yaml", "pressure_domains"),
])
def test_invalid_task_file_stops_serve_with_the_key_path(tmp_path, fixture, key_path):
    result = subprocess.run(
        [sys.executable, "-m", "praxist_fs", "serve", "--run-dir", str(tmp_path / "r"),
         "--config", str(FIXTURES / fixture)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert key_path in result.stderr and "compute_budget.resource_scheduler" in result.stderr


def test_normalizations_are_visible_in_policy_json(make_run):
    run = make_run()
    run.task = FIXTURES / "normalized.yaml"
    run.start()
    policy = read_json(run.sched / "policy.json")
    assert policy["supply_lease_seconds"] == 180
    used = {n["key_path"].rsplit(".", 1)[-1]: n["used"] for n in policy["normalizations"]}
    assert used["supply_lease_seconds"] == 180


def test_status_json_follows_changes_within_a_second(run, tmp_path):
    gate = tmp_path / "gate"
    job_id = run.reply(run.submit(request(
        "watched", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
    # its command runs: past the barrier (its pid is recorded before GO)
    status = wait_for(lambda: (s := run.status()) and s["running"] == 1
                      and s["active"][0]["phase"] == "running" and s, timeout=3.0)
    [active] = status["active"]
    assert active["job_id"] == job_id and active["attempt_id"] == "a1" and active["go"]
    assert active["pid"] and active["profile"] == "cpu" and active["peer"] == "tester"
    assert active["work_class"] == "ordinary" and active["age_s"] >= 0
    assert active["resource_activity"] == "non_gpu_allocation"
    gate.touch()
    status = wait_for(lambda: (s := run.status()) and s["counts"]["completed"] == 1 and s,
                      timeout=5)
    assert status["running"] == 0 and status["active"] == []
    assert status["coordinator"]["observer"] in ("inotify", "polling")


def test_status_command_prints_table_and_json(run):
    run.wait_state(run.reply(run.submit(request("shown")))["job_id"], "completed")
    wait_for(lambda: (s := run.status()) and s["counts"]["completed"] == 1)
    cmd = [sys.executable, "-m", "praxist_fs", "status", "--run-dir", str(run.root)]
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert table.returncode == 0 and "completed 1" in table.stdout
    raw = subprocess.run(cmd + ["--json"], capture_output=True, text=True, timeout=30)
    assert json.loads(raw.stdout)["counts"]["completed"] == 1



def test_polling_observer_serves_and_says_so(make_run):
    # What a network filesystem (NFS, Lustre) gets: inotify misses remote writes there.
    run = make_run()
    run.start(env={"PRAXIST_FORCE_POLLING": "1"})
    assert run.reply(run.submit(request("polled")))["outcome"] == "accepted"
    assert wait_for(lambda: run.status())["coordinator"]["observer"] == "polling"


def test_status_keeps_up_while_requests_keep_arriving(run):
    """Waiting requests go before the status view, but a coordinator that never runs out
    of them still rewrites status.json about once a second, not only once they stop.
    Counted only while requests wait in incoming/ on both sides of the read, so a slow
    machine that lets the coordinator catch up proves nothing either way."""
    incoming = run.sched / "spool" / "incoming"
    seen, submitted = set(), 0
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:
        for _ in range(10):  # faster than it accepts: it is never idle
            run.submit(request(f"stream-{submitted}", ["sleep", "60"]))
            submitted += 1
        waiting = any(incoming.glob("*.json"))
        status = run.status() or {}
        if waiting and status.get("counts", {}).get("queued") and any(incoming.glob("*.json")):
            seen.add(status["updated_at"])
    assert len(seen) >= 3, (f"status.json was rewritten {len(seen)} time(s) while "
                            f"{submitted} requests kept arriving")


def test_a_coordinator_on_a_local_file_system_is_its_loop_alone(run):
    """watchdog's observer kept three threads in every coordinator (inotify reader,
    emitter, dispatcher) that handed each event on, queue to queue, before the loop's
    pipe was written, and woke by themselves while idle. The loop reads inotify itself:
    a request is still answered, by a coordinator of one thread."""
    assert run.reply(run.submit(request("one-thread")))["outcome"] == "accepted"
    assert wait_for(lambda: run.status())["coordinator"]["observer"] == "inotify"
    assert os.listdir(f"/proc/{run.proc.pid}/task") == [str(run.proc.pid)]
