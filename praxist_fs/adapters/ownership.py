"""R-SEC-4: the run directory and every directory the coordinator side writes into are
the coordinator's own, and nothing another uid could swap is ever followed.

Postfix's habit. On a shared box the coordinator (often root), its shims and its
supervisors write job files, replies, logs and attempt files for peers of other uids.
Were a directory on the way to one of them writable by a peer, the peer could rename it
away and put its own tree there, with symlinks: root would then create files where the
peer chose, and a root-owned file holding what the peer's job printed could be moved into
the spool, where its owner would make it root's request. So, at every start and for
every generation's directories:

- every directory above the run directory belongs to root or to the coordinator's uid
  and is writable by no one else unless sticky (as /tmp): no one else can rename the
  run directory away, nor a symlinked component of its path;
- the run directory belongs to the coordinator's uid, is not a symlink, and is writable
  by no one else unless sticky (then each entry the coordinator uses is checked here);
- each state directory is made or found relative to its parent's descriptor with
  ``O_NOFOLLOW``, must be a real directory the coordinator's uid owns that no one else
  could write into (unless sticky), and is kept at its mode through that descriptor
  (``fchmod``): never a chmod through a path, never a directory of someone else's, and
  never one that was open to others, whatever they may have left in it.

Anything else refuses the start (``UnsafeLayout``, with the path and the fix). Once the
whole chain is checked, a path below the run directory names the same directory for as
long as the coordinator runs: only its own uid (or root) could change it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping

from ..errors import UnsafeLayout
from .fsio import make_dir, make_dir_at

ROOT = 0
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PEERS_SETUP = "docs/OPERATIONS.md, Peers under other uids"


def loose(mode: int) -> str | None:
    """Who besides the owner may rename or remove entries of a directory of ``mode``:
    "its group", "everyone", or None (nobody, or a sticky directory)."""
    if mode & stat.S_ISVTX or not mode & WRITABLE_BY_OTHERS:
        return None
    return "everyone" if mode & stat.S_IWOTH else "its group"


def check_ancestors(root: str, uid: int) -> None:
    """Refuse a run directory that someone other than root and ``uid`` could swap: an
    ancestor owned by another uid, or writable by others without the sticky bit.
    Symlinks on the way are fine where they are root's or ``uid``'s and the directory
    holding them is trusted too (in a sticky directory such as /tmp a link's owner may
    still replace it). An ancestor not there yet is no problem: the start makes it,
    ours, and checks again (``RunLayout.create``: one another uid made meanwhile, a
    directory or a link, is refused then)."""
    directories, links = _ancestors(root)
    for link in links:
        owner = os.lstat(link).st_uid
        if owner not in (ROOT, uid):
            raise UnsafeLayout(
                link, f"is a symbolic link owned by uid {owner}, who could point it, and "
                f"the run directory {root} with it, elsewhere",
                f"name the run directory by its real path ({os.path.realpath(root)})")
    for directory in directories:
        try:
            info = os.lstat(directory)
        except FileNotFoundError:
            continue
        if info.st_uid not in (ROOT, uid):
            raise UnsafeLayout(
                directory, f"is owned by uid {info.st_uid}, who could rename the run "
                f"directory {root} away and put another in its place",
                f"keep runs under directories owned by root or by uid {uid}")
        if who := loose(info.st_mode):
            raise UnsafeLayout(
                directory, f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}) and "
                f"not sticky: another uid could rename the run directory {root} away and "
                "put another in its place",
                "make it writable by its owner only (chmod go-w) or sticky (chmod +t), "
                "or keep the run elsewhere")


def _ancestors(root: str) -> tuple[list[str], list[str]]:
    """The directories whose owners could change what ``root`` (absolute, normalised)
    names: those above its real path, and those holding a symlink on the way to it; and
    those symlinks."""
    found: set[str] = set()
    links: list[str] = []

    def and_above(path: str) -> None:
        while True:
            found.add(path)
            if path == "/":
                return
            path = os.path.dirname(path)

    and_above(os.path.dirname(os.path.realpath(root)))
    prefix = ""
    for part in root.split("/")[1:-1]:
        prefix += "/" + part
        if os.path.islink(prefix):
            links.append(prefix)
            and_above(os.path.realpath(os.path.dirname(prefix)))
    return sorted(found), links


def check_run_directory(info: os.stat_result, root: str, uid: int) -> None:
    """The run directory itself (``info``: its lstat or the fstat of an O_NOFOLLOW open)."""
    if info.st_uid != uid:
        raise UnsafeLayout(root, f"is owned by uid {info.st_uid}, not by uid {uid}, which "
                           "serves it", f"serve it as uid {info.st_uid}, or chown it to "
                           f"uid {uid}")
    if who := loose(info.st_mode):
        raise UnsafeLayout(
            root, f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}) and not "
            "sticky: another uid could rename logs/ or resource_scheduler/ away and put "
            "its own, with symlinks, in their place",
            f"chmod {stat.S_IMODE(info.st_mode) & ~WRITABLE_BY_OTHERS:04o} it (peers need "
            f"only to read and search it: {PEERS_SETUP})")


def state_directory_problem(info: os.stat_result, uid: int) -> str | None:
    """What makes ``info`` (an lstat) unfit as a state directory of uid ``uid``'s run."""
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link, which the coordinator never follows"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid != uid:
        return (f"is owned by uid {info.st_uid}, not by uid {uid}, which serves the run: the "
                "coordinator writes only into directories it owns")
    if who := loose(info.st_mode):
        return (f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):04o}) and not "
                "sticky")
    return None


def secure_tree(root: str, tree: Mapping[str, int], uid: int,
                optional: frozenset[str] = frozenset()) -> None:
    """Open the run directory ``root`` (its ancestors checked already) and make or find
    every directory of ``tree`` (a relative path -> its mode, each parent before its
    children) relative to its parent's descriptor, never through a link; keep each at
    its mode. Those of ``optional`` are not made, only checked where they are. Raises
    ``UnsafeLayout`` at the first that is not the coordinator's own."""
    try:
        root_fd = os.open(root, DIRECTORY_FLAGS)
    except OSError as exc:
        raise _unusable(root, exc, os.lstat(root)) from None
    opened = {"": root_fd}
    try:
        check_run_directory(os.fstat(root_fd), root, uid)
        for relative, mode in tree.items():
            parent, _, name = relative.rpartition("/")
            path = os.path.join(root, relative)
            if relative in optional:
                try:
                    os.lstat(name, dir_fd=opened[parent])
                except FileNotFoundError:
                    continue
            opened[relative] = fd = _own_directory(opened[parent], name, path, mode, uid)
            info = os.fstat(fd)
            if stat.S_IMODE(info.st_mode) != mode:
                os.fchmod(fd, mode)  # our own, found by this very descriptor
    finally:
        for fd in opened.values():
            os.close(fd)


def _own_directory(parent_fd: int, name: str, path: str, mode: int, uid: int) -> int:
    """A descriptor of directory ``name`` under ``parent_fd``, made if missing; refused
    (``UnsafeLayout``) unless it is a real directory owned by ``uid``."""
    make_dir_at(parent_fd, name, path, mode & 0o777)
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        raise _unusable(path, exc, os.lstat(name, dir_fd=parent_fd)) from None
    info = os.fstat(fd)
    if problem := state_directory_problem(info, uid):
        os.close(fd)
        raise UnsafeLayout(path, problem, "move it aside (another uid made it) and start "
                           "again" if info.st_uid != uid else "another uid may have put "
                           "anything in it: look, then chmod go-w it and start again")
    return fd


def _unusable(path: str, exc: OSError, found: os.stat_result) -> UnsafeLayout | OSError:
    """What an O_NOFOLLOW open of a directory's failure means (``found``: its lstat)."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return UnsafeLayout(path, state_directory_problem(found, os.geteuid()),
                            "move it aside and start again" if not stat.S_ISLNK(found.st_mode)
                            else "give the directory it points to instead, or move the "
                            "link aside")
    return exc


def own_directories(base: str, *names: str, mode: int = 0o755) -> str:
    """``base/names...`` (``base`` one of the run's checked directories), each component
    made or found a real directory of ours, never through a link: an attempt's or a log's
    directory, on every launch. Raises ``UnsafeLayout`` for one that is not; returns the
    path."""
    path = base
    for name in names:
        path = os.path.join(path, name)
        make_dir(path, mode)
        if problem := state_directory_problem(os.lstat(path), os.geteuid()):
            raise UnsafeLayout(path, problem)
    return path


def layout_problems(root: str, tree: Mapping[str, int], uid: int) -> list[str]:
    """Read-only (``praxist-fs status``): what ``check_ancestors``, the run directory's
    check and ``secure_tree`` would refuse now, of a run served by ``uid``. Directories
    not made yet are no problem."""
    problems = []
    try:
        check_ancestors(root, uid)
        info = os.lstat(root)
        if stat.S_ISLNK(info.st_mode):
            raise UnsafeLayout(root, "is a symbolic link, which the coordinator never follows")
        check_run_directory(info, root, uid)
    except UnsafeLayout as exc:
        problems.append(str(exc))
    except OSError:
        return problems  # gone, or not ours to look at
    for relative in tree:
        path = os.path.join(root, relative)
        try:
            problem = state_directory_problem(os.lstat(path), uid)
        except OSError:
            continue
        if problem is not None:
            problems.append(f"{path}: {problem}")
    return problems
