"""The launch barrier: the command starts only after GO, and its exit is recorded durably."""

from __future__ import annotations

import json
import os

import pytest

from praxist_fs.adapters import launcher
from praxist_fs.adapters.fsio import write_atomic
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.effects import SpawnAttempt
from tests.e2e.conftest import read_json, wait_for


@pytest.fixture
def layout(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    return layout


def spawn(layout, tmp_path, body="echo started", env=None, gpus=()):
    marker = tmp_path / "marker"
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None,
                          command=f"touch {marker}; {body}", cwd=str(tmp_path),
                          env=env or {"PATH": "/usr/bin:/bin"}, profile="cpu", gpus=gpus,
                          metadata={"peer": "p"})
    handle = launcher.spawn(layout, effect, launcher.attempt_environment(layout, effect))
    return handle, layout.attempt_dir("job-1", "a1"), marker


def test_command_waits_for_go_then_exit_is_recorded(layout, tmp_path):
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 5")
    ready = wait_for(lambda: read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid and ready["start_time"]
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    assert handle.popen.wait(timeout=15) == 0
    record = read_json(attempt_dir / "exit.json")
    assert record["exit_code"] == 5 and record["signal"] is None and marker.exists()
    handle.close()


def test_abort_exits_without_running_the_command(layout, tmp_path):
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "ABORT", b"")
    handle.release_barrier(b"A")
    assert handle.popen.wait(timeout=15) == 0
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    handle.close()


def test_barrier_survives_the_coordinator_going_away(layout, tmp_path):
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"")  # the pipe closes as if the coordinator died
    assert handle.popen.poll() is None and not marker.exists()
    write_atomic(attempt_dir / "GO", b"")  # the next coordinator resumes the barrier
    assert handle.popen.wait(timeout=15) == 0 and marker.exists()
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 0
    handle.close()


def test_environment_carries_identity_and_gpu_binding(layout, tmp_path):
    dump = tmp_path / "env.json"
    body = f"python3 -c 'import json,os; json.dump(dict(os.environ), open(\"{dump}\", \"w\"))'"
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=body, gpus=("GPU-a", "GPU-b"),
                                   env={"PATH": os.environ["PATH"], "SEED": "3"})
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    handle.popen.wait(timeout=15)
    env = json.loads(dump.read_text())
    assert env["SEED"] == "3"
    assert env["PRAXIST_EXPERIMENT_ID"] == "job-1" and env["PRAXIST_EXPERIMENT_ATTEMPT_ID"] == "a1"
    assert env["PRAXIST_EXPERIMENT_ATTEMPT_DIR"] == str(attempt_dir)
    assert env["PRAXIST_RESOURCE_PROFILE"] == "cpu"
    for name in ("PRAXIST_ASSIGNED_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        assert env[name] == "GPU-a,GPU-b"
    assert "PYTHONPATH" not in env  # nothing of ours leaks in beyond the contract
    assert not (attempt_dir / "spec.json").exists()  # read once, then removed (raw secrets)
    handle.close()


def test_command_runs_in_a_new_session_under_the_shim(layout, tmp_path):
    out = tmp_path / "ids"
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=f"ps -o sid=,pgid= -p $$ > {out}")
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    handle.popen.wait(timeout=15)
    sid, pgid = map(int, out.read_text().split())
    assert sid == pgid == handle.popen.pid != os.getsid(0)
    handle.close()


def test_orphaned_shim_gives_up_without_running_the_command(layout, tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "BARRIER_TIMEOUT_S", 0.5)
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"")  # the coordinator is gone and none comes back
    assert handle.popen.wait(timeout=15) == 0
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    handle.close()
