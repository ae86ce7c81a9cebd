"""``praxist-fs stop RUN [RUN ...]``: freeze admission, then terminate the run's work.

With a live coordinator the stop goes through it (a ``run_stop`` control file:
it freezes, cancels queued work, revokes leases, terminates its attempts and
exits). Without one, the command fences the run itself: it takes the run's
owner lock so no coordinator can start, writes the STOP sentinel that every
later coordinator honours, and terminates the attempts' process groups. A run
that can be neither stopped through its coordinator nor fenced is left alone
and reported in ``failed_run_ids``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .adapters import fence
from .adapters.fsio import dumps, read_json, write_atomic
from .adapters.layout import RunLayout
from .adapters.lock import OwnerLock, live_endpoint
from .errors import OwnerBusy


def stop_runs(run_dirs: list[str], grace: float = 10.0, timeout: float = 60.0) -> dict[str, Any]:
    stopped, failed, reasons = [], [], {}
    for run_dir in run_dirs:
        layout = RunLayout.at(run_dir)
        try:
            if not layout.journal.exists():
                raise RuntimeError(f"{layout.root} is not a run directory (no journal)")
            if live_endpoint(layout) is not None:
                _through_coordinator(layout, timeout)
            else:
                _fence(layout, grace, timeout)
            survivors = fence.terminate(_shims(layout), layout.root, grace=0.5, deadline=timeout)
            if survivors:
                raise RuntimeError(f"processes still alive: {survivors}")
            stopped.append(str(layout.root))
        except (OwnerBusy, RuntimeError, TimeoutError, OSError) as exc:
            failed.append(str(layout.root))
            reasons[str(layout.root)] = str(exc)
    return {"stopped_run_ids": stopped, "failed_run_ids": failed, "reasons": reasons}


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
    owner.acquire()  # OwnerBusy: someone holds the run; we leave it untouched
    try:
        write_atomic(layout.stop_sentinel, dumps({"stopped_at": time.time()}), durable=True)
        survivors = fence.terminate(_shims(layout), layout.root, grace=grace, deadline=timeout)
        if survivors:
            raise RuntimeError(f"processes still alive after KILL: {survivors}")
    finally:
        owner.release()


def _shims(layout: RunLayout) -> list[fence.Shim]:
    """The shims of every attempt that may still run, from their READY files."""
    shims = []
    for ready in Path(layout.attempts).glob("*/*/READY"):
        doc = read_json(ready)
        if isinstance(doc, dict) and not (ready.parent / "exit.json").exists():
            shims.append((doc.get("pid"), doc.get("start_time"), doc.get("boot_id")))
    return [s for s in shims if isinstance(s[0], int) and isinstance(s[1], int)]


def cmd_stop(args: Any) -> int:
    result = stop_runs(args.runs, grace=args.grace, timeout=args.timeout)
    print(json.dumps(result, indent=2))
    return 1 if result["failed_run_ids"] else 0


def add_stop_parser(sub: Any) -> None:
    stop = sub.add_parser("stop", help="freeze a run and terminate its work (fenced)")
    stop.add_argument("runs", nargs="+", metavar="RUN", help="run directories")
    stop.add_argument("--grace", type=float, default=10.0,
                      help="seconds between TERM and KILL (default 10)")
    stop.add_argument("--timeout", type=float, default=60.0)
    stop.set_defaults(func=cmd_stop)
