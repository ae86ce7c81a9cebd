"""A large file's writeback goes out a slice at a time (``writeback``), so that the journal's
fsync on the same disk never queues behind a whole snapshot (issue 31: a reply 131-137 ms
late while the compaction child wrote ~135 MB at 100,000 finished jobs).

How much of a file is dirty or being written back cannot be read from outside without
noise (the page cache is the machine's), so the tests put a double behind ``Disk``'s
interface (``write``, ``sync_file_range``): it writes for real through ``os.write`` and
keeps a line per call in a log file, which a forked compaction child appends to as well;
``_most_unsynced`` replays the log as the kernel keeps a file's pages: dirty once
written, in flight once their writeback starts, clean once it was waited for."""

from __future__ import annotations

import json
import os

import pytest

from praxist_fs import compaction
from praxist_fs.adapters import fsio, writeback
from praxist_fs.adapters.jobindex import JobIndex
from praxist_fs.adapters.journal import Journal
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.unsynced import Unsynced
from praxist_fs.core.metrics import AttemptTally
from tests.core.simulation import replay, run_seed

SLICE = 4096


class LoggedDisk(writeback.Disk):
    """``writeback.Disk`` that logs each call (one JSON line, appended at once: a forked
    child's calls land in the same log) before making it."""

    def __init__(self, log_path) -> None:
        super().__init__()
        self.log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def _note(self, call, *arguments) -> None:  # with the caller's niceness
        line = [call, os.getpriority(os.PRIO_PROCESS, 0), *arguments]
        os.write(self.log, (json.dumps(line) + "\n").encode())

    def write(self, fd, data):
        written = os.write(fd, data)
        self._note("write", os.fstat(fd).st_ino, os.lseek(fd, 0, os.SEEK_CUR) - written,
                   written)
        return written

    def sync_file_range(self, fd, offset, nbytes, flags):
        self._note("sync_file_range", os.fstat(fd).st_ino, offset, nbytes, flags)
        super().sync_file_range(fd, offset, nbytes, flags)


def _most_unsynced(log_path) -> dict[int, tuple[int, int]]:
    """Per file written (by inode): the most bytes ever dirty or in flight at once, and
    the bytes written."""
    files: dict[int, dict] = {}
    for line in log_path.read_text().splitlines():
        call, _, inode, offset, nbytes, *flags = json.loads(line)
        state = files.setdefault(inode, {"pages": {}, "most": 0, "written": 0})
        pages = state["pages"]  # byte offset -> "dirty" | "flight", a 512-byte block each
        blocks = range(offset // 512, -(-(offset + nbytes) // 512))
        if call == "write":
            state["written"] += nbytes
            for block in blocks:
                pages[block] = "dirty"
        else:
            if flags[0] & 4:  # WAIT_AFTER: what was in flight in the range is on the disk
                for block in blocks:
                    if pages.get(block) == "flight" or flags[0] & 2:
                        pages.pop(block, None)
            elif flags[0] & 2:  # WRITE: the dirty blocks' writeback starts
                for block in blocks:
                    if pages.get(block) == "dirty":
                        pages[block] = "flight"
        state["most"] = max(state["most"], len(pages) * 512)
    return {inode: (state["most"], state["written"]) for inode, state in files.items()}


def _niceness(log_path) -> set[int]:
    """The niceness of the processes that made the calls logged."""
    return {json.loads(line)[1] for line in log_path.read_text().splitlines()}


@pytest.fixture
def logged(tmp_path, monkeypatch):
    log_path = tmp_path / "calls.log"
    disk = LoggedDisk(log_path)
    monkeypatch.setattr(writeback, "DISK", disk)
    monkeypatch.setattr(writeback, "SLICE_BYTES", SLICE)
    yield log_path
    os.close(disk.log)


def test_a_sliced_file_is_written_whole_and_never_more_than_two_slices_unsynced(tmp_path,
                                                                                 logged):
    data = os.urandom(40 * SLICE + 123)
    target = tmp_path / "big"
    fsio.write_atomic(target, data, durable=True, sliced=True)
    assert target.read_bytes() == data
    [(most, written)] = _most_unsynced(logged).values()
    assert written == len(data) and 0 < most <= 2 * SLICE


def test_written_whole_the_file_would_be_unsynced_whole(tmp_path, logged):
    """The measure itself: the same writes without a slice's sync leave everything dirty."""
    data = os.urandom(10 * SLICE)
    fd = os.open(tmp_path / "whole", os.O_WRONLY | os.O_CREAT, 0o600)
    writeback.DISK.write(fd, data)
    os.close(fd)
    assert list(_most_unsynced(logged).values()) == [(len(data), len(data))]


def test_the_durable_steps_of_a_sliced_write_are_those_of_a_whole_one(tmp_path, monkeypatch):
    """The power-loss model reads the same ledger: create (the whole data), fsync, rename,
    directory fsync, in that order."""
    ledger = tmp_path / "ledger"
    monkeypatch.setattr(fsio, "_ledger", os.open(ledger, os.O_WRONLY | os.O_CREAT, 0o600))
    monkeypatch.setattr(writeback, "SLICE_BYTES", SLICE)
    data = os.urandom(5 * SLICE)
    steps = []
    for sliced in (False, True):
        os.truncate(ledger, 0)
        os.lseek(fsio._ledger, 0, os.SEEK_SET)
        fsio.write_atomic(tmp_path / f"f{sliced}", data, durable=True, sliced=sliced)
        steps.append([(line["op"], line.get("data")) for line in
                      map(json.loads, ledger.read_text().splitlines())])
    assert steps[0] == steps[1] and [op for op, _ in steps[1]] == \
        ["create", "fsync", "rename", "fsync_dir"]


@pytest.fixture
def served(tmp_path):
    """A run's journal, job index and a scheduler with a history (hundreds of finished
    jobs and replies), as a coordinator holds them; closed after, its shelf's file too."""
    layout = RunLayout.at(tmp_path / "run")
    layout.journal_dir.mkdir(parents=True)
    journal = Journal(layout.journal)
    index = JobIndex(tmp_path / "index.sqlite", journal_seq=0, boot_id="b", clean=False)
    sched = replay(run_seed(4, 400).journal)
    yield layout, journal, sched, index, AttemptTally()
    for reader in {id(r): r for r in (sched.jobs.reader, sched.replies.reader)}.values():
        getattr(reader, "handle", None) and reader.handle.close()
    index.close()
    journal.close()


def test_a_compaction_at_a_stop_writes_its_snapshot_a_slice_at_a_time(served, logged):
    layout, journal, sched, index, tally = served
    compaction.compact(layout, journal, sched, index, tally, Unsynced())
    [(most, written)] = _most_unsynced(logged).values()
    assert written == layout.snapshot.stat().st_size > 10 * SLICE
    assert most <= 2 * SLICE


def test_the_compaction_child_writes_its_snapshot_a_slice_at_a_time(served, logged):
    """The background compaction of a serving coordinator: its forked child writes, at
    the lowest CPU priority (a reply it delays waits for a core)."""
    layout, journal, sched, index, tally = served
    wake_read, wake_write = os.pipe()
    running = compaction.Background.begin(layout, journal, sched, index, tally, wake_write,
                                           Unsynced())
    running.wait()
    while running.step(layout, journal, sched) is None:
        pass
    os.close(wake_read)
    os.close(wake_write)
    assert os.waitstatus_to_exitcode(running.status) == 0
    [(most, written)] = _most_unsynced(logged).values()
    assert written == layout.snapshot.stat().st_size > 10 * SLICE
    assert most <= 2 * SLICE
    assert _niceness(logged) == {compaction.CHILD_NICENESS} == {19}  # the loop goes first

