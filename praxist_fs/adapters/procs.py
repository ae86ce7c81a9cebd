"""Process identity from /proc (R-RUN-3): (boot id, pid, start time), never pid alone.

A pid is alive only while /proc shows the same start time and a state other
than zombie or dead; ``kill(pid, 0)`` would also answer for a zombie.

praxist_fs is Linux-only: on a host without procfs every process would look dead
(a running attempt lost, a live coordinator missing), so ``require_procfs`` refuses
to go on there instead (OPERATIONS.md *Linux only*). ``PRAXIST_PROC_ROOT`` moves
where procfs is read, so tests can stand for such a host; it must show the PID
namespace of the coordinator and its shims.
"""

from __future__ import annotations

import os
from collections import namedtuple
from functools import lru_cache

from praxist_fs.errors import NoProcfs


@lru_cache(maxsize=1)
def root() -> str:
    """Where procfs is mounted: ``$PRAXIST_PROC_ROOT``, else /proc."""
    return os.environ.get("PRAXIST_PROC_ROOT") or "/proc"


def require_procfs() -> None:
    """Raise ``NoProcfs`` unless procfs shows this process's own identity (pid, start time,
    state), which every liveness check, re-adoption and fencing reads for other pids."""
    pid = os.getpid()
    if start_time(pid) is None:
        raise NoProcfs(
            f"cannot read this process's identity from {root()}/{pid}/stat: praxist_fs "
            f"identifies, watches and stops processes by (pid, start time) read from Linux "
            f"procfs, and without it every process would look dead; run it on Linux with "
            f"procfs mounted at {root()} (OPERATIONS.md *Linux only*)")


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id. ``PRAXIST_BOOT_ID`` overrides it for the power-loss tests, where a
    coordinator restarted after a simulated power cut must see a new boot, as it would."""
    if override := os.environ.get("PRAXIST_BOOT_ID"):
        return override
    try:
        with open(f"{root()}/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"


def pids() -> list[int]:
    """Every pid procfs lists now (some may be gone by the time they are read)."""
    return [int(entry) for entry in os.listdir(root()) if entry.isdigit()]


def _stat_fields(pid: int) -> list[str] | None:
    """Read through the descriptor (an open, a read, a close): a buffered ``open()`` adds
    five system calls, and every launch and every end asks after a shim."""
    try:
        fd = os.open(f"{root()}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)  # the whole line: a few hundred bytes, read at once
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm (field 2) may hold spaces and parentheses: split after the last ')'.
    return data[data.rfind(b")") + 2:].decode().split()


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: clock ticks after boot at which the process started."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: int | None, started: int | None, boot: str | None = None) -> bool:
    if type(pid) is not int or type(started) is not int:  # also refuses values from damaged files
        return False
    if boot is not None and boot != boot_id():
        return False
    fields = _stat_fields(pid)
    return bool(fields) and int(fields[19]) == started and fields[0] not in ("Z", "X")


def with_argument(argument: str) -> list[int]:
    """Live (not zombie) processes one of whose command-line arguments is ``argument``:
    a shim started for an attempt carries its directory, before it wrote READY too."""
    wanted = os.fsencode(argument)
    found = []
    for pid in pids():
        try:
            with open(f"{root()}/{pid}/cmdline", "rb") as handle:
                arguments = handle.read().split(b"\0")
        except OSError:
            continue
        fields = _stat_fields(pid)
        if wanted in arguments and fields and fields[0] not in ("Z", "X"):
            found.append(pid)
    return found


def own_identity() -> tuple[int, int | None, str]:
    pid = os.getpid()
    return pid, start_time(pid), boot_id()


def session_id(pid: int) -> int | None:
    """The session of a pid (an attempt's tree shares its shim's), or None when the pid is
    not in our PID namespace."""
    info = group_and_session(pid)
    return info[1] if info else None


def group_and_session(pid: int) -> tuple[int, int, str, int] | None:
    """(process group, session, state letter, start time) of a pid, or None if gone."""
    found = stat(pid)
    return None if found is None else (found.pgrp, found.session, found.state, found.start)


# state: R, S, D, T, t, Z, X, ...; start: clock ticks after boot; the others ints. Not a
# typing.NamedTuple: ``typing`` is ~3 ms of a CLI call's start, which checks procfs (R-PERF-3).
Stat = namedtuple("Stat", "state ppid pgrp session start")


def stat(pid: int) -> Stat | None:
    """What /proc/<pid>/stat says of a pid's place among processes, or None if gone."""
    fields = _stat_fields(pid)
    if not fields:
        return None
    return Stat(fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def catches(pid: int, signum: int) -> bool:
    """Whether a process has a handler for ``signum`` (SigCgt of /proc/<pid>/status)."""
    return _signal_mask_has(pid, (b"SigCgt:",), signum)


def pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` is sent to a process and not yet delivered (ShdPnd, SigPnd)."""
    return _signal_mask_has(pid, (b"ShdPnd:", b"SigPnd:"), signum)


def _signal_mask_has(pid: int, fields: tuple[bytes, ...], signum: int) -> bool:
    try:
        with open(f"{root()}/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(fields) and int(line.split()[1], 16) >> (signum - 1) & 1:
                    return True
    except (OSError, ValueError, IndexError):
        pass
    return False
