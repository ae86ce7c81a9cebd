"""A damaged last journal record (bit rot, not a crash) is never dropped silently
(issue 14, item 5): the start stops and names it; an operator's
``--drop-damaged-record`` sets it aside, and every file that proves what it said
(an acknowledgement, a launch) is set aside or released so that nothing stands
that the coordinator does not know, and no command runs twice."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from .conftest import (
    CPU_ONLY, counting, forked_at_start, gone, held_start, read_json, request, starts,
    wait_for,
)


def damage_last_record(run) -> tuple[int, str]:
    """Flip one bit in the middle of the journal's last record, as a bad sector would;
    returns its seq and its type."""
    journal = run.sched / "journal" / "journal.log"
    data = bytearray(journal.read_bytes())
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    seq, _, payload = bytes(data[start:]).split(b" ", 2)
    data[start + (len(data) - start) // 2] ^= 0x01
    journal.write_bytes(bytes(data))
    return int(seq), json.loads(payload)["type"]


def refused(run) -> str:
    """Start a coordinator that must refuse; its log."""
    run.start_raw()
    assert run.proc.wait(timeout=15) == 1
    run.proc = None
    return (run.root.parent / f"coordinator-{run.root.name}.log").read_text()


def start_dropping(run, seq: int) -> None:
    serve = run.serve_command
    run.serve_command = lambda: [*serve(), "--drop-damaged-record", str(seq)]
    run.start()
    run.serve_command = serve


def problems(run) -> list[dict]:
    status = wait_for(lambda: (s := run.status()) and s["coordinator"]["pid"] == run.proc.pid
                      and s, message="status.json of the new coordinator")
    return status["coordinator"]["problems"]


def test_an_acceptance_lost_to_damage_leaves_no_orphan_reply_and_is_accepted_again(make_run):
    run = make_run()
    run.start()
    doc = request("held-then-damaged", hold=True)  # held: its acceptance stays the last record
    rid = run.submit(doc, name="sent-once.json")
    accepted = run.reply(rid)
    assert accepted["outcome"] == "accepted"
    # the reply comes before the request leaves the spool: killed in between, the restart
    # would read the request again, and this test is about the acceptance's record alone
    wait_for(lambda: not (run.sched / "spool" / "incoming" / "sent-once.json").exists(),
             message="the accepted request out of the spool")
    run.kill()
    seq, kind = damage_last_record(run)
    assert kind == "request_seen"

    log = refused(run)
    assert f"record seq {seq} " in log and "fails its checksum" in log
    assert f"--drop-damaged-record {seq}" in log
    assert read_json(run.sched / "spool" / "replies" / f"{rid}.json") == accepted  # untouched

    start_dropping(run, seq)
    [case] = problems(run)
    kept = {item["path"]: item["why"] for item in case["items"]}
    reply_path = f"resource_scheduler/spool/replies/{rid}.json"
    job_path = f"resource_scheduler/jobs/queued/{accepted['job_id']}.json"
    assert set(kept) == {f"journal-seq-{seq}.bin", reply_path, job_path}
    assert "(accepted)" in kept[reply_path]
    quarantined = run.root / case["case"]
    assert json.loads((quarantined / reply_path).read_text()) == accepted
    assert not (run.root / reply_path).exists() and not (run.root / job_path).exists()
    table = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, check=True).stdout
    assert f"PROBLEM: 3 item(s) set aside in {case['case']}" in table

    run.submit(doc, name="sent-once.json")  # the peer sends the very same request again
    again = run.reply(rid)
    assert again["outcome"] == "accepted" and again["job_id"] == accepted["job_id"]
    assert run.wait_state(accepted["job_id"], "queued")["request_id"] == rid


def test_a_lost_launch_record_never_runs_the_command_twice(make_run, tmp_path):
    run = make_run(task_text=CPU_ONLY)
    marker, gate = tmp_path / "starts", tmp_path / "gate"
    tag = "launch-then-damaged"
    job_id = f"{tag}-{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
    run.submit(request(tag, counting(marker, f"while [ ! -e {gate} ]; do sleep 0.05; done")))
    # Read at start, the request is accepted and launched in one batch, on a shim started
    # for it (the supervisors forked for the start are killed first); the coordinator dies
    # once that shim runs, before its pid is journaled: the launch is the last record, and
    # the shim waits at the barrier for a GO.
    held, go_on = held_start(tmp_path)
    run.start_raw({**held, "PRAXIST_CRASH_AT": "effect.SpawnAttempt.after"})
    for supervisor in forked_at_start(run)[1]:
        supervisor.kill()
        wait_for(lambda: gone(supervisor), message="the supervisor killed")
    go_on()
    assert run.proc.wait(timeout=15) == 86
    attempt = run.sched / "attempts" / job_id / "a1"
    wait_for(lambda: read_json(attempt / "READY"), message="the shim at the barrier")
    seq, kind = damage_last_record(run)
    assert kind == "attempt_launched"

    assert f"--drop-damaged-record {seq}" in refused(run)
    start_dropping(run, seq)
    [case] = problems(run)
    assert any(item["path"] == f"resource_scheduler/attempts/{job_id}/a1"
               and "never started" in item["why"] for item in case["items"])
    wait_for(lambda: starts(marker), message="the job's command, launched again")
    gate.touch()
    job = run.wait_state(job_id, "completed")
    assert [a["attempt_id"] for a in job["attempts"]] == ["a1"]
    assert starts(marker) == [job_id]  # the old shim was sent away: it never ran it


def test_an_unknown_attempt_that_was_given_go_stops_the_start(make_run):
    run = make_run()
    run.start()
    job_id = run.reply(run.submit(request("held-with-stray-go", hold=True)))["job_id"]
    run.kill()
    stray = run.sched / "attempts" / job_id / "a1"  # a launch and its GO the journal lost
    stray.mkdir(parents=True)
    (stray / "GO").touch()
    log = refused(run)
    assert f"{stray}: an attempt the journal has no record of was given GO" in log
    assert "Traceback" not in log and (stray / "GO").exists()


def test_a_lease_grant_lost_to_damage_is_set_aside_and_the_peer_gets_a_new_one(make_run):
    run = make_run(task_text=GENERATION_TASK)
    run.start()
    assert cli(run, "generation", "open", "1", "--cohort", "solo").returncode == 0
    lease = json.loads(cli(run, "lease", "wait", "--peer=solo", "--timeout=60").stdout)
    run.kill()
    seq, kind = damage_last_record(run)
    assert kind == "lease_granted"

    assert f"--drop-damaged-record {seq}" in refused(run)
    start_dropping(run, seq)
    [case] = problems(run)
    lease_path = "gen_1/resource_supply/leases/solo.json"
    assert [item["path"] for item in case["items"]][1:] == [lease_path]
    assert json.loads((run.root / case["case"] / lease_path).read_text()) == lease
    again = json.loads(cli(run, "lease", "wait", "--peer=solo", "--timeout=60").stdout)
    assert again["state"] == "granted"  # a grant the journal knows, and revokes at a restart
    assert read_json(run.root / lease_path) == again


GENERATION_TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    max_concurrent_experiments: 2
    supply_idle_samples: 1
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
"""


def cli(run, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "praxist_fs", *args, f"--run-dir={run.root}"],
                          capture_output=True, text=True, timeout=90)
