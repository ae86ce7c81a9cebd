"""The spool: list incoming request files and turn each into a ``RequestSeen`` fact.

Names starting with '.' or not ending in '.json' are ignored (R-FS-3). A file
that does not parse yet and was modified within the grace period is left for
the next scan, in case a peer wrote it in place instead of renaming it in.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Callable
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


def pending(incoming: Path) -> list[str]:
    """Request names in arrival order (mtime, then name), at most one batch."""
    entries = []
    with os.scandir(incoming) as it:
        for entry in it:
            if entry.name.startswith(".") or not entry.name.endswith(".json"):
                continue
            try:
                entries.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name))
            except FileNotFoundError:
                continue
    entries.sort()
    return [name for _, name in entries[:BATCH]]


def read_request(incoming: Path, dir_fd: int, name: str, now: float,
                 digest_of: Callable[[bytes], str]) -> RequestSeen | None:
    """The fact of one request file, or None if it vanished or is still within its grace."""
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
                           error_field=exc.field, error_problem=exc.problem, uid=data.uid)
    return RequestSeen(at=now, name=name, digest=digest, request_id=request.request_id,
                       request=request, uid=data.uid)


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


def read_inbox(directory: Path, skip: set[str] = frozenset()
                ) -> list[tuple[str, bytes | None, BadRequest | None]]:
    """The peer-written .json files of ``directory``: (name, bytes, None) or (name, None, why)."""
    found = []
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return found
    try:
        for name in sorted(os.listdir(fd)):
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
