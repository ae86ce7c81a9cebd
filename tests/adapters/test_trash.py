"""The trash on real files: a rename now, the removal later; a reader of the old file
still reads it whole."""

from __future__ import annotations

import os

from praxist_fs.adapters import trash as trash_module
from praxist_fs.adapters.trash import Trash


def test_a_discarded_file_leaves_its_directory_at_once_and_a_reader_still_reads_it_whole(
        tmp_path):
    bin_, jobs = tmp_path / "trash", tmp_path / "queued"
    bin_.mkdir()
    jobs.mkdir()
    (jobs / "j.json").write_bytes(b'{"job_id": "j", "state": "queued"}\n')
    trash = Trash(bin_)
    trash.empty(1.0)  # a start's look: nothing left by a crash
    assert trash.held == 0
    with open(jobs / "j.json", "rb") as reader:
        trash.discard(str(jobs / "j.json"))
        trash.discard(str(jobs / "gone.json"))  # already gone: counts as taken
        assert os.listdir(jobs) == [] and len(os.listdir(bin_)) == 1 and trash.held == 1
        assert reader.read() == b'{"job_id": "j", "state": "queued"}\n'
    trash.empty(1.0)
    assert os.listdir(bin_) == [] and trash.held == 0


def test_the_trash_is_emptied_a_slice_at_a_time_and_counts_what_a_crash_left(
        tmp_path, monkeypatch):
    bin_ = tmp_path / "trash"
    bin_.mkdir()
    for n in range(5):  # a crashed coordinator's
        (bin_ / f"1.{n}").write_bytes(b"{}\n")
    trash = Trash(bin_)
    assert trash.held  # unknown until looked at
    clock = iter(range(100))
    monkeypatch.setattr(trash_module.time, "monotonic", lambda: next(clock))
    trash.empty(2)  # two seconds of the fake clock: two removals, then the slice ends
    assert len(os.listdir(bin_)) == 3 and trash.held
    trash.empty(100)
    assert os.listdir(bin_) == [] and trash.held == 0
    monkeypatch.setattr(trash_module, "TRASH_LIMIT", 2)
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    trash.discard(str(tmp_path / "a"))
    assert not trash.full
    trash.discard(str(tmp_path / "b"))
    assert trash.full


def test_on_a_full_disk_a_discarded_file_is_removed_at_once(tmp_path, monkeypatch):
    """A rename into the trash may need a new directory block; a removal frees room."""
    import errno

    bin_ = tmp_path / "trash"
    bin_.mkdir()
    (tmp_path / "j.json").write_bytes(b"{}\n")
    trash = Trash(bin_)
    trash.empty(1.0)

    def full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", dst)

    monkeypatch.setattr(trash_module, "rename", full)
    trash.discard(str(tmp_path / "j.json"))
    assert not (tmp_path / "j.json").exists() and trash.held == 0


def test_with_the_trash_removed_by_hand_a_discarded_file_is_still_taken_out(tmp_path):
    bin_ = tmp_path / "trash"
    bin_.mkdir()
    (tmp_path / "j.json").write_bytes(b"{}\n")
    trash = Trash(bin_)
    bin_.rmdir()
    trash.empty(1.0)
    trash.discard(str(tmp_path / "j.json"))
    assert not (tmp_path / "j.json").exists() and trash.held == 0
