"""The run's owner lock and endpoint.json, the run-owned launch authority (R-DUR-3).

owner.lock is a filelock held for the coordinator's life (its descriptor is
close-on-exec and never passed to children). endpoint.json names the owner by
(pid, start time, host, boot id); clients trust it only while that identity is
alive, never because an environment variable says so.
"""

from __future__ import annotations

import os
import time

from . import procs
from ..errors import OwnerBusy
from .fsio import read_json, unlink, write_json
from .layout import RunLayout

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1


class OwnerLock:
    """The coordinator's hold on the run. filelock is imported here, by the coordinator
    alone: it costs a CLI call that only reads endpoint.json about 40 ms (asyncio)."""

    def __init__(self, layout: RunLayout) -> None:
        import filelock

        self.layout = layout
        self._timeout = filelock.Timeout
        self._lock = filelock.FileLock(str(layout.owner_lock), timeout=0)

    def acquire(self) -> None:
        try:
            self._lock.acquire()
        except self._timeout:
            raise OwnerBusy(describe_owner(self.layout)) from None

    def release(self) -> None:
        self._lock.release()


def _hostname() -> str:
    """This host's name, as ``socket.gethostname`` gives it (the kernel's nodename)
    without importing socket: every CLI call checks the endpoint's host."""
    return os.uname().nodename


def describe_owner(layout: RunLayout) -> str:
    endpoint = read_json(layout.endpoint)
    if not isinstance(endpoint, dict):
        return f"run {layout.root} is owned by another coordinator (it holds {layout.owner_lock})"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(endpoint.get("since", 0)))
    return (f"run {layout.root} is owned by coordinator pid {endpoint.get('pid')} "
            f"on host {endpoint.get('host')} since {since}")


def write_endpoint(layout: RunLayout, *, since: float) -> dict[str, Any]:
    pid, started, boot = procs.own_identity()
    endpoint = {
        "pid": pid,
        "start_time": started,
        "host": _hostname(),
        "boot_id": boot,
        "protocol_version": PROTOCOL_VERSION,
        "run_dir": str(layout.root),
        "spool": str(layout.spool),
        "since": since,
    }
    write_json(layout.endpoint, endpoint, durable=True)
    return endpoint


def remove_endpoint(layout: RunLayout) -> None:
    unlink(layout.endpoint)


def live_endpoint(layout: RunLayout) -> dict[str, Any] | None:
    """endpoint.json if its coordinator is alive on this boot, else None."""
    endpoint = read_json(layout.endpoint)
    if not isinstance(endpoint, dict):
        return None
    if endpoint.get("host") != _hostname():
        return None
    if procs.is_alive(endpoint.get("pid"), endpoint.get("start_time"), endpoint.get("boot_id")):
        return endpoint
    return None

