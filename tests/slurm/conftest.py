"""Fixtures of the Slurm backend's tests: fake Slurm commands on PATH, and a real
single-node Slurm (tests/slurm/setup.sh) started once per session and stopped after.

Where a real Slurm cannot be had (not root, no apt-get), the tests that need it are
skipped with setup.sh's reason; they are never skipped silently, nor when setup.sh
fails for another reason (that fails them)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parent
FAKE = HERE / "fake"
UNAVAILABLE = 77  # setup.sh: Slurm cannot be installed or started here


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """The fake sbatch/squeue/scancel/sacct first on PATH; the returned object sets their
    answers and reads the argv of each call."""
    state = tmp_path / "fake-slurm"
    state.mkdir()
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", f"{FAKE}{os.pathsep}{os.environ['PATH']}")
    return FakeSlurm(state)


class FakeSlurm:
    def __init__(self, state: Path) -> None:
        self.state = state

    def answer(self, tool: str, out: str = "", err: str = "", rc: int = 0,
               hang: float = 0.0) -> None:
        for suffix, text in ((".out", out), (".err", err), (".rc", str(rc)),
                             (".hang", str(hang))):
            (self.state / (tool + suffix)).write_text(text)

    def calls(self, tool: str | None = None) -> list[dict]:
        path = self.state / "calls.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [call for call in map(json.loads, lines) if tool in (None, call["tool"])]


@pytest.fixture(scope="session")
def real_slurm():
    """SLURM_CONF of a running single-node Slurm (node ci0, two fake GPUs), exported for
    the session so the backend's commands, run with our environment, reach it."""
    done = subprocess.run([str(HERE / "setup.sh")], capture_output=True, text=True,
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
            subprocess.run([str(HERE / "teardown.sh")], timeout=120, check=False)
