"""Trust on a shared box (R-SEC-4, R-SEC-5): the attacks of a peer of the documented
multi-user set-up, each tried by a real uid against a coordinator running as root.

Two users of one group are made for this module (tests/e2e/peers.py); the run directory
is theirs to read and search (setgid, 2750), the coordinator's to write. Each test is
an attack that worked before the run's directories were the coordinator's own, before
request ids, tags and caps were each uid's, and before the spool was read fairly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from praxist_fs import client
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.identity import job_id_for

from .conftest import TASK, Run, read_json, request, wait_for
from .peers import as_peer, attempt, shared_run, users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@pytest.fixture(scope="module")
def peers():
    with users(2) as made:
        yield made


@pytest.fixture
def shared(peers):
    """A run of the documented set-up for the peers' group; its coordinator is root."""
    with shared_run(peers[0].gid, TASK.format(slots=4, retries=0)) as run:
        yield run


def peer_submit(root: str, doc: dict, request_id: str) -> dict:
    """As a peer: submit through the client (the CLI's own functions) and wait for the
    reply, which must answer this uid's request."""
    layout = RunLayout.at(root)
    try:
        client.submit(layout, {**doc, "request_id": request_id})
        return client.wait_for_reply(layout, request_id, 20)
    except client.NotYours as exc:
        return {"not_yours": str(exc)}


def peer_control(root: str, doc: dict, request_id: str) -> dict:
    try:
        return client.send_control(RunLayout.at(root), {**doc, "request_id": request_id}, 20,
                                   "control")
    except client.NotYours as exc:
        return {"not_yours": str(exc)}


# -- R-SEC-4: the run's directories are the coordinator's own ---------------------------------


def swap_the_runs_directories(root: str) -> dict:
    """As a peer: rename logs/ and resource_scheduler/ away and put a tree of one's own in
    their place, as the review did on the run directory of the older set-up (2770)."""
    run = Path(root)
    return {
        "rename_logs": attempt(lambda: os.rename(run / "logs", run / "logs.old")),
        "rename_scheduler": attempt(lambda: os.rename(run / "resource_scheduler",
                                                      run / "rs.old")),
        "plant_symlink": attempt(lambda: os.symlink("/etc", run / "logs2")),
        "plant_directory": attempt(lambda: os.mkdir(run / "gen_9")),
        "rename_experiments": attempt(lambda: os.rename(run / "logs" / "experiments",
                                                        run / "logs" / "x")),
        "rename_journal": attempt(lambda: os.rename(run / "resource_scheduler" / "journal",
                                                    run / "resource_scheduler" / "j")),
    }


# The job prints a request; the route of the review then tries to make a root-owned file
# of that output and move it into the spool, where root's ownership would make it root's.
ROUTE_JOB = r"""printf '%s' "$PWN_REQUEST" """


def route_to_root(root: str, job_log: str) -> dict:
    """As a peer: every way to get a file the coordinator side wrote into the spool."""
    run = Path(root)
    incoming = run / "resource_scheduler" / "spool" / "incoming"
    found = {"swap_logs": attempt(lambda: os.rename(run / "logs", run / "logs.away"))}
    for name, path in (("log", Path(job_log)),
                       ("status", run / "resource_scheduler" / "status.json"),
                       ("policy", run / "resource_scheduler" / "policy.json")):
        found[f"move_{name}"] = attempt(lambda: os.rename(path, incoming / f"mv-{name}.json"))
        found[f"link_{name}"] = attempt(lambda: os.link(path, incoming / f"ln-{name}.json"))
    return found


def test_no_file_the_coordinator_side_writes_becomes_a_root_request(shared, peers):
    proof = shared.root.parent / "proof"
    shared.start()
    pwn = json.dumps({"peer": "x", "tag": "pwn", "argv": [
        "sh", "-c", f"id -u > {proof}"]})
    doc = request("route", ["sh", "-c", ROUTE_JOB], env={"PWN_REQUEST": pwn})
    reply = as_peer(peers[0], peer_submit, str(shared.root), doc, "route-1")
    job = shared.wait_state(reply["job_id"], "completed")
    log = shared.root / "logs" / "experiments" / job["job_id"] / "a1.log"
    assert log.read_text() == pwn
    assert log.stat().st_uid == peers[0].uid  # what its job printed is the peer's own file
    outcome = as_peer(peers[0], route_to_root, str(shared.root), str(log))
    for name in ("swap_logs", "move_log", "move_status", "move_policy"):
        assert outcome[name] == "PermissionError", (name, outcome)
    # a hard link of another's file: refused where fs.protected_hardlinks is 1 (the
    # default of systemd hosts); of its own log, allowed, and then refused by the reader
    assert outcome["link_log"] == "allowed", outcome
    incoming = shared.sched / "spool" / "incoming"
    wait_for(lambda: not any(incoming.glob("*.json")), message="the spool read")
    replies = [read_json(path) for path in (shared.sched / "spool" / "replies").glob("*.json")]
    assert all(r.get("uid") != 0 for r in replies if r.get("request_id") != "route-1")
    assert not proof.exists()  # nothing ran as root (nor as anyone: a linked log is refused)


def serve_exit(run: Run) -> tuple[int, str]:
    """A coordinator's exit code and what it printed, for a start that must be refused."""
    done = subprocess.run(run.serve_command(), capture_output=True, text=True, timeout=30,
                          env={**os.environ,
                               "PRAXIST_HOST_REGISTRY": str(run.root.parent / "registry")})
    return done.returncode, done.stderr


def test_the_older_set_up_is_refused_and_the_documented_one_cannot_be_swapped(shared, peers):
    shared.root.chmod(0o2770)  # the set-up documented before: anyone of the group swaps logs/
    code, said = serve_exit(shared)
    assert code == 78
    assert f"{shared.root}: is writable by its group (mode 2770) and not sticky" in said
    assert "chmod 2750 it" in said
    assert not (shared.root / "resource_scheduler").exists()  # nothing was made in it
    shared.root.chmod(0o2750)
    shared.start()
    outcome = as_peer(peers[0], swap_the_runs_directories, str(shared.root))
    assert outcome == dict.fromkeys(outcome, "PermissionError"), outcome


def test_status_says_when_a_served_run_became_unsafe(shared):
    shared.start()
    command = [sys.executable, "-m", "praxist_fs", "status", "--run-dir", str(shared.root)]
    assert "UNSAFE" not in subprocess.run(command, capture_output=True, text=True).stdout
    shared.root.chmod(0o2770)
    shown = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
    assert shown.startswith("UNSAFE: another uid could swap a directory of this run")
    assert f"{shared.root}: is writable by its group (mode 2770) and not sticky" in shown
    doc = json.loads(subprocess.run([*command, "--json"], capture_output=True,
                                    text=True, timeout=30).stdout)
    assert len(doc["unsafe_layout"]) == 1


@pytest.mark.parametrize("swap", ["logs_symlink", "journal_of_a_peer", "private_of_a_peer",
                                  "loose_parent"])
def test_serve_refuses_a_state_directory_it_does_not_own(shared, peers, swap):
    shared.start()
    shared.stop()
    closed = shared.root.parent / "closed"
    closed.mkdir(mode=0o700)
    if swap == "logs_symlink":  # what a peer planted in the older set-up
        os.rename(shared.root / "logs", shared.root / "logs.old")
        os.symlink(closed, shared.root / "logs")
        expected = f"{shared.root / 'logs'}: is a symbolic link"
    elif swap in ("journal_of_a_peer", "private_of_a_peer"):
        name = swap.split("_")[0]
        victim = shared.sched / name
        os.rename(victim, shared.sched / f"{name}.old")
        victim.mkdir()
        os.chown(victim, peers[0].uid, peers[0].gid)
        expected = f"{victim}: is owned by uid {peers[0].uid}, not by uid 0"
    else:
        shared.root.parent.chmod(0o775)  # whoever the group is could rename the run away
        expected = f"{shared.root.parent}: is writable by its group (mode 0775) and not sticky"
    code, said = serve_exit(shared)
    assert code == 78 and expected in said, said
    assert stat.S_IMODE(closed.stat().st_mode) == 0o700  # never chmodded through a link


def test_a_log_or_attempt_planted_as_a_link_or_a_fifo_is_refused_not_written_through(shared):
    shared.start()
    target, elsewhere = shared.root.parent / "target", shared.root.parent / "elsewhere"
    target.write_text("untouched\n")
    elsewhere.mkdir()
    logs, attempts = shared.root / "logs" / "experiments", shared.sched / "attempts"
    plants = {  # as only the coordinator's uid still could: what a start would refuse
        "linked": (lambda job: (logs / job).mkdir() or os.symlink(target, logs / job / "a1.log"),
                   "the log .* is a symbolic link: refusing to write through it"),
        "piped": (lambda job: (logs / job).mkdir() or os.mkfifo(logs / job / "a1.log"),
                  "the log .* is not a regular file: refusing to write through it"),
        "attempt": (lambda job: os.symlink(elsewhere, attempts / job),
                    "refused to start it: .*: is a symbolic link"),
    }
    for tag, (plant, said) in plants.items():
        plant(job_id_for(tag))
        reply = shared.reply(shared.submit(request(tag, ["echo", "written"])))
        job = shared.wait_state(reply["job_id"], "failed", timeout=30)
        assert job["exit_code"] == 126 and re.search(said, job["attempts"][0]["error"]), job
    assert target.read_text() == "untouched\n" and not os.listdir(elsewhere)


# -- R-SEC-5: each uid's requests, ids, tags and caps --------------------------------------


def list_and_read(root: str, name: str) -> dict:
    sched = Path(root) / "resource_scheduler"
    found = {where: attempt(lambda where=where: os.listdir(sched / where))
             for where in ("spool/tmp", "spool/incoming", "control", "control/tmp",
                           "spool/rejected", "control/rejected")}
    found["read_by_name"] = attempt(lambda: (sched / "spool" / "incoming" / name).read_bytes())
    return found


def test_a_peer_cannot_list_or_read_another_peers_pending_request(shared, peers):
    shared.start()
    os.kill(shared.proc.pid, signal.SIGSTOP)  # the request stays pending meanwhile
    try:
        def submit_secret(root: str) -> str:
            layout = RunLayout.at(root)
            request_id = client.new_request_id("alice")
            client.submit(layout, {**request("secret", env={"API_TOKEN": "s3cr3t"}),
                                   "request_id": request_id})
            return request_id
        request_id = as_peer(peers[1], submit_secret, str(shared.root))
        pending = shared.sched / "spool" / "incoming" / f"{request_id}.json"
        assert stat.S_IMODE(pending.stat().st_mode) == 0o600
        outcome = as_peer(peers[0], list_and_read, str(shared.root), pending.name)
    finally:
        os.kill(shared.proc.pid, signal.SIGCONT)
    assert outcome == dict.fromkeys(outcome, "PermissionError"), outcome
    assert shared.reply(request_id)["outcome"] == "accepted"


def squat_with_a_back_dated_mtime(root: str, request_id: str) -> str:
    """As a peer that learnt another's request id: drop its own request under that id,
    named to sort first and dated from 1970, as the review did."""
    sched = Path(root) / "resource_scheduler"
    tmp = sched / "spool" / "tmp" / "0-squat.json"
    tmp.write_text(json.dumps({**request("squat", ["sh", "-c", "echo squatted"]),
                               "request_id": request_id}))
    os.utime(tmp, (1, 1))
    os.rename(tmp, sched / "spool" / "incoming" / "0-squat.json")
    return "dropped"


def victim_submits(root: str, request_id: str) -> str:
    layout = RunLayout.at(root)
    client.submit(layout, {**request("victim", ["sh", "-c", "echo mine"]),
                           "request_id": request_id})
    return "submitted"


def test_a_squatted_request_id_is_set_aside_and_the_victims_reply_is_its_own(shared, peers):
    shared.start()
    victim, attacker = peers
    request_id = "victim-req-1"
    os.kill(shared.proc.pid, signal.SIGSTOP)  # both files wait for one scan
    try:
        as_peer(victim, victim_submits, str(shared.root), request_id)
        mine = shared.sched / "spool" / "incoming" / f"{request_id}.json"
        wait_for(lambda: time.time_ns() > mine.stat().st_ctime_ns + 20_000_000,
                 message="the file clock to move on")  # the squat comes after, as it must
        as_peer(attacker, squat_with_a_back_dated_mtime, str(shared.root), request_id)
    finally:
        os.kill(shared.proc.pid, signal.SIGCONT)
    reply = as_peer(victim, lambda root: client.wait_for_reply(
        RunLayout.at(root), request_id, 20), str(shared.root))
    assert reply["uid"] == victim.uid and reply["outcome"] == "accepted"
    assert shared.wait_state(reply["job_id"], "completed")["tag"] == "victim"
    error = wait_for(lambda: read_json(shared.sched / "spool" / "rejected"
                                       / "0-squat.json.error.json"))
    assert error["field"] == "request_id"
    assert error["problem"].startswith(f"already used by another uid's request; this file "
                                       f"is owned by uid {attacker.uid}")
    assert read_json(shared.sched / "spool" / "replies" / f"{request_id}.json") == reply


def test_a_request_id_taken_first_by_another_uid_is_not_taken_for_ones_own(shared, peers):
    shared.start()
    victim, attacker = peers
    first = as_peer(attacker, peer_submit, str(shared.root), request("theirs"), "guessed-1")
    assert first["uid"] == attacker.uid
    answer = as_peer(victim, peer_submit, str(shared.root), request("mine"), "guessed-1")
    assert answer["not_yours"].startswith(f"the reply to request guessed-1 answers a request "
                                          f"of uid {attacker.uid}, not yours")
    # and so for control requests: the squatter's reply is never read as the victim's
    job = as_peer(victim, peer_submit, str(shared.root), request("held", hold=True), "own-2")
    shared.wait_state(job["job_id"], "queued")
    taken = as_peer(attacker, peer_control, str(shared.root),
                    {"action": "cancel", "jobs": ["theirs"]}, "ctl-guessed")
    assert taken["uid"] == attacker.uid
    cancel = as_peer(victim, peer_control, str(shared.root),
                     {"action": "cancel", "jobs": [job["job_id"]]}, "ctl-guessed")
    assert "not yours" in cancel["not_yours"]
    assert shared.job(job["job_id"])["state"] == "queued"  # the victim's cancel never ran


def flood(root: str, count: int) -> int:
    """As a peer: ``count`` held requests, as fast as files can be made."""
    sched = Path(root) / "resource_scheduler"
    for i in range(count):
        tmp = sched / "spool" / "tmp" / f"flood-{i:05d}.json"
        tmp.write_text(json.dumps({"peer": "flood", "tag": f"flood-{i}", "argv": ["true"],
                                   "hold": True}))
        os.rename(tmp, sched / "spool" / "incoming" / tmp.name)
    return count


def test_a_flood_of_one_uid_does_not_delay_another_and_its_excess_is_rejected(shared, peers):
    flooder, other = peers
    shared.task.write_text(TASK.format(slots=4, retries=0)
                           + "    spool_quota_requests: 100\n")
    shared.start()
    os.kill(shared.proc.pid, signal.SIGSTOP)
    try:
        assert as_peer(flooder, flood, str(shared.root), 500) == 500
        as_peer(other, victim_submits, str(shared.root), "after-the-flood")
    finally:
        os.kill(shared.proc.pid, signal.SIGCONT)
    replies = shared.sched / "spool" / "replies"
    mine = shared.reply("after-the-flood", timeout=30)
    assert mine["outcome"] == "accepted" and mine["uid"] == other.uid
    answered_at = (replies / "after-the-flood.json").stat().st_mtime_ns
    wait_for(lambda: len(list(replies.glob("flood-*.json"))) == 500, timeout=120,
             message="every request of the flood answered")
    outcomes: dict[str, int] = {}
    before = 0
    for path in replies.glob("flood-*.json"):
        doc = read_json(path)
        outcomes[doc["outcome"]] = outcomes.get(doc["outcome"], 0) + 1
        before += path.stat().st_mtime_ns < answered_at
        if doc["outcome"] == "rejected":
            assert doc["field"] == "quota" and "spool_quota_requests (100)" in doc["problem"]
    assert before < 200  # one short turn (64 fair, 64 over the quota), not the flood's 500
    assert outcomes["accepted"] >= 100 and outcomes["rejected"] >= 100
    assert sum(outcomes.values()) == 500
    queued = shared.sched / "jobs" / "queued"
    wait_for(lambda: len(list(queued.glob("flood-*.json"))) == outcomes["accepted"],
             message="a job file for every accepted request")  # nothing accepted is lost


def test_a_borrowed_peer_name_does_not_use_up_another_uids_cap(shared, peers):
    shared.task.write_text(TASK.format(slots=4, retries=0)
                           + "    max_concurrent_per_peer: 1\n")
    shared.start()
    alice, mallory = peers
    as_peer(mallory, peer_submit, str(shared.root),
            {**request("hog", ["sleep", "60"]), "peer": "alice"}, "hog-1")
    taken = as_peer(alice, peer_submit, str(shared.root),
                    {**request("mine", ["sleep", "60"]), "peer": "alice"}, "mine-1")
    job = shared.wait_state(taken["job_id"], "running")
    assert job["uid"] == alice.uid
    waiting = as_peer(mallory, peer_submit, str(shared.root),
                      {**request("hog2", ["sleep", "60"]), "peer": "alice"}, "hog-2")
    wait_for(lambda: (shared.job(waiting["job_id"]) or {}).get("reason") ==
             f"peer alice (uid {mallory.uid}): 1 of max_concurrent_per_peer 1 running")


def find_as_peer(root: str, ref: str) -> str | None:
    found = client.find_job(RunLayout.at(root), ref)
    return found and found[0]


def test_a_tag_is_each_uids_own_and_wait_logs_cancel_find_ones_own(shared, peers):
    shared.start()
    first, second = peers
    theirs = as_peer(first, peer_submit, str(shared.root),
                     request("exp", ["sh", "-c", "echo theirs"], hold=True), "exp-1")
    mine = as_peer(second, peer_submit, str(shared.root),
                   request("exp", ["sh", "-c", "echo mine"]), "exp-2")
    assert mine["outcome"] == "accepted" and mine["job_id"] != theirs["job_id"]
    shared.wait_state(theirs["job_id"], "queued")
    assert as_peer(second, find_as_peer, str(shared.root), "exp") == mine["job_id"]
    assert as_peer(first, find_as_peer, str(shared.root), "exp") == theirs["job_id"]
    assert as_peer(first, find_as_peer, str(shared.root), mine["job_id"]) == mine["job_id"]
    shared.wait_state(mine["job_id"], "completed")
    cancel = as_peer(second, peer_control, str(shared.root),
                     {"action": "cancel", "jobs": ["exp"]}, "ctl-exp")
    assert [job["job_id"] for job in cancel["jobs"]] == [mine["job_id"]]
    assert shared.job(theirs["job_id"])["state"] == "queued"
    logs = subprocess.run([sys.executable, "-m", "praxist_fs", "logs", "--run-dir",
                           str(shared.root), "exp", "--uid", str(second.uid)],
                          capture_output=True, text=True, timeout=30)
    assert logs.stdout.endswith("mine\n"), logs  # an operator names the uid whose tag it is


def test_a_control_records_the_uid_that_asked_whatever_by_says(shared, peers):
    shared.start()
    peer = peers[0]
    job = as_peer(peer, peer_submit, str(shared.root),
                  {**request("forged", ["sleep", "60"], hold=True), "peer": "operator"},
                  "forged-1")
    held = wait_for(lambda: (shared.job(job["job_id"]) or {}).get("hold"))
    assert held["uid"] == peer.uid and held["by"] == f"operator (uid {peer.uid})"
    reply = as_peer(peer, peer_control, str(shared.root),
                    {"action": "cancel", "jobs": [job["job_id"]], "by": "root"}, "by-1")
    assert reply["uid"] == peer.uid and reply["outcome"] == "ok"
    done = shared.wait_state(job["job_id"], "cancelled")
    assert done["reason"] == f"cancelled by root (uid {peer.uid})"
