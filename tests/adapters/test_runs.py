"""The host run registry forgets the runs that are gone, and only those: a run is kept
while it has its owner.lock or anything it recorded still runs, and another user's run
is left alone (listed, never judged by what we cannot read)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from praxist_fs.adapters import manifests, runs
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters import procs
from tests.e2e.test_permissions import as_peer

def a_run(tmp_path: Path, name: str, registry: Path, owned: bool = True) -> RunLayout:
    """A registered run directory; ``owned``: a coordinator or launch has taken its lock."""
    layout = RunLayout.at(tmp_path / name)
    layout.scheduler.mkdir(parents=True)
    if owned:
        layout.owner_lock.touch()
    assert runs.register(layout.root, "serve", registry)
    return layout


@pytest.fixture
def sleeper():
    """A live process group leader, in a session of its own, like a shim or a launch."""
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield child.pid, procs.start_time(child.pid), procs.boot_id()
    child.kill()
    child.wait()


def test_entries_of_gone_and_never_owned_runs_are_pruned_and_logged(tmp_path, caplog):
    registry = tmp_path / "registry"
    kept = a_run(tmp_path, "kept", registry)  # ended long ago, but a run of ours: kept
    gone = a_run(tmp_path, "gone", registry)
    (gone.scheduler / "owner.lock").unlink()
    gone.scheduler.rmdir()
    flat = a_run(tmp_path, "flat", registry, owned=False)
    flat.scheduler.rmdir()
    flat.scheduler.write_text("not a directory")
    unowned = a_run(tmp_path, "unowned", registry, owned=False)
    ended = a_run(tmp_path, "ended", registry, owned=False)  # its attempt exited
    (ended.attempts / "j" / "a1").mkdir(parents=True)
    (ended.attempts / "j" / "a1" / "READY").write_text(json.dumps(
        {"pid": os.getpid(), "start_time": procs.start_time(os.getpid()),
         "boot_id": procs.boot_id()}))
    (ended.attempts / "j" / "a1" / "exit.json").write_text("{}")
    with caplog.at_level(logging.INFO, logger="praxist_fs"):
        entries = runs.registered(registry)
    assert entries == [
        runs.Entry(ended.root, pruned="it has no resource_scheduler/owner.lock and nothing "
                                      "it recorded is alive"),
        runs.Entry(flat.root, pruned="its resource_scheduler/ is gone"),
        runs.Entry(gone.root, pruned="its resource_scheduler/ is gone"),
        runs.Entry(kept.root),
        runs.Entry(unowned.root, pruned="it has no resource_scheduler/owner.lock and "
                                        "nothing it recorded is alive")]
    assert f"run registry: forgot {gone.root}: its resource_scheduler/ is gone" in caplog.text
    assert runs.registered(registry) == [runs.Entry(kept.root)]  # the files are deleted


def test_a_run_without_its_owner_lock_is_kept_while_its_work_lives(tmp_path, sleeper):
    """The lock file is created by every coordinator and launch before it registers; one
    deleted by hand must not hide work that still runs from stop --all."""
    registry = tmp_path / "registry"
    legacy = a_run(tmp_path, "legacy", registry, owned=False)
    pid, started, boot = sleeper
    manifests.add(legacy, "alice", {"launch_id": "local-1", "pid": pid, "start_time": started,
                                    "boot_id": boot, "pgid": pid})
    central = a_run(tmp_path, "central", registry, owned=False)
    (central.attempts / "j" / "a1").mkdir(parents=True)
    (central.attempts / "j" / "a1" / "READY").write_text(json.dumps(
        {"pid": pid, "start_time": started, "boot_id": boot}))
    assert runs.registered(registry) == [runs.Entry(central.root), runs.Entry(legacy.root)]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")
def test_another_users_runs_are_skipped_and_judged_only_when_gone(tmp_path):
    """Seen from nobody: root's runs are listed as left alone, an unreadable one too, and a
    gone one whose entry nobody may delete is left alone rather than crashing."""
    base = Path(tempfile.mkdtemp(prefix="praxist-runs-"))
    try:
        base.chmod(0o755)
        registry = base / "registry"
        theirs = a_run(base, "theirs", registry, owned=False)  # nobody cannot see its work
        hidden = a_run(base / "private", "hidden", registry)
        (base / "private").chmod(0o700)
        gone = a_run(base, "gone", registry)
        (gone.scheduler / "owner.lock").unlink()
        gone.scheduler.rmdir()
        (registry / "runs" / "runs.lock").touch()
        (registry / "runs" / "runs.lock").chmod(0o666)
        seen = as_peer(lambda: [(str(e.run_dir), e.pruned, e.skipped)
                                  for e in runs.registered(registry)])
    finally:
        (base / "private").chmod(0o755)
        subprocess.run(["rm", "-rf", str(base)], check=True)
    assert seen[0][0] == str(gone.root) and seen[0][1] is None
    assert seen[0][2].startswith("its resource_scheduler/ is gone, but its entry ")
    assert seen[0][2].endswith(" cannot be deleted: Permission denied")
    assert seen[1:] == [[str(hidden.root), None, "cannot be read (Permission denied)"],
                        [str(theirs.root), None, "another user's (uid 0)"]]

