"""Legacy peer-local launching (R-DUR-3): a task without ``mode: central`` runs the command
in the launcher's own new process group, recorded in a per-peer protected-PID manifest that
stop and status read; a live (or former) central coordinator always wins."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .conftest import LEGACY_TASK, alive, pid_in, read_json, wait_for

PRAXIST = [sys.executable, "-m", "praxist_fs"]
NO_MODE_TASK = "compute_budget:\n  resource_scheduler:\n    initial_concurrent_experiments: 2\n"


def ended(launcher: subprocess.Popen) -> int:
    """Its exit code once it ended, its pipes closed unread (what it started may still
    hold them: waiting for their end of file could outlast the test)."""
    code = launcher.wait(timeout=30)
    launcher.stdout.close()
    launcher.stderr.close()
    return code


class Legacy:
    """A run directory used by legacy peers, and the host registry they register in."""

    def __init__(self, tmp_path: Path, task_text: str = LEGACY_TASK) -> None:
        self.root = tmp_path / "run"
        self.root.mkdir()
        self.task = tmp_path / "legacy-task.yaml"
        self.task.write_text(task_text)
        self.registry = tmp_path / "host-registry"
        self.manifests = self.root / "resource_scheduler" / "protected_pids"

    def command(self, *cmd: str, peer: str = "alice", tag: str = "local-job",
                flags: tuple[str, ...] = ()) -> list[str]:
        return [*PRAXIST, "launch", f"--run-dir={self.root}", f"--peer={peer}", f"--tag={tag}",
                f"--config={self.task}", *flags, "--", *cmd]

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PRAXIST_HOST_REGISTRY": str(self.registry), **extra}

    def start(self, *cmd: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(*cmd, **kwargs), env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, *cmd: str, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*cmd, **kwargs), env=self.env(), capture_output=True,
                              text=True, timeout=60)

    def entries(self, peer: str = "alice") -> list[dict]:
        return (read_json(self.manifests / f"{peer}.json") or {}).get("entries", [])

    def status(self) -> subprocess.CompletedProcess:
        return subprocess.run([*PRAXIST, "status", "--run-dir", str(self.root), "--json"],
                              capture_output=True, text=True, timeout=30)

    def stop(self) -> tuple[int, dict]:
        result = subprocess.run([*PRAXIST, "stop", "--grace=1", str(self.root)],
                                capture_output=True, text=True, timeout=120)
        return result.returncode, json.loads(result.stdout)


def test_legacy_launch_runs_the_command_in_its_own_group_and_records_it(tmp_path):
    legacy = Legacy(tmp_path, NO_MODE_TASK)  # no mode at all is legacy too
    gate, pid_file = tmp_path / "gate", tmp_path / "pid"
    launcher = legacy.start("sh", "-c", f"echo out; echo err >&2; echo $$ > {pid_file}; "
                            f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3")
    pid = pid_in(pid_file)
    [entry] = wait_for(legacy.entries, message="the manifest entry")
    assert entry["pid"] == entry["pgid"] == pid and entry["tag"] == "local-job"
    assert entry["argv"][0] == "sh" and entry["launcher"]["pid"] == launcher.pid
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    assert entry["start_time"] == int(stat[19])
    assert os.getpgid(pid) == os.getsid(pid) == pid != os.getpgid(launcher.pid)
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"PRAXIST_RUN_DIR={legacy.root}".encode() in environ
    assert f"PRAXIST_EXPERIMENT_ATTEMPT_ID={entry['launch_id']}".encode() in environ
    [shown] = json.loads(legacy.status().stdout)["peer_local_launches"]
    assert shown["pid"] == pid and shown["state"] == "running" and shown["peer"] == "alice"
    table = subprocess.run([*PRAXIST, "status", "--run-dir", str(legacy.root)],
                           capture_output=True, text=True, timeout=30).stdout
    assert "local-job" in table and "running" in table
    [registered] = (legacy.registry / "runs").glob("*.json")
    assert json.loads(registered.read_text())["run_dir"] == str(legacy.root)
    gate.touch()
    out, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 3 and out == "out\n" and "err" in err
    assert not (legacy.manifests / "alice.json").exists()
    assert legacy.status().returncode == 1  # nothing to show any more


def test_stop_terminates_the_manifest_groups_and_fences_the_run(tmp_path):
    legacy = Legacy(tmp_path)
    stubborn = "trap '' TERM; sleep 60 & echo $$ > {}; wait"  # ignores TERM, has a member
    first = legacy.start("sh", "-c", stubborn.format(tmp_path / "first"), tag="first")
    orphan = legacy.start("sh", "-c", stubborn.format(tmp_path / "second"), peer="bob",
                          tag="second")
    pids = [pid_in(tmp_path / "first"), pid_in(tmp_path / "second")]
    wait_for(lambda: legacy.entries("alice") and legacy.entries("bob"), message="both entries")
    orphan.kill()  # its launcher dies; the entry stays and its leader still verifies it
    ended(orphan)
    decoy = subprocess.Popen(["sh", "-c", stubborn.format(tmp_path / "decoy")],
                             start_new_session=True)  # the same command line
    try:
        code, result = legacy.stop()
        assert code == 0 and result["stopped_run_ids"] == [str(legacy.root)]
        assert ended(first) == 128 + signal.SIGKILL
        assert not any(alive(pid) for pid in pids) and decoy.poll() is None
        assert (legacy.root / "resource_scheduler" / "STOP").exists()
        assert not legacy.entries("alice") and not legacy.entries("bob")  # stale one pruned
        marker = tmp_path / "ran"
        late = legacy.run("touch", str(marker), tag="late")
        assert late.returncode == 2 and "stopped" in late.stderr and not marker.exists()
    finally:
        os.killpg(decoy.pid, signal.SIGKILL)
        decoy.wait()


def test_a_group_without_its_leader_and_launcher_is_not_guessed_at(tmp_path):
    legacy = Legacy(tmp_path)
    member = tmp_path / "member"
    # the leader exits at once; a member with a cleared environment stays in its group
    launcher = legacy.start("sh", "-c", f"env -i sleep 60 & echo $! > {member}; exit 0")
    pid = pid_in(member)
    try:
        wait_for(lambda: [e for e in json.loads(legacy.status().stdout)["peer_local_launches"]
                          if e["state"] == "draining"], message="the launcher to wait for it")
        launcher.kill()
        ended(launcher)
        [shown] = json.loads(legacy.status().stdout)["peer_local_launches"]
        assert shown["state"] == "unverifiable"
        code, result = legacy.stop()
        assert code == 1 and result["failed_run_ids"] == [str(legacy.root)]
        assert "by hand" in result["reasons"][str(legacy.root)] and alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_interrupting_the_launcher_interrupts_the_command(tmp_path):
    legacy = Legacy(tmp_path)
    launcher = legacy.start("sh", "-c", f"echo $$ > {tmp_path / 'pid'}; exec sleep 60")
    pid = pid_in(tmp_path / "pid")
    wait_for(legacy.entries, message="the manifest entry")
    launcher.send_signal(signal.SIGINT)  # what Ctrl-C in the peer's terminal does
    assert ended(launcher) == 128 + signal.SIGINT
    assert not alive(pid) and not legacy.entries()


def test_a_live_coordinator_wins_over_a_legacy_task_and_the_environment(make_run, tmp_path):
    run = make_run()
    run.start()
    task = tmp_path / "legacy-task.yaml"
    task.write_text(LEGACY_TASK)
    env = {**os.environ, "PRAXIST_TASK_CONFIG": str(task), "PRAXIST_RUN_DIR": str(run.root),
           "PRAXIST_EXPERIMENT_ATTEMPT_ID": "local-1", "PRAXIST_HOST_REGISTRY": str(tmp_path)}
    launch = [*PRAXIST, "launch", "--peer=p", f"--config={task}"]  # run dir from the environment
    result = subprocess.run([*launch, "--tag=central-wins", "--", "sh", "-c",
                             "echo $PRAXIST_EXPERIMENT_ATTEMPT_DIR"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip().endswith("/a1")  # a central attempt
    assert list((run.sched / "jobs" / "done").glob("central-wins-*.json"))
    run.kill()  # its endpoint is stale now, but the run stays central for good
    marker = tmp_path / "ran"
    late = subprocess.run([*launch, "--tag=late", "--wait-coordinator=0.3", "--", "touch",
                           str(marker)], env=env, capture_output=True, text=True, timeout=60)
    assert late.returncode == 69 and not marker.exists()
    assert not (run.sched / "protected_pids").exists()


def test_detach_needs_a_coordinator(tmp_path):
    legacy = Legacy(tmp_path)
    marker = tmp_path / "ran"
    result = subprocess.run(legacy.command("touch", str(marker), flags=("--detach",)),
                            env=legacy.env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--detach" in result.stderr and not marker.exists()
