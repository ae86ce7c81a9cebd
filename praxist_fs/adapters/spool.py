"""The spool: list incoming request files and turn each into a ``RequestSeen`` fact.

Names starting with '.' or not ending in '.json' are ignored (R-FS-3). A file
that does not parse yet and was modified within the grace period is left for
the next scan, in case a peer wrote it in place instead of renaming it in.
"""

from __future__ import annotations

import bisect
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
# A batch's replies are written once it is journaled: while several uids' files (or files
# over a quota) wait, a batch is this short, so that one uid's flood holds another's
# request for a few milliseconds of work, not for hundreds of requests' worth
SHARED_BATCH = 64
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
            ) -> tuple[list[Waiting], bool]:
    """What to read of ``inbox`` now: at most ``batch`` files (``SHARED_BATCH`` while
    several owners' wait), fairly between their owners (R-SEC-5), then as many more that
    are over ``quota`` = (files, bytes) of one owner, so that they are answered (rejected,
    by the core) without waiting their turn: the spool a flood fills stays bounded.

    Fair: each owner's files in the order they arrived, the owners in turn (one file of
    each, then a second of each, ...), the owner of the oldest file first. So one uid's
    flood, however large, delays another uid's request by one turn of the loop.

    Arrival is the file's ctime (then its name): the kernel sets it when the file is
    renamed in, and its owner can move it later (touch, chmod) but never back, as it can
    the mtime; so no peer jumps ahead of files that came before its own.

    Returns the files to read, and whether more were left waiting."""
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
    owners = []  # (first arrival, uid, files in order, their bytes so far, how many within)
    for uid, files in by_owner.items():
        files.sort()
        used = list(itertools.accumulate(size for _, _, size in files))
        within = len(files) if quota is None else \
            min(quota[0], bisect.bisect_right(used, quota[1]))
        owners.append((files[0][:2], uid, files, used, within))
    owners.sort()
    waiting_within = sum(within for *_, within in owners)
    waiting_over = sum(len(files) - within for _, _, files, _, within in owners)
    if len(owners) > 1 or waiting_over:  # others wait: a short turn, so theirs comes soon
        batch = min(batch, SHARED_BATCH)
    fair, turn = [], 0  # (uid, files, used, index), one of each owner's a turn
    while len(fair) < batch and (left := [o for o in owners if o[4] > turn]):
        fair += [(uid, files, used, turn) for _, uid, files, used, _ in left][:batch - len(fair)]
        turn += 1
    over = [(uid, files, used, index) for _, uid, files, used, within in owners
            for index in range(within, min(len(files), within + batch))][:batch]
    chosen = [Waiting(files[index][1], uid, index + 1, used[index])
              for uid, files, used, index in fair + over]
    return chosen, waiting_within > len(fair) or waiting_over > len(over)


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
    # Not fsynced: neither is the rename that files the request beside it, so a power cut
    # could take the pair anyway; a rejection a peer was answered is journaled (its
    # reply is rebuilt), and one without an id was never acknowledged. An fsync here was
    # 40 % of a burst of invalid files' cost (issue 31: 10,000 took 30 s).
    write_json(rejected / f"{kept}.error.json", error, sync=False)
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
