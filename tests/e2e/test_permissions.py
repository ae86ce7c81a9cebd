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
import tempfile
from pathlib import Path

import pytest

from .conftest import TASK, Run, read_json, request, wait_for

PEER_UID = PEER_GID = 65534  # nobody:nogroup

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


def as_peer(function, *args) -> dict:
    """Run ``function`` in a forked child that dropped to nobody:nogroup; its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(PEER_GID)
            os.setuid(PEER_UID)
            os.write(write_end, json.dumps(function(*args)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and data, "the peer child failed"
    return json.loads(data)


@pytest.fixture
def shared_run():
    """A run directory nobody:nogroup can reach: pytest's own tmp dir is 0700 root."""
    base = Path(tempfile.mkdtemp(prefix="praxist-perm-"))
    base.chmod(0o755)
    root = base / "run"
    root.mkdir()
    os.chown(root, 0, PEER_GID)
    root.chmod(0o2770)  # the documented set-up: the peers' group, setgid
    task = base / "task.yaml"
    task.write_text(TASK.format(slots=1, retries=1))
    run = Run(root, task)
    yield run
    if run.proc is not None and run.proc.poll() is None:
        run.stop()
    run.kill_attempt_groups()
    shutil.rmtree(base, ignore_errors=True)


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

    for peer_writable in ("spool/tmp", "spool/incoming", "control", "control/tmp"):
        assert mode(peer_writable) == 0o3770, peer_writable  # group rwx, setgid, sticky
    for readable in ("", "spool", "spool/replies", "spool/rejected", "jobs/queued",
                     "jobs/done", "attempts", "control/replies"):
        assert mode(readable) == 0o2750, readable
    for private in ("journal", "private"):
        assert mode(private) == 0o700, private
    for relative, mode in (("gen_1", 0o2750), ("gen_1/results", 0o3770),
                           ("gen_1/resource_supply/idle", 0o3770),
                           ("gen_1/resource_supply/leases", 0o2750)):
        assert stat.S_IMODE((run.root / relative).stat().st_mode) == mode, relative
    gid = (run.sched / "spool" / "incoming").stat().st_gid
    assert gid == PEER_GID  # inherited from the run directory's setgid group
