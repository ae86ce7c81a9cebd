"""A large file written a slice at a time, its writeback started and waited for as it goes.

Written whole, then fsynced, the ~135 MB snapshot of 100,000 finished jobs sits in the
page cache (this box's kernel starts writing back only past 10 % of memory dirty) until
its fsync sends all of it to the disk at once, and the coordinator's journal fsync,
issued meanwhile on the same disk, waits behind it: a reply came 131-137 ms late in
`make bench` while the compaction child wrote, with no loop turn long in CPU. Written in
slices, each slice's writeback is started as soon as it is written and the slice before
it is waited for, so no more than two slices are ever dirty or in flight: a journal
fsync queues behind a few megabytes, never behind the whole file (``write_sliced``).

``sync_file_range(2)``, not ``fdatasync`` per slice: it starts and waits for the
writeback of the file's data in that range and nothing else, where ``fdatasync`` would
also write the inode each time (the size grows with every slice) and ask the device to
flush its cache (68 flushes for one snapshot, each one also a wait for every other
writer's data). It promises no durability, and none is asked of it: the caller's
fsync, rename and directory fsync after the last slice stay the only durable steps, in
the same order. Python's ``os`` has no ``sync_file_range``: it is called through
``ctypes`` (loaded at the first slice, never by a CLI call); where libc lacks it,
``fdatasync`` bounds the slices instead.
"""

from __future__ import annotations

import os

SLICE_BYTES = 2 << 20  # 1-4 MB gave the same 15-25 ms longest journal fsync, against 60-107
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4  # sync_file_range(2)'s flags


class Disk:
    """The system calls ``write_sliced`` makes: ``os.write`` and ``sync_file_range``. A
    test double (tests/adapters/test_writeback.py) has the same two methods."""

    def __init__(self) -> None:
        self._sync_file_range = None

    write = staticmethod(os.write)

    def sync_file_range(self, fd: int, offset: int, nbytes: int, flags: int) -> None:
        """sync_file_range(2) for a range of ``fd``; an error is raised as ``OSError``."""
        if self._sync_file_range is None:
            self._sync_file_range = _load_sync_file_range()
        self._sync_file_range(fd, offset, nbytes, flags)

    def start_writeback(self, fd: int) -> None:
        """The writeback of all of ``fd``'s dirty data begins; nothing is waited for."""
        self.sync_file_range(fd, 0, 0, _WRITE)


def _load_sync_file_range():
    import ctypes  # here: ~3 ms of import that only a compaction's child pays

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        call = libc.sync_file_range
    except AttributeError:  # a libc without it: each slice's data is synced instead
        return lambda fd, offset, nbytes, flags: os.fdatasync(fd) if flags & _WAIT_AFTER \
            else None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]

    def sync_file_range(fd: int, offset: int, nbytes: int, flags: int) -> None:
        if call(fd, offset, nbytes, flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
    return sync_file_range


DISK = Disk()


def write_sliced(fd: int, data: bytes) -> None:
    """Write ``data`` to ``fd`` (a new file, at offset 0) a slice at a time: once a slice
    is written its writeback starts, and the writeback of the slice before it is waited
    for before the next slice is written, so at most two slices of the file are dirty or
    being written back at any moment. The data is not durable when this returns: the
    caller fsyncs."""
    disk, slice_bytes = DISK, SLICE_BYTES  # looked up at each call: a test swaps them
    view, start, last = memoryview(data), 0, None
    while start < len(view):
        end = min(start + slice_bytes, len(view))
        at = start
        while at < end:
            at += disk.write(fd, view[at:end])
        disk.sync_file_range(fd, start, end - start, _WRITE)
        if last is not None:
            disk.sync_file_range(fd, *last, _WAIT_BEFORE | _WRITE | _WAIT_AFTER)
        last, start = (start, end - start), end
