"""The derived files written since the last moment they were all vouched for, by name, and
how they are made durable: what a compaction's watermark needs, and no more.

A compaction's watermark says that every derived file written before it (job files,
replies) is durable. ``sync(2)`` made it true for the whole machine: on a machine with
much else unwritten (a checkpoint just saved to the same disk) the reply whose journal
fsync came meanwhile waited behind that writeback (84-270 ms against 2-4 ms, below).
``Unsynced`` keeps the names of the derived files written since the last moment they
were all durable, and ``make_durable`` syncs those and their directories, nothing else.
Measured on this machine's ext4 (``bench_compaction.py --durable-step 5000``: 10,000
job files and replies between two watermarks, as 20,000 records leave them, a 1 GB file
written just before on the same disk, a journal-like append and fdatasync every 5 ms
beside it, 3 rounds each, load 6-7): the longest of those fdatasyncs was 98-235 ms
(median 177) during ``sync(2)``, 15-461 ms (median 61) during ``make_durable``, whose
p50 was 0.33 ms against 2.3-3.8; a prototype at load 2-4: 84-270 ms against 1.8-4.4,
and ``syncfs(2)`` of the run's file system (the big file is on it) 102-231 ms. The
child pays: 3.5-6.6 s against 0.1-0.4 s, each file's fdatasync a device flush of its
own on this ext4 without a journal; the loop waits for none of it.
"""

from __future__ import annotations

import os

from .fsio import datasync, fsync_dir
from .writeback import DISK

# names kept at most between two durable moments (a compaction every 20,000 records writes
# ~10,000); past this the next one syncs everything instead (``Unsynced.take``): bounded
# memory for a compaction held off long (a full disk) or set to run rarely
UNSYNCED_NAMES = 100_000
_OPEN_AT_ONCE = 256  # files whose writeback ``make_durable`` starts before it waits


class Unsynced:
    """The derived files written without fsync since the last moment all of them were
    durable (a compaction's watermark, a clean stop), by directory: what the next such
    moment must make durable (``make_durable``). ``everything``: names are not known
    for all of them (a start after a crash, whose last coordinator left writes unsynced
    that this one never made; too many names), so the next one syncs the machine."""

    def __init__(self, everything: bool = True) -> None:
        self.everything = everything
        self.names: dict[str, set[str]] = {}
        self.count = 0

    def vouched(self) -> None:
        """Every derived file written so far is durable (a clean stop synced them all):
        only those written from now on are owed."""
        self.names, self.count, self.everything = {}, 0, False

    def note(self, path: str) -> None:
        """A derived file was written at ``path`` (a string, as ``os.path`` splits it)."""
        if self.everything:
            return
        directory, name = os.path.split(path)
        names = self.names.setdefault(directory, set())
        if name not in names:
            names.add(name)
            self.count += 1
            if self.count > UNSYNCED_NAMES:
                self.names, self.count, self.everything = {}, 0, True

    def take(self) -> dict[str, set[str]] | None:
        """What to make durable now, by directory (None: everything); from here on only
        what is written later is noted (``give_back`` if it could not be done)."""
        taken = None if self.everything else self.names
        self.names, self.count, self.everything = {}, 0, False
        return taken

    def give_back(self, taken: dict[str, set[str]] | None) -> None:
        """What ``take`` gave was not made durable (a failed compaction): owed again."""
        if taken is None:
            self.names, self.count, self.everything = {}, 0, True
            return
        for directory, names in taken.items():
            for name in names:
                self.note(os.path.join(directory, name))


def make_durable(taken: dict[str, set[str]]) -> None:
    """The files ``Unsynced.take`` named (those gone since are skipped: moved on, their
    removal is their directory's entry), then their directories' entries, reach the
    disk. Each file's writeback is started before any is waited for, a few hundred at a
    time (``sync_file_range``), so the device writes them together; then ``fdatasync``
    each (its data and size: all a reader needs), then ``fsync`` each directory."""
    files = [os.path.join(directory, name) for directory, names in taken.items()
             for name in names]
    for start in range(0, len(files), _OPEN_AT_ONCE):
        opened = []
        try:
            for path in files[start:start + _OPEN_AT_ONCE]:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                opened.append((path, fd))
                DISK.start_writeback(fd)
            for path, fd in opened:
                datasync(fd, path)
        finally:
            for _, fd in opened:
                os.close(fd)
    for directory in taken:
        try:
            fsync_dir(directory)
        except FileNotFoundError:  # a generation's directory removed since: nothing in it
            pass
