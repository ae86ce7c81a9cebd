"""``praxist-fs status`` shows at least what the run's journal held when it was asked.

Issue 29: the README's quick start printed ``counts: running 1`` right after its
``launch`` had returned with the job's exit code, on a loaded host: the coordinator
rewrites status.json at a cadence, and the job's end was journaled but not yet in it.
Here this test process plays the serving coordinator (endpoint.json names it), with a
journal one record ahead of status.json."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from praxist_fs import client
from praxist_fs.adapters.fsio import write_json
from praxist_fs.adapters.journal import Journal, last_seq
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.lock import write_endpoint


def behind(tmp_path) -> RunLayout:
    """A served run whose journal has records 1-3 and whose status.json shows 2."""
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    journal = Journal(layout.journal)
    for n in range(3):
        journal.append({"record": n})
    journal.commit()
    journal.close()
    write_json(layout.status, {"coordinator": {"journal_seq": 2}, "counts": {"running": 1}})
    write_endpoint(layout, since=time.time())
    return layout


def test_status_waits_for_the_rewrite_that_shows_the_last_journaled_record(tmp_path):
    layout = behind(tmp_path)
    rewrite = threading.Timer(0.5, write_json, (layout.status, {
        "coordinator": {"journal_seq": 3}, "counts": {"completed": 1}}))
    rewrite.start()
    try:
        done = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--json",
                               "--run-dir", str(layout.root)],
                              capture_output=True, text=True, timeout=60)
    finally:
        rewrite.join()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"] == {"completed": 1}


def test_a_stuck_coordinators_status_is_shown_as_it_is_after_the_catch_up_time(
        tmp_path, monkeypatch):
    layout = behind(tmp_path)
    monkeypatch.setattr(client, "STATUS_CATCH_UP_S", 0.2)
    assert client.current_status(layout)["counts"] == {"running": 1}


def test_the_journals_last_seq_passes_over_an_append_in_progress(tmp_path):
    layout = behind(tmp_path)
    assert last_seq(layout.journal) == 3
    with open(layout.journal, "ab") as handle:
        handle.write(b'4 0badc0de {"record"')  # a torn append: no newline yet
    assert last_seq(layout.journal) == 3
    assert last_seq(tmp_path / "missing.log") is None
