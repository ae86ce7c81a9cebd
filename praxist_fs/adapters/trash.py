"""``resource_scheduler/trash/``: job files the coordinator is done with (a job's copy in
the state directory it left), moved there by a rename on the launch and end path and
removed later, when the loop has nothing else to do.

Why: removing a file frees its inode and its blocks, which costs ~0.07 ms on a calm ext4
and 1-1.3 ms while the disk is busy (measured on the 2-core bench machine, other work
writing), where a rename costs 0.02-0.1 ms; a trivial job that waited in the queue had
two such removals between the commit of its end or launch and the next one. The
promise to readers is unchanged: the new copy is in place before the old one leaves
its directory, and a reader holding the old one open still reads it whole (its inode
is not reused until it is removed from here). Nothing reads the trash; what a crash
leaves there the next coordinator removes the same way. Consumed requests are not
put here: a request may hold raw secret values, which live in ``private/`` alone.
"""

from __future__ import annotations

import errno
import os
import time

from .fsio import rename, unlink

TRASH_LIMIT = 10_000  # held past this many, some go at every turn of the loop, busy or not


class Trash:
    """Put files in (``discard``), take them out a slice at a time (``empty``)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        self._prefix = f"{os.getpid()}."
        self._names = 0
        self.held = 1  # unknown at a start (a crash may have left some): the first look sees

    def discard(self, path: str) -> None:
        """Take ``path`` out of its directory now; one already gone counts as taken. On
        another file system than the trash, or when the trash has no room for one more
        name (a full disk: a removal frees room instead), it is removed at once."""
        self._names += 1
        try:
            rename(path, os.path.join(self.directory, f"{self._prefix}{self._names}"))
        except FileNotFoundError:
            if os.path.lexists(path):  # the trash itself is gone (removed by hand)
                unlink(path)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSPC, errno.EDQUOT):
                raise
            unlink(path)
            return
        self.held += 1

    @property
    def full(self) -> bool:
        return self.held >= TRASH_LIMIT

    def empty(self, seconds: float) -> None:
        """Remove what the trash holds, for up to ``seconds``."""
        if not self.held:
            return
        deadline = time.monotonic() + seconds
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    unlink(entry.path)
                    self.held = max(self.held - 1, 1)  # unknown until a look finds it empty
                    if time.monotonic() >= deadline:
                        return
        except FileNotFoundError:  # removed by hand: discard removes at once meanwhile
            pass
        self.held = 0
