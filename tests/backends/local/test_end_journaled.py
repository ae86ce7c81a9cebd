"""A supervisor told on its pool socket that the end it reported (``X``) is journaled
leaves exit.json unsynced; without that word in time, or once its coordinator is gone,
it fsyncs exit.json and its directories, the end's only durable record then (PROTOCOL
section 6, step 7). What a power cut would leave is read from the shims' power-loss
ledger (tests/powerloss.py)."""

from __future__ import annotations

import json
import select
import time

import pytest

from praxist_fs.adapters import fsio
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt

from ... import powerloss
from .conftest import finish, read_json, spawn, wait_for


@pytest.fixture
def ledger(tmp_path, monkeypatch):
    """The ledger the shims write (the server started after this passes it on)."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(fsio.LEDGER_ENV, str(path))
    return path


@pytest.fixture
def supervisor(layout, ledger):
    """A warm supervisor forked by a shim server that writes the ledger."""
    server = launcher.ShimServer.start(layout)
    warm = launcher.prestart(layout, server)
    yield warm
    warm.handle.popen.close()
    server.close()


def told_its_end(layout, tmp_path, warm, body="exit 3"):
    """An attempt given GO at once, read until its shim told the exit (``X``)."""
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=body, warm=warm)
    handle.release_barrier(b"G")
    wait_for(lambda: handle.read_status() is not None and handle.exit_record is not None,
             message="the exit on the status pipe")
    return handle, attempt_dir


def ledger_ops(ledger, under):
    return [(line["op"], line["path"]) for line in map(json.loads, ledger.read_text().splitlines())
            if line["path"].startswith(str(under))]


def test_an_end_confirmed_journaled_leaves_exit_json_unsynced(layout, tmp_path, ledger,
                                                              supervisor, monkeypatch):
    monkeypatch.setattr(launcher, "END_WAIT_S", 60.0)
    handle, attempt_dir = told_its_end(layout, tmp_path, supervisor)
    handle.confirm_end()
    assert finish(handle) == b""  # well before END_WAIT_S: the word ended the wait
    assert read_json(attempt_dir / "exit.json") == handle.exit_record  # written all the same
    ops = ledger_ops(ledger, layout.attempts)
    assert ("create", str(attempt_dir / "exit.json")) in ops
    assert [op for op in ops if op[0] in ("fsync", "fsync_dir")] == []  # no fsync at all
    powerloss.apply(ledger, layout.root)
    assert not attempt_dir.exists()  # a power cut may take it: the journal holds the end
    handle.close()


def test_an_end_never_confirmed_is_fsynced_and_a_late_word_is_let_pass(
        layout, tmp_path, ledger, supervisor, monkeypatch):
    """No word within END_WAIT_S (a coordinator stuck, or whose commit failed): exit.json
    and its directories are fsynced. The word that comes later finds the supervisor idle,
    which lets it pass and serves its next attempt."""
    monkeypatch.setattr(launcher, "END_WAIT_S", 0.2)
    handle, attempt_dir = told_its_end(layout, tmp_path, supervisor)
    assert finish(handle) == b""
    exit_json = str(attempt_dir / "exit.json")
    ops = ledger_ops(ledger, layout.attempts)
    assert ("fsync", exit_json) in ops
    assert {("fsync_dir", str(path)) for path in (attempt_dir, attempt_dir.parent,
                                                  layout.attempts)} <= set(ops)
    handle.confirm_end()  # too late
    handle.close()
    powerloss.apply(ledger, layout.root)
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 3

    supervisor = handle.popen.warm()
    effect = SpawnAttempt(job_id="job-1", attempt_id="a2", argv=("true",), command=None,
                          cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), metadata={"peer": "p"})
    second = launcher.spawn(layout, effect, attempt_environment(layout, effect), supervisor)
    second.release_barrier(b"G")
    finish(second)
    assert read_json(layout.attempt_dir("job-1", "a2") / "exit.json")["exit_code"] == 0
    second.close()


def test_a_coordinator_gone_before_its_word_leaves_the_fsyncs_to_the_supervisor_at_once(
        layout, tmp_path, ledger, supervisor, monkeypatch):
    """Its pool socket closed (the coordinator stopped, or died before the end's commit):
    the supervisor does not wait out END_WAIT_S but fsyncs exit.json and leaves."""
    monkeypatch.setattr(launcher, "END_WAIT_S", 60.0)
    handle, attempt_dir = told_its_end(layout, tmp_path, supervisor)
    handle.popen.retire()
    deadline = time.monotonic() + 15
    while handle.read_status() != b"":
        assert time.monotonic() < deadline, "the supervisor waited for a word no one sends"
        select.select([handle.status_fd], [], [], deadline - time.monotonic())
    assert handle.over
    assert ("fsync", str(attempt_dir / "exit.json")) in ledger_ops(ledger, layout.attempts)
    handle.close()
    powerloss.apply(ledger, layout.root)
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 3
