"""The append-only event journal: the source of truth (R-DUR-1).

One record per line: ``<seq> <crc32 hex> <json>``; the checksum covers the
sequence number and the payload, so a torn or zero-filled tail never reads as
a record. At open the first bad line decides (TigerBeetle's distinction between
a torn write and damage):

- followed by a good record: corruption in the middle, which stops the start;
- with no newline after it: a **torn append** (a crash leaves a prefix of what
  was written, never fsynced, so never acknowledged): truncated to the last
  good record. A record whose one extra byte stands where its newline was is
  damage to that newline, not a prefix of anything written: it is kept;
- a complete line (newline-terminated) that fails its checksum: a **damaged
  record**, which may have been fsynced and acknowledged. It is dropped only
  when ``keep_damaged`` (the coordinator, told so by an operator) has set its
  bytes aside; otherwise the start stops.
``append`` buffers, ``commit`` writes and fsyncs (group commit). A commit that
fails (a full disk, a quota, EIO) takes its records back: the error propagates, the
numbering goes on from the last durable record, and whatever part of them reached the
file is cut off at once (or, if that fails too, before anything is appended again).
The caller rolls its state back to ``durable`` (the records on disk) and retries later.

Compaction: once a durable snapshot covers every record up to seq N, ``compact``
empties the file and numbering goes on from N + 1. A journal therefore starts no
later than right after its snapshot (``after``): records the snapshot already
covers (a crash between writing it and emptying the file) are skipped, and a
journal that starts later than that has lost records and is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path

from ..errors import JournalCorrupt
from . import fsio
from .crashpoints import reach

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator


_encode_record = fsio.one_line_encoder(separators=(",", ":"), sort_keys=True)


def _encode(seq: int, record: dict[str, Any]) -> bytes:
    payload = _encode_record(record).encode()
    head = f"{seq} ".encode()
    return head + f"{zlib.crc32(head + payload):08x} ".encode() + payload + b"\n"


def _check(line: bytes) -> int | None:
    """The seq of an intact line, whatever it is; None if torn or damaged."""
    try:
        seq_text, crc_text, payload = line.split(b" ", 2)
        if int(crc_text, 16) != zlib.crc32(seq_text + b" " + payload):
            return None
        return int(seq_text)
    except ValueError:
        return None


def read_intact(path: str | os.PathLike, after: int = 0) -> Iterator[dict[str, Any]]:
    """The records after ``after`` (the seq its snapshot covers) of a journal a live
    coordinator may be appending to, read without opening it for writing (``simulate
    --from-run``, ``report``): up to the first line that is not an intact record (an
    append in progress, or damage the coordinator itself decides about at its next start)."""
    with open(path, "rb") as handle:
        for line in handle:
            seq = _check(line[:-1]) if line.endswith(b"\n") else None
            if seq is None:
                return
            if seq > after:
                yield json.loads(line.split(b" ", 2)[2])


class Journal:
    def __init__(self, path: str | os.PathLike, *, after: int = 0,
                 keep_damaged: Callable[[int, int, bytes], bool] | None = None) -> None:
        """``after``: the seq a snapshot already covers (0: none). ``keep_damaged(seq,
        offset, data)``: asked about damaged last records (the seq they were due at, where
        they start, their bytes); True once it has kept the bytes durably, which lets
        them be cut off."""
        self.path = Path(path)
        # the bytes of the file that hold records after ``after``, on disk at open: to replay
        self._replay: tuple[int, int] | None = None
        self.truncated_bytes = 0  # a torn tail's
        self.restored_newline: int | None = None  # the seq of a record whose newline was damaged
        self._keep_damaged = keep_damaged
        self._after = after
        self._seq = after
        self._pending: list[bytes] = []
        self._start = 0  # offset of the first record after ``after``
        self._synced = (after, 0)  # seq and file size of the last durable record
        self._torn = False  # a failed commit may have left bytes after it
        created = not self.path.exists()
        self._fd = fsio.open_append(self.path)
        if created:
            fsio.fsync(self._fd)
            fsio.fsync_dir(self.path.parent)
        self._load()

    @property
    def seq(self) -> int:
        """The sequence number of the last record written (committed or pending)."""
        return self._seq

    @property
    def tail(self) -> int:
        """Records written since the snapshot (or since the run began)."""
        return self._seq - self._after

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records found at open, all at once (for tests and tools; a start replays)."""
        return list(self._read(self._replay))

    def replay(self) -> Iterator[dict[str, Any]]:
        """The records found at open, once: read again from the file (open checked them)
        and decoded one at a time, so a start never holds them all, raw or decoded (their
        peak would stay as the coordinator's RSS)."""
        span, self._replay = self._replay, None
        return self._read(span)

    def durable(self, after: int) -> Iterator[dict[str, Any]]:
        """The durable records numbered after ``after`` (the seq of the snapshot a caller
        starts from), read back from the file: the state a failed commit rolls back to,
        rebuilt as a start would."""
        return self._read((self._start, self._synced[1]), after)

    def _read(self, span: tuple[int, int] | None, after: int = 0
              ) -> Iterator[dict[str, Any]]:
        if span is None:
            return
        offset, end = span
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            for line in handle:
                if offset >= end:
                    return
                offset += len(line)
                fields = line.split(b" ", 2)
                if after and int(fields[0]) <= after:
                    continue  # a snapshot written before a failed compaction covers it
                try:
                    yield json.loads(fields[2])
                except ValueError:
                    raise JournalCorrupt(f"{self.path}: a record with a good checksum is "
                                         "not JSON; refusing to start") from None

    def _load(self) -> None:
        offset, expected = 0, None
        with open(self.path, "rb") as handle:
            for line in handle:
                if not line.endswith(b"\n") and _check(line[:-1]) is not None:
                    line = self._restore_newline(offset, line)
                seq = _check(line[:-1]) if line.endswith(b"\n") else None
                if seq is None:
                    handle.seek(offset)
                    self._repair_tail(handle.read(), offset, expected or self._after + 1)
                    break
                if expected is None and 1 <= seq <= self._after + 1:
                    expected = seq  # a start no later than right after the snapshot: no gap
                if seq != expected:
                    raise JournalCorrupt(
                        f"{self.path}: record seq {seq} where {expected or self._after + 1} "
                        "was due; refusing to start (a journal without its snapshot, or "
                        "records lost)")
                if seq > self._after and self._replay is None:
                    self._replay = (offset, offset)
                expected = seq + 1
                offset += len(line)
        if self._replay is not None:
            self._replay = (self._replay[0], offset)
        self._start = self._replay[0] if self._replay is not None else offset
        last = expected - 1 if expected is not None else self._after
        if last < self._after:
            raise JournalCorrupt(f"{self.path}: ends at seq {last}, before its snapshot's "
                                 f"seq {self._after}; refusing to start")
        self._seq = last
        self._synced = (last, offset)

    def _repair_tail(self, tail: bytes, offset: int, due: int) -> None:
        """``tail``: the file from the first bad line (at ``offset``, due as seq ``due``) on."""
        lines = tail.split(b"\n")
        for later in lines[1:]:
            if _check(later) is not None:
                raise JournalCorrupt(
                    f"{self.path}: damaged record after seq {due - 1} is followed by good "
                    "records; refusing to start (copy the journal aside and ask an operator)")
        if len(lines) > 1:  # a whole line: written in full, so perhaps fsynced and acknowledged
            if self._keep_damaged is None or not self._keep_damaged(due, offset, tail):
                raise JournalCorrupt(
                    f"{self.path}: record seq {due} (from byte {offset}, {len(tail)} bytes to "
                    "the end) is a complete line that fails its checksum: damage, not a torn "
                    "write, and it may have been acknowledged; refusing to start (see "
                    "OPERATIONS.md *Crash*; to drop it, start once with --drop-damaged-record "
                    f"{due})")
        else:
            self.truncated_bytes = len(tail)
        fsio.truncate(self._fd, offset)
        fsio.fsync(self._fd)

    def _restore_newline(self, offset: int, line: bytes) -> bytes:
        """The last line is a good record and one byte where its newline belongs: damage
        to that byte (a torn append leaves a prefix, and a record is followed by its
        newline). The record stays: replaying a record is always safe, whether or not it
        had been acknowledged."""
        fsio.truncate(self._fd, offset + len(line) - 1)
        fsio.append(self._fd, b"\n")
        fsio.fsync(self._fd)
        self.restored_newline = _check(line[:-1])
        return line[:-1] + b"\n"

    @property
    def committed(self) -> tuple[int, int]:
        """The seq of the last durable record, and the byte where the records end: what a
        snapshot written from the state of this moment covers (``keep_after``)."""
        return self._synced

    def keep_after(self, seq: int, end: int) -> None:
        """A durable snapshot covers every record up to ``seq`` (``committed`` said they
        end at byte ``end``), while later ones were appended meanwhile: the file is
        replaced by one holding only those, written and made durable beside it, then
        renamed over it. A crash leaves the one or the other, which a start reads alike
        (records the snapshot covers are skipped)."""
        self.commit()
        with open(self.path, "rb") as handle:
            handle.seek(end)
            later = handle.read(self._synced[1] - end)
        fsio.write_atomic(self.path, later, durable=True, mode=0o600)  # else: as it was
        try:
            fd = fsio.open_append(self.path)
        except OSError as exc:  # appending to the old file would lose what it is told
            raise RuntimeError(f"{self.path}: replaced by the records after seq {seq}, then "
                               f"not opened again ({exc}); stopping: a start reads it") from None
        fsio.close_aside(self._fd)  # the old file, renamed over: its blocks freed aside
        self._fd = fd
        self._after, self._start, self._synced = seq, 0, (self._seq, len(later))
        self._torn = False  # what a failed commit left is not in the new file

    def compact(self) -> None:
        """Empty the journal: a durable snapshot covers every record in it."""
        self.commit()
        fsio.truncate(self._fd, 0)
        self._after, self._start, self._synced = self._seq, 0, (self._seq, 0)
        fsio.fsync(self._fd)

    def append(self, record: dict[str, Any]) -> int:
        self._seq += 1
        self._pending.append(_encode(self._seq, record))
        return self._seq

    def commit(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        try:
            if self._torn:
                self.rewind()
            fsio.append(self._fd, data)
            reach("journal.after_append")  # written, not yet durable: a power cut tears it
            fsio.fsync(self._fd)
        except OSError:
            self._seq, self._torn = self._synced[0], True
            with contextlib.suppress(OSError):  # at once: a stop before a retry leaves none
                self.rewind()
            raise
        self._synced = (self._seq, self._synced[1] + len(data))

    def rewind(self) -> None:
        """Cut off what a failed commit left after the last durable record (a prefix of
        its records, on a full disk). Until this succeeds nothing is appended: a torn
        record followed by good ones would read as damage at the next start."""
        fsio.truncate(self._fd, self._synced[1])
        fsio.fsync(self._fd)
        self._torn = False

    def close(self) -> None:
        os.close(self._fd)


def last_seq(path: str | os.PathLike) -> int | None:
    """The seq of the last intact record of a journal a live coordinator may be appending
    to, read from its end (an append in progress is passed over); None for a journal with
    none (compacted since) or one this uid cannot read (it is the coordinator's alone)."""
    try:
        with open(path, "rb") as handle:
            end = handle.seek(0, os.SEEK_END)
            span = 1 << 16
            while True:
                start = max(0, end - span)
                handle.seek(start)
                lines = handle.read(end - start).split(b"\n")[:-1]  # the last: unfinished
                for line in reversed(lines[1:] if start else lines):  # the first: cut
                    seq = _check(line)
                    if seq is not None:
                        return seq
                if not start:
                    return None
                span *= 4
    except OSError:
        return None
