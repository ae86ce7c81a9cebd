"""The per-peer compatibility cap (R-SUB-5) through a real coordinator and real commands."""

from __future__ import annotations

import subprocess
import sys

from praxist_fs.core.identity import job_id_for

from .conftest import TASK, request, wait_for

CAPPED = TASK.format(slots=4, retries=1) + "    max_concurrent_per_peer: 1\n"


def test_a_capped_peer_waits_without_an_attempt_while_another_peer_runs(make_run, tmp_path):
    """seed 000 "Submission": "When a peer's compatibility cap is already occupied, another
    central submission from that peer remains queued until the active process group
    drains. Other peers may continue to launch, and the blocked job does not consume an
    attempt or create a capacity-failure record." """
    run = make_run(task_text=CAPPED)
    run.start()
    gate = tmp_path / "alice-may-finish"
    run.submit(request("alice-1", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
                       peer="alice"))
    first, second = job_id_for("alice-1"), job_id_for("alice-2")
    run.wait_state(first, "running")
    run.submit(request("alice-2", peer="alice"))
    for tag in ("bob-1", "bob-2"):  # four slots: bob's jobs start while alice's waits
        run.submit(request(tag, peer="bob"))
    for tag in ("bob-1", "bob-2"):
        assert run.wait_state(job_id_for(tag), "completed")["exit_code"] == 0

    waiting = wait_for(lambda: (doc := run.job(second)) and doc["reason"].startswith("peer")
                       and doc, message="alice-2's pending reason")
    assert (waiting["state"], waiting["attempts"]) == ("queued", [])
    assert waiting["reason"] == "peer alice: 1 of max_concurrent_per_peer 1 running"
    peers = wait_for(lambda: ((run.status() or {}).get("peers") or {}).get("running")
                     == {"alice": 1} and run.status()["peers"], message="status peers")
    assert peers["max_concurrent_per_peer"] == 1
    shown = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, timeout=60)
    assert "running by peer (cap 1 each): alice 1" in shown.stdout, shown.stdout
    assert "peer alice: 1 of max_concurrent_per_peer 1 running" in shown.stdout

    gate.touch()  # alice's running group drains: her queued job starts, first time
    done = run.wait_state(second, "completed")
    assert [a["attempt_id"] for a in done["attempts"]] == ["a1"]
    assert run.job(first)["state"] == "completed"
