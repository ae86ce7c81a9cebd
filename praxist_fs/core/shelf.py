"""A dict whose settled entries wait in the last snapshot instead of in memory.

A long run's history is mostly finished jobs and old replies: 100,000 of them as
objects cost ~2 KB each and ~10 s to build at every start, though a decision
reads one only when a peer resubmits its tag or request id, or an operator names
it. A ``Shelf`` holds such an entry as where its line lies in the snapshot file
(one int) and builds it when asked; the core keeps reading and writing it as a
dict, so a restored scheduler decides exactly as one that never left memory.

Pure: reading a line is the ``read`` the adapter gives (``compaction.restore``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_LENGTH_BITS = 32  # a shelved entry: its line's offset << 32 | its length


def place(offset: int, length: int) -> int:
    """Where a line lies, packed in one int (``Shelf`` keeps one per shelved entry)."""
    return offset << _LENGTH_BITS | length


def offset_and_length(where: int) -> tuple[int, int]:
    """``place``'s arguments back."""
    return where >> _LENGTH_BITS, where & ((1 << _LENGTH_BITS) - 1)


class Shelf(MutableMapping[K, V], Generic[K, V]):
    """``live`` entries are objects; ``shelved`` ones are (``place``) lines that ``read``
    returns and ``build`` turns into objects. Looking one up (``[]``, ``get``) brings it
    into memory for good, since the caller may change it; iteration (``values``,
    ``items``) and ``peek`` only read, and leave it on the shelf."""

    __slots__ = ("_live", "_shelved", "_read", "_build")

    def __init__(self, live: dict[K, V] | None = None) -> None:
        self._live: dict[K, V] = live if live is not None else {}
        self._shelved: dict[K, int] = {}
        self._read: Callable[[int], bytes] | None = None
        self._build: Callable[[bytes], V] | None = None

    def shelve(self, shelved: dict[K, int], read: Callable[[int], bytes],
               build: Callable[[bytes], V]) -> None:
        """From now on these entries (all that were shelved before, and any live one
        named) are lines that ``read`` returns: a new snapshot replaces the old one."""
        for key in shelved:
            self._live.pop(key, None)
        self._shelved, self._read, self._build = shelved, read, build

    def line(self, key: K) -> bytes | None:
        """A shelved entry's line as stored (a snapshot copies it unparsed), else None."""
        where = self._shelved.get(key)
        return None if where is None else self._read(where)

    def shelved(self) -> Iterator[K]:
        return iter(self._shelved)

    def live(self) -> Iterator[V]:
        return iter(self._live.values())

    def peek(self, key: K, default: V | None = None) -> V | None:
        if (value := self._live.get(key)) is not None:
            return value
        where = self._shelved.get(key)
        return default if where is None else self._build(self._read(where))

    def get(self, key: K, default: V | None = None) -> V | None:
        if (value := self._live.get(key)) is not None:
            return value
        return self[key] if key in self._shelved else default

    def __getitem__(self, key: K) -> V:
        try:
            return self._live[key]
        except KeyError:
            where = self._shelved.pop(key)  # KeyError: not here at all
        value = self._live[key] = self._build(self._read(where))
        return value

    def __setitem__(self, key: K, value: V) -> None:
        self._shelved.pop(key, None)
        self._live[key] = value

    def __delitem__(self, key: K) -> None:
        if self._shelved.pop(key, None) is None:
            del self._live[key]

    def __contains__(self, key: object) -> bool:
        return key in self._live or key in self._shelved

    def __iter__(self) -> Iterator[K]:
        yield from list(self._shelved)
        yield from list(self._live)

    def __len__(self) -> int:
        return len(self._live) + len(self._shelved)

    def values(self) -> Iterator[V]:  # type: ignore[override]
        for key in self:
            yield self.peek(key)

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        for key in self:
            yield key, self.peek(key)
