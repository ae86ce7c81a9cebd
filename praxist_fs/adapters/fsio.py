"""Every coordinator file write goes through here (R-FS-2).

Create and replace: a unique hidden temp name in the target directory, written
fully, fsynced, renamed into place; the directory is fsynced when the caller
asks for durability. A reader never sees a half-written file.

Power-loss testing: with ``PRAXIST_POWERLOSS_LEDGER=<path>`` every operation
that changes the disk is also appended, as one JSON line, to that ledger, so a
test can rebuild what would survive a power cut (tests/powerloss.py). Lines
carry ``op`` and ``path`` (absolute) and, by op: ``create`` (``data``,
``mode``), ``fsync``, ``rename`` (``src``, ``moved``, ``replaced``),
``unlink`` (``old``), ``mkdir``, ``fsync_dir`` (``names``: the directory's
entries at that moment), ``open_append`` (``old``), ``append`` (``data``),
``truncate`` (``size``), ``overwrite`` (``data``, written over the file from its
start), ``chmod`` (``mode``), and each its writer's ``pid``; ``rewrite`` records an ``open_append``, maybe a
``chmod``, an ``overwrite`` and maybe a ``truncate``, by path. ``data`` is base64;
``moved``/``replaced``/``old`` describe what the name held before (``{"kind":
"absent" | "file" | "symlink" | "other", ...}``). Unset, each operation pays one
``is None`` test.
"""

from __future__ import annotations

import _thread
import errno
import itertools
import json
import os
import stat
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii

from ..errors import BadRequest

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any, BinaryIO

_counter = itertools.count()
TEMP_PATTERN = ".*.tmp"  # a glob that matches every temp_name
LEDGER_ENV = "PRAXIST_POWERLOSS_LEDGER"
_PIECES_BUFFER = 256 << 10  # ``write_atomic_pieces``: small pieces gathered to one write


def _open_ledger() -> int | None:
    path = os.environ.get(LEDGER_ENV)
    if not path:
        return None
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)


_ledger = _open_ledger()
_append_paths: dict[int, str] = {}  # fd -> path of files opened by open_append, ledger only


def _record(op: str, path: str | os.PathLike, **fields: Any) -> None:
    """One ledger line, written at once: the ledger must hold every op before a crash.
    ``pid``: a compaction child writes the same ledger as its loop, and a directory's
    listing (``fsync_dir``) taken by one may predate the other's change recorded first."""
    line = json.dumps({"op": op, "path": os.path.abspath(path), "pid": os.getpid(),
                       **fields}) + "\n"
    os.write(_ledger, line.encode())


def _encode(data: bytes) -> str:
    import base64  # here: the power-loss ledger's alone (tests), not every CLI call's

    return base64.b64encode(data).decode()


def _describe(path: str | os.PathLike) -> dict[str, Any]:
    """What a name holds now, for a ledger line: enough to put it back (test runs only:
    it reads a whole file)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "absent"}
    if stat.S_ISLNK(info.st_mode):
        return {"kind": "symlink", "target": os.readlink(path)}
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as handle:
            return {"kind": "file", "data": _encode(handle.read()),
                    "mode": stat.S_IMODE(info.st_mode)}
    return {"kind": "other"}


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
        if _ledger is not None:
            _record("fsync_dir", path, names=sorted(os.listdir(fd)))
    finally:
        os.close(fd)


def makedirs(path: str | os.PathLike, *, durable: bool = False, mode: int = 0o777) -> None:
    """``mkdir -p``. With ``durable`` each directory it creates is fsynced into its
    parent, so that what is fsynced inside cannot vanish with it after a power cut (one
    made by a process killed before that fsync is the caller's to fsync again)."""
    path = os.path.abspath(path)  # strings, not Paths: this is on every launch's path
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue  # made by someone else meanwhile
        if _ledger is not None:
            _record("mkdir", directory)
        if durable:
            fsync_dir(os.path.dirname(directory))


def make_dir(path: str, mode: int) -> bool:
    """mkdir ``path``; False when the name was taken already, by whatever: the caller looks."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        return False
    if _ledger is not None:
        _record("mkdir", path)
    return True


def make_dir_at(dir_fd: int, name: str, path: str, mode: int) -> bool:
    """mkdir ``name`` in the directory open as ``dir_fd`` (``path``: its absolute path, for
    the ledger). False when the name was taken already, by whatever: the caller looks."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    if _ledger is not None:
        _record("mkdir", path)
    return True


def _create(path: str | os.PathLike, data: bytes, mode: int, *, sync: bool,
            meant: str | os.PathLike | None = None, stat: bool = False,
            sliced: bool = False) -> os.stat_result | None:
    """``meant``: the file ``path`` is the temp name of, which an error names (a write's
    error names no file: a full disk's message must say where). ``stat``: the new file's
    fstat, as written, is returned. ``sliced``: written a slice at a time, its writeback
    started as it goes (``writeback.write_sliced``)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, mode)
    try:
        if sliced:
            from .writeback import write_sliced  # a compaction's alone: no CLI call's
            write_sliced(fd, data)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        if _ledger is not None:
            _record("create", path, data=_encode(data), mode=mode)
        if sync:
            os.fsync(fd)
            if _ledger is not None:
                _record("fsync", path)
        made = os.fstat(fd) if stat else None
    except BaseException as exc:
        os.close(fd)
        unlink(path)
        if isinstance(exc, OSError):
            exc.filename = os.fspath(meant or path)
        raise
    os.close(fd)
    return made


def rewrite(path: str | os.PathLike, data: bytes, *, mode: int = 0o644
            ) -> os.stat_result | None:
    """Write ``data`` over the bytes of ``path``, a file of ours that no other process
    holds, without fsync, and give it ``mode``; its fstat as written. None, and nothing
    changed, when it is not a regular file of this uid with one link, or something else
    has it open: the kernel grants a write lease (F_SETLEASE) only to a file's only
    opener. For a file nobody can open anew (``adapters/spares.py``): once checked, no
    reader can see it change and no writer can change it, whatever its mode let others
    do before (a peer's request, a spare made group-writable); ``mode`` is what it
    lets them do from now on.

    The bytes go over the old ones from the start and the file is cut to their length:
    the blocks it has are written again, none freed and none allocated. Truncated to
    nothing first, as before, ext4 freed its blocks, reserved new ones and, at the close
    of a file truncated to nothing and written (``auto_da_alloc``), started its
    writeback: 8 % of the coordinator's CPU at 2 slots (``perf``, issue 31). A power
    cut may leave the old bytes with a part of the new ones over them: a derived view,
    compared with the journal and rewritten after a crash."""
    import fcntl  # here: the coordinator's alone, not every CLI call's
    import signal
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link, a FIFO: not a file to reuse
            return None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
            return None
        # a lease broken by an opener signals its holder: SIGURG, ignored, not SIGIO's exit
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EBUSY):  # held by another opener
                return None
            raise
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        if _ledger is not None:  # opened as it stood (a spare an earlier process kept)
            _record("open_append", path, old=_describe(path),
                    mode=stat.S_IMODE(info.st_mode))
        if stat.S_IMODE(info.st_mode) != mode:  # set-id and sticky bits go too
            os.fchmod(fd, mode)
            if _ledger is not None:
                _record("chmod", path, mode=mode)
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.pwrite(fd, view[written:], written)
        if _ledger is not None:
            _record("overwrite", path, data=_encode(data))
        if info.st_size > len(data):
            os.ftruncate(fd, len(data))
            if _ledger is not None:
                _record("truncate", path, size=len(data))
        return os.fstat(fd)
    finally:
        os.close(fd)


def create(path: str | os.PathLike, data: bytes, *, mode: int = 0o644) -> None:
    """A new file (never an existing one, never through a link), neither fsynced nor
    renamed: for files only a child reads, which a machine crash makes moot."""
    _create(path, data, mode, sync=False)


def write_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = False,
                 sync: bool = True, mode: int = 0o644, stat: bool = False,
                 sliced: bool = False) -> os.stat_result | None:
    """Write ``data`` to ``path`` by temp file + fsync + rename (+ directory fsync).

    ``sync=False`` skips the fsync of the content: only for derived files that the
    journal rebuilds after a crash (a compaction and a clean stop make them durable by
    name, ``unsynced.make_durable``, or with ``sync_all`` when names are not known). A
    reader still never sees a half-written file; a power cut may leave it empty.
    ``stat``: the file's fstat as written is returned (a rename keeps it). ``sliced``:
    for a file of many megabytes, written while others wait on fsyncs of the same disk
    (a compaction's snapshot): its writeback goes out a few megabytes at a time, never
    all at its fsync (``writeback``); the same steps make it durable, in the same order."""
    tmp = temp_name(path)
    made = _create(tmp, data, mode, sync=sync, meant=path, stat=stat, sliced=sliced)
    rename(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(tmp))
    return made


def write_atomic_pieces(path: str | os.PathLike, pieces: Iterable[bytes], *,
                        mode: int = 0o644) -> int:
    """As ``write_atomic(path, b"".join(pieces), sync=False)``, each piece written as it
    comes, so that a file larger than what its writer should hold (a long run's report)
    is never whole in memory; its size in bytes. Without fsync: for files outside a
    run's state, which no recovery reads (a power cut may leave it empty); under the
    power-loss ledger, joined and written as ``write_atomic`` writes."""
    if _ledger is not None:
        data = b"".join(pieces)
        write_atomic(path, data, sync=False, mode=mode)
        return len(data)
    tmp, size = temp_name(path), 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open(os.open(tmp, flags, mode), "wb", buffering=_PIECES_BUFFER) as out:
            for piece in pieces:
                size += out.write(piece)
    except BaseException as exc:
        unlink(tmp)
        if isinstance(exc, OSError):
            exc.filename = os.fspath(path)
        raise
    rename(tmp, path)
    return size


def close_aside(closable: int | BinaryIO) -> None:
    """Close a file descriptor or file object in a thread of its own: the last close of a
    file with no name left (renamed over, or a temporary one) frees its blocks and cached
    pages, which takes milliseconds per megabyte on a busy disk (40-60 ms for the ~135 MB
    snapshot of 100,000 finished jobs), and the loop need not wait for that. Nothing
    durable depends on it: what was fsynced stays so. ``_thread``'s start, not
    ``threading``'s, which waits until the new thread runs: 20 ms and more on a loaded
    machine."""
    if isinstance(closable, int):
        _thread.start_new_thread(os.close, (closable,))
    else:
        _thread.start_new_thread(closable.close, ())


def temp_name(path: str | os.PathLike) -> str:
    """The name a file is written under before it is renamed to ``path``: hidden and
    beside it, ``.NAME.<pid>.<n>.tmp``, never the same twice in one process (the form
    PROTOCOL.md section 1 promises; the shim, which cannot import us, makes the same)."""
    directory, name = os.path.split(os.fspath(path))  # strings: on every job's path
    return os.path.join(directory or ".", f".{name}.{os.getpid()}.{next(_counter)}.tmp")


def rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move a name, replacing ``dst``, within one file system: whatever ``src`` is (a
    peer's symlink stays a link), it is not opened, except to describe it in a ledger."""
    if _ledger is None:
        os.rename(src, dst)
        return
    moved, replaced = _describe(src), _describe(dst)
    os.rename(src, dst)
    _record("rename", dst, src=os.path.abspath(src), moved=moved, replaced=replaced)


def open_append(path: str | os.PathLike, *, mode: int = 0o600) -> int:
    """A descriptor for appending to ``path`` (created if missing), read-write; never
    through a link, and only to a regular file of our own (R-SEC-4)."""
    old = _describe(path) if _ledger is not None else None
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file of this uid's: not written through",
                      os.fspath(path))
    if _ledger is not None:
        _append_paths[fd] = os.path.abspath(path)
        _record("open_append", path, old=old, mode=mode)
    return fd


def open_log(path: str | os.PathLike) -> int:
    """A descriptor for appending to a log of ours (created if missing): never through a
    link, never a FIFO or a file another uid owns or has linked (R-SEC-4), which would
    have this process write where someone else chose. OSError otherwise."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
                 | os.O_CLOEXEC, 0o644)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_nlink != 1:
        os.close(fd)
        raise OSError(errno.EPERM, "not a regular file of this uid's with one link: not "
                      "written through", os.fspath(path))
    os.set_blocking(fd, True)  # O_NONBLOCK was for the open alone (a FIFO's)
    return fd


def append(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    if _ledger is not None:
        _record("append", _append_paths[fd], data=_encode(data))


def fsync(fd: int) -> None:
    """fsync a descriptor from ``open_append``; an error propagates (it is fatal)."""
    os.fsync(fd)
    if _ledger is not None:
        _record("fsync", _append_paths[fd])


def datasync(fd: int, path: str) -> None:
    """fdatasync a file opened at ``path`` (``writeback.make_durable``: a derived file
    written without fsync, vouched for now)."""
    os.fdatasync(fd)
    if _ledger is not None:
        _record("fsync", path)


def truncate(fd: int, size: int) -> None:
    os.ftruncate(fd, size)
    if _ledger is not None:
        _record("truncate", _append_paths[fd], size=size)


def one_line_encoder(*, ensure_ascii: bool = True, separators: tuple[str, str] = (", ", ": "),
                     sort_keys: bool = False) -> Callable[[Any], str]:
    """``json.JSONEncoder(...).encode``, made once, without what ``encode`` pays again at
    every call: a new C encoder and a dict to look for cycles in (1.4 of the 6 us a job
    file's document takes). The documents are trees the coordinator builds, never cyclic.
    Where the C encoder is missing (another Python), the encoder's own ``encode``."""
    plain = json.JSONEncoder(ensure_ascii=ensure_ascii, separators=separators,
                             sort_keys=sort_keys)
    if c_make_encoder is None:
        return plain.encode
    chunks = c_make_encoder(
        None, plain.default, encode_basestring_ascii if ensure_ascii else encode_basestring,
        None, separators[1], separators[0], sort_keys, False, True)
    return lambda document: "".join(chunks(document, 0))


def dumps(document: Any, *, indent: int | None = None) -> bytes:
    """One line by default: the C encoder writes it ~10x faster than an indented one, and
    a launch writes several job files. ``indent`` for the files people read (status).
    backslashreplace: a lone surrogate from a peer's key must not make a write fail."""
    text = _compact(document) if indent is None else \
        json.dumps(document, indent=indent, ensure_ascii=False)
    return (text + "\n").encode("utf-8", "backslashreplace")


_compact = one_line_encoder(ensure_ascii=False)  # every job file and reply


def write_json(path: str | os.PathLike, document: Any, *, durable: bool = False,
               sync: bool = True, mode: int = 0o644, indent: int | None = None) -> None:
    write_atomic(path, dumps(document, indent=indent), durable=durable, sync=sync, mode=mode)


def sync_all() -> None:
    """Everything written so far reaches the disk (sync(2)): how a compaction or a clean
    stop makes the derived files written without fsync durable before vouching for them
    when their names are not known (``Unsynced.everything``)."""
    os.sync()
    if _ledger is not None:
        _record("sync", "/")


def read_file(path: str | os.PathLike) -> bytes:
    """A whole file, read through its descriptor: an open, reads until the end and a close,
    where a buffered ``open()`` adds two fstats, an ioctl and two lseeks. Every job's end
    reads READY (and a shim's exit.json when its pipe said nothing) this way."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_json(path: str | os.PathLike) -> Any | None:
    """A JSON file we (or a shim) wrote, or None if it is absent or unreadable."""
    try:
        return json.loads(read_file(path))
    except (OSError, ValueError):
        return None


class Owned(bytes):
    """A peer file's bytes, with ``uid``: the file's owner, from the fstat of the very
    descriptor they were read from (no second look at the path, so no race; R-SEC-3)."""

    uid: int


def read_spool_file(dir_fd: int, name: str, limit: int, explained: int = 0) -> Owned:
    """Read a peer's file without following links or blocking; at most ``limit`` bytes,
    or ``explained`` (when larger), for the parser to say what made it too large.

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
        read = max(limit, explained)
        if info.st_size > read:
            raise BadRequest("<file>", f"is {info.st_size} bytes; the limit is {limit}")
        chunks, remaining = [], read + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 65536))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > read:
            raise BadRequest("<file>", f"grew past the limit of {limit} bytes")
        owned = Owned(data)
        owned.uid = info.st_uid
        return owned
    finally:
        os.close(fd)


def unlink(path: str | os.PathLike) -> None:
    """Remove a file; one that is already gone counts as removed."""
    old = _describe(path) if _ledger is not None else None
    try:
        os.unlink(path)
    except FileNotFoundError:
        return
    if _ledger is not None:
        _record("unlink", path, old=old)
