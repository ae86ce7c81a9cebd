"""The journal: checksummed records, torn tails truncated, mid-log damage refused."""

from __future__ import annotations

import json
import os
import zlib

import pytest

from praxist_fs.adapters import fsio
from praxist_fs.adapters.journal import Journal
from praxist_fs.errors import JournalCorrupt


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


def test_damage_followed_by_good_records_is_corruption(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 5)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"i":2', b'"i":7')  # checksum no longer matches
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalCorrupt, match="after seq 2"):
        Journal(path)


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
