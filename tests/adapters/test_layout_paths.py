"""An attempt's paths, given as strings on the launch path and as ``Path``s elsewhere,
name the same files: the spec, attempt.json and the command's environment say the
directory and log that GO, ABORT and the observations use."""

from __future__ import annotations

import json
import marshal
import os

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends.attempt_dir import description
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local.launcher import spec_of
from praxist_fs.core.effects import SpawnAttempt


def test_the_string_paths_are_the_path_ones_for_a_run_named_loosely(tmp_path, monkeypatch):
    """A run named relatively, with ``.``, ``..`` and a trailing slash: the strings are
    the ``Path`` methods' files, spelled as pathlib spells them."""
    monkeypatch.chdir(tmp_path)
    layout = RunLayout.at("./x/../run/")
    root = tmp_path / "run"
    assert layout.root_str == str(root)
    for job_id, attempt_id in (("job-1", "a1"), ("b.7@x,y=z+w", "a12")):
        attempt_dir = root / "resource_scheduler" / "attempts" / job_id / attempt_id
        log = root / "logs" / "experiments" / job_id / f"{attempt_id}.log"
        assert layout.attempt_dir_str(job_id, attempt_id) == str(attempt_dir)
        assert layout.attempt_dir(job_id, attempt_id) == attempt_dir
        assert layout.log_str(job_id, attempt_id) == str(log)
        assert layout.log(job_id, attempt_id) == log
    assert layout.reply_str("req-1") == str(root / "resource_scheduler/spool/replies/req-1.json")
    assert layout.reply("req-1") == root / "resource_scheduler/spool/replies/req-1.json"


def test_a_launch_writes_the_attempt_paths_the_coordinator_watches(tmp_path):
    """The spec the shim runs, attempt.json and the command's environment name the
    attempt directory and log of the ``Path`` API, and the run directory itself as the
    default cwd: a tool that follows any of them finds the files the coordinator reads."""
    layout = RunLayout.at(tmp_path / "run")
    effect = SpawnAttempt(job_id="job-1", attempt_id="a2", argv=("true",), command=None,
                          cwd=None, profile="cpu", metadata={"peer": "p"})
    attempt_dir, log = layout.attempt_dir("job-1", "a2"), layout.log("job-1", "a2")
    env = attempt_environment(layout, effect)
    assert env["PRAXIST_EXPERIMENT_ATTEMPT_DIR"] == str(attempt_dir)
    assert env["PRAXIST_RUN_DIR"] == str(tmp_path / "run")
    spec = marshal.loads(spec_of(layout, effect, env))
    assert (spec["log"], spec["cwd"], spec["env"]) == (str(log), str(tmp_path / "run"), env)
    described = json.loads(description(layout, effect))
    assert (described["log"], described["cwd"]) == (str(log), os.fspath(tmp_path / "run"))
    assert spec["attempt_json"] == description(layout, effect)
