"""A real full disk for tests: a small tmpfs (root only), filled and freed at will, and
an inotify watch that shows what a process did in a directory while it was full."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

IN_DELETE = 0x200
EVENT_HEAD = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then name)


class Disk:
    """A mounted small file system: ``fill`` it, ``free`` it again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.filler = root / "filler"

    def fill(self) -> None:
        """Write one file until the file system has no room left."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        chunk = bytes(65536)
        try:
            while True:
                os.write(fd, chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str = "1m"):
    """A ``Disk``: a tmpfs of ``size`` mounted on ``directory`` for the block, freed and
    unmounted after it (so a writer still trying gets its room and ends). The test is
    skipped where this environment cannot mount (``cannot_mount``); any other mount
    failure fails it."""
    directory.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)])
    disk = Disk(directory)
    try:
        yield disk
    finally:
        disk.free()
        unmount(directory)


@contextlib.contextmanager
def bound(source: Path, target: Path):
    """``source`` also seen at ``target`` (a bind mount), so that two directories of a run
    share one small file system."""
    source.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    _mount(["--bind", str(source), str(target)])
    try:
        yield target
    finally:
        unmount(target)


CAP_SYS_ADMIN = 21  # the capability mount(2) needs (capabilities(7))


def cannot_mount() -> str | None:
    """Why no test can mount here, known before trying: not root, root without
    CAP_SYS_ADMIN (a container that withholds it), or no mount(8). None: mounting is
    expected to work, and a failure is the test's to report."""
    if os.geteuid() != 0:
        return "a full disk is a real tmpfs here, and mounting one needs root"
    status = Path("/proc/self/status").read_text()
    effective = int(next(line.split()[1] for line in status.splitlines()
                         if line.startswith("CapEff:")), 16)
    if not effective >> CAP_SYS_ADMIN & 1:
        return "root without CAP_SYS_ADMIN (a container that withholds it) cannot mount"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "no mount(8)/umount(8) on PATH"
    return None


def _mount(arguments: list[str]) -> None:
    """mount(8), or skip where ``cannot_mount`` says why; any other failure fails."""
    if (why := cannot_mount()) is not None:
        pytest.skip(why)
    done = subprocess.run(["mount", *arguments], capture_output=True, text=True)
    if done.returncode:
        pytest.fail(f"mount {' '.join(arguments)} failed with exit code {done.returncode}: "
                    f"{done.stderr.strip()}")


def unmount(directory: Path) -> None:
    """Unmount; lazily if a process killed at teardown still holds a file there (it goes
    with the last one)."""
    if subprocess.run(["umount", str(directory)], capture_output=True).returncode:
        subprocess.run(["umount", "-l", str(directory)], check=True)


class Deletions:
    """Names removed from one directory since the watch began (inotify): how a test sees
    that a writer tried, failed and cleaned up, on a disk with no room."""

    def __init__(self, directory: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(directory),
                                                 IN_DELETE) < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        self.names: list[str] = []

    def seen(self, prefix: str) -> bool:
        """Whether a name that starts with ``prefix`` was removed by now."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            data = b""
        while data:
            _, _, _, size = EVENT_HEAD.unpack_from(data)
            name = data[EVENT_HEAD.size:EVENT_HEAD.size + size]
            self.names.append(os.fsdecode(name.rstrip(b"\0")))
            data = data[EVENT_HEAD.size + size:]
        return any(name.startswith(prefix) for name in self.names)

    def close(self) -> None:
        os.close(self.fd)
