"""The journal: checksummed records, torn tails truncated, mid-log damage refused."""

from __future__ import annotations

import pytest

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


def test_a_record_out_of_sequence_is_not_accepted(tmp_path):
    path = tmp_path / "j.log"
    write_records(path, 2)
    data = path.read_bytes()
    first = data.split(b"\n")[0] + b"\n"
    path.write_bytes(data + first)  # a valid record, but seq 1 again
    journal = Journal(path)
    assert len(journal.records) == 2 and journal.truncated_bytes == len(first)
