"""praxist-fs stop --all: every run of the host's run registry is fenced like ``stop RUN``,
then escaped descendants are found by exact environment identity or, narrowly, a cleared
environment in the run's peer workspaces; look-alikes are never signalled (R-SUP-8)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import filelock

from praxist_fs.adapters import runs

from .conftest import request
from .test_legacy_launch import LEGACY_TASK, alive, pid_in

PRAXIST = [sys.executable, "-m", "praxist_fs"]
# The command records its pid, then leaves a descendant that escaped its session (setsid),
# with its environment ({env} empty) or without it (env -i), working in the given directory.
ESCAPE = ("setsid {env} /bin/sh -c 'cd \"$0\" && echo $$ > \"$1\" && exec sleep 60' {ws} {esc} &"
          " echo $$ > {pid}; exec sleep 60")


def stop_all(registry: Path, *extra: str) -> tuple[int, dict]:
    result = subprocess.run([*PRAXIST, "stop", "--all", f"--host-registry={registry}",
                             "--grace=1", *extra], capture_output=True, text=True, timeout=120)
    return result.returncode, json.loads(result.stdout)


def escaping_job(run, tmp_path: Path, name: str, env: str = "env -i") -> tuple[int, int]:
    """Submit a job whose descendant escapes into the run's peer workspace; (pid, escaped)."""
    workspace = run.root / "peer_workspaces" / "alice"
    workspace.mkdir(parents=True)
    pid, escaped = tmp_path / f"{name}.pid", tmp_path / f"{name}-escaped.pid"
    run.reply(run.submit(request(name, ["sh", "-c", ESCAPE.format(
        env=env, ws=workspace, esc=escaped, pid=pid)])))
    return pid_in(pid), pid_in(escaped)


def look_alikes(run, tmp_path: Path) -> list[subprocess.Popen]:
    """Processes a careless stop --all would hit, each in a session of its own."""
    root = str(run.root)
    near = run.root.parent / f"{run.root.name}-peer_workspaces"
    near.mkdir()
    shapes = [
        ({**os.environ}, tmp_path),                                       # same command line
        ({"PRAXIST_RUN_DIR": root + "-other", "PRAXIST_EXPERIMENT_ATTEMPT_ID": "a1"}, tmp_path),
        ({"PRAXIST_RUN_DIR": root + "/", "PRAXIST_EXPERIMENT_ATTEMPT_ID": "a1"}, tmp_path),
        ({"PRAXIST_RUN_DIR": root}, run.root / "peer_workspaces" / "alice"),  # a peer's shell
        ({}, run.root),                      # a cleared environment in the run root is not enough
        ({}, near),                                                # a name that only starts alike
    ]
    return [subprocess.Popen(["sleep", "60"], env=env, cwd=cwd, start_new_session=True)
            for env, cwd in shapes]


def test_stop_all_stops_every_registered_run_and_only_its_processes(make_run, tmp_path):
    registry = tmp_path / "host-registry"  # where conftest's coordinators register
    live, dead = make_run(name="live"), make_run(name="dead")
    live.start()
    dead.start()
    # found by its environment (by the coordinator: it does not wait for a cleared one)
    live_pid, live_escaped = escaping_job(live, tmp_path, "live", env="")
    dead_pid, dead_escaped = escaping_job(dead, tmp_path, "dead")
    dead.kill()
    local = tmp_path / "local"
    local.mkdir()
    (tmp_path / "legacy.yaml").write_text(LEGACY_TASK)
    launcher = subprocess.Popen(
        [*PRAXIST, "launch", f"--run-dir={local}", "--peer=alice", "--tag=local",
         f"--config={tmp_path / 'legacy.yaml'}", "--", "sh", "-c",
         f"echo $$ > {tmp_path / 'local-pid'}; exec sleep 60"],
        env={**os.environ, "PRAXIST_HOST_REGISTRY": str(registry)})
    local_pid = pid_in(tmp_path / "local-pid")
    gone = tmp_path / "gone"
    (gone / "resource_scheduler").mkdir(parents=True)
    assert runs.register(gone, "serve", registry)
    shutil.rmtree(gone)
    bystanders = look_alikes(live, tmp_path)
    try:
        code, result = stop_all(registry)
        assert code == 0, result
        assert result["stopped_run_ids"] == sorted(map(str, (dead.root, live.root, local)))
        assert result["failed_run_ids"] == [] and result["escaped_scan"] == "done"
        for pid in (live_pid, live_escaped, dead_pid, dead_escaped, local_pid):
            assert not alive(pid), pid
        assert launcher.wait(timeout=30) == 128 + signal.SIGTERM
        assert live.proc.wait(timeout=30) == 0
        assert all(p.poll() is None for p in bystanders)
        assert runs.registered(registry) == sorted([dead.root, live.root, local])  # gone: pruned
    finally:
        for p in bystanders:
            p.kill()
            p.wait()


def test_stop_all_skips_the_escaped_scan_when_a_run_cannot_be_fenced(make_run, tmp_path):
    registry = tmp_path / "host-registry"
    fenced, held = make_run(name="fenced"), make_run(name="held")
    fenced.start()
    held.start()
    pid, escaped = escaping_job(fenced, tmp_path, "fenced")
    held.reply(held.submit(request("kept", ["sh", "-c",
                                            f"echo $$ > {tmp_path / 'kept'}; exec sleep 60"])))
    kept = pid_in(tmp_path / "kept")
    fenced.kill()
    held.kill()
    (held.sched / "endpoint.json").unlink()
    holder = filelock.FileLock(str(held.sched / "owner.lock"), timeout=0)
    holder.acquire()  # someone else holds that run: it cannot be fenced
    try:
        code, result = stop_all(registry)
        assert code == 1 and result["failed_run_ids"] == [str(held.root)]
        assert result["stopped_run_ids"] == [str(fenced.root)]
        assert result["escaped_scan"] == "skipped"
        assert not alive(pid) and alive(kept)
        assert alive(escaped)  # only the skipped sweep would have found it
    finally:
        holder.release()
        os.kill(escaped, signal.SIGKILL)


def test_stop_all_arguments(tmp_path):
    code, result = stop_all(tmp_path / "empty-registry")
    assert code == 0 and result["stopped_run_ids"] == result["failed_run_ids"] == []
    both = subprocess.run([*PRAXIST, "stop", "--all", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert both.returncode == 2 and "not both" in both.stderr
