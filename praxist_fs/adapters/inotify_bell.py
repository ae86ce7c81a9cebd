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
rename *out*, which is no news. Network file systems keep watchdog's polling observer
(``watcher.needs_polling``).
"""

from __future__ import annotations

import ctypes
import os
import weakref
from pathlib import Path

from .wakepipe import drain

# <sys/inotify.h>
IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM = 0x2, 0x4, 0x8, 0x40
IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x80, 0x100, 0x200, 0x400, 0x800
IN_ONLYDIR = 0x01000000
ARRIVALS = IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE  # what rings in an inbox
CHANGES = ARRIVALS | IN_DELETE  # ... and elsewhere (a generation's results and idle/)
# anything a look at a directory's entries and their contents and times could find new
TOUCHED = CHANGES | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF

_libc = ctypes.CDLL(None, use_errno=True)


class InotifyBell:
    """An inotify instance whose descriptor (``fileno``) a selector waits on; ``drain``
    once it is readable. Stands where a watchdog observer stood: ``watch``, ``stop``,
    ``join`` and ``is_alive`` (no thread: it cannot die)."""

    def __init__(self) -> None:
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _error("inotify_init1")
        self.fd = fd
        self._closed = weakref.finalize(self, os.close, fd)  # one dropped unstopped

    def fileno(self) -> int:
        return self.fd

    def watch(self, directory: str | os.PathLike, mask: int = CHANGES) -> None:
        """Ring for ``mask``'s events in ``directory`` (not below it)."""
        path = os.fsencode(directory)
        if _libc.inotify_add_watch(self.fd, path, mask | IN_ONLYDIR) < 0:
            raise _error("inotify_add_watch", directory)

    def drain(self) -> None:
        """Read every queued event and forget it: the caller lists what it watches."""
        drain(self.fd)

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
