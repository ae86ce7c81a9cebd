"""A whole generation through real files and a real coordinator (R-SUP-1..8): leases to
idle peers, a consumed and a declined lease, mature results, assessment, close, drain."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from .conftest import Host, read_json, request, wait_for

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 4
    max_concurrent_experiments: 4
    supply_idle_samples: 2
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
synthesis_trigger:
  mature_quorum_fraction: 0.5
"""

CLI = [sys.executable, "-m", "praxist_fs"]


def cli(run, *args, timeout=60):
    result = subprocess.run([*CLI, *args, f"--run-dir={run.root}"], capture_output=True,
                            text=True, timeout=timeout)
    return result.returncode, (json.loads(result.stdout) if result.stdout.strip() else None), \
        result.stderr


def gen_file(run, *parts):
    return read_json(run.root.joinpath("gen_1", *parts))


def publish(run, result_id, peer, mature=True):
    results = run.root / "gen_1" / "results"
    (results / f".{result_id}.tmp").write_text(json.dumps({"peer": peer, "mature": mature,
                                                            "score": 0.9}))
    (results / f".{result_id}.tmp").rename(results / f"{result_id}.json")


def test_a_generation_from_open_to_close(make_run, tmp_path):
    run = make_run(task_text=TASK)
    run.start()
    code, reply, _ = cli(run, "generation", "open", "1", "--cohort", "p1", "--cohort", "p2",
                         "--cohort", "p3", "--cohort", "p4")
    assert code == 0 and reply["outcome"] == "ok", reply
    assert gen_file(run, "peers", "p3.json") == {"peer": "p3", "generation": 1}

    waiters = {peer: subprocess.Popen([*CLI, "lease", "wait", f"--run-dir={run.root}",
                                       f"--peer={peer}", "--timeout=60"],
                                      stdout=subprocess.PIPE, text=True)
               for peer in ("p1", "p2", "p3", "p4")}
    leases = {peer: json.loads(proc.communicate(timeout=90)[0]) for peer, proc in waiters.items()}
    assert all(lease["state"] == "granted" for lease in leases.values())
    priorities = sorted(lease["priority"] for lease in leases.values())
    # hard quorum 2 of 4 replaces Q=1: two mature leases, and the others keep exploring
    assert priorities == ["frontier_followup", "frontier_followup", "mature", "mature"]
    assert all(lease["profiles"] == ["cpu"] for lease in leases.values())
    # status.json follows the lease files within its cadence
    maturity = wait_for(lambda: (m := run.status()["generation"]["maturity"])
                        and m["mature_commitments"] == 2 and m, message="two mature commitments")
    assert maturity["Q"] == 2

    mature_peer = next(p for p, lease in leases.items() if lease["priority"] == "mature")
    other_mature = next(p for p, lease in leases.items()
                        if lease["priority"] == "mature" and p != mature_peer)
    explorer = next(p for p, lease in leases.items() if lease["priority"] != "mature")
    decliner = next(p for p in leases if p not in (mature_peer, other_mature, explorer))

    consumed = run.reply(run.submit(request("mature-eval-1", peer=mature_peer, work_class="mature",
                                            lease=leases[mature_peer]["lease_id"])))
    assert consumed["lease"] == {"lease_id": leases[mature_peer]["lease_id"],
                                 "outcome": "consumed"}
    assert gen_file(run, "resource_supply", "leases", f"{mature_peer}.json")["state"] == "consumed"
    again = run.reply(run.submit(request("mature-eval-2", peer=mature_peer,
                                         lease=leases[mature_peer]["lease_id"])))
    assert again["lease"]["outcome"] == "reuse_ignored"
    code, _, _ = cli(run, "lease", "decline", f"--peer={decliner}")
    assert code == 0
    wait_for(lambda: gen_file(run, "resource_supply", "leases",
                              f"{decliner}.json")["state"] == "declined")
    run.wait_state(consumed["job_id"], "completed")
    publish(run, "r1", mature_peer)

    gate = tmp_path / "gate"
    slow_argv = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
    slow = run.reply(run.submit(request("explore-long", slow_argv, peer=explorer)))
    run.wait_state(slow["job_id"], "running")
    # seed 000: "at most one already justified experiment" per lease; a duplicate is none
    dup = run.reply(run.submit(request("explore-long", slow_argv, peer=explorer,
                                       lease=leases[explorer]["lease_id"])))
    assert dup["outcome"] == "duplicate" and dup["lease"]["outcome"] == "duplicate_ignored"
    assert gen_file(run, "resource_supply", "leases", f"{explorer}.json")["state"] == "granted"

    code, reply, _ = cli(run, "generation", "close", "1")
    assert code == 0 and "assessment" in reply["reason"]  # 1 of 2 mature peers so far
    wait_for(lambda: run.status()["generation"]["phase"] == "assessment")
    waiting = run.reply(run.submit(request("explore-late", peer=explorer)))
    wait_for(lambda: any(q["job_id"] == waiting["job_id"] and "assessment" in q["reason"]
                         for q in run.status()["queue"]), message="held by the assessment")
    top_up = run.reply(run.submit(request("mature-top-up", peer=other_mature,
                                          work_class="mature")))
    run.wait_state(top_up["job_id"], "completed")  # mature top-ups still run
    publish(run, "r2", other_mature)

    wait_for(lambda: (run.root / "gen_1" / "CLOSING_SIGNAL").exists())
    frozen = run.wait_state(waiting["job_id"], "rejected")
    assert "generation 1 closed" in frozen["reason"]
    late = run.reply(run.submit(request("too-late", peer=explorer, generation=1)))
    assert late["outcome"] == "rejected" and late["field"] == "generation"
    assert run.job(slow["job_id"])["state"] == "running"  # running work drains, not killed
    gate.touch()
    run.wait_state(slow["job_id"], "completed")
    wait_for(lambda: run.status()["generations"][0]["phase"] == "closed")
    publish(run, "r3", explorer)
    wait_for(lambda: run.status()["generations"][0]["quarantined"] == 1)

    stats = gen_file(run, "resource_supply", "stats.json")
    assert (stats["granted"], stats["consumed"], stats["declined"], stats["revoked"]) == (4, 1, 1, 2)
    assert stats["reuse_ignored"] == 1 and stats["conversion_rate"] == 0.25
    assert stats["by_priority"]["mature"]["granted"] == 2
    assert stats["by_priority"]["mature"]["consumed"] == 1

    run.kill()
    run.start()
    assert gen_file(run, "resource_supply", "stats.json") == stats  # nothing reset or re-counted
    status = wait_for(lambda: (s := run.status()) and s["coordinator"]["pid"] == run.proc.pid and s)
    assert status["generations"][0]["stats"]["granted"] == 4
    assert run.job(waiting["job_id"])["state"] == "rejected"  # a restart never revives it


def test_interrupted_grants_are_revoked_at_restart(make_run):
    run = make_run(task_text=TASK)
    run.start()
    assert cli(run, "generation", "open", "1", "--cohort", "solo")[0] == 0
    waiter = subprocess.Popen([*CLI, "lease", "wait", f"--run-dir={run.root}", "--peer=solo",
                               "--timeout=60"], stdout=subprocess.PIPE, text=True)
    lease = json.loads(waiter.communicate(timeout=90)[0])
    assert lease["priority"] == "mature"  # a cohort of one gets mature advice
    run.kill()
    run.start()
    revoked = wait_for(lambda: (doc := gen_file(run, "resource_supply", "leases", "solo.json"))
                       and doc["state"] == "revoked" and doc)
    assert "restarted" in revoked["reason"]
    assert gen_file(run, "resource_supply", "stats.json")["revoked"] == 1


def test_an_assessment_closes_by_itself_at_its_deadline(make_run, tmp_path):
    """seed 000 "Timing And Close": "Assessment is not CLOSING_SIGNAL. Once the quota is
    met, or the generation reaches its safety bound, the normal strict close path takes
    over" -- nobody sends close: at the deadline the queue freezes and CLOSING_SIGNAL is
    written."""
    run = make_run(task_text=TASK)
    run.start()
    deadline = datetime.now(timezone.utc) + timedelta(seconds=15)  # time to assess first
    assert cli(run, "generation", "open", "1", "--deadline", deadline.isoformat())[0] == 0
    gate = tmp_path / "gate"
    argv = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
    running = run.reply(run.submit(request("explore-long", argv)))
    run.wait_state(running["job_id"], "running")
    code, reply, _ = cli(run, "generation", "assess", "1")
    assert code == 0 and reply["generation"]["close_requested"] is False
    held = run.reply(run.submit(request("explore-late")))
    assert held["outcome"] == "accepted", held
    signal = wait_for(lambda: read_json(run.root / "gen_1" / "CLOSING_SIGNAL"), timeout=40,
                      message="CLOSING_SIGNAL at the deadline")
    assert signal["reason"] == "deadline passed" and signal["at"] >= deadline.timestamp()
    frozen = run.wait_state(held["job_id"], "rejected")
    assert frozen["reason"] == "generation 1 closed before it started (deadline passed)"
    gate.touch()
    run.wait_state(running["job_id"], "completed", "failed", "cancelled")
    wait_for(lambda: run.status()["generations"][0]["phase"] == "closed")


def test_a_mature_top_up_takes_the_slot_kept_for_exploration_that_assessment_holds(make_run):
    """seed 000 "Timing And Close": "exploration_reserve prevents mature work from consuming
    every slot when exploration is queued" -- not exploration that assessment forbids: the
    deadline-safe mature top-up runs at once in the run's one slot."""
    one_slot = TASK.replace("concurrent_experiments: 4", "concurrent_experiments: 1")
    run = make_run(task_text=one_slot)
    run.start()
    deadline = datetime.now(timezone.utc) + timedelta(hours=1)
    assert cli(run, "generation", "open", "1", "--deadline", deadline.isoformat())[0] == 0
    assert cli(run, "generation", "assess", "1")[0] == 0
    ordinary = run.reply(run.submit(request("explore-held")))
    top_up = run.reply(run.submit(request("mature-top-up", work_class="mature", eta_s=60)))
    run.wait_state(top_up["job_id"], "completed")
    wait_for(lambda: "only mature top-ups start" in
             (run.job(ordinary["job_id"]) or {}).get("reason", ""),
             message="the ordinary job held by the assessment")


GPU_TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: {slots}
    max_concurrent_experiments: 4
    supply_idle_samples: 1
    default_profile: gpu45
    profiles:
      gpu45: {{accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}}
"""


def gpu_pair(make_run, tmp_path, slots_a=1, slots_b=2):
    host = Host(tmp_path)
    host.edit_device(1, utilization_pct=100)  # one usable device for both runs
    a = make_run(name="run-a", task_text=GPU_TASK.format(slots=slots_a))
    b = make_run(name="run-b", task_text=GPU_TASK.format(slots=slots_b))
    for run in (a, b):
        run.start(env=host.env())
    return host, a, b


def granted_lease(run, peer):
    assert cli(run, "generation", "open", "1", "--cohort", peer)[0] == 0
    waiter = subprocess.Popen([*CLI, "lease", "wait", f"--run-dir={run.root}", f"--peer={peer}",
                               "--timeout=60"], stdout=subprocess.PIPE, text=True)
    return json.loads(waiter.communicate(timeout=90)[0])


def test_a_lease_claims_gpu_capacity_that_real_work_of_another_run_preempts(make_run, tmp_path):
    host, a, b = gpu_pair(make_run, tmp_path)
    lease = granted_lease(a, "pa")
    assert lease["claim"]["uuid"] == "GPU-fake-0" and lease["claim"]["utilization_pct"] == 45
    registry = wait_for(lambda: next((doc for p in host.registry.glob("*.json")
                                      if (doc := read_json(p)) and doc.get("claims")), None))
    assert [c["lease_id"] for c in registry["claims"]] == [lease["lease_id"]]
    gate = tmp_path / "gate"
    argv = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
    jobs = [b.reply(b.submit(request(f"real-{i}", argv)))["job_id"] for i in range(2)]
    for job_id in jobs:  # a claim never blocks real work: both place beside it
        assert b.wait_state(job_id, "running")["attempts"][0]["gpus"] == ["GPU-fake-0"]
    revoked = wait_for(lambda: (doc := read_json(a.root / "gen_1" / "resource_supply" /
                                                 "leases" / "pa.json"))
                       and doc["state"] == "revoked" and doc)
    assert "preempted" in revoked["reason"]
    gate.touch()


def test_a_claim_that_cannot_be_released_stays_visible_until_it_can(make_run, tmp_path):
    import hashlib

    host, a, _ = gpu_pair(make_run, tmp_path)
    lease = granted_lease(a, "pa")
    path = host.registry / f"{hashlib.sha256(str(a.root).encode()).hexdigest()[:16]}.json"
    wait_for(lambda: (read_json(path) or {}).get("claims"))  # published right after the grant
    path.unlink()
    path.mkdir()  # the registry entry can no longer be replaced (root ignores file modes)
    assert cli(a, "lease", "decline", "--peer=pa")[0] == 0
    lease_file = a.root / "gen_1" / "resource_supply" / "leases" / "pa.json"
    stuck = wait_for(lambda: (doc := read_json(lease_file)) and doc["release_pending"] and doc)
    assert stuck["state"] == "declined" and stuck["lease_id"] == lease["lease_id"]
    wait_for(lambda: a.status()["generation"]["maturity"]["mature_commitments"] == 0)
    path.rmdir()  # reconciliation retries and succeeds
    wait_for(lambda: read_json(lease_file)["release_pending"] is False)
