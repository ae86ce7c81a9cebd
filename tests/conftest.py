"""Shared fixtures. Autouse guards fail a test that leaks a thread or a child process.

``layout``: a fresh, created run layout under the test's tmp_path.

``real_slurm``: a real Slurm on this host (tests/slurm/setup.sh) started once per session
and stopped after. Where one cannot be had (not root, no apt-get), the tests that need
it are skipped with setup.sh's reason; never silently, nor when setup.sh fails for
another reason (that fails them). ``fake_cluster``: the tiny single-node Slurm of
tests/slurm/fake/cluster (its sbatch really runs the batch script), for everywhere."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import psutil
import pytest

from praxist_fs.adapters.layout import RunLayout

SLURM_SETUP = Path(__file__).parent / "slurm"
UNAVAILABLE = 77  # setup.sh: Slurm cannot be installed or started here


@pytest.fixture(autouse=True)
def no_leaked_threads_or_children():
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leaked_threads = [t for t in threading.enumerate()
                      if t not in threads_before and t.is_alive()]
    leaked = [p for p in psutil.Process().children(recursive=True)
              if p.pid not in children_before and p.status() != psutil.STATUS_ZOMBIE]
    assert not leaked_threads, f"test leaked threads: {leaked_threads}"
    assert not leaked, f"test leaked child processes: {[p.cmdline() for p in leaked]}"


@pytest.fixture
def layout(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    return layout


@pytest.fixture(scope="session")
def real_slurm():
    """SLURM_CONF of a running Slurm (node ci0 with two fake GPUs, alone in the default
    partition main; ci1 shares partition pair with it), exported for the session so the
    backend's commands, run with our environment, reach it."""
    done = subprocess.run([str(SLURM_SETUP / "setup.sh")], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode == UNAVAILABLE:
        pytest.skip("no real Slurm for the Slurm backend's tests: "
                    + (done.stderr.strip().splitlines() or ["setup.sh said nothing"])[-1])
    assert done.returncode == 0, f"tests/slurm/setup.sh failed:\n{done.stderr}"
    conf = done.stdout.strip().splitlines()[-1].removeprefix("SLURM_CONF=")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        if not os.environ.get("PRAXIST_SLURM_KEEP"):  # a developer looking at a failure
            subprocess.run([str(SLURM_SETUP / "teardown.sh")], timeout=120, check=False)


@pytest.fixture
def fake_cluster(tmp_path, monkeypatch):
    """The fake cluster's sbatch, squeue, scancel and sacct first on PATH, its state in
    a fresh directory (the path to it); whatever of its jobs still runs at the end is
    killed."""
    state = tmp_path / "fake-cluster"
    state.mkdir()
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", f"{SLURM_SETUP / 'fake' / 'cluster'}{os.pathsep}"
                               f"{os.environ['PATH']}")
    yield state
    for path in (state / "jobs").glob("*.json"):
        job = json.loads(path.read_text())
        if job["state"] == "PENDING":  # its runner waits: cancelled, it leaves
            subprocess.run(["scancel", job["id"]], timeout=30, check=False)
        elif job["state"] == "RUNNING":
            for proc in _tree(job["pid"]):
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass


def _tree(pid: int) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
