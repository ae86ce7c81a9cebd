"""watchdog as a doorbell: any event under a watched directory rings.

Events are hints, never facts; whoever waits lists the directory itself. The
handler only calls ``ring`` (a non-blocking pipe write for the coordinator, an
Event for a waiting peer) inside a guard, because an exception in a watchdog
handler silently kills the observer thread. On
network filesystems inotify misses remote writes, so we poll instead (R-FS-4).
The file system a path lies on is read here for that reason, and described
(``filesystem_of``) for the coordinator's message when that disk is full.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent, DirMovedEvent, FileClosedEvent, FileCreatedEvent, FileDeletedEvent,
    FileMovedEvent, FileSystemEventHandler,
)
from watchdog.observers.inotify import InotifyEmitter, InotifyObserver
from watchdog.observers.inotify_c import InotifyConstants
from watchdog.observers.polling import PollingObserver

from .inotify_bell import InotifyBell

DISPATCH_TIMEOUT = 60.0
# What can mean news: an entry appeared, was renamed in (inotify: ``_ArrivalsEmitter``;
# polling: in or out), was removed, or a file
# written in place was closed. Not opens and reads: our own scans of a watched
# directory would ring the doorbell and make every rescan wake the loop twice.
CHANGES = [FileCreatedEvent, FileMovedEvent, FileClosedEvent, FileDeletedEvent,
           DirCreatedEvent, DirMovedEvent]
# An inbox the coordinator empties itself (spool/incoming/, control/): there a deletion is
# its own consumption of a request (or a peer taking one back: nothing to do), which rang
# the doorbell once more for every request and woke the loop to list every inbox again.
INBOX_CHANGES = [kind for kind in CHANGES if kind is not FileDeletedEvent]
# the same changes as the kernel's inotify masks, for the coordinator's own ``InotifyBell``
_MASKS = {FileCreatedEvent: InotifyConstants.IN_CREATE,
          DirCreatedEvent: InotifyConstants.IN_CREATE,
          FileMovedEvent: InotifyConstants.IN_MOVED_TO,
          DirMovedEvent: InotifyConstants.IN_MOVED_TO,
          FileClosedEvent: InotifyConstants.IN_CLOSE_WRITE,
          FileDeletedEvent: InotifyConstants.IN_DELETE}
NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph",
                       "9p", "afs")


class _ArrivalsEmitter(InotifyEmitter):
    """watchdog's inotify emitter, never asking for IN_MOVED_FROM. A file renamed *out* of
    a watched directory (a request the coordinator sets aside into rejected/) is no news
    to a doorbell, and watchdog holds an unpaired IN_MOVED_FROM half a second to pair it
    with an IN_MOVED_TO, every event behind it held too: the next request renamed in
    rang half a second late (`generation open` answered "already exists" in ~0.5 s after
    another one, 50 ms otherwise). A rename *in* is still seen (IN_MOVED_TO)."""

    def get_event_mask_from_filter(self):
        return super().get_event_mask_from_filter() & ~InotifyConstants.IN_MOVED_FROM


class _Observer(InotifyObserver):
    """watchdog's inotify observer with ``_ArrivalsEmitter`` for every watch (its emitter
    class is private to watchdog: tests/adapters/test_watcher.py fails if it stops
    taking)."""

    def __init__(self, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._emitter_class = _ArrivalsEmitter


class _Doorbell(FileSystemEventHandler):
    def __init__(self, ring: Callable[[], object]) -> None:
        self.ring = ring

    def on_any_event(self, event: object) -> None:
        try:
            self.ring()
        except Exception:  # e.g. a full wake-up pipe already means "wake up"; never raise
            pass


def filesystem_type(path: Path) -> str:
    """The type of the filesystem holding ``path``, from /proc/self/mountinfo."""
    target, best, kind = os.path.realpath(path), "", "unknown"
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                left, _, right = line.partition(" - ")
                mount_point = left.split()[4].replace("\\040", " ")
                if (target == mount_point or target.startswith(mount_point.rstrip("/") + "/")) \
                        and len(mount_point) >= len(best):
                    best, kind = mount_point, right.split()[0]
    except OSError:
        pass
    return kind


def filesystem_of(path: str | os.PathLike) -> str:
    """'<device> (<type>) at <mount point>' of the file system that holds ``path``."""
    target, best = os.path.realpath(path), ("?", "?", "/")
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                source, point, kind = line.split()[:3]
                point = point.replace("\\040", " ")
                if (target == point or target.startswith(point.rstrip("/") + "/")) and \
                        len(point) >= len(best[2]):
                    best = (source, kind, point)
    except OSError:
        pass
    return f"{best[0]} ({best[1]}) at {best[2]}"


def needs_polling(path: Path) -> bool:
    kind = filesystem_type(path)
    return kind in NETWORK_FILESYSTEMS or kind.startswith("fuse.") or \
        os.environ.get("PRAXIST_FORCE_POLLING") == "1"


def start_observer(directories: list[Path], ring: Callable[[], object], polling: bool,
                   changes: list[type] = CHANGES):
    """A started observer calling ``ring`` on any of ``changes``; the caller checks
    ``is_alive()``."""
    # The inotify observer's dispatcher wakes every ``timeout`` seconds even with nothing to
    # do, and stop() wakes it at once: a long timeout costs nothing but idle CPU saved.
    observer = PollingObserver(timeout=1.0) if polling else _Observer(timeout=DISPATCH_TIMEOUT)
    observer.doorbell = _Doorbell(ring)
    for directory in directories:
        watch(observer, directory, changes)
    observer.daemon = True
    observer.start()
    return observer


def start_doorbell(directories: list[Path], ring: Callable[[], object], polling: bool,
                   changes: list[type] = CHANGES):
    """The coordinator's doorbell: on a local file system an ``InotifyBell`` for the loop's
    own selector (no thread between the kernel and the loop; ``ring`` is not called),
    on a network one a polling observer calling ``ring``."""
    if polling:
        return start_observer(directories, ring, polling, changes)
    bell = InotifyBell()
    for directory in directories:
        watch(bell, directory, changes)
    return bell


def watch(observer, directory: Path, changes: list[type] = CHANGES) -> None:
    """Ring the same doorbell for one more directory (a new generation's inboxes)."""
    if isinstance(observer, InotifyBell):
        mask = 0
        for kind in changes:
            mask |= _MASKS[kind]
        observer.watch(directory, mask)
        return
    observer.schedule(observer.doorbell, str(directory), recursive=False, event_filter=changes)
