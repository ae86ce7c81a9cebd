"""A run's state as its next start would rebuild it (snapshot, then journal), read by
tools beside a live coordinator (``report``, ``simulate --from-run``): nothing is opened
for writing, and the journal is read up to its first line that is not an intact record.

The snapshot is read as a start reads it: its finished jobs and replies stay lines of
the file (``Shelf``), found by its header alone, so that holding a run of 100,000
finished jobs costs their index, not their documents; a tool walks them one at a time
(``Shelf.values`` builds each and keeps none). Unlike a start, the index holds no key
(``LineKeyed``: a lookup reads them from the lines), so that it costs ~4 bytes a job,
not ~40 (issue 31: memory flat in history)."""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ..core.replay import replay
from ..core.scheduler import Scheduler
from ..core.shelf import offset_and_length
from ..core.snapshot import read
from .journal import read_intact
from .layout import RunLayout

HEADER_PIECE = 64 << 10  # bytes of a snapshot's header read at a time


def read_run(layout: RunLayout) -> tuple[Scheduler, float | None]:
    """The rebuilt scheduler and the last journaled instant (None: no record after the
    snapshot). FileNotFoundError when the run has neither; a damaged or newer journal
    raises what replaying it raises (OSError, SnapshotError, ValueError, ...). The
    snapshot stays open, for its shelved lines, as long as the scheduler lives."""
    if not layout.journal.exists() and not layout.snapshot.exists():
        raise FileNotFoundError(errno.ENOENT, "no journal", str(layout.journal))
    sched, after = Scheduler(), 0
    if layout.snapshot.exists():
        handle = open(layout.snapshot, "rb")
        try:
            restored = read(handle, line_reader(handle), header_pieces(handle),
                            keys_in_file=True)
        except BaseException:
            handle.close()
            raise
        after, sched = restored.journal_seq, restored.sched
        weakref.finalize(sched, handle.close)
    return sched, replay(sched, read_intact(layout.journal, after)
                         if layout.journal.exists() else ())


def header_pieces(handle: BinaryIO) -> Callable[[], Iterator[bytes]]:
    """The first line of ``handle``'s file, from its start, HEADER_PIECE bytes at a time;
    the file is left just after it (``snapshot.read``: the header of a snapshot, 5.4 MB
    at 100,000 finished jobs, is never held whole)."""
    def pieces() -> Iterator[bytes]:
        handle.seek(0)
        while piece := handle.readline(HEADER_PIECE):
            yield piece
            if piece.endswith(b"\n"):
                return
    return pieces


def line_reader(handle: BinaryIO) -> LineReader:
    """Reads a line of ``handle``'s file by its place (``shelf.place``); the file stays
    open while the reader is kept (a later snapshot renamed over it leaves this one
    readable until the shelf lets it go)."""
    return LineReader(handle)


class LineReader:
    """``line_reader``'s: a callable that keeps its file (``handle``), so that whoever
    lets it go last can close it where the loop does not wait (compaction.py)."""

    __slots__ = ("handle",)

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle

    def __call__(self, where: int) -> bytes:
        offset, length = offset_and_length(where)
        return os.pread(self.handle.fileno(), length, offset)
