"""A snapshot's header line (core/snapshot.py ``render``) read without an object per
shelved entry.

The header lists the id and the line length of every finished job and reply of the run
(its ``shelf``): at 100,000 finished jobs, 200,000 strings and as many ints that
``json.loads`` builds only for a start (or ``report``, ``simulate --from-run``) to pack
them into a ``Shelved`` index and let them go: ~33 MB at its peak, to keep 9. Where the
ids hold no escape (job ids and request ids never do, in practice), they are taken from
the line's bytes as they are (already ``encoded``, one ``","`` between two) and the
lengths read into an array; the rest of the header is parsed as JSON. Any other shape
(an escape, an older or hand-made file) is parsed as JSON whole, as before.

``read_header_pieces`` reads the same line given in pieces (a file's, a few tens of
kilobytes at a time): neither the line (5.4 MB at 100,000 finished jobs) nor a copy of
its ids whole is held beside what the index keeps, so a report or a start peaks at the
index's size, not three times it. Same format, same result.

Pure: bytes in, a dict out.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from .shelf import PackedKeys

_SHELF = b'"shelf":{"finished":['
_IDS, _LENGTHS, _STATES, _END = b'{"ids":[', b'],"lengths":[', b'],"states":"', b'"}'


def read_header(first: bytes) -> dict[str, Any]:
    """``json.loads(first)``, but the shelf's sections' ``ids`` a ``PackedKeys`` and their
    ``lengths`` an ``array`` where the line is as ``render`` writes it."""
    start = first.find(_SHELF)  # its quotes are no string's: a string's are escaped
    if start < 0:
        return json.loads(first)
    finished = first.find(b"]", start + len(_SHELF)) + 1  # state names hold no bracket
    at, sections = finished, {}
    for name in ("jobs", "replies"):
        at = _section(first, at, name, sections) if at > 0 else -1
    if at <= 0 or not first.startswith(b"}", at):
        return json.loads(first)
    header = json.loads(first[:start] + b'"shelf":{"finished":' +
                        first[start + len(_SHELF) - 1:finished] + b"}" + first[at + 1:])
    header["shelf"].update(sections)
    return header


_CHUNK = 64 << 10  # ``_numbers`` reads this many bytes of numbers at a time


def _numbers(line: bytes, start: int, end: int) -> array | None:
    """The comma-separated numbers of ``line[start:end]`` in an array, read a chunk at a
    time (a list of every one, ~4 MB at 100,000 lengths, is never made); None where
    something else is there."""
    numbers, at = array("Q"), start
    while at < end:
        stop = end if end - at <= _CHUNK else line.rfind(b",", at, at + _CHUNK)
        chunk = line[at:max(stop, at)]
        if stop <= at or chunk.strip(b"0123456789,") or chunk.startswith(b",") or \
                chunk.endswith(b",") or b",," in chunk:
            return None
        numbers.extend(map(int, chunk.split(b",")))
        at = stop + 1
    return numbers


def _section(line: bytes, at: int, name: str, sections: dict[str, Any]) -> int:
    """Read the section ``name`` that begins at ``at`` into ``sections``; where it ends,
    or -1 where it is not as ``render`` writes it with no escape in an id."""
    key = f',"{name}":'.encode() + _IDS
    if not line.startswith(key, at):
        return -1
    ids_at = at + len(key)
    lengths_at = line.find(_LENGTHS, ids_at)  # an id holds no unescaped quote
    states_at = line.find(_STATES, max(lengths_at, ids_at))
    end = line.find(_END, states_at + len(_STATES))
    if min(lengths_at, states_at, end) < 0:
        return -1
    if line.find(b"\\", ids_at, lengths_at) >= 0 or (lengths_at > ids_at and not (
            line.startswith(b'"', ids_at) and line.endswith(b'"', ids_at, lengths_at))):
        return -1
    count = line.count(b'"', ids_at, lengths_at) // 2
    keys = line[ids_at + 1:lengths_at - 1].replace(b'","', b"\n")
    lengths = _numbers(line, lengths_at + len(_LENGTHS), states_at)
    states = line[states_at + len(_STATES):end]
    if lengths is None or (lengths_at > ids_at and keys.count(b"\n") != count - 1) or \
            states.strip(b"0123456789"):
        return -1  # a quote that is no delimiter, or not numbers: parsed as JSON instead
    sections[name] = {"ids": PackedKeys(keys, count), "lengths": lengths,
                      "states": states.decode()}
    return end + len(_END)


class _NotAsWritten(Exception):
    """The line is not as ``render`` writes it with no escape in an id: read as JSON."""


def read_header_pieces(pieces: Callable[[], Iterator[bytes]], keys: bool = True
                       ) -> tuple[dict[str, Any], int]:
    """``read_header`` of a line given in pieces, and its length (newline included):
    ``pieces()`` yields the line's bytes from its start to its newline. Where the line is
    not as ``render`` writes it (an escape, an older or hand-made file) it is read again
    (``pieces()`` once more) and parsed as JSON whole, as ``read_header`` does. Without
    ``keys``, a section's ids are only counted (a ``PackedKeys`` with no data: the keys
    are read from the lines instead, ``shelf.LineKeyed``)."""
    stream = _Stream(pieces())
    try:
        return _streamed(stream, keys), stream.consumed
    except _NotAsWritten:
        line = b"".join(pieces())
        return json.loads(line), len(line)


def _streamed(stream: _Stream, keys: bool) -> dict[str, Any]:
    prefix, finished, sections = [], [], {}
    stream.upto(_SHELF, prefix.append)
    stream.upto(b"]", finished.append)  # state names hold no bracket
    for name in ("jobs", "replies"):
        stream.expect(f',"{name}":'.encode() + _IDS)
        ids, lengths, states = _Ids() if keys else _Counted(), _Numbers(), []
        stream.upto(_LENGTHS, ids)
        stream.upto(_STATES, lengths)
        stream.upto(_END, states.append)
        state_marks = b"".join(states)
        if state_marks.strip(b"0123456789"):
            raise _NotAsWritten
        sections[name] = {"ids": ids.packed(), "lengths": lengths.finished(),
                          "states": state_marks.decode()}
    stream.expect(b"}")
    suffix = []
    stream.rest(suffix.append)
    header = json.loads(b"".join(prefix) + b'"shelf":{"finished":[' + b"".join(finished) +
                        b"]}" + b"".join(suffix))
    header["shelf"].update(sections)
    return header


class _Stream:
    """A line's pieces, scanned for the markers between its sections: at most a piece
    and a marker's length are held at once; ``consumed``: the bytes taken so far."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces, self._buffer, self.consumed = pieces, b"", 0

    def _more(self) -> bool:
        piece = next(self._pieces, b"")
        self._buffer += piece
        return bool(piece)

    def _take(self, count: int) -> bytes:
        taken, self._buffer = self._buffer[:count], self._buffer[count:]
        self.consumed += count
        return taken

    def upto(self, marker: bytes, sink: Callable[[bytes], None]) -> None:
        """Hand ``sink`` the bytes before ``marker`` (in pieces), and take the marker."""
        while (found := self._buffer.find(marker)) < 0:
            if len(self._buffer) >= len(marker):  # the rest could begin the marker
                sink(self._take(len(self._buffer) - len(marker) + 1))
            if not self._more():
                raise _NotAsWritten
        sink(self._take(found))
        self._take(len(marker))

    def expect(self, literal: bytes) -> None:
        while len(self._buffer) < len(literal) and self._more():
            pass
        if not self._buffer.startswith(literal):
            raise _NotAsWritten
        self._take(len(literal))

    def rest(self, sink: Callable[[bytes], None]) -> None:
        while True:
            sink(self._take(len(self._buffer)))
            if not self._more():
                return


class _Ids:
    """A section's ids as they stream by (``"a","b"``), packed as ``read_header`` packs
    them (``PackedKeys``: one newline between two, no quotes) a piece at a time."""

    def __init__(self) -> None:
        self._packed, self._carry, self._quotes = bytearray(), b"", 0

    def __call__(self, piece: bytes) -> None:
        text = self._carry + piece
        if b"\\" in text:
            raise _NotAsWritten
        cut = text.rfind(b'","') + 3  # a piece may end inside a '","': it waits
        if cut < 3:
            self._carry = text
            return
        self._add(text[:cut])
        self._carry = text[cut:]

    def _add(self, text: bytes) -> None:
        self._quotes += text.count(b'"')
        self._packed += text.replace(b'","', b"\n")

    def packed(self) -> PackedKeys:
        self._add(self._carry)
        packed = self._packed
        if not packed:
            return PackedKeys(b"", 0)
        count = self._quotes // 2
        if self._quotes % 2 or not (packed.startswith(b'"') and packed.endswith(b'"')) or \
                packed.count(b"\n") != count - 1:
            raise _NotAsWritten  # a quote that is no delimiter
        del packed[0], packed[-1]  # the first and last quotes, in place
        return PackedKeys(bytes(packed), count)


class _Counted(_Ids):
    """``_Ids`` that keeps none of the ids, only their count (``read_header_pieces``
    without ``keys``): the same checks, a piece's worth held at a time."""

    def __init__(self) -> None:
        super().__init__()
        self._first = self._last = b""
        self._newlines = 0

    def _add(self, text: bytes) -> None:
        if text:
            self._quotes += text.count(b'"')
            self._newlines += text.count(b'","')
            self._first, self._last = self._first or text[:1], text[-1:]

    def packed(self) -> PackedKeys:
        self._add(self._carry)
        if not self._quotes and not self._first:
            return PackedKeys(b"", 0)
        count = self._quotes // 2
        if self._quotes % 2 or (self._first, self._last) != (b'"', b'"') or \
                self._newlines != count - 1:
            raise _NotAsWritten  # a quote that is no delimiter
        return PackedKeys(b"", count)


class _Numbers:
    """A section's lengths as they stream by (``12,345``), into an array a piece at a
    time, as ``_numbers`` reads them from a whole line."""

    def __init__(self) -> None:
        self._numbers, self._carry = array("I"), b""  # 4 bytes each, as the index keeps them

    def __call__(self, piece: bytes) -> None:
        text = self._carry + piece
        cut = text.rfind(b",")  # a piece may end inside a number: it waits
        if cut < 0:
            self._carry = text
            return
        self._add(text[:cut])
        self._carry = text[cut + 1:]

    def _add(self, chunk: bytes) -> None:
        if not chunk or chunk.strip(b"0123456789,") or chunk.startswith(b",") or \
                chunk.endswith(b",") or b",," in chunk:
            raise _NotAsWritten
        before = len(self._numbers)
        try:
            self._numbers.extend(map(int, chunk.split(b",")))
        except OverflowError:  # a line past 4 GB: 8 bytes each from here
            self._numbers = array("Q", self._numbers[:before])
            self._numbers.extend(map(int, chunk.split(b",")))

    def finished(self) -> array:
        if self._carry or self._numbers:
            self._add(self._carry)
        return self._numbers
