"""The append-only event journal: the source of truth (R-DUR-1).

One record per line: ``<seq> <crc32 hex> <json>``; the checksum covers the
sequence number and the payload, so a torn or zero-filled tail never reads as
a record. At open a damaged tail is truncated to the last good record; a
damaged record followed by a good one is corruption and stops the coordinator.
``append`` buffers, ``commit`` writes and fsyncs (group commit); an fsync error
propagates and is fatal for the caller.

Compaction: once a durable snapshot covers every record up to seq N, ``compact``
empties the file and numbering goes on from N + 1. A journal therefore starts no
later than right after its snapshot (``after``): records the snapshot already
covers (a crash between writing it and emptying the file) are skipped, and a
journal that starts later than that has lost records and is refused.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..errors import JournalCorrupt
from . import fsio


def _encode(seq: int, record: dict[str, Any]) -> bytes:
    payload = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
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


class Journal:
    def __init__(self, path: str | os.PathLike, *, after: int = 0) -> None:
        """``after``: the seq a snapshot already covers (0: none)."""
        self.path = Path(path)
        # the bytes of the file that hold records after ``after``, on disk at open: to replay
        self._replay: tuple[int, int] | None = None
        self.truncated_bytes = 0
        self._after = after
        self._seq = after
        self._pending: list[bytes] = []
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

    def _read(self, span: tuple[int, int] | None) -> Iterator[dict[str, Any]]:
        if span is None:
            return
        offset, end = span
        with open(self.path, "rb") as handle:
            handle.seek(offset)
            for line in handle:
                if offset >= end:
                    return
                offset += len(line)
                try:
                    yield json.loads(line.split(b" ", 2)[2])
                except ValueError:
                    raise JournalCorrupt(f"{self.path}: a record with a good checksum is "
                                         "not JSON; refusing to start") from None

    def _load(self) -> None:
        offset, expected = 0, None
        with open(self.path, "rb") as handle:
            for line in handle:
                seq = _check(line[:-1]) if line.endswith(b"\n") else None
                if seq is None:
                    handle.seek(offset)
                    self._repair_tail(handle.read(), offset, (expected or self._after + 1) - 1)
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
        last = expected - 1 if expected is not None else self._after
        if last < self._after:
            raise JournalCorrupt(f"{self.path}: ends at seq {last}, before its snapshot's "
                                 f"seq {self._after}; refusing to start")
        self._seq = last

    def _repair_tail(self, tail: bytes, offset: int, last_good: int) -> None:
        """``tail``: the file from the first damaged record (at ``offset``) on."""
        for later in tail.split(b"\n")[1:]:
            if _check(later) is not None:
                raise JournalCorrupt(
                    f"{self.path}: damaged record after seq {last_good} is followed by good "
                    "records; refusing to start (copy the journal aside and ask an operator)")
        self.truncated_bytes = len(tail)
        fsio.truncate(self._fd, offset)
        fsio.fsync(self._fd)

    def compact(self) -> None:
        """Empty the journal: a durable snapshot covers every record in it."""
        self.commit()
        fsio.truncate(self._fd, 0)
        fsio.fsync(self._fd)
        self._after = self._seq

    def append(self, record: dict[str, Any]) -> int:
        self._seq += 1
        self._pending.append(_encode(self._seq, record))
        return self._seq

    def commit(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        fsio.append(self._fd, data)
        fsio.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
