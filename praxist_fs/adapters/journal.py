"""The append-only event journal: the source of truth (R-DUR-1).

One record per line: ``<seq> <crc32 hex> <json>``; the checksum covers the
sequence number and the payload, so a torn or zero-filled tail never reads as
a record. At open a damaged tail is truncated to the last good record; a
damaged record followed by a good one is corruption and stops the coordinator.
``append`` buffers, ``commit`` writes and fsyncs (group commit); an fsync error
propagates and is fatal for the caller.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from ..errors import JournalCorrupt
from .fsio import fsync_dir


def _encode(seq: int, record: dict[str, Any]) -> bytes:
    payload = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
    head = f"{seq} ".encode()
    return head + f"{zlib.crc32(head + payload):08x} ".encode() + payload + b"\n"


def _decode(line: bytes, expected_seq: int) -> dict[str, Any] | None:
    try:
        seq_text, crc_text, payload = line.split(b" ", 2)
        seq = int(seq_text)
        if seq != expected_seq or int(crc_text, 16) != zlib.crc32(seq_text + b" " + payload):
            return None
        return json.loads(payload)
    except ValueError:
        return None


class Journal:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.records: list[dict[str, Any]] = []  # what was on disk at open, for replay
        self.truncated_bytes = 0
        self._seq = 0
        self._pending: list[bytes] = []
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        if created:
            os.fsync(self._fd)
            fsync_dir(self.path.parent)
        self._load()

    @property
    def seq(self) -> int:
        """The sequence number of the last record written (committed or pending)."""
        return self._seq

    def forget_loaded(self) -> None:
        """Drop the records read at open once they are replayed (they are on disk)."""
        self.records = []

    def _load(self) -> None:
        with open(self.path, "rb") as handle:
            data = handle.read()
        offset = 0
        while offset < len(data):
            end = data.find(b"\n", offset)
            record = _decode(data[offset:end], len(self.records) + 1) if end >= 0 else None
            if record is None:
                self._repair_tail(data, offset)
                return
            self.records.append(record)
            self._seq += 1
            offset = end + 1

    def _repair_tail(self, data: bytes, offset: int) -> None:
        for later in data[offset:].split(b"\n")[1:]:
            if _decode(later, len(self.records) + 2) is not None:
                raise JournalCorrupt(
                    f"{self.path}: damaged record after seq {len(self.records)} "
                    "is followed by good records; refusing to start (copy the journal aside "
                    "and ask an operator)")
        self.truncated_bytes = len(data) - offset
        os.ftruncate(self._fd, offset)
        os.fsync(self._fd)

    def append(self, record: dict[str, Any]) -> int:
        self._seq += 1
        self._pending.append(_encode(self._seq, record))
        return self._seq

    def commit(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)
