"""R-SEC-2: a peer under another uid can submit and read its reply, nothing more.

The run directory is given the peers' group with the setgid bit (the documented
set-up); the coordinator runs as root here, the peer as nobody:nogroup in a
forked child. Needs root to switch uid: skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .conftest import TASK, Run, read_json, request, wait_for
from . import peers
from .peers import NOBODY, Peer, as_peer as run_as

PEER_UID = PEER_GID = NOBODY  # nobody:nogroup
NOBODY_PEER = Peer(PEER_UID, PEER_GID, "nobody")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")

def peer_attempts(sched: Path, doc: dict) -> dict:
    """What a peer of another uid manages to do: runs in the forked child, as that uid."""
    outcome: dict = {}

    def attempt(name, action):
        try:
            action()
            outcome[name] = "allowed"
        except PermissionError:
            outcome[name] = "denied"

    def submit():
        tmp = sched / "spool" / "tmp" / "peer-req.json"
        tmp.write_text(json.dumps(doc))
        os.rename(tmp, sched / "spool" / "incoming" / "peer-req.json")

    def read_reply():
        outcome["reply"] = wait_for(lambda: read_json(sched / "spool" / "replies" /
                                                      "peer-req.json"), 20)

    def write(relative):
        return lambda: (sched / relative).write_text("{}")

    attempt("submit", submit)
    attempt("read_reply", read_reply)
    attempt("read_status", lambda: (sched / "status.json").read_text())
    attempt("forge_job_file", write("jobs/queued/forged.json"))
    attempt("append_journal", lambda: open(sched / "journal" / "journal.log", "a"))
    attempt("overwrite_status", write("status.json"))
    attempt("forge_reply", write("spool/replies/forged.json"))
    attempt("remove_reply", lambda: os.unlink(sched / "spool" / "replies" / "peer-req.json"))
    attempt("read_private", lambda: os.listdir(sched / "private"))
    attempt("write_attempts", write("attempts/forged.json"))
    attempt("write_control_reply", write("control/replies/forged.json"))
    return outcome


def as_peer(function, *args):
    """``function(*args)`` run by nobody:nogroup (tests/e2e/peers.py)."""
    return run_as(NOBODY_PEER, function, *args)


@pytest.fixture
def shared_run():
    """The documented set-up for the peers' group (nogroup here), coordinator as root."""
    with peers.shared_run(PEER_GID, TASK.format(slots=1, retries=1), "praxist-perm-") as run:
        yield run


def test_a_peer_of_another_uid_submits_but_cannot_write_scheduler_state(shared_run):
    run = shared_run
    run.start()
    outcome = as_peer(peer_attempts, run.sched, request("other-uid", request_id="peer-req"))
    assert outcome.pop("submit") == "allowed"
    assert outcome.pop("read_reply") == "allowed"
    assert outcome.pop("read_status") == "allowed"
    assert outcome.pop("reply")["outcome"] == "accepted"
    assert outcome == dict.fromkeys(outcome, "denied"), outcome
    assert not (run.sched / "jobs" / "queued" / "forged.json").exists()


def test_the_documented_modes(shared_run):
    run = shared_run
    run.start()
    control = run.sched / "control"
    (control / "tmp" / "open.json").write_text(json.dumps(
        {"action": "generation_open", "generation": 1}))
    (control / "tmp" / "open.json").rename(control / "open.json")
    wait_for(lambda: read_json(control / "replies" / "open.json"))
    run.stop()

    def mode(relative: str) -> int:
        return stat.S_IMODE((run.sched / relative).stat().st_mode)

    for dropbox in ("spool/tmp", "spool/incoming", "control", "control/tmp"):
        assert mode(dropbox) == 0o3730, dropbox  # group -wx (not listable), setgid, sticky
    for readable in ("", "spool", "spool/replies", "jobs/queued", "jobs/done", "attempts",
                     "control/replies", "../logs", "../logs/experiments"):
        assert mode(readable) == 0o2750, readable
    for sealed in ("spool/rejected", "control/rejected"):
        assert mode(sealed) == 0o2710, sealed  # group --x: its own files by name only
    for private in ("journal", "private"):
        assert mode(private) == 0o700, private
    for relative, mode in (("gen_1", 0o2750), ("gen_1/results", 0o3770),
                           ("gen_1/resource_supply/idle", 0o3770),
                           ("gen_1/resource_supply/leases", 0o2750)):
        assert stat.S_IMODE((run.root / relative).stat().st_mode) == mode, relative
    gid = (run.sched / "spool" / "incoming").stat().st_gid
    assert gid == PEER_GID  # inherited from the run directory's setgid group


# -- R-SEC-3: a peer's job runs as that peer ---------------------------------------------------

# What a job finds it can do: the uid and groups it runs as, the coordinator's secrets and
# journal (opened for appending, writing nothing), its environment and its attempt.
PROBE = r"""
id -u; id -G
cat "$PRAXIST_RUN_DIR/resource_scheduler/private/hmac.key" >/dev/null 2>&1 \
    && echo private:read || echo private:denied
(: >> "$PRAXIST_RUN_DIR/resource_scheduler/journal/journal.log") 2>/dev/null \
    && echo journal:opened || echo journal:denied
ls "$PRAXIST_EXPERIMENT_ATTEMPT_DIR" >/dev/null && echo attempt:readable
echo "home=$HOME user=$USER logname=$LOGNAME"
"""


def submit_file(sched: Path, doc: dict, name: str) -> dict:
    """Submit ``doc`` as ``name`` and wait for its reply (as whoever runs this)."""
    tmp = sched / "spool" / "tmp" / name
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, sched / "spool" / "incoming" / name)
    return wait_for(lambda: read_json(sched / "spool" / "replies" / name), 20)


def control_file(sched: Path, doc: dict, name: str) -> dict:
    """Drop a control request as ``name`` and wait for its reply."""
    tmp = sched / "control" / "tmp" / name
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, sched / "control" / name)
    return wait_for(lambda: read_json(sched / "control" / "replies" / name), 20)


def test_a_peers_job_runs_as_that_peer_and_cannot_reach_the_coordinators_files(shared_run):
    run = shared_run
    run.start()
    reply = as_peer(submit_file, run.sched, request("probe", ["/bin/sh", "-c", PROBE]),
                    "probe.json")
    assert reply["outcome"] == "accepted" and reply["uid"] == PEER_UID
    job = run.wait_state(reply["job_id"], "completed", "failed")
    assert job["uid"] == PEER_UID and job["state"] == "completed", job
    log = run.root / "logs" / "experiments" / job["job_id"] / "a1.log"
    assert log.read_text().splitlines() == [
        str(PEER_UID), str(PEER_GID), "private:denied", "journal:denied", "attempt:readable",
        "home=/nonexistent user=nobody logname=nobody"]
    assert as_peer(lambda: log.read_text()) == log.read_text()  # the peer reads its log


def test_a_peer_acts_only_on_its_own_jobs(shared_run):
    run = shared_run
    run.start()
    roots = run.reply(run.submit(request("roots", ["sleep", "60"], hold=True)))["job_id"]
    peers = as_peer(submit_file, run.sched, request("peers", hold=True), "peers.json")
    cancel = as_peer(control_file, run.sched, {"action": "cancel", "jobs": [roots, "peers"]},
                     "cancel.json")
    assert cancel["outcome"] == "rejected"
    assert f"job {roots} ('roots') belongs to uid 0; this file is owned by uid " \
           f"{PEER_UID}" in cancel["reason"]
    stop = as_peer(control_file, run.sched, {"action": "run_stop"}, "stop.json")
    assert stop["outcome"] == "rejected" and "run_stop is for operators" in stop["reason"]
    release = as_peer(control_file, run.sched, {"action": "release", "states": ["queued"]},
                      "release.json")
    assert [job["job_id"] for job in release["jobs"]] == [peers["job_id"]]
    run.wait_state(peers["job_id"], "completed")
    assert run.job(roots)["state"] == "queued" and run.job(roots)["hold"]


def can_serve() -> bool:
    """Whether this interpreter and our package load for nobody (runs as the peer)."""
    try:
        return subprocess.run([sys.executable, "-c", "import praxist_fs.daemon"],
                              stderr=subprocess.DEVNULL).returncode == 0
    except PermissionError:
        return False


@pytest.fixture
def unprivileged_run():
    """A run directory owned by nobody:nogroup, whose coordinator runs as nobody."""
    if not as_peer(can_serve):
        pytest.skip(f"nobody cannot run {sys.executable} with praxist_fs (a directory above "
                    "it is closed to other users): run pytest with an interpreter all users "
                    "can run to test an unprivileged coordinator")
    base = Path(tempfile.mkdtemp(prefix="praxist-unpriv-"))
    base.chmod(0o755)
    root, registry = base / "run", base / "host-registry"
    for directory in (root, registry):
        directory.mkdir()
        os.chown(directory, PEER_UID, PEER_GID)
    run = Run(root, base / "task.yaml")
    yield run
    if run.proc is not None and run.proc.poll() is None:
        run.stop()
    run.kill_attempt_groups()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("trusted", [False, True])
def test_an_unprivileged_coordinator_runs_only_its_own_uid_and_trusted_ones(
        unprivileged_run, trusted):
    run = unprivileged_run
    run.task.write_text(TASK.format(slots=1, retries=1) + (
        "    trusted_uids: [root]\n" if trusted else ""))
    run.start(user=PEER_UID)
    own = as_peer(submit_file, run.sched, request("own", ["sh", "-c", "id -u"]), "own.json")
    assert own["outcome"] == "accepted" and own["uid"] == PEER_UID
    roots = submit_file(run.sched, request("roots", ["sh", "-c", "id -u"]), "roots.json")
    if not trusted:
        assert roots["outcome"] == "rejected" and roots["field"] == "uid"
        assert roots["problem"].startswith(f"the request file is owned by uid 0; this "
                                           f"coordinator runs as uid {PEER_UID}, not root")
        assert (run.sched / "spool" / "rejected" / "roots.json").exists()
        ran = [own]
    else:  # the task trusts root's requests to run as the coordinator: a documented choice
        assert roots["outcome"] == "accepted" and roots["uid"] == 0
        ran = [own, roots]
    for reply in ran:
        assert run.wait_state(reply["job_id"], "completed")["state"] == "completed"
        log = run.root / "logs" / "experiments" / reply["job_id"] / "a1.log"
        assert log.read_text() == f"{PEER_UID}\n"
