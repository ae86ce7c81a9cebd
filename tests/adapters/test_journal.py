"""The journal: checksummed records, torn tails truncated, damaged records refused."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import zlib

import pytest

from praxist_fs.adapters import fsio
from praxist_fs.adapters.journal import Journal, read_intact
from praxist_fs.errors import JournalCorrupt
from tests.disks import small_tmpfs


def write_records(path, count):
    journal = Journal(path)
    for i in range(count):
        journal.append({"type": "x", "i": i})
    journal.commit()
    journal.close()


def test_records_survive_reopen_in_order(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    journal = Journal(path)
    assert [r["i"] for r in journal.records] == [0, 1, 2, 3, 4] and journal.seq == 5
    journal.append({"type": "x", "i": 5})
    journal.commit()
    journal.close()
    assert [r["i"] for r in Journal(path).records] == list(range(6))


def test_a_replay_hands_out_each_record_once_then_holds_none(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    journal = Journal(path)
    assert [r["i"] for r in journal.replay()] == [0, 1, 2, 3, 4] and journal.seq == 5
    assert journal.records == [] and list(journal.replay()) == []


def test_a_checksummed_record_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 1)
    head = b"2 "
    payload = b"{not json"
    with open(path, "ab") as handle:
        handle.write(head + b"%08x " % zlib.crc32(head + payload) + payload + b"\n")
    with pytest.raises(JournalCorrupt, match="not JSON"):
        list(Journal(path).replay())


@pytest.mark.parametrize("tail", [b"6 0000", b"\x00" * 4096, b"6 deadbeef {\"type\":",
                                  b"garbage without newline"])
def test_torn_tail_is_truncated(tmp_path, tail):
    path = tmp_path / "j.log"
    write_records(path, 5)
    good = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(tail)
    journal = Journal(path)
    assert len(journal.records) == 5 and journal.truncated_bytes == len(tail)
    assert path.read_bytes() == good
    journal.append({"type": "x", "i": 99})
    journal.commit()
    journal.close()
    assert Journal(path).records[-1]["i"] == 99


def flip_in_last_record(path, at: int) -> tuple[int, bytes]:
    """Flip one bit of the last record, ``at`` bytes from its start (from its end if
    negative): bit rot, a bad sector. Returns where the record starts and its bytes."""
    data = bytearray(path.read_bytes())
    start = data.rindex(b"\n", 0, len(data) - 1) + 1
    record = bytes(data[start:])
    data[start + at if at >= 0 else len(data) + at] ^= 0x01
    path.write_bytes(bytes(data))
    return start, record


@pytest.mark.parametrize("at", [0, 3, 20, -2])  # seq, checksum, payload, its last brace
def test_a_complete_last_record_that_fails_its_checksum_is_refused_not_dropped(tmp_path, at):
    path = tmp_path / "j.log"
    write_records(path, 5)
    start, _ = flip_in_last_record(path, at)
    damaged = path.read_bytes()
    with pytest.raises(JournalCorrupt, match=rf"record seq 5 \(from byte {start}, .*"
                       r"fails its checksum.*--drop-damaged-record 5"):
        Journal(path)
    assert path.read_bytes() == damaged  # nothing cut: the operator decides


def test_a_damaged_last_record_is_cut_only_once_its_bytes_are_kept(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    start, _ = flip_in_last_record(path, 20)
    damaged = path.read_bytes()
    asked = []
    with pytest.raises(JournalCorrupt, match="seq 5"):
        Journal(path, keep_damaged=lambda *args: asked.append(args) and False)
    assert asked == [(5, start, damaged[start:])] and path.read_bytes() == damaged
    journal = Journal(path, keep_damaged=lambda *args: True)
    assert [r["i"] for r in journal.records] == [0, 1, 2, 3] and journal.seq == 4
    assert path.read_bytes() == damaged[:start] and journal.truncated_bytes == 0
    journal.append({"type": "x", "i": 99})  # numbering goes on where the good records end
    journal.commit()
    journal.close()
    assert [r["i"] for r in Journal(path).records] == [0, 1, 2, 3, 99]


def test_a_torn_append_is_still_truncated_without_asking(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    whole = path.read_bytes()
    path.write_bytes(whole[:-10])  # the last record cut short: no newline
    journal = Journal(path, keep_damaged=lambda *args: pytest.fail("a torn tail is not damage"))
    assert journal.seq == 4 and journal.truncated_bytes == len(whole) - 10 - whole.rindex(
        b"\n", 0, len(whole) - 1) - 1


def test_a_last_record_whose_newline_is_damaged_is_kept(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    whole = path.read_bytes()
    path.write_bytes(whole[:-1] + b"\x0b")  # the final newline's bit flipped
    journal = Journal(path)
    assert [r["i"] for r in journal.records] == [0, 1, 2, 3, 4]
    assert journal.restored_newline == 5 and journal.truncated_bytes == 0
    assert path.read_bytes() == whole
    journal.close()


def test_damage_followed_by_good_records_is_corruption(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"i":2', b'"i":7')  # checksum no longer matches
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalCorrupt, match="after seq 2"):
        Journal(path)
    with pytest.raises(JournalCorrupt, match="after seq 2"):  # never dropped on request
        Journal(path, keep_damaged=lambda *args: True)


def test_a_record_out_of_sequence_is_refused(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 2)
    data = path.read_bytes()
    path.write_bytes(data + data.split(b"\n")[0] + b"\n")  # intact, but seq 1 again
    with pytest.raises(JournalCorrupt, match="seq 1 where 3 was due"):
        Journal(path)


def test_compaction_empties_the_file_and_numbering_goes_on(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 4)
    journal = Journal(path)
    journal.compact()
    assert path.read_bytes() == b"" and journal.seq == 4 and journal.tail == 0
    journal.append({"type": "x", "i": 4})
    journal.commit()
    journal.close()
    reopened = Journal(path, after=4)
    assert [r["i"] for r in reopened.records] == [4]
    assert reopened.seq == 5 and reopened.tail == 1


def test_a_journal_kept_after_its_snapshot_holds_the_records_appended_since(tmp_path):
    """A compaction written in the background covers the records up to its fork; those
    appended meanwhile are all that is kept, and appending goes on into the new file."""
    path = tmp_path / "j.log"
    write_records(path, 4)
    journal = Journal(path)
    seq, end = journal.committed
    for i in (4, 5):
        journal.append({"type": "x", "i": i})
    journal.commit()
    journal.append({"type": "x", "i": 6})  # not committed yet: it goes in first
    journal.keep_after(seq, end)
    assert seq == 4 and journal.seq == 7 and journal.tail == 3
    assert [r["i"] for r in read_intact(path, 4)] == [4, 5, 6]
    journal.append({"type": "x", "i": 7})
    journal.commit()
    journal.close()
    reopened = Journal(path, after=4)
    assert [r["i"] for r in reopened.records] == [4, 5, 6, 7] and reopened.seq == 8


def test_the_file_a_kept_journal_replaced_is_closed_off_the_callers_thread(tmp_path,
                                                                         monkeypatch):
    """issue 31 item 3 (no loop stall over 50 ms): the old file, renamed over, frees its
    blocks at its last close, tens of milliseconds on a busy disk at a compaction of a
    long history; the loop's thread, which keeps the journal, does not wait for that.
    ``os.close`` is watched (and still called) to see on which thread the old file's
    descriptor is closed."""
    closed_on: dict[int, int] = {}
    close = os.close

    def watched_close(fd: int) -> None:
        closed_on[fd] = threading.get_ident()
        close(fd)

    path = tmp_path / "j.log"
    write_records(path, 4)
    journal = Journal(path)
    seq, end = journal.committed
    journal.append({"type": "x", "i": 4})
    old = journal._fd
    monkeypatch.setattr(os, "close", watched_close)
    journal.keep_after(seq, end)
    deadline = time.monotonic() + 10
    while old not in closed_on and time.monotonic() < deadline:
        time.sleep(0.01)
    assert old in closed_on and closed_on[old] != threading.get_ident()
    monkeypatch.undo()
    journal.close()
    assert [r["i"] for r in read_intact(path, 4)] == [4]


def test_records_the_snapshot_covers_are_skipped(tmp_path):
    """A crash between writing the snapshot and emptying the journal."""
    path = tmp_path / "j.log"
    write_records(path, 5)
    journal = Journal(path, after=3)
    assert [r["i"] for r in journal.records] == [3, 4] and journal.seq == 5


def test_a_tail_that_began_at_an_earlier_compaction_is_read_past_the_snapshot(tmp_path):
    """A crash after a later snapshot was written, before the journal was emptied."""
    source = tmp_path / "full.log"
    write_records(source, 6)
    path = tmp_path / "j.log"
    path.write_bytes(b"\n".join(source.read_bytes().split(b"\n")[2:]))  # seq 3..6
    journal = Journal(path, after=4)
    assert [r["i"] for r in journal.records] == [4, 5] and journal.seq == 6


def test_an_empty_compacted_journal_continues_after_its_snapshot(tmp_path):
    path = tmp_path / "j.log"
    path.write_bytes(b"")
    assert Journal(path, after=7).seq == 7


@pytest.mark.parametrize("after, problem", [
    (0, "seq 4 where 1 was due"),           # the snapshot is gone: history is missing
    (2, "seq 4 where 3 was due"),           # records between the snapshot and the tail lost
])
def test_a_journal_that_does_not_meet_its_snapshot_is_refused(tmp_path, after, problem):
    source = tmp_path / "full.log"
    write_records(source, 5)
    lines = source.read_bytes().split(b"\n")
    path = tmp_path / "j.log"
    path.write_bytes(b"\n".join(lines[3:]))  # seq 4 and 5 only
    with pytest.raises(JournalCorrupt, match=problem):
        Journal(path, after=after)


def test_a_journal_shorter_than_its_snapshot_is_refused(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 2)
    with pytest.raises(JournalCorrupt, match="ends at seq 2, before its snapshot's seq 5"):
        Journal(path, after=5)

def test_every_durable_step_is_in_the_power_loss_ledger(tmp_path, monkeypatch):
    """What tests/powerloss.py needs to know: creation, appends, fsyncs, truncation."""
    ledger = tmp_path / "ledger.jsonl"
    fd = os.open(ledger, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    monkeypatch.setattr(fsio, "_ledger", fd)
    path = tmp_path / "j.log"
    write_records(path, 2)
    with open(path, "ab") as handle:
        handle.write(b"3 torn")
    Journal(path).close()
    os.close(fd)
    ops = [json.loads(line)["op"] for line in ledger.read_text().splitlines()]
    assert ops == ["open_append", "fsync", "fsync_dir", "append", "fsync",
                   "open_append", "truncate", "fsync"]


def test_a_commit_that_fails_on_a_full_disk_takes_its_records_back(tmp_path):
    """The part of a batch that reached the file before ENOSPC is cut off and its seqs are
    reused, so that the next commit does not leave a torn record in the middle (refused at
    the next start) or a gap in the numbering; ``durable`` reads what is left."""
    with small_tmpfs(tmp_path / "disk") as disk:
        path = disk.root / "j.log"
        journal = Journal(path)
        journal.append({"type": "x", "i": 0})
        journal.commit()
        size = path.stat().st_size
        disk.fill()  # the journal's last page still has room: a prefix of the next lands
        journal.append({"type": "big", "pad": "p" * 20_000})
        with pytest.raises(OSError) as failed:
            journal.commit()
        assert failed.value.errno == errno.ENOSPC and path.stat().st_size == size
        assert journal.seq == 1 and [r["i"] for r in journal.durable(0)] == [0]
        disk.free()
        journal.append({"type": "x", "i": 1})
        journal.commit()
        journal.close()
        assert path.stat().st_size > size
        assert [r["i"] for r in Journal(path).records] == [0, 1]


def test_a_reader_reads_read_intact_and_never_repairs(tmp_path):
    """`praxist-fs report` reads a live coordinator's journal: every intact record after
    the snapshot's seq, stopping at an append in progress, and the file left as it was
    (only a start truncates a torn tail)."""
    path = tmp_path / "j.log"
    write_records(path, 5)
    with open(path, "ab") as handle:
        handle.write(b"6 deadbeef {\"type\":")  # an append the coordinator is making
    before = path.read_bytes()
    assert [r["i"] for r in read_intact(path)] == [0, 1, 2, 3, 4]
    assert [r["i"] for r in read_intact(path, after=3)] == [3, 4]
    assert path.read_bytes() == before
