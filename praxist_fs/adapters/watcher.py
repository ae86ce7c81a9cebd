"""watchdog as a doorbell: any event under a watched directory wakes the loop.

Events are hints, never facts; the loop lists the directory itself. The
handler does one non-blocking write to a wake-up pipe inside a guard, because
an exception in a watchdog handler silently kills the observer thread. On
network filesystems inotify misses remote writes, so we poll instead (R-FS-4).
"""

from __future__ import annotations

import os
from pathlib import Path

from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.polling import PollingObserver

NETWORK_FILESYSTEMS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "ceph",
                       "9p", "afs")


class _Doorbell(FileSystemEventHandler):
    def __init__(self, wake_fd: int) -> None:
        self.wake_fd = wake_fd

    def on_any_event(self, event: object) -> None:
        try:
            os.write(self.wake_fd, b"w")
        except Exception:  # a full pipe already means "wake up"; never raise here
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


def needs_polling(path: Path) -> bool:
    kind = filesystem_type(path)
    return kind in NETWORK_FILESYSTEMS or kind.startswith("fuse.") or \
        os.environ.get("PRAXIST_FORCE_POLLING") == "1"


def start_observer(directories: list[Path], wake_fd: int, polling: bool):
    """A started observer ringing ``wake_fd``; the caller checks ``is_alive()`` each tick."""
    observer = PollingObserver(timeout=1.0) if polling else Observer()
    observer.doorbell = _Doorbell(wake_fd)
    for directory in directories:
        watch(observer, directory)
    observer.daemon = True
    observer.start()
    return observer


def watch(observer, directory: Path) -> None:
    """Ring the same doorbell for one more directory (a new generation's inboxes)."""
    observer.schedule(observer.doorbell, str(directory), recursive=False)
