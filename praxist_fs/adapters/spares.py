"""Job files and replies written into the inodes of files let go (issue 31 item 1).

A job's file is written again at each change of state (jobs/queued/, running/, done/):
as a new file each time, every change allocated an inode and freed the old file's. On
ext4 without a journal, as on our 2-core bench machine, an allocation first walks past
every inode its block group freed lately (the kernel's ``recently_deleted``: 5 s, or 5
minutes while the inode table's block is dirty), so the frees of one burst of jobs made
every later creation slower, the shims' too: ``perf`` put 40 % of the coordinator's
samples there at 2 slots. So a job file that is replaced is kept aside instead of
unlinked (``retire``: renamed into resource_scheduler/private/, which only the
coordinator's uid can enter), and so is a consumed request of our own uid whose env held
no secret (``adopt``); a later job file or reply is written into it (``write``): written
over, cut to length and renamed into place, as a new one would be, but with no inode
freed or allocated. Per job that leaves one allocation (its done file and reply stay,
its request goes) and no free, where there were two and one.

A reader that opened the old file must never see it change: a spare is reused only
when nothing else has it open, which the kernel says by granting a write lease
(``fsio.rewrite``); from the private directory nobody opens it anew. A spare that is
not our own regular file with one link, or that something still holds, is unlinked
and a new file written. At most ``KEPT`` are kept; the next start adopts them (freeing
them there would give room back to a start on a full disk, which then would not say so:
tests/e2e/test_full_disk.py). A job directory on another file system (a mount) keeps
no spares: its replaced files are unlinked as before. The files are derived views
either way: written without fsync, repaired from the journal after a crash, where a
power cut may leave in the old name either content, or the old with part of the new
over it.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import time

from . import fsio

KEPT = 64  # spares kept at most: the job files a batch replaces beyond that are unlinked
PREFIX = ".spare-"


class Spares:
    """Retired job files in ``directory``, reused for the next writes."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = os.fspath(directory)
        self._kept: list[str] = []
        self._names = itertools.count()
        # a new spare's name, less its count: this process's pid and start, so that an
        # earlier process's kept spares are adopted, never overwritten; made once, as are
        # the owner a request must have to be adopted: 2 to 3 system calls a job less
        self._prefix = os.path.join(self.directory, f"{PREFIX}{os.getpid()}-{time.time_ns()}-")
        self._owner = (os.geteuid(), os.getegid())
        for name in sorted(os.listdir(self.directory)):  # an earlier coordinator's
            if name.startswith(PREFIX):
                self._keep_or_free(os.path.join(self.directory, name))

    def __len__(self) -> int:
        return len(self._kept)

    def retire(self, path: str) -> None:
        """``path`` is replaced (its job moved on): kept aside for a later write, or
        unlinked when enough are kept or it lies on another file system. Gone already
        counts as retired."""
        if len(self._kept) >= KEPT:
            fsio.unlink(path)
            return
        spare = f"{self._prefix}{next(self._names)}"
        try:
            fsio.rename(path, spare)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            fsio.unlink(path)  # a job directory mounted apart: freed as before
            return
        self._kept.append(spare)

    def adopt(self, path: str) -> None:
        """``path``, a consumed request, is kept aside as a retired job file is, when it is
        a plain file of our own uid and group with one link; another's is unlinked as
        before. Unlinked, every request freed an inode, which every later creation in its
        block group walked past (the shims' too): the coordinator's last free per job.
        (Its writer is our uid: it could write our job files anyway.)"""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and \
                (info.st_uid, info.st_gid) == self._owner:
            self.retire(path)
        else:
            fsio.unlink(path)

    def write(self, path: str, data: bytes) -> os.stat_result:
        """``data`` at ``path``, as ``fsio.write_atomic(sync=False)`` writes it (a reader
        sees the old file or the new one, whole), in a spare's inode if one is free; the
        file's fstat as written."""
        while self._kept:
            spare = self._kept.pop()
            try:
                made = fsio.rewrite(spare, data)
                if made is not None:
                    fsio.rename(spare, path)
                    return made
            except FileNotFoundError:  # not there to keep after all
                continue
            except OSError as exc:
                fsio.unlink(spare)
                if exc.errno == errno.EXDEV:  # ``path`` is on another file system
                    break
                exc.filename = path  # a full disk's error names the file meant
                raise
            fsio.unlink(spare)  # held, or no longer ours alone: freed after all
        return fsio.write_atomic(path, data, sync=False, stat=True)

    def _keep_or_free(self, spare: str) -> None:
        if len(self._kept) < KEPT:
            self._kept.append(spare)
        else:
            fsio.unlink(spare)
