"""The coordinator's doorbell on a local file system: one inotify descriptor in the loop's
own selector, read by the loop itself.

watchdog's observer handed each event through three threads (its reader, the emitter and
the dispatcher, two queues between them) before it wrote a byte to the wake-up pipe: on
this 2-core machine that was most of the 0.37-0.45 ms from a request's rename to the
loop reading it, and the threads woke for nothing while idle. Here the kernel's queue is
the loop's: readable means "something changed", and the loop reads the queue empty and
lists its inboxes itself (events are hints, never facts, as before; an overflow of the
queue is one more hint). The masks are those ``watcher.CHANGES`` name for watchdog:
an entry created or renamed in, a file written in place and closed, and a removal
except in an inbox the coordinator empties itself (``watcher.INBOX_CHANGES``); never a
rename *out*, which is no news. Each event names the watch it came from, so ``drain``
says which directories rang: the loop lists those, not every inbox (a request's rename
listed control/ and every generation's inboxes too); an overflowed queue names none, and
means any. Network file systems keep watchdog's polling observer
(``watcher.needs_polling``). The calls and masks are watchdog's own binding of libc's
inotify (``watchdog.observers.inotify_c``), not a second one.
"""

from __future__ import annotations

import ctypes
import os
import struct
import weakref
from pathlib import Path

from watchdog.observers.inotify_c import InotifyConstants as In
from watchdog.observers.inotify_c import inotify_add_watch, inotify_init

ARRIVALS = In.IN_CREATE | In.IN_MOVED_TO | In.IN_CLOSE_WRITE  # what rings in an inbox
CHANGES = ARRIVALS | In.IN_DELETE  # ... and elsewhere (a generation's results and idle/)
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_LARGEST = _EVENT.size + 256  # an event naming a NAME_MAX entry: its name, NUL and padding
_READ = 65536
# anything a look at a directory's entries and their contents and times could find new
TOUCHED = (CHANGES | In.IN_MODIFY | In.IN_ATTRIB | In.IN_MOVED_FROM | In.IN_DELETE_SELF
           | In.IN_MOVE_SELF)


class InotifyBell:
    """An inotify instance whose descriptor (``fileno``) a selector waits on; ``drain``
    once it is readable. Stands where a watchdog observer stood: ``watch``, ``stop``,
    ``join`` and ``is_alive`` (no thread: it cannot die)."""

    def __init__(self) -> None:
        fd = inotify_init()  # watchdog's binding of libc's (it has no inotify_init1):
        if fd < 0:
            raise _error("inotify_init")
        os.set_blocking(fd, False)  # the loop reads it only when readable, then empty
        os.set_inheritable(fd, False)  # subprocess closes it anyway (close_fds)
        self.fd = fd
        self._closed = weakref.finalize(self, os.close, fd)  # one dropped unstopped
        self._watched: dict[int, str | os.PathLike] = {}  # watch descriptor -> directory

    def fileno(self) -> int:
        return self.fd

    def watch(self, directory: str | os.PathLike, mask: int = CHANGES) -> None:
        """Ring for ``mask``'s events in ``directory`` (not below it), never through a link
        put in its place (an OSError then, ENOTDIR)."""
        path = os.fsencode(directory)
        wd = inotify_add_watch(self.fd, path, mask | In.IN_ONLYDIR | In.IN_DONT_FOLLOW)
        if wd < 0:
            raise _error("inotify_add_watch", directory)
        self._watched[wd] = directory

    def drain(self) -> set[str | os.PathLike] | None:
        """Read every queued event: the directories they came from (as ``watch`` was
        given them), for the caller to list; None when the queue overflowed, or an
        event names no watch of ours: anything may have changed.

        A read that left room for the largest event took the queue whole: it is not read
        again only to fail with EAGAIN (a system call and an exception, ~8 us of a
        request's wake-up from idle, before its launch's commit). An event queued since
        keeps the descriptor readable, and the selector (level-triggered) wakes again."""
        rang: set[str | os.PathLike] = set()
        anything = False
        try:
            while True:
                data = os.read(self.fd, _READ)
                offset = 0
                while offset < len(data):
                    wd, mask, _, length = _EVENT.unpack_from(data, offset)
                    offset += _EVENT.size + length
                    directory = self._watched.get(wd)
                    if directory is None or mask & In.IN_Q_OVERFLOW:
                        anything = True  # an overflow's wd is -1
                    else:
                        rang.add(directory)
                if len(data) <= _READ - _LARGEST:
                    break  # room for one more event was left: the queue was read empty
        except BlockingIOError:
            pass
        return None if anything else rang

    def rang(self) -> bool:
        """Whether anything was queued since the last look (read empty now; a queue that
        overflowed says so too)."""
        queued = False
        try:
            while os.read(self.fd, 4096):
                queued = True
        except BlockingIOError:
            pass
        return queued

    def is_alive(self) -> bool:
        return self.fd >= 0

    def stop(self) -> None:
        if self.fd >= 0:
            self._closed()
            self.fd = -1

    def join(self, timeout: float | None = None) -> None:
        """Nothing to wait for (no thread); for the observer's interface."""


def _error(call: str, path: str | os.PathLike | None = None) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{call}: {os.strerror(code)}", None if path is None else str(Path(path)))
