"""The spool: list incoming request files and turn each into a ``RequestSeen`` fact.

Names starting with '.' or not ending in '.json' are ignored (R-FS-3). A file
that does not parse yet and was modified within the grace period is left for
the next scan, in case a peer wrote it in place instead of renaming it in.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from operator import methodcaller
from pathlib import Path

from ..core.events import RequestSeen
from ..core.request import (
    EXPLAINED_BYTES, MAX_REQUEST_BYTES, parse_request, request_id_from_filename,
)
from ..errors import BadRequest
from .fsio import TEMP_PATTERN, read_spool_file, rename, unlink, write_json

GRACE_SECONDS = 2.0
BATCH = 512
STALE_TMP_SECONDS = 36 * 3600  # Maildir's rule for abandoned writes in tmp/


@dataclass(frozen=True, slots=True)
class Waiting:
    """A request file waiting in the spool, as a listing finds it: its owner (the lstat's;
    the fstat of the read decides), and where it stands among that owner's files in
    arrival order: ``position`` (1 for the oldest) and ``bytes`` (its size and the older
    ones', each counted up to the most a request may be: a larger one is refused for its
    size, unread), which the core holds against the owner's quota (core/tenancy.py)."""

    name: str
    uid: int
    position: int
    bytes: int


def pending(inbox: Path, batch: int = BATCH, quota: tuple[int, int] | None = None
            ) -> list[Waiting]:
    """What to read of ``inbox`` now: at most ``batch`` files, fairly between their owners
    (R-SEC-5), then at most ``batch`` more that are over ``quota`` = (files, bytes) of one
    owner, so that they are answered (rejected, by the core) without waiting their turn:
    the spool a flood fills stays bounded.

    Fair: each owner's files in the order they arrived, the owners in turn (one file of
    each, then a second of each, ...), the owner of the oldest file first. So one uid's
    flood, however large, delays another uid's request by one turn of the loop.

    Arrival is the file's ctime (then its name): the kernel sets it when the file is
    renamed in, and its owner can move it later (touch, chmod) but never back, as it can
    the mtime; so no peer jumps ahead of files that came before its own."""
    by_owner: dict[int, list[tuple[int, str, int]]] = {}
    with os.scandir(inbox) as it:
        for entry in it:
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            by_owner.setdefault(info.st_uid, []).append(  # one too large is read no further
                (info.st_ctime_ns, entry.name, min(info.st_size, MAX_REQUEST_BYTES)))
    turns: list[tuple[tuple[int, str], list[Waiting]]] = []  # (first arrival, within quota)
    over: list[Waiting] = []
    for uid, files in by_owner.items():
        files.sort()
        within, used = [], 0
        for position, (_, name, size) in enumerate(files, 1):
            used += size
            waiting = Waiting(name, uid, position, used)
            if quota is not None and (position > quota[0] or used > quota[1]):
                over.append(waiting)
            else:
                within.append(waiting)
        if within:
            turns.append((files[0][:2], within))
    turns.sort(key=lambda turn: turn[0])
    fair = [waiting for turn in itertools.zip_longest(*(queue for _, queue in turns))
            for waiting in turn if waiting is not None]
    return fair[:batch] + over[:batch]


def read_request(incoming: Path, dir_fd: int, name: str, now: float,
                 digest_of: Callable[[bytes], str],
                 position: tuple[int, int] | None = None) -> RequestSeen | None:
    """The fact of one request file, or None if it vanished or is still within its grace.
    ``position``: where the listing found it among its owner's (``Waiting``)."""
    try:
        data = read_spool_file(dir_fd, name, MAX_REQUEST_BYTES, EXPLAINED_BYTES)
    except FileNotFoundError:
        return None
    except BadRequest as exc:
        digest = digest_of(f"unreadable:{name}:{exc}".encode())
        return RequestSeen(at=now, name=name, digest=digest,
                           request_id=request_id_from_filename(name),
                           error_field=exc.field, error_problem=exc.problem)
    digest = digest_of(data)
    try:
        request = parse_request(name, data)
    except BadRequest as exc:
        if exc.field == "<file>" and len(data) <= MAX_REQUEST_BYTES and \
                _young(incoming / name, now):  # too large already: it will not get smaller
            return None
        return RequestSeen(at=now, name=name, digest=digest,
                           request_id=request_id_from_filename(name),
                           error_field=exc.field, error_problem=exc.problem, uid=data.uid,
                           spool_position=position)
    return RequestSeen(at=now, name=name, digest=digest, request_id=request.request_id,
                       request=request, uid=data.uid, spool_position=position)


def _young(path: Path, now: float) -> bool:
    ends = _grace_ends(path)
    return ends is not None and now < ends


def _grace_ends(path: Path) -> float | None:
    """When a file that does not parse stops being left for its writer (None: gone)."""
    try:
        return path.stat(follow_symlinks=False).st_mtime + GRACE_SECONDS
    except FileNotFoundError:
        return None


def grace_left(incoming: Path, names: list[str], now: float) -> float | None:
    """Seconds until the first of ``names`` left within its grace is read again as it
    stands (None when none is still there): a request written in place that never
    parses is rejected then, not at the next slow scan of an idle coordinator."""
    ends = [end for name in names if (end := _grace_ends(incoming / name)) is not None]
    return max(0.0, min(ends) - now) if ends else None


def reject(incoming: Path, rejected: Path, name: str, error: dict) -> None:
    """Keep the offending file (a symlink stays a link, never followed) and say why.

    An earlier rejected file of the same name is kept too: the newcomer gets a suffix."""
    if not os.path.lexists(incoming / name):
        return  # already filed (a redone effect after a restart)
    base = name if len(name.encode(errors="surrogateescape")) <= 160 else \
        f"{name[:100]}-{hashlib.sha256(name.encode(errors='surrogateescape')).hexdigest()[:16]}"
    kept, serial = base, 1
    while os.path.lexists(rejected / kept):
        serial += 1
        kept = f"{base}.{serial}"
    write_json(rejected / f"{kept}.error.json", error)
    try:
        rename(incoming / name, rejected / kept)
    except FileNotFoundError:
        pass


def sweep_stale(spool_tmp: Path, own_directories: list[Path], now: float) -> int:
    """Remove abandoned writes: peers' spool/tmp files older than 36 h, and our own
    hidden temp files (a crash between write and rename leaves them). Returns a count."""
    removed = 0
    for directory in own_directories:
        hidden = filter(methodcaller("startswith", "."), os.listdir(directory))
        for name in fnmatch.filter(hidden, TEMP_PATTERN):
            unlink(directory / name)
            removed += 1
    with os.scandir(spool_tmp) as it:
        for entry in it:
            try:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > STALE_TMP_SECONDS
            except FileNotFoundError:
                continue
            if stale and not entry.is_dir(follow_symlinks=False):
                unlink(entry.path)
                removed += 1
    return removed


def read_inbox(directory: Path, skip: set[str] = frozenset(),
               names: list[str] | None = None
               ) -> list[tuple[str, bytes | None, BadRequest | None]]:
    """The peer-written .json files of ``directory`` (or those of ``names``, in their
    order: ``pending``'s): (name, bytes, None) or (name, None, why)."""
    found = []
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return found
    try:
        for name in sorted(os.listdir(fd)) if names is None else names:
            if name.startswith(".") or not name.endswith(".json") or name in skip:
                continue
            try:
                found.append((name, read_spool_file(fd, name, MAX_REQUEST_BYTES), None))
            except FileNotFoundError:
                continue
            except BadRequest as exc:
                found.append((name, None, exc))
    finally:
        os.close(fd)
    return found
