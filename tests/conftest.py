"""Shared fixtures. Autouse guards fail a test that leaks a thread or a child process.

``layout``: a fresh, created run layout under the test's tmp_path.

``real_slurm``: a real Slurm of the session's own on this host (tests/slurm/setup.sh),
started once per session where asked (PRAXIST_TEST_REAL_SLURM=1) and stopped after.
Unasked, or where one cannot be had (not root, no apt-get), the tests that need it are
skipped with the reason; never silently, nor when setup.sh fails for another reason
(that fails them). Under pytest-xdist they share one worker (``xdist_group``).
``fake_cluster``: the tiny single-node Slurm of
tests/slurm/fake/cluster (its sbatch really runs the batch script), for everywhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil
import pytest

from praxist_fs.adapters.layout import RunLayout

SLURM_SETUP = Path(__file__).parent / "slurm"
UNAVAILABLE = 77  # setup.sh: Slurm cannot be installed or started here
# The real-Slurm tests run only where this is 1 (CI sets it in .ci/run; README says so):
# they need root, may install packages and start daemons, which `make test` does not
# do to a machine unasked.
REAL_SLURM_OPT_IN = "PRAXIST_TEST_REAL_SLURM"
REAL_SLURM_GROUP = pytest.mark.xdist_group("real_slurm")


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (``--dist loadgroup``) the tests of the one real Slurm, which a
    session starts once, run in one worker; tests/backends marks its own ``slurm`` rig."""
    for item in items:
        if "real_slurm" in item.fixturenames:
            item.add_marker(REAL_SLURM_GROUP)


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
    """SLURM_CONF of a running Slurm of this session's own (node ci0 with two fake GPUs,
    alone in the default partition main; ci1 shares partition pair with it), exported for
    the session so the backend's commands, run with our environment, reach it.

    Only where asked (REAL_SLURM_OPT_IN=1): setup.sh may install packages, and starts
    daemons, in a fresh directory and on free ports, beside any other Slurm on the
    machine; teardown.sh stops all of it and the directory goes."""
    if os.environ.get(REAL_SLURM_OPT_IN) != "1":
        pytest.skip(f"no real Slurm for the Slurm backend's tests unless {REAL_SLURM_OPT_IN}=1 "
                    "(as root: installs Slurm and munge with apt-get when missing, starts a "
                    "private Slurm for the session and stops it; README)")
    directory = Path(tempfile.mkdtemp(prefix="praxist-slurm."))
    env = {name: value for name, value in os.environ.items() if name != "SLURM_CONF"}
    env["PRAXIST_SLURM_DIR"] = str(directory)
    saved = os.environ.get("SLURM_CONF")
    try:
        done = subprocess.run([str(SLURM_SETUP / "setup.sh")], capture_output=True, text=True,
                              env=env, timeout=900, check=False)
        if done.returncode == UNAVAILABLE:
            pytest.skip("no real Slurm for the Slurm backend's tests: "
                        + (done.stderr.strip().splitlines() or ["setup.sh said nothing"])[-1])
        assert done.returncode == 0, f"tests/slurm/setup.sh failed:\n{done.stderr}"
        conf = done.stdout.strip().splitlines()[-1].removeprefix("SLURM_CONF=")
        os.environ["SLURM_CONF"] = conf
        yield conf
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        if os.environ.get("PRAXIST_SLURM_KEEP"):  # a developer looking at a failure
            print(f"\nthe real Slurm keeps running: PRAXIST_SLURM_DIR={directory} "
                  f"{SLURM_SETUP / 'teardown.sh'} stops it")
        else:
            stopped = subprocess.run([str(SLURM_SETUP / "teardown.sh")], capture_output=True,
                                     text=True, env=env, timeout=300, check=False)
            assert stopped.returncode == 0, f"tests/slurm/teardown.sh:\n{stopped.stderr}"
            shutil.rmtree(directory)


@pytest.fixture
def fake_cluster(tmp_path, monkeypatch):
    """The fake cluster's sbatch, squeue, scancel and sacct first on PATH, its state in
    a fresh directory (the path to it); whatever of its jobs still runs at the end is
    killed."""
    state = tmp_path / "fake-cluster"
    state.mkdir()
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", fakes_first_on_path(SLURM_SETUP / "fake" / "cluster"))
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


def fakes_first_on_path(fakes: Path) -> str:
    """PATH with the fake Slurm commands first, then this interpreter's directory: the
    fakes are Python scripts run by ``python3`` from PATH, which must not be a version
    manager's shim (pyenv's costs half a second a call on a loaded host, against
    the Slurm backend's command timeouts of one or two seconds in these tests)."""
    return os.pathsep.join([str(fakes), str(Path(sys.executable).parent), os.environ["PATH"]])


def _tree(pid: int) -> list[psutil.Process]:
    try:
        proc = psutil.Process(pid)
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
