"""Fixtures of the Slurm backend's tests: fake Slurm commands on PATH that record and
answer. The real Slurm (``real_slurm``) and the fake cluster whose sbatch runs the job
(``fake_cluster``) are tests/conftest.py's, shared with the backend contract suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import fakes_first_on_path

HERE = Path(__file__).parent
FAKE = HERE / "fake"


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """The fake sbatch/squeue/scancel/sacct first on PATH; the returned object sets their
    answers and reads the argv of each call."""
    state = tmp_path / "fake-slurm"
    state.mkdir()
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", fakes_first_on_path(FAKE))
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
