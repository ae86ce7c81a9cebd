"""``praxist-fs stop RUN [RUN ...]`` and ``stop --all``: freeze admission, then terminate
the runs' work.

With a live coordinator the stop goes through it (a ``run_stop`` control file:
it freezes, cancels queued work, revokes leases, terminates its attempts and
exits). Without one, the command fences the run itself: it takes the run's
owner lock so no coordinator can start (and no legacy peer-local launch can
begin), writes the STOP sentinel that every later coordinator honours, and
terminates the attempts' process groups and the groups its protected-PID
manifests list. A run that can be neither stopped through its coordinator nor
fenced, or whose manifests list live processes that cannot be verified as its
own, is reported in ``failed_run_ids``. ``--all`` stops every run of the host's
run registry that way, then sweeps once more for escaped descendants, unless a
run could not be fenced. Since it acts on runs nobody named, it first lists them
(on stderr, so stdout stays the JSON result) and goes on only with ``--yes`` or a
``y`` typed at the terminal.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .adapters import manifests, runs
from .adapters.fsio import dumps, read_json, write_atomic
from .adapters.layout import RunLayout
from .adapters.lock import OwnerLock, live_endpoint
from .backends.local import fence
from .errors import OwnerBusy

OWNER_WAIT = 2.0  # a legacy launch holds the owner lock for milliseconds
FAILURES = (OwnerBusy, RuntimeError, TimeoutError, OSError)


def stop_runs(run_dirs: list[str], grace: float = 10.0, timeout: float = 60.0) -> dict[str, Any]:
    stopped, failed, reasons = [], [], {}
    for run_dir in run_dirs:
        layout = RunLayout.at(run_dir)
        try:
            _stop(layout, grace, timeout)
            survivors = fence.terminate_scopes([_scope(layout)], grace=0.5, deadline=timeout)
            if survivors:
                raise RuntimeError(f"processes still alive: {survivors[layout.root]}")
            stopped.append(str(layout.root))
        except FAILURES as exc:
            failed.append(str(layout.root))
            reasons[str(layout.root)] = str(exc)
    return {"stopped_run_ids": stopped, "failed_run_ids": failed, "reasons": reasons}


def stop_all(entries: list[runs.Entry], grace: float = 10.0, timeout: float = 60.0
             ) -> dict[str, Any]:
    """The registry's runs that are ours to stop (those ``stop --all`` listed), each stopped
    as ``stop RUN`` stops it; then one sweep over all of them for escaped descendants, by
    environment identity and, narrowly, a cleared environment working in the run's peer
    workspaces. When any run could not be fenced the sweep is skipped: what it would find
    cannot be told from that run's orphans."""
    stopped: list[RunLayout] = []
    failed, reasons = [], {}
    for layout in [RunLayout.at(e.run_dir) for e in entries if e.to_stop]:
        try:
            _stop(layout, grace, timeout)
            stopped.append(layout)
        except FAILURES as exc:
            failed.append(str(layout.root))
            reasons[str(layout.root)] = str(exc)
    scanned = not failed
    if scanned:
        scopes = [_scope(layout, layout.peer_workspaces) for layout in stopped]
        for run_dir, processes in fence.terminate_scopes(scopes, 0.5, timeout).items():
            failed.append(str(run_dir))
            reasons[str(run_dir)] = f"processes still alive: {processes}"
    skipped = [e for e in entries if e.skipped]
    return {"stopped_run_ids": [str(l.root) for l in stopped if str(l.root) not in failed],
            "failed_run_ids": failed, "skipped_run_ids": [str(e.run_dir) for e in skipped],
            "reasons": {**reasons, **{str(e.run_dir): e.skipped for e in skipped}},
            "escaped_scan": "done" if scanned else "skipped"}


def _stop(layout: RunLayout, grace: float, timeout: float) -> None:
    if not (layout.journal.exists() or layout.protected_pids.is_dir()):
        raise RuntimeError(f"{layout.root} is not a run directory (no journal, no "
                           f"protected-PID manifests)")
    if live_endpoint(layout) is not None:
        _through_coordinator(layout, timeout)
        if manifests.launches(layout):  # legacy launches from before a coordinator took over
            fence.terminate_scopes([_scope(layout)], grace, timeout)
    else:
        _fence(layout, grace, timeout)
    manifests.prune(layout)
    if unverifiable := [l for l in manifests.launches(layout)
                        if l["state"] == manifests.UNVERIFIABLE]:
        raise RuntimeError("not signalled: live processes hold the group of " + ", ".join(
            f"peer {l['peer']}'s launch {l.get('launch_id')} (pgid {l.get('pgid')})"
            for l in unverifiable) + ", but neither its command nor its launcher is the "
            "recorded process any more; check them by hand")


def _through_coordinator(layout: RunLayout, timeout: float) -> None:
    request_id = f"stop-{time.time_ns()}"
    (layout.control / "tmp").mkdir(parents=True, exist_ok=True)
    write_atomic(layout.control / "tmp" / f"{request_id}.json",
                 dumps({"request_id": request_id, "action": "run_stop"}))
    (layout.control / "tmp" / f"{request_id}.json").rename(layout.control / f"{request_id}.json")
    deadline = time.monotonic() + timeout
    reply_path = layout.control_replies / f"{request_id}.json"
    while not isinstance(reply := read_json(reply_path), dict):
        if time.monotonic() > deadline or live_endpoint(layout) is None:
            raise TimeoutError("the coordinator did not confirm the freeze")
        time.sleep(0.05)
    if reply["outcome"] != "ok":
        raise RuntimeError(f"the coordinator refused: {reply['reason']}")
    while live_endpoint(layout) is not None:  # it exits once its work is gone
        if time.monotonic() > deadline:
            raise TimeoutError("the coordinator froze admission but did not finish stopping")
        time.sleep(0.05)


def _fence(layout: RunLayout, grace: float, timeout: float) -> None:
    """No live coordinator: hold the owner lock while stopping, so none can start."""
    owner = OwnerLock(layout)
    wait_end = time.monotonic() + OWNER_WAIT
    while True:
        try:
            owner.acquire()
            break
        except OwnerBusy:  # someone holds the run; after a short wait we leave it untouched
            if time.monotonic() >= wait_end or live_endpoint(layout) is not None:
                raise
            time.sleep(0.05)
    try:
        write_atomic(layout.stop_sentinel, dumps({"stopped_at": time.time()}), durable=True)
        survivors = fence.terminate_scopes([_scope(layout)], grace, timeout)
        if survivors:
            raise RuntimeError(f"processes still alive after KILL: {survivors[layout.root]}")
    finally:
        owner.release()


def _scope(layout: RunLayout, workspaces: Path | None = None) -> fence.Scope:
    """The run's group leaders: the shims of every attempt that may still run and the
    legacy launches its manifests can still verify."""
    leaders = [manifests.leader(l) for l in manifests.launches(layout)
               if l["state"] in (manifests.RUNNING, manifests.DRAINING)]
    return fence.Scope(layout.root, (*fence.unfinished(layout.attempts), *(
        s for s in leaders if isinstance(s[0], int) and isinstance(s[1], int))), workspaces)
