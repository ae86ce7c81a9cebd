"""Every coordinator file write goes through here (R-FS-2).

Create and replace: a unique hidden temp name in the target directory, written
fully, fsynced, renamed into place; the directory is fsynced when the caller
asks for durability. A reader never sees a half-written file.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import BadRequest

_counter = itertools.count()


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = False,
                 mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` by temp file + fsync + rename (+ directory fsync)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_counter)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def dumps(document: Any) -> bytes:
    # backslashreplace: a lone surrogate from a peer's key must not make a write fail
    return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode(
        "utf-8", "backslashreplace")


def write_json(path: str | os.PathLike, document: Any, *, durable: bool = False,
               mode: int = 0o644) -> None:
    write_atomic(path, dumps(document), durable=durable, mode=mode)


def read_json(path: str | os.PathLike) -> Any | None:
    """A JSON file we (or a shim) wrote, or None if it is absent or unreadable."""
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def read_spool_file(dir_fd: int, name: str, limit: int) -> bytes:
    """Read a peer's file without following links or blocking; at most ``limit`` bytes.

    Raises ``BadRequest`` for anything that is not a small regular file with one
    link, and ``FileNotFoundError`` when it vanished (a race, not an error).
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        if exc.errno == getattr(os, "ELOOP", 40):
            raise BadRequest("<file>", "is a symbolic link; expected a regular file") from None
        raise BadRequest("<file>", f"cannot be opened ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadRequest("<file>", "is not a regular file")
        if info.st_nlink > 1:
            raise BadRequest("<file>", "has more than one hard link")
        if info.st_size > limit:
            raise BadRequest("<file>", f"is {info.st_size} bytes; the limit is {limit}")
        chunks, remaining = [], limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise BadRequest("<file>", f"grew past the limit of {limit} bytes")
        return data
    finally:
        os.close(fd)


def unlink(path: str | os.PathLike) -> None:
    """Remove a file; one that is already gone counts as removed."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
