"""The benchmark's disk: where its scratch directories live, and what a durable file
hand-off costs there right now.

On ext4 without a journal (this development machine's file system), allocating an inode
skips every inode of its block group freed in the last minute (the kernel's
``recently_deleted()``: 60 s, 360 s while their inode table block is dirty). The system
temp dir lives in one block group that every test and benchmark of the machine fills and
empties: creating a file there cost 40-840 us of kernel time, against 15-23 us in a fresh
group, and a bench's rows followed what the disk went through in the minute before they
ran (a second ``make bench`` started as the first deleted its scratch directories
measured an fsync floor of 0.768 ms against 0.484). ``isolate`` gives the run a temp dir
of its own flagged as a top of a directory tree (``chattr +T``), so that the allocator
(Orlov) puts each scratch directory made in it into a block group of few directories,
apart from the ones just emptied. Every scenario's scratch is made by ``mkdtemp``, so
both systems of a side-by-side row live on that fresh disk alike.
"""

from __future__ import annotations

import argparse
import array
import atexit
import fcntl
import json
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from bench_coordinator import discard

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_TOPDIR_FL = 0x80086601, 0x40086602, 0x00020000


def isolate() -> dict:
    """Make every later ``tempfile.mkdtemp`` (and a child's, through TMPDIR) land in a new
    directory of the system temp dir flagged TOPDIR, deleted when this process exits;
    returns where, and whether the flag took (not on every file system: there the bench
    runs as before, in a plain directory)."""
    root = Path(tempfile.mkdtemp(prefix="praxist-bench-root-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] |= FS_TOPDIR_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
        topdir = True
    except OSError:
        topdir = False
    finally:
        os.close(fd)
    tempfile.tempdir = os.environ["TMPDIR"] = str(root)
    # the coordinators' host registry too (unless one is given), as bench_cli's: never
    # the machine's, where another user's run would see the bench's claims
    os.environ.setdefault("PRAXIST_HOST_REGISTRY", str(root / "hosts"))
    return {"scratch_root": str(root), "topdir_flag": topdir}


def durable_handoffs_ns(n: int) -> list[int]:
    """Each of ``n`` small files' write + fsync + rename + directory fsync, in a fresh
    scratch directory (what one durable file hand-off costs here, from Python)."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-floor-"))
    data = json.dumps({"request_id": "x" * 24, "argv": ["/usr/bin/true"], "pad": "y" * 200})
    durable = []
    dir_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(n):
            t0 = time.perf_counter_ns()
            fd = os.open(scratch / f".{i}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data.encode())
            os.fsync(fd)
            os.close(fd)
            os.rename(scratch / f".{i}.tmp", scratch / f"{i}.json")
            os.fsync(dir_fd)
            durable.append(time.perf_counter_ns() - t0)
    finally:
        os.close(dir_fd)
        discard(scratch)
    return durable


def flushes_after_quiet_ns(n: int, quiet_s: float = 0.05) -> dict[str, list[int]]:
    """One journal record's append + fsync (what a launch's commit does before its GO, the
    launch barrier of SPEC R-RUN-2), ``n`` times after ``quiet_s`` without a flush of ours
    (``after_quiet``) and ``n`` times right after another one (``after_flush``). On this
    development machine's virtual disk the first flush after a quiet spell cost 0.35-0.47
    ms and one made right after another 0.14-0.17 ms, the warmth fading over 10-30 ms
    (2026-12-07): the latency rows' jobs each come after both systems went quiet
    (``settle``), so their commit pays the first, and task-spooler flushes nothing."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-flush-"))
    record = b"1 00000000 " + json.dumps({"pad": "y" * 300}).encode() + b"\n"
    flushes: dict[str, list[int]] = {"after_quiet": [], "after_flush": []}
    fd = os.open(scratch / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def flush() -> int:
        t0 = time.perf_counter_ns()
        os.write(fd, record)
        os.fsync(fd)
        return time.perf_counter_ns() - t0

    try:
        flush()  # the first also writes the new file's inode and entry: not a record's cost
        for _ in range(n):
            time.sleep(quiet_s)
            flushes["after_quiet"].append(flush())
            flushes["after_flush"].append(flush())
    finally:
        os.close(fd)
        discard(scratch)
    return flushes


def creation_us(n: int = 300) -> float:
    """Kernel CPU time (microseconds, not wall: the load of other processes does not
    enter it) of creating one empty file in a fresh scratch directory, over ``n``: what
    the freed inodes the allocator walks past cost."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-create-"))
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        for i in range(n):
            os.close(os.open(scratch / str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        return round((resource.getrusage(resource.RUSAGE_SELF).ru_stime - before) * 1e6 / n, 1)
    finally:
        discard(scratch)


def floor_now(samples: int = 20) -> dict:
    """The disk's state before a row: the durable hand-off's p50 and a creation's cost."""
    durable = sorted(durable_handoffs_ns(samples))
    return {"fsync_rename_p50_ms": round(durable[len(durable) // 2] / 1e6, 3),
            "create_kernel_us": creation_us()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the disk's floor now, in the system temp "
                                     "dir and in an isolated one (see disk.py)")
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    plain = floor_now(args.samples)
    print(json.dumps({"system_temp_dir": plain, **isolate(),
                      "isolated": floor_now(args.samples)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
