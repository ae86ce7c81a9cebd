"""praxist-fs stop --all: every run of the host's run registry is fenced like ``stop RUN``,
then escaped descendants are found by exact environment identity or, narrowly, a cleared
environment in the run's peer workspaces; look-alikes are never signalled (R-SUP-8)."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import filelock
import psutil

from praxist_fs import stopper
from praxist_fs.adapters import runs

from .conftest import LEGACY_TASK, alive, pid_in, read_json, request, wait_for

PRAXIST = [sys.executable, "-m", "praxist_fs"]
# The command records its pid, then leaves a descendant that escaped its session (setsid),
# with its environment ({env} empty) or without it (env -i), working in the given directory.
ESCAPE = ("setsid {env} /bin/sh -c 'cd \"$0\" && echo $$ > \"$1\" && exec sleep 60' {ws} {esc} &"
          " echo $$ > {pid}; exec sleep 60")


def stop_all(registry: Path, *extra: str) -> tuple[int, dict]:
    result = stop_all_raw(registry, "--yes", *extra)
    return result.returncode, json.loads(result.stdout)


def stop_all_raw(registry: Path, *extra: str) -> subprocess.CompletedProcess:
    """stop --all on a test's own registry, stdin not a terminal."""
    return subprocess.run([*PRAXIST, "stop", "--all", f"--host-registry={registry}",
                           "--grace=1", *extra], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def answered(registry: Path, answer: bytes) -> tuple[int, str, str]:
    """stop --all with a terminal on stdin: wait for its question, type ``answer`` and
    Enter; (exit code, stdout, stderr)."""
    terminal, stdin = pty.openpty()
    proc = subprocess.Popen([*PRAXIST, "stop", "--all", f"--host-registry={registry}",
                             "--grace=1"], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    os.close(stdin)
    asked = b""
    try:
        while not asked.endswith(b"? [y/N] "):
            assert select.select([proc.stderr], [], [], 60)[0], f"no question: {asked!r}"
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, f"it exited without asking: {asked!r}"
            asked += chunk
        os.write(terminal, answer + b"\n")
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(terminal)
    return proc.returncode, out.decode(), (asked + err).decode()


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
        assert runs.registered(registry) == [runs.Entry(r) for r in sorted(  # gone: pruned
            [dead.root, live.root, local])]
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
    # a live shim's descendants are its attempt's however they left: orphan this one
    shim = psutil.Process(pid).ppid()
    os.kill(shim, signal.SIGKILL)
    wait_for(lambda: psutil.Process(pid).ppid() != shim, message="the command orphaned")
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
    theirs = runs.Entry(tmp_path / "theirs", skipped="another user's (uid 1001)")
    assert stopper.stop_all([theirs]) == {  # left alone, and said so
        "stopped_run_ids": [], "failed_run_ids": [], "skipped_run_ids": [str(theirs.run_dir)],
        "reasons": {str(theirs.run_dir): "another user's (uid 1001)"}, "escaped_scan": "done"}
    both = subprocess.run([*PRAXIST, "stop", "--all", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert both.returncode == 2 and "not both" in both.stderr


def test_stop_all_lists_the_runs_and_stops_them_only_when_told(make_run, tmp_path):
    registry = tmp_path / "host-registry"
    run = make_run(name="served")
    run.start()
    run.reply(run.submit(request("kept", ["sh", "-c",
                                          f"echo $$ > {tmp_path / 'job'}; exec sleep 60"])))
    job = pid_in(tmp_path / "job")
    wait_for(lambda: (read_json(run.sched / "status.json") or {}).get("counts", {})
             .get("running") == 1, message="status.json to count the running job")
    unowned = tmp_path / "unused"  # nothing of ours ever ran there; as long a name as served
    (unowned / "resource_scheduler").mkdir(parents=True)
    assert runs.register(unowned, "serve", registry)
    listed = (f"praxist-fs stop --all: 1 run to stop in the run registry {registry}/runs:\n"
              f"  {run.root}  live coordinator (pid {run.proc.pid}): 1 running, 0 queued\n")

    refused = stop_all_raw(registry)  # a script without --yes
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(listed + "forgotten (stale entries, deleted):\n"
                                     f"  {unowned}  it has no resource_scheduler/owner.lock")
    assert refused.stderr.endswith("not stopping without a confirmation: give --yes (stdin "
                                   "is not a terminal to ask on)\n")
    code, out, err = answered(registry, b"n")
    assert (code, out) == (1, "") and err == (listed + "stop this run? [y/N] "
                                              "praxist-fs stop: nothing stopped\n")
    assert alive(job) and run.proc.poll() is None

    code, out, err = answered(registry, b"y")
    assert code == 0 and err == listed + "stop this run? [y/N] "
    assert json.loads(out)["stopped_run_ids"] == [str(run.root)]
    assert not alive(job) and run.proc.wait(timeout=30) == 0


def test_a_starting_coordinator_forgets_the_runs_that_are_gone(make_run, tmp_path):
    registry = tmp_path / "host-registry"
    gone = tmp_path / "gone"
    (gone / "resource_scheduler").mkdir(parents=True)
    (gone / "resource_scheduler" / "owner.lock").touch()
    assert runs.register(gone, "serve", registry)
    shutil.rmtree(gone)
    run = make_run()
    run.start()
    assert [read_json(p)["run_dir"] for p in runs.directory(registry).glob("*.json")] == [
        str(run.root)]
