"""A dict whose settled entries wait in the last snapshot instead of in memory.

A long run's history is mostly finished jobs and old replies: 100,000 of them as
objects cost ~2 KB each and ~10 s to build at every start, though a decision
reads one only when a peer resubmits its tag or request id, or an operator names
it. A ``Shelf`` holds such an entry as where its line lies in the snapshot file,
in a ``Shelved`` index (its key's bytes and three numbers, no object per entry),
and builds it when asked; the core keeps reading and writing it as a dict, so a
restored scheduler decides exactly as one that never left memory.

Pure: reading a line is the ``read`` the adapter gives (``compaction.restore``).
"""

from __future__ import annotations

import bisect
import json
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from itertools import accumulate, chain
from typing import Generic, TypeVar

V = TypeVar("V")

_LENGTH_BITS = 32  # a shelved entry's place: its line's offset << 32 | its length
_READ_BYTES = 4 << 20  # a snapshot's shelved lines are copied this much at a read
_WALK_BYTES = 64 << 10  # ... and read this much at a time by a walk that builds each
# (at 256 KB a read, a report's peak RSS at 100,000 finished jobs was ~0.5 MB higher)
_FENCE_EVERY = 64  # ``Shelved.find``: one key in this many kept in a list (~1.5 % of keys)


def place(offset: int, length: int) -> int:
    """Where a line lies, packed in one int (``Shelved`` keeps one per entry)."""
    return offset << _LENGTH_BITS | length


def offset_and_length(where: int) -> tuple[int, int]:
    """``place``'s arguments back."""
    return where >> _LENGTH_BITS, where & ((1 << _LENGTH_BITS) - 1)


def numbers(values: Iterable[int]) -> array:
    """``values`` as an array of 4 bytes each, or of 8 where one needs them (the offsets of
    a snapshot past 4 GB): an index's arrays cost half of what 8 bytes an entry did
    (~2.4 MB at 100,000 finished jobs and as many replies, ``report`` included)."""
    wide = values if isinstance(values, array) else array("Q", values)
    if wide.typecode == "I":
        return wide
    try:
        return array("I", wide)
    except OverflowError:
        return wide


def encoded(key: str) -> bytes:
    """A key as the index stores and orders it."""
    return key.encode("utf-8", "surrogatepass")


class PackedKeys:
    """Keys as ``Shelved`` stores them (``encoded``, in order, one newline between, none
    in a key), read straight from a file, and how many."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data, self.count = data, count

    def __len__(self) -> int:
        return self.count


class Shelved:
    """Keys in their ``encoded`` order, each with where its line lies (offset, length)
    and a small ``mark`` (a finished job's state): one bytes object for all the keys
    and ~25 bytes of arrays per entry, where a dict of strings to ints costs ~150.
    Immutable: a compaction writes a new one. Found by bisection (~20 comparisons at
    100,000); listed whole at C speed (``keys``)."""

    __slots__ = ("_keys", "_starts", "_offsets", "_lengths", "_marks", "_split", "_fences")

    def __init__(self, keys: list[str], offsets: Iterable[int], lengths: Iterable[int],
                 marks: bytes = b"") -> None:
        """``keys`` in ``encoded`` order; ``offsets``, ``lengths`` and ``marks`` (empty:
        all 0) one per key, in the same order."""
        text = "\n".join(keys)
        self._keys = text.encode("utf-8", "surrogatepass")
        ascii_only = len(self._keys) == len(text)
        # key i is _keys[_starts[i] + i:_starts[i + 1] + i]: the keys, a newline between
        self._starts = numbers(accumulate(map(len, keys) if ascii_only else (
            len(encoded(key)) for key in keys), initial=0))
        self._offsets, self._lengths = numbers(offsets), numbers(lengths)
        self._marks = marks or bytes(len(keys))
        self._split = self._keys.count(b"\n") == max(0, len(keys) - 1)  # no key holds one
        self._fences: list[bytes] | None = None  # ``find``'s, made at its first call
        if not len(self._offsets) == len(self._lengths) == len(self._marks) == len(keys):
            raise ValueError("a shelf index whose keys, places and marks disagree")

    @classmethod
    def packed(cls, keys: PackedKeys, offsets: Iterable[int], lengths: Iterable[int],
               marks: bytes) -> Shelved:
        """As ``Shelved(keys, ...)``, from keys already encoded and joined by newlines (a
        snapshot header's, ``snapshot_header``): no string object per key, ever."""
        shelved = cls([], (), ())
        data, count = keys.data, len(keys)
        starts, at = array("I" if len(data) < 1 << 32 else "Q", [0]), data.find(b"\n")
        while at >= 0:  # key i ends at the i-th newline: its start less the i newlines
            starts.append(at - len(starts) + 1)
            at = data.find(b"\n", at + 1)
        if count:
            starts.append(len(data) - count + 1)
        shelved._keys, shelved._starts, shelved._split = data, numbers(starts), True
        shelved._offsets, shelved._lengths = numbers(offsets), numbers(lengths)
        shelved._marks = marks or bytes(count)
        if not len(starts) - 1 == len(shelved._offsets) == len(shelved._lengths) == \
                len(shelved._marks) == count:
            raise ValueError("a shelf index whose keys, places and marks disagree")
        return shelved

    @classmethod
    def of_encoded(cls, keys: list[bytes], offsets: array, lengths: array,
                   marks: bytes) -> Shelved:
        """As ``Shelved(keys, ...)``, from keys already ``encoded``, in order."""
        shelved = cls([], (), ())
        shelved._keys = b"\n".join(keys)
        shelved._starts = numbers(accumulate(map(len, keys), initial=0))
        shelved._split = shelved._keys.count(b"\n") == max(0, len(keys) - 1)
        shelved._offsets, shelved._lengths = numbers(offsets), numbers(lengths)
        shelved._marks = marks
        if not len(offsets) == len(lengths) == len(marks) == len(keys):
            raise ValueError("a shelf index whose keys, places and marks disagree")
        return shelved

    def merged(self, leaving: Iterable[str], keys: list[bytes], offsets: Iterable[int],
               lengths: Iterable[int], marks: bytes) -> Shelved:
        """A new index: this one less the keys ``leaving``, and the entries of ``keys``
        (``encoded``, in order, none of them here) added. No Python step per entry: the
        two runs in order are merged by one sort (timsort merges them in linear time)."""
        every = (self._keys.split(b"\n") if self._split else
                 [self[position] for position in range(len(self))]) if len(self) else []
        every += keys
        places, sizes, kinds = array("Q", self._offsets), array("Q", self._lengths), \
            bytearray(self._marks)
        places.extend(offsets)
        sizes.extend(lengths)
        kinds += marks
        for position in sorted((p for p in map(self.find, leaving) if p >= 0), reverse=True):
            del every[position], places[position], sizes[position], kinds[position]
        order = sorted(range(len(every)), key=every.__getitem__)
        return Shelved.of_encoded(list(map(every.__getitem__, order)),
                                  array("Q", map(places.__getitem__, order)),
                                  array("Q", map(sizes.__getitem__, order)),
                                  bytes(map(kinds.__getitem__, order)))

    @classmethod
    def of(cls, entries: Iterable[tuple[str, int, int]]) -> Shelved:
        """From (key, ``place``, mark) in any order."""
        ordered = sorted(entries, key=lambda entry: encoded(entry[0]))
        return cls([key for key, _, _ in ordered],
                   [offset_and_length(where)[0] for _, where, _ in ordered],
                   [offset_and_length(where)[1] for _, where, _ in ordered],
                   bytes(mark for _, _, mark in ordered))

    def __len__(self) -> int:
        return len(self._marks)

    def __getitem__(self, position: int) -> bytes:  # for ``bisect``: the key's bytes
        return self._keys[self._starts[position] + position:
                          self._starts[position + 1] + position]

    def find(self, key: str) -> int:
        """The key's position, or -1. A bisection of the fences first (every
        ``_FENCE_EVERY``-th key, a list: compared at C speed), then of the block between
        two of them: 6 keys sliced out, where a bisection of the whole index slices ~17
        at 100,000 (a start replaying a long journal asks for every new job and request,
        several times each)."""
        raw = encoded(key)
        if self._fences is None:
            self._fences = [self[position] for position in range(0, len(self), _FENCE_EVERY)]
        block = bisect.bisect_right(self._fences, raw) - 1
        if block < 0:
            return -1
        start = block * _FENCE_EVERY
        position = bisect.bisect_left(self, raw, start, min(start + _FENCE_EVERY, len(self)))
        return position if position < len(self) and self[position] == raw else -1

    def keys(self, suffix: str = "") -> list[str]:
        """Every key, in order, each with ``suffix`` (a file name: at C speed too)."""
        if not self._marks:
            return []
        if self._split:
            text = self._keys.decode("utf-8", "surrogatepass")
            return (text.replace("\n", f"{suffix}\n") + suffix if suffix else text).split("\n")
        return [self[position].decode("utf-8", "surrogatepass") + suffix
                for position in range(len(self))]

    def place(self, position: int) -> int:
        return place(self._offsets[position], self._lengths[position])

    def mark(self, position: int) -> int:
        return self._marks[position]

    def marks(self) -> bytes:
        """Every key's mark, in order."""
        return self._marks

    def runs(self, most: int) -> Iterator[tuple[int, int]]:
        """The positions in (start, end) runs whose lines lie one after the other in the
        file, of at most ``most`` bytes (but one line each): a run is one read."""
        offsets, lengths, start, size = self._offsets, self._lengths, 0, 0
        for position in range(len(self)):
            if size and (offsets[position] != offsets[start] + size or
                         size + lengths[position] > most):
                yield start, position
                start, size = position, 0
            size += lengths[position]
        if size or start < len(self):
            yield start, len(self)

    def span(self, start: int, end: int) -> int:
        """The ``place`` of a run's lines (``runs``) taken together."""
        return place(self._offsets[start], sum(self._lengths[start:end]))

    def length(self, position: int) -> int:
        return self._lengths[position]

    def key_of(self, position: int, line: bytes) -> bytes:
        """The key of ``position``, whose ``line`` the caller has read already."""
        return self[position]


_HEAD_BYTES = 128  # of a line, read to find its key (``LineKeyed``): a job id fits


class LineKeyed(Shelved):
    """A ``Shelved`` that holds no key: key ``i`` is read from the head of its line in
    the file (``read``), where the lines lie in key order one after the other, each a
    JSON object whose first field (``field``) is its key, as a snapshot writes its shelf.
    ~4 bytes and a mark per entry (where each line ends), against ~40 that the keys and
    their places cost: a tool that reads a run beside it (``report``, ``simulate
    --from-run``) holds memory flat in history, and pays a read of a line's head per
    comparison (~20 a lookup at 100,000 entries, the fences' first: ``find``), which
    only a journal's tail asks for."""

    __slots__ = ("_start", "_ends", "_read", "_prefix", "_field")

    def __init__(self, start: int, ends: array, marks: bytes, read: Callable[[int], bytes],
                 field: str) -> None:
        """The lines begin at byte ``start``; ``ends``: where each ends; ``marks``: one per
        line, or none where every mark is 0 (replies: ~1 byte an entry saved)."""
        if marks and len(ends) != len(marks):
            raise ValueError("a shelf index whose places and marks disagree")
        self._keys, self._starts = b"", array("I")
        self._offsets = self._lengths = array("I")  # a line's: ``place``, ``length``
        self._start, self._ends, self._marks = start, ends, marks
        self._split, self._fences = False, None
        self._read, self._field = read, field
        self._prefix = f'{{"{field}":"'.encode()

    def __getitem__(self, position: int) -> bytes:
        line = self._read(place(self._offset(position),
                                min(self.length(position), _HEAD_BYTES)))
        return self.key_of(position, line)

    def key_of(self, position: int, line: bytes) -> bytes:
        """The key at the head of ``line`` (its whole line read where the head does not
        hold it, or holds an escape)."""
        end = line.find(b'"', len(self._prefix))
        if line.startswith(self._prefix) and end > 0 and b"\\" not in line[:end]:
            return line[len(self._prefix):end]
        if len(line) < self.length(position):
            line = self._read(self.place(position))
        return encoded(json.loads(line)[self._field])

    def keys(self, suffix: str = "") -> list[str]:
        return [self[position].decode("utf-8", "surrogatepass") + suffix
                for position in range(len(self))]

    def __len__(self) -> int:
        return len(self._ends)

    def mark(self, position: int) -> int:
        return self._marks[position] if self._marks else 0

    def marks(self) -> bytes:
        return self._marks or bytes(len(self))

    def _offset(self, position: int) -> int:
        return self._ends[position - 1] if position else self._start

    def place(self, position: int) -> int:
        return place(self._offset(position), self.length(position))

    def length(self, position: int) -> int:
        return self._ends[position] - self._offset(position)

    def span(self, start: int, end: int) -> int:
        return place(self._offset(start), self._offset(end) - self._offset(start))

    def runs(self, most: int) -> Iterator[tuple[int, int]]:
        start = 0
        while start < len(self):  # one line after the other: a run ends past ``most``
            end = bisect.bisect_right(self._ends, self._offset(start) + most, start, len(self))
            end = max(end, start + 1)
            yield start, end
            start = end


_EMPTY = Shelved([], (), ())


class Shelf(MutableMapping[str, V], Generic[V]):
    """``live`` entries are objects; shelved ones are lines of a ``Shelved`` index that
    ``read`` returns and ``build`` turns into objects. Looking one up (``[]``, ``get``)
    brings it into memory for good, since the caller may change it, and tells
    ``brought_back``; iteration (``values``, ``items``) and ``peek`` only read, and leave
    it on the shelf."""

    __slots__ = ("_live", "_index", "_gone", "_marked", "_read", "_build", "_brought_back",
                 "_touched", "_gone_at_watch")

    def __init__(self, brought_back: Callable[[str, V], None] | None = None) -> None:
        self._live: dict[str, V] = {}
        self._index = _EMPTY
        self._gone: set[str] = set()  # keys of the index brought back or deleted since
        self._marked: Counter[int] = Counter()  # entries still shelved, by mark
        self._read: Callable[[int], bytes] | None = None
        self._build: Callable[[bytes], V] | None = None
        self._brought_back = brought_back
        self._touched: set[str] | None = None  # looked up to change since ``watch``
        self._gone_at_watch: set[str] = set()  # ``_gone`` then

    @property
    def reader(self) -> Callable[[int], bytes] | None:
        """What reads the shelved entries' lines now (the last ``shelve``'s ``read``)."""
        return self._read

    def watch(self, on: bool = True) -> None:
        """Remember from now on every key looked up the way a caller that may change its
        entry does (``[]``, ``get``, setting, deleting), until the next ``shelve`` (or
        ``watch(False)``): a snapshot written meanwhile (in a forked child) holds such an
        entry as it was when this was called, so that entry must stay in memory."""
        self._touched = set() if on else None
        self._gone_at_watch = set(self._gone) if on else set()

    def shelve(self, index: Shelved, read: Callable[[int], bytes],
               build: Callable[[bytes], V], captured: Iterable[str] | None = None) -> None:
        """From now on the entries of ``index`` (all that were shelved before, and any
        live one it names) are lines that ``read`` returns: a new snapshot replaces the
        old one. ``captured``: the live keys ``index`` was written with, when it was
        written since ``watch`` (the entries looked up since stay live, and leave the
        index); else every live key it names leaves memory."""
        touched, self._touched = self._touched or set(), None
        if captured is None:
            self._live = {key: value for key, value in self._live.items()
                          if index.find(key) < 0}
            kept: set[str] = set()
        else:  # no search of the index per live key: those are the ones it took
            # in the index and changed since: taken live, or off the last shelf
            kept = touched.intersection(captured) | (self._gone - self._gone_at_watch)
            for key in captured:
                if key not in kept:
                    self._live.pop(key, None)
        marks = index.marks()  # counted at C speed: a Counter of 100,000 marks takes ~5 ms
        self._index, self._gone = index, set()
        self._marked = Counter({mark: marks.count(mark) for mark in set(marks)})
        self._read, self._build = read, build
        for key in kept:
            if (position := self._position(key)) >= 0:
                self._take(position, key)

    def _position(self, key: str) -> int:
        """Where a still shelved key is in the index, or -1."""
        position = self._index.find(key) if self._index else -1
        return -1 if position < 0 or key in self._gone else position

    def _take(self, position: int, key: str) -> None:
        self._gone.add(key)
        self._marked[self._index.mark(position)] -= 1

    def shelved_keys(self, suffix: str = "") -> list[str]:
        """The keys of every entry still shelved, in key order, each with ``suffix``."""
        keys = self._index.keys(suffix)
        if not self._gone:
            return keys
        gone = {key + suffix for key in self._gone}
        return [key for key in keys if key not in gone]

    def shelved(self) -> Iterator[tuple[str, int]]:
        """(key, mark) of every entry still shelved, in key order."""
        gone = self._gone
        for key, mark in zip(self._index.keys(), self._index.marks()):
            if key not in gone:
                yield key, mark

    def merged_index(self, keys: list[bytes], offsets: Iterable[int],
                     lengths: Iterable[int], marks: bytes) -> Shelved:
        """The index of every entry still shelved and of ``keys`` (``Shelved.merged``)."""
        return self._index.merged(self._gone, keys, offsets, lengths, marks)

    def shelved_lines(self, most: int = _READ_BYTES) -> Iterator[tuple[str, bytes, int]]:
        """(key, line, mark) of every entry still shelved, in key order: what a new
        snapshot copies (no lookup, no parse; a read per ``most`` bytes of lines, and no
        list of every key)."""
        index, gone, read = self._index, self._gone, self._read
        marks = index.marks()
        for start, end in index.runs(most):
            lines, at = read(index.span(start, end)), 0
            for position in range(start, end):
                length = index.length(position)
                line = lines[at:at + length]
                key = index.key_of(position, line).decode("utf-8", "surrogatepass")
                if key not in gone:
                    yield key, line, marks[position]
                at += length

    def entries_after(self, key: str | None, most: int) -> list[tuple[str, int | None]]:
        """Up to ``most`` (key, mark) of the last snapshot's entries that follow ``key``
        (None: from the first), in key order; the mark None for one no longer shelved
        (brought back or deleted since). A walk in slices that a new snapshot between two
        of them does not restart: what it shelves anew was in memory when the walk
        began, or came back since."""
        index, gone = self._index, self._gone
        position = 0 if key is None else bisect.bisect_right(index, encoded(key), 0, len(index))
        found: list[tuple[str, int | None]] = []
        while position < len(index) and len(found) < most:
            name = index[position].decode("utf-8", "surrogatepass")
            found.append((name, None if name in gone else index.mark(position)))
            position += 1
        return found

    def mark(self, key: str) -> int | None:
        """A shelved entry's mark (None: live, or not here)."""
        position = -1 if key in self._live else self._position(key)
        return None if position < 0 else self._index.mark(position)

    def marked(self, mark: int) -> int:
        """How many entries still shelved carry ``mark``."""
        return self._marked[mark]

    def in_memory(self, key: str) -> V | None:
        """A live entry, never one built from the shelf."""
        return self._live.get(key)

    def live(self) -> Iterator[V]:
        return iter(self._live.values())

    def peek(self, key: str, default: V | None = None) -> V | None:
        if (value := self._live.get(key)) is not None:
            return value
        position = self._position(key)
        return default if position < 0 else self._build(self._read(self._index.place(position)))

    def get(self, key: str, default: V | None = None) -> V | None:
        if (value := self._live.get(key)) is not None:
            if self._touched is not None:
                self._touched.add(key)
            return value
        return self[key] if self._position(key) >= 0 else default

    def __getitem__(self, key: str) -> V:
        if self._touched is not None:
            self._touched.add(key)
        try:
            return self._live[key]
        except KeyError:
            position = self._position(key)
        if position < 0:
            raise KeyError(key)
        value = self._build(self._read(self._index.place(position)))
        self._take(position, key)
        self._live[key] = value
        if self._brought_back is not None:
            self._brought_back(key, value)
        return value

    def __setitem__(self, key: str, value: V) -> None:
        if self._touched is not None:
            self._touched.add(key)
        if key not in self._live and (position := self._position(key)) >= 0:
            self._take(position, key)
        self._live[key] = value

    def __delitem__(self, key: str) -> None:
        if self._touched is not None:
            self._touched.add(key)
        if key in self._live:
            del self._live[key]
        elif (position := self._position(key)) >= 0:
            self._take(position, key)
        else:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._live or isinstance(key, str) and self._position(key) >= 0

    def __iter__(self) -> Iterator[str]:
        return chain(self.shelved_keys(), list(self._live))

    def __len__(self) -> int:
        return len(self._live) + len(self._index) - len(self._gone)

    def values(self) -> Iterator[V]:  # type: ignore[override]
        """Every entry, the shelved ones first (in key order), each built from its line
        as a read of _WALK_BYTES of lines at a time reaches it (``shelved_lines``: no
        lookup, no read per entry) and kept by no one here."""
        for _, value in self.items():
            yield value

    def items(self) -> Iterator[tuple[str, V]]:  # type: ignore[override]
        build, live = self._build, list(self._live.items())
        for key, line, _ in self.shelved_lines(_WALK_BYTES):
            yield key, build(line)
        yield from live
