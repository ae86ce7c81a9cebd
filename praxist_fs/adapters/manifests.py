"""Per-peer protected-PID manifests of legacy peer-local launches (R-DUR-3, R-RUN-3).

A task without ``mode: central`` has no coordinator: ``praxist-fs launch`` runs
the command itself, in a session and process group of its own, and records it in
``resource_scheduler/protected_pids/<peer>.json`` so that ``praxist-fs stop``
and ``praxist-fs status`` find it. The file is changed under ``<peer>.lock``
and replaced atomically and durably; the launcher removes its entry once the
command's whole tree is gone. An entry names the group leader and its launcher
by (pid, start time, boot id): a group is ours while one of the two is still
the recorded process, and is never guessed at otherwise.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from . import procs
from .fsio import read_json, unlink, write_json
from .layout import RunLayout

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:  # status reads the entries: locks and fencing are the launcher's
    from typing import Any

    from .fence import Shim

LOCK_TIMEOUT = 10.0
RUNNING = "running"            # the leader is the recorded process
DRAINING = "draining"          # the leader has ended; its launcher waits for the rest of the tree
UNVERIFIABLE = "unverifiable"  # live processes hold the group id, leader and launcher are gone
GONE = "gone"                  # nothing of it is left: a stale entry


def add(layout: RunLayout, peer: str, entry: dict[str, Any]) -> None:
    layout.create_protected_pids()
    with _locked(layout, peer):
        kept = _entries(layout, peer)
        write_json(_path(layout, peer), {"peer": peer, "entries": [*kept, entry]}, durable=True)


def remove(layout: RunLayout, peer: str, launch_ids: set[str]) -> None:
    with _locked(layout, peer):
        kept = [e for e in _entries(layout, peer) if e.get("launch_id") not in launch_ids]
        if kept:
            write_json(_path(layout, peer), {"peer": peer, "entries": kept}, durable=True)
        else:
            unlink(_path(layout, peer))


def launches(layout: RunLayout) -> list[dict[str, Any]]:
    """Every recorded launch of every peer, each with its ``peer`` and current ``state``."""
    found = []
    for path in sorted(layout.protected_pids.glob("*.json")):
        peer = path.stem
        found += [{**entry, "peer": peer, "state": state(entry)}
                  for entry in _entries(layout, peer)]
    return found


def leader(entry: dict[str, Any]) -> Shim:
    return entry.get("pid"), entry.get("start_time"), entry.get("boot_id")


def state(entry: dict[str, Any]) -> str:
    pid, started, boot = leader(entry)
    if boot != procs.boot_id() or type(pid) is not int or type(started) is not int:
        return GONE
    if procs.is_alive(pid, started, boot):
        return RUNNING
    launcher = entry.get("launcher") if isinstance(entry.get("launcher"), dict) else {}
    if procs.is_alive(launcher.get("pid"), launcher.get("start_time"), boot):
        return DRAINING
    from . import fence

    return UNVERIFIABLE if fence.holders(((pid, started, boot),)) else GONE


def prune(layout: RunLayout) -> None:
    """Drop the entries of launches that left nothing alive (a launcher killed by -9)."""
    for launch in launches(layout):
        if launch["state"] == GONE:
            remove(layout, launch["peer"], {launch.get("launch_id")})


def age(entry: dict[str, Any]) -> float | None:
    """Seconds since the launch, to 0.1 s; None for an entry without a start."""
    started = entry.get("started_at")
    return round(time.time() - started, 1) if isinstance(started, (int, float)) else None


def _path(layout: RunLayout, peer: str) -> Path:
    return layout.protected_pids / f"{peer}.json"


def _entries(layout: RunLayout, peer: str) -> list[dict[str, Any]]:
    doc = read_json(_path(layout, peer))
    entries = doc.get("entries") if isinstance(doc, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


@contextlib.contextmanager
def _locked(layout: RunLayout, peer: str) -> Iterator[None]:
    import filelock

    with filelock.FileLock(str(layout.protected_pids / f"{peer}.lock"), timeout=LOCK_TIMEOUT):
        yield
