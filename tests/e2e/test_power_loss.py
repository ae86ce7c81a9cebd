"""Power loss at named crash points: only what was fsynced survives (R-DUR-1, R-DUR-2).

Each case starts a coordinator that records its disk operations in a ledger
(PRAXIST_POWERLOSS_LEDGER) and dies at one crash point (PRAXIST_CRASH_AT).
The machine then "loses power": every shim and command of the run is killed,
and tests/powerloss.py rewrites the run directory to the worst state the
ledger allows (unsynced content and unsynced directory entries dropped), or, in
the drawn cases, to a state drawn by seed among all those a disk could leave
(any prefix of unsynced writes, torn or zero-filled appends, any subset of
unsynced names), sometimes with a second power cut while the next boot recovers.
A normal coordinator starts on what is left, as a new boot; then every reply a peer could
have seen before the cut must name the same job again, every journal record
that survived must still be there (or in the snapshot that replaced it), no
command may have started twice (one whose attempt was lost may have started
once, never twice), and the invariant checker must pass.

``PRAXIST_POWERLOSS_DRAWS=N`` runs N drawn cases of each kind instead of the few CI
runs; ``make soak`` (tests/soak.py --real) draws them too.
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest

from .. import powerloss
from ..invariants import check_run
from .conftest import no_exit_json, read_json, request, wait_for
from .crashes import (
    BASIC, COMPACTION, COMPACT_OFTEN, CRASH_EXIT, CRASH_TASK, GENERATION, basic_scenario,
    job_ids, more_records_until_it_dies, settled_invariants,
)

DRAWS = int(os.environ.get("PRAXIST_POWERLOSS_DRAWS", "0"))

# Points reached only later in the basic scenario: retries, exits and their job moves.
LATE = ["journal.after_commit@done:d", "effect.WriteJob.after:9", "effect.WriteReply.after:5",
        "effect.ConsumeRequest.after:4", "effect.WriteGo.after:4"]
# What each basic job's attempts exit with when nothing is lost (one exits 75 once).
EXIT_CODES = {"a": [0], "b": [75, 0], "c": [3], "d": [0]}
RAN = {"completed", "failed", "infra_retry"}
# The machine comes back as a new boot: page-cache state (an unsynced GO) is gone with it.
NEW_BOOT = {"PRAXIST_BOOT_ID": "boot-after-the-power-cut"}


def start_recording(run, point, ledger, env=None):
    return run.start_raw(env={"PRAXIST_CRASH_AT": point, "PRAXIST_POWERLOSS_LEDGER": str(ledger),
                              **(env or {})})


def cut_power(run, proc, point, ledger, seed=None):
    """The coordinator died at ``point``; the machine goes down with everything it ran,
    leaving the worst state or, with ``seed``, a drawn one.

    Returns what a peer could have read before the cut (replies, control replies), the
    journal records that survived it, and the exits the shims had recorded durably (the
    exit.json files the cut left)."""
    assert proc.wait(timeout=30) == CRASH_EXIT, f"{point} was never reached"
    return lose_power(run, point, ledger, seed)


def cut_power_in_recovery(run, proc, point, ledger, seed):
    """``cut_power`` for a boot recovering from a cut. One that has nothing to do at
    ``point`` (no job file to write: every job had ended before the first cut) loses
    its power once it is idle instead."""
    wait_for(lambda: proc.poll() is not None or idle(run, proc.pid), timeout=30,
             message=f"{point} or an idle coordinator")
    if proc.poll() is None:
        proc.kill()
    if proc.wait() == CRASH_EXIT:
        return lose_power(run, point, ledger, seed)
    return lose_power(run, f"{point} (never reached: once idle)", ledger, seed)


def idle(run, pid):
    """The coordinator ``pid`` says it serves with nothing queued or in flight."""
    status = read_json(run.sched / "status.json") or {}
    return status.get("coordinator", {}).get("pid") == pid and \
        not any(status["counts"][state] for state in ("queued", "running", "suspended"))


def lose_power(run, point, ledger, seed):
    """The machine goes down with everything the run ran (its coordinator is dead)."""
    run.kill_attempt_groups()
    seen = {str(path.relative_to(run.sched)): reply  # a torn one tells a peer nothing
            for inbox in ("spool/replies", "control/replies")
            for path in (run.sched / inbox).glob("*.json")
            if (reply := read_json(path)) is not None}
    changes = powerloss.apply(ledger, run.root, seed=seed)
    print(f"power cut at {point} (seed {seed}):", *changes, sep="\n  ")  # shown on failure
    # after the cut: an exit.json written, but not yet fsynced into its directory when the
    # power went (its shim fsyncs it once its coordinator died, so just then), is gone
    exits = {path.parent.relative_to(run.sched / "attempts").parts: record
             for path in (run.sched / "attempts").glob("*/*/exit.json")
             if (record := read_json(path)) is not None}
    return seen, journal_records(run), exits


def journal_records(run):
    """seq -> whole line of the journal file (not a torn tail: it was never a record),
    and the seq its snapshot covers (0: none)."""
    journal = run.sched / "journal"
    *whole, _torn = (journal / "journal.log").read_bytes().split(b"\n")  # after the last \n
    lines = {int(line.split(b" ", 1)[0]): line for line in whole}
    snapshot = journal / "snapshot.jsonl"
    header = snapshot.read_bytes().split(b"\n", 1)[0] if snapshot.exists() else b"{}"
    return lines, json.loads(header).get("journal_seq", 0)


def assert_nothing_acknowledged_was_lost(run, seen, journal, exits):
    """``seen``, ``journal`` and ``exits`` as ``cut_power`` found them."""
    (lines, covered), (lines_now, covered_now) = journal, journal_records(run)
    assert covered_now >= covered
    changed = {seq: (line, lines_now.get(seq)) for seq, line in lines.items()
               if seq > covered_now and lines_now.get(seq) != line}
    assert not changed, f"journal records lost or rewritten (was, now): {changed}"
    for path, before in seen.items():
        after = wait_for(lambda: read_json(run.sched / path), timeout=15,
                         message=f"{path} again after the restart")
        assert (after.get("job_id"), after.get("outcome")) == \
            (before.get("job_id"), before.get("outcome")), path
    for (job_id, attempt_id), record in exits.items():
        # the shim fsynced this end before the cut: it is known, not `lost` like a
        # command that was still running when the power went
        attempt = wait_for(lambda: next((a for a in (run.job(job_id) or {}).get("attempts", [])
                                         if a["attempt_id"] == attempt_id and a["outcome"]),
                                        None),
                           timeout=15, message=f"{job_id} {attempt_id} to end after the restart")
        assert attempt["outcome"] != "lost" and attempt["exit_code"] == record["exit_code"], \
            (job_id, attempt, record)


@pytest.mark.parametrize("point, env", [(p, {}) for p in BASIC + LATE] +
                         [(p, COMPACT_OFTEN) for p in COMPACTION])
def test_power_loss_at_point_keeps_every_acknowledgement(make_run, tmp_path, point, env):
    run = make_run(task_text=CRASH_TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, point, ledger, env)
    ids = basic_scenario(run, tmp_path)
    if point in COMPACTION:
        more_records_until_it_dies(run, proc, tmp_path / "starts")
    before_cut = cut_power(run, proc, point, ledger)
    run.start({**env, **NEW_BOOT})
    assert_recovered(run, tmp_path, ids, [before_cut])


def assert_recovered(run, tmp_path, ids, cuts):
    """The basic scenario after its power cuts: each as ``cut_power`` returned it."""
    jobs = job_ids(run, ids)
    # one read per job: a job file moving between directories is in neither for an instant
    wait_for(lambda: all((doc := run.job(j)) and doc["state"] in
                         ("completed", "failed", "drained_unknown") for j in jobs.values()),
             timeout=30, message="every job to end after the restart")
    for before_cut in cuts:
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
    # each command started once per attempt that ran, and at most once per lost one
    settled_invariants(run, timeout=10, starts=tmp_path / "starts", power_lost=True)


# Where a drawn cut comes: the named points, and between a journal append and its
# fsync (the only moment a torn record can exist), at the first commit, at b's first end
# and its retry, and at the last job's end (d sleeps: it ends last).
TORN = ["journal.after_append", "journal.after_append@ended:b/a1",
        "journal.after_append@done:d"]
# Where the boot after a power cut is cut again: each step of recovery, and its first
# commits and writes (reached in every scenario: the lost attempts are journaled).
RECOVERY = ["start.after_journal_open", "start.after_repair", "start.after_adopt",
            "journal.after_append", "journal.after_commit", "effect.WriteJob.after",
            "status.after_write"]


def draw_power_loss(seed):
    """Seed -> (first cut's point, environment, second cut's point or None). Every fourth
    seed tears an append; every second one is cut again, in turn at each recovery step."""
    rng = random.Random(f"power-loss:{seed}")
    point, env = rng.choice([(p, {}) for p in BASIC + LATE + TORN] +
                            [(p, COMPACT_OFTEN) for p in COMPACTION])
    if seed % 4 == 1:
        point, env = rng.choice(TORN), {}
    return point, env, RECOVERY[seed // 2 % len(RECOVERY)] if seed % 2 == 0 else None


def drawn_power_loss_case(make_run, tmp_path, seed):
    """The basic scenario, a drawn power cut, and perhaps a second one in recovery."""
    point, env, again = draw_power_loss(seed)
    run = make_run(task_text=CRASH_TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, point, ledger, env)
    ids = basic_scenario(run, tmp_path)
    if point in COMPACTION:  # the N-th compaction: as many as the machine's speed allows
        more_records_until_it_dies(run, proc, tmp_path / "starts")
    cuts = [cut_power(run, proc, point, ledger, seed=f"{seed}:1")]
    if again is not None:
        second = tmp_path / "ledger-recovery.jsonl"
        proc = start_recording(run, again, second, {**env, **NEW_BOOT})
        cuts.append(cut_power_in_recovery(run, proc, again, second, seed=f"{seed}:2"))
    run.start({**env, "PRAXIST_BOOT_ID": "boot-after-the-last-power-cut"})
    assert_recovered(run, tmp_path, ids, cuts)


@pytest.mark.parametrize("seed", range(1, 1 + (DRAWS or 16)))
def test_a_drawn_power_loss_keeps_every_acknowledgement(make_run, tmp_path, seed):
    """R-DUR-1, R-DUR-2 under a real disk's freedom: torn appends, half-made directories,
    moves in both places, and power lost again during recovery."""
    drawn_power_loss_case(make_run, tmp_path, seed)


# Draws the real soak failed on: 251097084, a command that ended before its batch did
# lost its exit.json with its attempt directory; 729505948, every job had ended before
# the first cut, so recovery never wrote the job file it was to be cut after.
SOAK_FOUND = [251097084, 729505948]


@pytest.mark.parametrize("seed", SOAK_FOUND)
def test_a_drawn_power_loss_the_soak_found_keeps_every_acknowledgement(make_run, tmp_path, seed):
    drawn_power_loss_case(make_run, tmp_path, seed)


def test_the_draws_cover_torn_appends_and_every_recovery_step():
    draws = [draw_power_loss(seed) for seed in range(1, 17)]
    assert sum(point in TORN for point, _, _ in draws) >= 4
    assert {again for _, _, again in draws} == set(RECOVERY) | {None}


def _control(run, name, doc):
    control = run.sched / "control"
    (control / "tmp").mkdir(parents=True, exist_ok=True)
    (control / "tmp" / name).write_text(json.dumps(doc))
    (control / "tmp" / name).rename(control / name)


@pytest.mark.parametrize("point", GENERATION + ["effect.WriteGenerationFile.lease.after:2"])
def test_power_loss_in_a_generation_keeps_leases_and_stats_consistent(make_run, tmp_path, point):
    run = make_run(task_text=CRASH_TASK)
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
    wait_for(lambda: not check_run(run.root, settled=False, power_lost=True), timeout=15,
             message=f"invariants: {check_run(run.root, settled=False, power_lost=True)}")
    stats = read_json(run.root / "gen_1" / "resource_supply" / "stats.json")
    assert stats is not None and stats["granted"] >= stats["consumed"]


def test_a_reply_lost_to_the_power_cut_is_answered_again_from_the_journal(make_run, tmp_path):
    run = make_run(task_text=CRASH_TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, "effect.ConsumeRequest.after", ledger)
    # held: its acceptance launches nothing (a launch on a warm shim would share that
    # commit with its GO, and a command given GO before a power cut is not run again)
    rid = run.submit(request("only", hold=True), name="only.json")
    before_cut = cut_power(run, proc, "effect.ConsumeRequest.after", ledger)
    reply = before_cut[0]["spool/replies/only.json"]
    assert reply["outcome"] == "accepted"
    # The reply and the request's removal were never fsynced into their directories:
    assert not (run.sched / "spool" / "replies" / "only.json").exists()
    assert (run.sched / "spool" / "incoming" / "only.json").exists()
    run.start(NEW_BOOT)
    assert run.reply(rid) == reply
    _control(run, "release.json", {"action": "release", "jobs": ["only"]})
    assert run.wait_state(reply["job_id"], "completed")
    assert sorted(p.name for p in (run.sched / "jobs" / "done").glob("*.json")) == \
        [f"{reply['job_id']}.json"]
    assert_nothing_acknowledged_was_lost(run, *before_cut)


def test_an_exit_its_shim_recorded_before_the_power_cut_is_kept(make_run, tmp_path):
    """A command that ends at once, while the batch that gave its GO is still being
    carried out: its shim fsyncs exit.json into the attempt directory, which must be
    durable in its parents before exit.json is (the shim fsyncs them once it told the
    exit, before exit.json), or the power cut takes the exit along and the job reads `drained_unknown`
    (its command "lost") instead of its real end."""
    run = make_run(task_text=CRASH_TASK)
    ledger = tmp_path / "ledger.jsonl"
    proc = start_recording(run, "effect.WriteGo.after", ledger)
    rid = run.submit(request("quick", ["sh", "-c", "exit 3"]), name="quick.json")
    assert proc.wait(timeout=30) == CRASH_EXIT
    # the coordinator is gone right after the GO; the command ends before the power does,
    # and its supervisor leaves once exit.json is durable (its pool socket is closed)
    supervisor_leaves(run)
    before_cut = cut_power(run, proc, "effect.WriteGo.after", ledger)
    run.start(NEW_BOOT)
    job = run.wait_state(run.reply(rid)["job_id"], "failed", "drained_unknown")
    assert (job["state"], job["exit_code"]) == ("failed", 3), job
    assert_nothing_acknowledged_was_lost(run, *before_cut)


def test_an_end_its_coordinator_died_before_journaling_is_fsynced_by_its_supervisor(
        make_run, tmp_path):
    """A supervisor leaves exit.json unsynced only once its coordinator said on the pool
    socket that the end is journaled. Killed before that commit, the coordinator says
    nothing, and its pool socket closes: the supervisor fsyncs exit.json and its
    directories, then leaves. After a power cut the next coordinator finds the end there,
    with the command's own code, not `lost` (`drained_unknown`)."""
    run = make_run(task_text=CRASH_TASK)
    ledger, point = tmp_path / "ledger.jsonl", "journal.before_commit@ended:quick/a1"
    proc = start_recording(run, point, ledger)
    rid = run.submit(request("quick", ["sh", "-c", "exit 3"]), name="quick.json")
    assert proc.wait(timeout=30) == CRASH_EXIT
    supervisor_leaves(run)
    before_cut = cut_power(run, proc, point, ledger)
    run.start(NEW_BOOT)
    job = run.wait_state(run.reply(rid)["job_id"], "failed", "drained_unknown")
    assert (job["state"], job["exit_code"]) == ("failed", 3), job["reason"]
    assert [(a["outcome"], a["exit_code"]) for a in job["attempts"]] == [("failed", 3)]
    assert_nothing_acknowledged_was_lost(run, *before_cut)


def supervisor_leaves(run):
    """Wait until the supervisor of the run's one attempt has left: it leaves once
    exit.json is durable, when its coordinator is gone."""
    ready = wait_for(lambda: next(map(read_json, (run.sched / "attempts").glob("*/a1/READY")),
                                  None), timeout=15, message="the attempt's READY")
    wait_for(lambda: not os.path.exists(f"/proc/{ready['pid']}"), timeout=15,
             message="the supervisor to leave once exit.json is durable")


def test_an_end_journaled_from_the_status_pipe_stands_without_its_exit_json(make_run, tmp_path):
    """The shim tells the exit on its status pipe before it writes exit.json, and the
    coordinator journals the end from that. The power goes right after that commit, with no
    exit.json anywhere (here none can be written: the command left a directory in its
    place, and the shim died on it): after the reboot the journal's end stands, with the
    command's own code, and the command does not run again."""
    run = make_run(task_text=CRASH_TASK)
    ledger, point = tmp_path / "ledger.jsonl", "journal.after_commit@ended:told/a1"
    proc = start_recording(run, point, ledger)
    rid = run.submit(request("told", no_exit_json(tmp_path)), name="told.json")
    before_cut = cut_power(run, proc, point, ledger)
    run.start(NEW_BOOT)
    job = run.wait_state(run.reply(rid)["job_id"], "failed", "drained_unknown", "completed")
    assert (job["state"], job["exit_code"]) == ("failed", 3), job["reason"]
    assert [(a["outcome"], a["exit_code"]) for a in job["attempts"]] == [("failed", 3)]
    assert (tmp_path / "runs").read_text() == "ran\n"
    assert_nothing_acknowledged_was_lost(run, *before_cut)


def test_a_generation_made_by_a_coordinator_killed_before_its_fsync_survives_a_power_cut(
        make_run, tmp_path):
    """A coordinator killed between making gen_1's directories and fsyncing them: the next
    one must make them durable although they exist, or a later power cut takes the results
    peers published in them along."""
    run = make_run(task_text=CRASH_TASK)
    ledger = tmp_path / "ledger.jsonl"  # both coordinators record: the cut comes after both
    proc = start_recording(run, "generation.before_fsync", ledger)
    wait_for(lambda: (run.sched / "endpoint.json").exists() or proc.poll() is not None)
    _control(run, "open.json", {"action": "generation_open", "generation": 1, "cohort": ["p1"]})
    assert proc.wait(timeout=30) == CRASH_EXIT
    assert (run.root / "gen_1" / "results").is_dir()
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger)})
    assert wait_for(lambda: read_json(run.sched / "control" / "replies" / "open.json"),
                    timeout=30)["outcome"] == "ok"
    result = run.root / "gen_1" / "results" / "r1.json"
    with open(result, "w") as handle:  # the peer's own durable write
        handle.write(json.dumps({"peer": "p1", "mature": True, "score": 0.9}))
        handle.flush()
        os.fsync(handle.fileno())
    run.kill()
    run.kill_attempt_groups()
    print("power cut:", *powerloss.apply(ledger, run.root), sep="\n  ")
    assert json.loads(result.read_text())["peer"] == "p1"
