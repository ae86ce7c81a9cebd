"""``praxist-fs stop RUN [RUN ...]`` and ``stop --all``: freeze admission, then terminate
the runs' work.

With a live coordinator the stop goes through it (a ``run_stop`` control file:
it freezes, cancels queued work, revokes leases, terminates its attempts and
exits). Without one, the command fences the run itself: it takes the run's
owner lock so no coordinator can start (and no legacy peer-local launch can
begin), writes the STOP sentinel that every later coordinator honours, and
terminates the attempts' process groups and the groups its protected-PID
manifests list; a run a Slurm-backend coordinator served also gets ABORT for every
attempt not yet started and scancel for every Slurm job of the run
(backends/slurm/stop.py), recorded in the STOP sentinel. A run that can be neither stopped through its coordinator nor
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

from .adapters import fence, manifests
from .adapters.fsio import dumps, read_json, write_atomic
from .adapters.layout import RunLayout
from .adapters.lock import OwnerLock, live_endpoint
from .errors import OwnerBusy

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a stop's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any

    from .adapters import runs

OWNER_WAIT = 2.0  # a legacy launch holds the owner lock for milliseconds
FAILURES = (OwnerBusy, RuntimeError, TimeoutError, OSError)


def stop_runs(run_dirs: list[str], grace: float = 10.0, timeout: float = 60.0) -> dict[str, Any]:
    stopped, failed, reasons, slurm = [], [], {}, {}
    for run_dir in run_dirs:
        layout = RunLayout.at(run_dir)
        try:
            if (ended := _stop(layout, grace, timeout)) is not None:
                slurm[str(layout.root)] = ended
            survivors = fence.terminate_scopes([_scope(layout)], grace=0.5, deadline=timeout)
            if survivors:
                raise RuntimeError(f"processes still alive: {survivors[layout.root]}")
            stopped.append(str(layout.root))
        except FAILURES as exc:
            failed.append(str(layout.root))
            reasons[str(layout.root)] = str(exc)
    return {"stopped_run_ids": stopped, "failed_run_ids": failed, "reasons": reasons,
            **({"slurm": slurm} if slurm else {})}


def stop_all(entries: list[runs.Entry], grace: float = 10.0, timeout: float = 60.0
             ) -> dict[str, Any]:
    """The registry's runs that are ours to stop (those ``stop --all`` listed), each stopped
    as ``stop RUN`` stops it; then one sweep over all of them for escaped descendants, by
    environment identity and, narrowly, a cleared environment working in the run's peer
    workspaces. When any run could not be fenced the sweep is skipped: what it would find
    cannot be told from that run's orphans."""
    stopped: list[RunLayout] = []
    failed, reasons, slurm = [], {}, {}
    for layout in [RunLayout.at(e.run_dir) for e in entries if e.to_stop]:
        try:
            if (ended := _stop(layout, grace, timeout)) is not None:
                slurm[str(layout.root)] = ended
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
            "escaped_scan": "done" if scanned else "skipped", **({"slurm": slurm} if slurm else {})}


def _stop(layout: RunLayout, grace: float, timeout: float) -> dict[str, Any] | None:
    """Stop one run; what a fence did in Slurm (``end_run_in_slurm``), if anything."""
    if not (layout.journal.exists() or layout.protected_pids.is_dir()):
        raise RuntimeError(f"{layout.root} is not a run directory (no journal, no "
                           f"protected-PID manifests)")
    slurm = None
    if live_endpoint(layout) is not None:
        _through_coordinator(layout, timeout)
        if manifests.launches(layout):  # legacy launches from before a coordinator took over
            fence.terminate_scopes([_scope(layout)], grace, timeout)
    else:
        slurm = _fence(layout, grace, timeout)
    manifests.prune(layout)
    if unverifiable := [l for l in manifests.launches(layout)
                        if l["state"] == manifests.UNVERIFIABLE]:
        raise RuntimeError("not signalled: live processes hold the group of " + ", ".join(
            f"peer {l['peer']}'s launch {l.get('launch_id')} (pgid {l.get('pgid')})"
            for l in unverifiable) + ", but neither its command nor its launcher is the "
            "recorded process any more; check them by hand")
    return slurm


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
    if reply["outcome"] != "ok":  # ControlOutcome.OK: core.states is not a stop's to load
        raise RuntimeError(f"the coordinator refused: {reply['reason']}")
    while live_endpoint(layout) is not None:  # it exits once its work is gone
        if time.monotonic() > deadline:
            raise TimeoutError("the coordinator froze admission but did not finish stopping")
        time.sleep(0.05)


def _fence(layout: RunLayout, grace: float, timeout: float) -> dict[str, Any] | None:
    """No live coordinator: hold the owner lock while stopping, so none can start. The
    run's Slurm jobs are ended first (their commands may run on this host too: a test
    cluster's nodes), then its processes here; what was done in Slurm is returned and
    written into STOP."""
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
        stopped = {"stopped_at": time.time()}
        write_atomic(layout.stop_sentinel, dumps(stopped), durable=True)
        # Here, not at the top: a stop through a live coordinator never needs it.
        from .backends.slurm.stop import end_run_in_slurm

        try:
            slurm, unfinished = end_run_in_slurm(layout, timeout), None
        except RuntimeError as exc:  # the processes here are terminated all the same
            slurm, unfinished = None, exc
        if slurm is not None:
            write_atomic(layout.stop_sentinel, dumps({**stopped, "slurm": slurm}),
                         durable=True)
        survivors = fence.terminate_scopes([_scope(layout)], grace, timeout)
        if survivors:
            raise RuntimeError(f"processes still alive after KILL: {survivors[layout.root]}")
        if unfinished is not None:
            raise unfinished
        return slurm
    finally:
        owner.release()


def fenced_reason(layout: RunLayout) -> str:
    """How a coordinator that finds STOP journals the stop: by praxist-fs stop, and what
    that stop did in Slurm, if anything."""
    sentinel = read_json(layout.stop_sentinel)
    slurm = sentinel.get("slurm") if isinstance(sentinel, dict) else None
    if not isinstance(slurm, dict):
        return "stopped by praxist-fs stop"
    aborted, cancelled = slurm.get("aborted") or [], slurm.get("cancelled") or {}
    return (f"stopped by praxist-fs stop without a coordinator: ABORT for {len(aborted)} "
            f"attempt(s) not started, scancel of {len(cancelled)} Slurm job(s)"
            + (f" ({_listed(sorted(cancelled, key=lambda i: (len(i), i)))})"
               if cancelled else ""))


def _listed(ids: list[str], shown: int = 10) -> str:
    return ", ".join(ids[:shown]) + (f" and {len(ids) - shown} more" if len(ids) > shown
                                     else "")


def _scope(layout: RunLayout, workspaces: Path | None = None) -> fence.Scope:
    """The run's group leaders: the shims of every attempt that may still run and the
    legacy launches its manifests can still verify."""
    leaders = [manifests.leader(l) for l in manifests.launches(layout)
               if l["state"] in (manifests.RUNNING, manifests.DRAINING)]
    return fence.Scope(layout.root, (*fence.unfinished(layout.attempts), *(
        s for s in leaders if isinstance(s[0], int) and isinstance(s[1], int))), workspaces)
