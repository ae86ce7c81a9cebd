"""The derived files a compaction's watermark vouches for, made durable by name
(adapters/unsynced.py): what was written since the last watermark, no more."""

from __future__ import annotations

import json
import os

from praxist_fs.adapters import fsio, unsynced


def test_the_files_owed_a_watermark_are_those_written_since_the_last_one_by_name(tmp_path):
    """``Unsynced``: a start not vouched for owes everything once; then the names written
    since the last take, given back when a compaction failed; past its bound, everything
    again (its memory stays bounded)."""
    owed = unsynced.Unsynced()
    owed.note(str(tmp_path / "jobs" / "a.json"))
    assert owed.take() is None  # unknown by name: sync(2) once
    owed.note(str(tmp_path / "jobs" / "a.json"))
    owed.note(str(tmp_path / "replies" / "r.json"))
    taken = owed.take()
    assert taken == {str(tmp_path / "jobs"): {"a.json"}, str(tmp_path / "replies"): {"r.json"}}
    assert owed.take() == {}
    owed.give_back(taken)  # the compaction that took them failed
    owed.note(str(tmp_path / "jobs" / "b.json"))
    assert owed.take() == {str(tmp_path / "jobs"): {"a.json", "b.json"},
                           str(tmp_path / "replies"): {"r.json"}}


def test_past_its_bound_the_next_watermark_syncs_everything(monkeypatch, tmp_path):
    monkeypatch.setattr(unsynced, "UNSYNCED_NAMES", 3)
    owed = unsynced.Unsynced(everything=False)
    for n in range(4):
        owed.note(str(tmp_path / f"{n}.json"))
    assert owed.take() is None and owed.names == {}


def test_made_durable_are_the_files_named_and_their_directories(tmp_path, monkeypatch):
    """Each file named that is still there is fdatasynced, each directory fsynced; a file
    moved on since is its directory's entry alone; nothing else is synced."""
    ledger = tmp_path / "ledger"
    monkeypatch.setattr(fsio, "_ledger", os.open(ledger, os.O_WRONLY | os.O_CREAT, 0o600))
    (tmp_path / "d").mkdir()
    fsio.write_atomic(tmp_path / "d" / "kept.json", b"{}", sync=False)
    owed = unsynced.Unsynced(everything=False)
    for name in ("kept.json", "moved-on.json"):
        owed.note(str(tmp_path / "d" / name))
    unsynced.make_durable(owed.take())
    assert [(line["op"], os.path.basename(line["path"]))
            for line in map(json.loads, ledger.read_text().splitlines())
            if line["op"] in ("fsync", "fsync_dir", "sync")] == \
        [("fsync", "kept.json"), ("fsync_dir", "d")]
