"""The jobs shipped for the README and the docs run with python3 alone and report like a
task should (docs/PROTOCOL.md, *Task reports*)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"


def job(tmp_path: Path, script: str, *args: str, attempt_dir: bool = True):
    env = {k: v for k, v in os.environ.items() if k != "PRAXIST_EXPERIMENT_ATTEMPT_DIR"}
    if attempt_dir:
        env["PRAXIST_EXPERIMENT_ATTEMPT_DIR"] = str(tmp_path)
    # -S -I: the standard library alone, as a bare python3 would have it
    return subprocess.run([sys.executable, "-S", "-I", str(JOBS / script), *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_train_prints_each_step_and_reports_its_progress(tmp_path):
    result = job(tmp_path, "train.py", "--steps", "3", "--step-time", "0", "--seed", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(" loss ")[0] for line in lines[:3]] == [
        "train step 1/3", "train step 2/3", "train step 3/3"]
    assert lines[3].startswith("train done: seed 2 lr 0.1 final loss ")
    assert json.loads((tmp_path / "progress.json").read_text()) == {
        "done": 3, "total": 3, "unit": "step"}
    assert not (tmp_path / "failure.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]  # no temporary left


def test_train_diverges_with_a_failure_report(tmp_path):
    result = job(tmp_path, "train.py", "--lr", "1", "--step-time", "0")
    assert result.returncode == 3
    assert json.loads((tmp_path / "failure.json").read_text()) == {
        "kind": "diverged", "message": "loss is NaN at step 1", "step": 1}
    assert json.loads((tmp_path / "progress.json").read_text())["done"] == 0


def test_eval_reports_batches_and_runs_outside_praxist_too(tmp_path):
    result = job(tmp_path, "eval.py", "--seed", "3", "--batch-time", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("eval done: seed 3 accuracy 0.")
    assert json.loads((tmp_path / "progress.json").read_text()) == {
        "done": 4, "total": 4, "unit": "batch"}
    outside = tmp_path / "outside"
    outside.mkdir()
    result = job(outside, "train.py", "--steps", "1", "--step-time", "0", attempt_dir=False)
    assert result.returncode == 0 and not list(outside.iterdir())
