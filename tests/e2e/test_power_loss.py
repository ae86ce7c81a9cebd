"""Power loss at named crash points: only what was fsynced survives (R-DUR-1, R-DUR-2).

Each case starts a coordinator that records its disk operations in a ledger
(PRAXIST_POWERLOSS_LEDGER) and dies at one crash point (PRAXIST_CRASH_AT).
The machine then "loses power": every shim and command of the run is killed,
and tests/powerloss.py rewrites the run directory to the worst state the
ledger allows (unsynced content and unsynced directory entries dropped).
A normal coordinator starts on what is left, as a new boot; then every reply a peer could
have seen before the cut must name the same job again, every journal record
that survived must still be there (or in the snapshot that replaced it), no
command may have started twice (one whose attempt was lost may have started
once, never twice), and the invariant checker must pass.
"""

from __future__ import annotations

import json
import time

import pytest

from .. import powerloss
from ..invariants import check_run
from .conftest import read_json, request, wait_for
from .test_crash_matrix import (
    BASIC, COMPACT_OFTEN, COMPACTION, CRASH_EXIT, GENERATION, TASK, basic_scenario, job_ids,
)

# Points reached only later in the basic scenario: retries, exits and their job moves.
LATE = ["journal.after_commit:9", "effect.WriteJob.after:9", "effect.WriteReply.after:5",
        "effect.ConsumeRequest.after:4", "effect.WriteGo.after:4"]
# What each basic job's attempts exit with when nothing is lost (one exits 75 once).
EXIT_CODES = {"a": [0], "b": [75, 0], "c": [3], "d": [0]}
RAN = {"completed", "failed", "infra_retry"}
# The machine comes back as a new boot: page-cache state (an unsynced GO) is gone with it.
NEW_BOOT = {"PRAXIST_BOOT_ID": "boot-after-the-power-cut"}


def start_recording(run, point, ledger, env=None):
    return run.start_raw(env={"PRAXIST_CRASH_AT": point, "PRAXIST_POWERLOSS_LEDGER": str(ledger),
                              **(env or {})})


def cut_power(run, proc, point, ledger):
    """The coordinator died at ``point``; the machine goes down with everything it ran.

    Returns what a peer could have read before the cut (replies, control replies) and
    the journal records that survived it."""
    assert proc.wait(timeout=30) == CRASH_EXIT, f"{point} was never reached"
    run.kill_attempt_groups()
    seen = {str(path.relative_to(run.sched)): read_json(path)
            for inbox in ("spool/replies", "control/replies")
            for path in (run.sched / inbox).glob("*.json")}
    print("power cut:", *powerloss.apply(ledger, run.root), sep="\n  ")  # shown on failure
    return seen, journal_records(run)


def journal_records(run):
    """seq -> line of the journal file, and the seq its snapshot covers (0: none)."""
    journal = run.sched / "journal"
    lines = {int(line.split(b" ", 1)[0]): line
             for line in (journal / "journal.log").read_bytes().splitlines()}
    snapshot = journal / "snapshot.jsonl"
    header = snapshot.read_bytes().split(b"\n", 1)[0] if snapshot.exists() else b"{}"
    return lines, json.loads(header).get("journal_seq", 0)


def assert_nothing_acknowledged_was_lost(run, seen, journal):
    """``seen`` and ``journal`` as ``cut_power`` found them."""
    (lines, covered), (lines_now, covered_now) = journal, journal_records(run)
    assert covered_now >= covered
    assert all(seq <= covered_now or lines_now.get(seq) == line for seq, line in lines.items())
    for path, before in seen.items():
        after = wait_for(lambda: read_json(run.sched / path), timeout=15,
                         message=f"{path} again after the restart")
        assert (after.get("job_id"), after.get("outcome")) == \
            (before.get("job_id"), before.get("outcome")), path


def starts_problems(run, jobs, starts):
    """Each command started once per attempt that ran, at most once more if one was lost."""
    ran = starts.read_text().split() if starts.exists() else []
    problems = []
    for job_id in jobs.values():
        attempts = run.job(job_id)["attempts"]
        least = sum(1 for a in attempts if a["outcome"] in RAN)
        most = least + sum(1 for a in attempts if a["outcome"] == "lost")
        if not least <= ran.count(job_id) <= most:
            problems.append(f"{job_id}: started {ran.count(job_id)} times, {least} ran, "
                            f"{most - least} lost")
    return problems


@pytest.mark.parametrize("point, env", [(p, {}) for p in BASIC + LATE] +
                         [(p, COMPACT_OFTEN) for p in COMPACTION])
def test_power_loss_at_point_keeps_every_acknowledgement(make_run, tmp_path, point, env):
    run = make_run(task_text=TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, point, ledger, env)
    ids = basic_scenario(run, tmp_path)
    before_cut = cut_power(run, proc, point, ledger)
    run.start({**env, **NEW_BOOT})
    jobs = job_ids(run, ids)
    wait_for(lambda: all(run.job(j) and run.job(j)["state"] in
                         ("completed", "failed", "drained_unknown") for j in jobs.values()),
             timeout=30, message="every job to end after the restart")
    assert_nothing_acknowledged_was_lost(run, *before_cut)
    for tag, job_id in jobs.items():
        job = run.job(job_id)
        codes = [a["exit_code"] for a in job["attempts"] if a["outcome"] in RAN]
        if job["state"] == "drained_unknown":  # its command was running when power went
            assert job["attempts"][-1]["outcome"] == "lost"
            assert codes == EXIT_CODES[tag][:len(codes)] and len(codes) < len(EXIT_CODES[tag])
        else:
            assert codes == EXIT_CODES[tag], (tag, job)
            assert job["state"] == ("failed" if tag == "c" else "completed")
    assert run.reply("a-again")["job_id"] == jobs["a"]
    assert run.reply("bad")["outcome"] == "rejected"
    assert not starts_problems(run, jobs, tmp_path / "starts")
    wait_for(lambda: not check_run(run.root), timeout=10,
             message=f"invariants: {check_run(run.root)}")


def _control(run, name, doc):
    control = run.sched / "control"
    (control / "tmp").mkdir(parents=True, exist_ok=True)
    (control / "tmp" / name).write_text(json.dumps(doc))
    (control / "tmp" / name).rename(control / name)


@pytest.mark.parametrize("point", GENERATION + ["effect.WriteGenerationFile.lease.after:2"])
def test_power_loss_in_a_generation_keeps_leases_and_stats_consistent(make_run, tmp_path, point):
    run = make_run(task_text=TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, point, ledger)
    wait_for(lambda: (run.sched / "endpoint.json").exists() or proc.poll() is not None)
    _control(run, "open.json", {"action": "generation_open", "generation": 1, "cohort": ["p1"]})
    idle = run.root / "gen_1" / "resource_supply" / "idle"
    idle.mkdir(parents=True, exist_ok=True)
    (idle / "p1.json").write_text(json.dumps({"peer": "p1", "generation": 1, "at": time.time()}))
    lease_file = run.root / "gen_1" / "resource_supply" / "leases" / "p1.json"
    lease = wait_for(lambda: proc.poll() is not None or
                     ((doc := read_json(lease_file)) and doc["state"] == "granted" and doc),
                     timeout=30)
    if isinstance(lease, dict) and proc.poll() is None:
        run.submit(request("leased", lease=lease["lease_id"], peer="p1"), name="leased.json")
        _control(run, "close.json", {"action": "generation_close", "generation": 1})
    before_cut = cut_power(run, proc, point, ledger)
    run.start(NEW_BOOT)
    wait_for(lambda: (run.sched / "control" / "replies" / "open.json").exists(), timeout=30)
    assert_nothing_acknowledged_was_lost(run, *before_cut)
    wait_for(lambda: not check_run(run.root, settled=False), timeout=15,
             message=f"invariants: {check_run(run.root, settled=False)}")
    stats = read_json(run.root / "gen_1" / "resource_supply" / "stats.json")
    assert stats is not None and stats["granted"] >= stats["consumed"]


def test_a_reply_lost_to_the_power_cut_is_answered_again_from_the_journal(make_run, tmp_path):
    run = make_run(task_text=TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, "effect.ConsumeRequest.after", ledger)
    rid = run.submit(request("only"), name="only.json")
    before_cut = cut_power(run, proc, "effect.ConsumeRequest.after", ledger)
    reply = before_cut[0]["spool/replies/only.json"]
    assert reply["outcome"] == "accepted"
    # The reply and the request's removal were never fsynced into their directories:
    assert not (run.sched / "spool" / "replies" / "only.json").exists()
    assert (run.sched / "spool" / "incoming" / "only.json").exists()
    run.start(NEW_BOOT)
    assert run.reply(rid) == reply
    assert run.wait_state(reply["job_id"], "completed")
    assert sorted(p.name for p in (run.sched / "jobs" / "done").glob("*.json")) == \
        [f"{reply['job_id']}.json"]
    assert_nothing_acknowledged_was_lost(run, *before_cut)
