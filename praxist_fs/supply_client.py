"""The operator and peer side of generations and idle supply (R-SUP), as files.

Like ``client``, this does only what a shell script may do:

- ``generation_command``: an operator request written to
  ``resource_scheduler/control/tmp/<request_id>.json``, renamed into
  ``control/``, answered in ``control/replies/<request_id>.json``.
- ``lease_wait``: a peer registers as idle in
  ``gen_<N>/resource_supply/idle/<peer>.json`` and waits for a new granted lease
  in ``gen_<N>/resource_supply/leases/<peer>.json``. A watchdog observer on the
  leases directory is only a doorbell; the file is re-read every second anyway,
  so a missed event delays, never loses, a grant.
- ``lease_decline``: ``gen_<N>/resource_supply/idle/<peer>.decline.json``.

Every file is written atomically (a hidden temp name in the same directory,
fsync, rename). ``praxist_fs.commands.supply`` is their command line
(``generation`` and ``lease``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from . import client
from .adapters.fsio import dumps, read_json, unlink, write_atomic
from .adapters.layout import RunLayout
from .adapters.lock import live_endpoint
from .core.bounds import NAME_EXPECTED, NAME_RE
from .errors import PraxistError

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    import threading
    from typing import Any, Iterable, TextIO

ACTIONS = ("open", "assess", "close")
DECLINE_SUFFIX = ".decline"
RECHECK_SECONDS = 1.0
STATUS_LAG_SECONDS = 6.0  # status.json is rewritten at least every 5 s while serving



class SupplyError(PraxistError, ValueError):
    """Invalid input or a state that makes the command meaningless; the message says which."""


# -- paths ------------------------------------------------------------------------------


def generation_dir(layout: RunLayout, generation: int) -> Path:
    return layout.root / f"gen_{generation}"


def idle_dir(layout: RunLayout, generation: int) -> Path:
    return generation_dir(layout, generation) / "resource_supply" / "idle"


def leases_dir(layout: RunLayout, generation: int) -> Path:
    return generation_dir(layout, generation) / "resource_supply" / "leases"


def idle_file(layout: RunLayout, generation: int, peer: str) -> Path:
    return idle_dir(layout, generation) / f"{peer}.json"


def decline_file(layout: RunLayout, generation: int, peer: str) -> Path:
    return idle_dir(layout, generation) / f"{peer}{DECLINE_SUFFIX}.json"


def lease_file(layout: RunLayout, generation: int, peer: str) -> Path:
    return leases_dir(layout, generation) / f"{peer}.json"


# -- validation -------------------------------------------------------------------------


def _name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.fullmatch(value):
        raise SupplyError(f"{what} {value!r} is not a valid name: expected {NAME_EXPECTED}")
    return value


def _peer(value: Any) -> str:
    if not value:
        raise SupplyError("a peer id is needed (--peer or PRAXIST_PEER_ID)")
    peer = _name("peer", value)
    if peer.endswith(DECLINE_SUFFIX):
        # idle/<peer>.json of such a peer would be the decline file of another peer
        raise SupplyError(f"peer {peer!r} ends with {DECLINE_SUFFIX!r}, which the idle "
                          f"directory reserves for decline files; choose another peer id")
    return peer


def _generation(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise SupplyError(f"generation {value!r} is not valid: expected an integer >= 1")
    return value


def _deadline(value: str) -> str:
    from datetime import datetime  # here: only ``generation open --deadline`` needs it

    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise SupplyError(f"deadline {value!r} is not an ISO-8601 date-time, e.g. "
                          f"2025-06-01T18:00:00+02:00") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise SupplyError(f"deadline {value!r} has no timezone; add one, e.g. "
                          f"{parsed.isoformat()}+00:00 or a trailing Z")
    return value


def _timeout(value: float | None, what: str) -> float | None:
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value != value \
            or value < 0:
        raise SupplyError(f"{what} {value!r} is not valid: expected seconds >= 0")
    return float(value)


def current_generation(layout: RunLayout) -> int:
    """status.json's ``generation.number``; ``SupplyError`` when there is none.

    status.json lags the coordinator's state by up to its rewrite interval, so a
    generation opened just before (``generation open`` answered) may not show yet:
    while a live coordinator serves, the answer is taken only from a status.json
    written after this call began, which holds everything committed before it."""
    asked, deadline = time.time(), time.monotonic() + STATUS_LAG_SECONDS
    doc = client.status_document(layout)
    while _number(doc) is None and (doc or {}).get("updated_at", 0) < asked and \
            time.monotonic() < deadline and live_endpoint(layout) is not None:
        time.sleep(0.05)
        doc = client.status_document(layout)
    if doc is None:
        raise SupplyError(f"no generation given and no status.json under {layout.root}; "
                          f"pass --generation N")
    generation = doc.get("generation")
    if not isinstance(generation, dict) or generation.get("number") is None:
        raise SupplyError(f"no generation given and {layout.status} shows no current "
                          f"generation; pass --generation N or open one with "
                          f"praxist-fs generation open")
    try:
        return _generation(generation["number"])
    except SupplyError:
        raise SupplyError(f"{layout.status} has an invalid generation.number "
                          f"{generation['number']!r}; pass --generation N") from None


def _number(doc: dict[str, Any] | None) -> Any:
    generation = (doc or {}).get("generation")
    return generation.get("number") if isinstance(generation, dict) else None


def _resolve_generation(layout: RunLayout, generation: int | None) -> int:
    return current_generation(layout) if generation is None else _generation(generation)


def _require_run(layout: RunLayout) -> None:
    if not layout.scheduler.is_dir():
        raise SupplyError(f"{layout.root} is not a run directory (no resource_scheduler/); "
                          f"start its coordinator with: praxist-fs serve --run-dir {layout.root}")


# -- operator: generation control -------------------------------------------------------


def generation_request(action: str, number: int, cohort: Iterable[str] = (),
                       deadline: str | None = None, request_id: str | None = None
                       ) -> dict[str, Any]:
    """The validated control request body for ``action`` on generation ``number``."""
    if action not in ACTIONS:
        raise SupplyError(f"action {action!r} is not valid: expected one of "
                          f"{', '.join(ACTIONS)}")
    number = _generation(number)
    if isinstance(cohort, str):
        raise SupplyError("cohort must be a list of peer ids, not one string")
    cohort = list(cohort)
    if action != "open" and (cohort or deadline is not None):
        raise SupplyError(f"--cohort and --deadline apply to 'open' only, not {action!r}")
    seen: set[str] = set()
    for peer in cohort:
        _peer(peer)
        if peer in seen:
            raise SupplyError(f"peer {peer!r} appears twice in the cohort")
        seen.add(peer)
    if request_id is None:
        request_id = client.new_request_id(f"generation-{action}-{number}")
    request: dict[str, Any] = {"request_id": _name("request_id", request_id),
                               "action": f"generation_{action}", "generation": number}
    if cohort:
        request["cohort"] = cohort
    if deadline is not None:
        request["deadline"] = _deadline(deadline)
    return request


def generation_command(run_dir: str | os.PathLike, action: str, number: int,
                       cohort: Iterable[str] = (), deadline: str | None = None,
                       timeout: float = 30.0, *, wait_coordinator: float = 0.0,
                       request_id: str | None = None) -> dict[str, Any]:
    """Send one generation control request and return the coordinator's reply.

    The reply is returned whatever its outcome (``ok`` or ``rejected``). Raises
    ``SupplyError`` for invalid input, ``client.NoCoordinator`` when no live
    coordinator owns the run (after ``wait_coordinator`` seconds), and
    ``TimeoutError`` when no reply came within ``timeout`` seconds; the request
    is then withdrawn if the coordinator has not taken it yet."""
    layout = RunLayout.at(run_dir)
    request = generation_request(action, number, cohort, deadline, request_id)
    timeout = _timeout(timeout, "timeout")
    if timeout is None:
        raise SupplyError("a generation command needs a finite timeout")
    client.wait_for_coordinator(layout, _timeout(wait_coordinator, "wait_coordinator") or 0.0)
    return client.send_control(layout, request, timeout,
                               f"{request['action']} of generation {request['generation']}")


# -- peer: idle registration, leases, declines ------------------------------------------


def _usable_grant(doc: Any, peer: str, generation: int, ignore: str | None
                  ) -> dict[str, Any] | None:
    if not isinstance(doc, dict) or doc.get("state") != "granted":
        return None
    lease_id = doc.get("lease_id")
    if not isinstance(lease_id, str) or not lease_id or lease_id == ignore:
        return None
    if doc.get("peer") != peer or doc.get("generation") != generation:
        return None
    return doc


def _lease_id(doc: Any) -> str | None:
    lease_id = doc.get("lease_id") if isinstance(doc, dict) else None
    return lease_id if isinstance(lease_id, str) else None


class _Doorbell:
    """A watchdog observer on one directory that sets an Event on any change in it.
    ``lease_wait`` makes it only once it has registered and found no lease yet:
    watchdog's import is tens of milliseconds, which the registration (what the
    coordinator waits for) and a wait that ends at once need not pay (R-PERF-3)."""

    def __init__(self, directory: Path, bell: threading.Event) -> None:
        from .adapters.watcher import start_observer

        self.observer = None
        try:
            self.observer = start_observer([directory], bell.set, polling=False)
        except Exception:  # no inotify (limits, exotic FS): the periodic re-check suffices
            self.close()

    def close(self) -> None:
        observer, self.observer = self.observer, None
        if observer is None:
            return
        try:
            observer.stop()
        finally:
            if observer.is_alive():
                observer.join(timeout=5.0)


def register_idle(run_dir: str | os.PathLike, peer: str, generation: int) -> dict[str, Any]:
    """Write ``gen_<N>/resource_supply/idle/<peer>.json`` atomically; return what was written."""
    layout = RunLayout.at(run_dir)
    peer, generation = _peer(peer), _generation(generation)
    directory = idle_dir(layout, generation)
    directory.mkdir(parents=True, exist_ok=True)
    document = {"peer": peer, "generation": generation, "at": time.time()}
    write_atomic(idle_file(layout, generation, peer), dumps(document))
    return document


def lease_wait(run_dir: str | os.PathLike, peer: str, generation: int | None = None,
               timeout: float | None = None, out: TextIO | None = None) -> dict[str, Any]:
    """Register ``peer`` as idle and block until it holds a new granted lease.

    A lease counts when the peer's lease file shows ``state: granted`` with a
    ``lease_id`` other than the one in the file when waiting started, and names
    this peer and generation. The lease is printed to ``out`` (default stdout) as
    JSON and returned. The idle registration is removed on every exit (lease,
    timeout, interrupt): a peer holding a lease, or no longer waiting, is not
    idle. ``TimeoutError`` after ``timeout`` seconds (None: wait for ever)."""
    out = sys.stdout if out is None else out
    layout = RunLayout.at(run_dir)
    peer = _peer(peer)
    timeout = _timeout(timeout, "timeout")
    _require_run(layout)
    generation = _resolve_generation(layout, generation)
    leases = leases_dir(layout, generation)
    leases.mkdir(parents=True, exist_ok=True)
    path = lease_file(layout, generation, peer)
    import threading  # here: a peer's wait alone needs it, not generation or decline

    bell, doorbell = threading.Event(), None
    try:
        ignore = _lease_id(read_json(path))  # a lease already there is not for this wait
        register_idle(layout.root, peer, generation)
        deadline = None if timeout is None else time.monotonic() + timeout
        lease = None
        try:
            while True:
                bell.clear()
                lease = _usable_grant(read_json(path), peer, generation, ignore)
                if lease is not None:
                    break
                wait = RECHECK_SECONDS
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    wait = min(wait, remaining)
                if doorbell is None:  # armed once there is something to wait for (below)
                    doorbell = _Doorbell(leases, bell)
                    continue  # a grant written before it was armed rang nothing: look again
                bell.wait(wait)
        finally:
            unlink(idle_file(layout, generation, peer))
        if lease is None:  # a grant racing the unregistration still counts
            lease = _usable_grant(read_json(path), peer, generation, ignore)
        if lease is None:
            raise TimeoutError(f"no lease for peer {peer} in generation {generation} within "
                               f"{timeout:g}s; the idle registration was withdrawn")
    finally:
        if doorbell is not None:
            doorbell.close()
    print(json.dumps(lease, indent=2), file=out, flush=True)
    return lease


def lease_decline(run_dir: str | os.PathLike, peer: str, lease_id: str | None = None,
                  generation: int | None = None) -> dict[str, Any]:
    """Write ``gen_<N>/resource_supply/idle/<peer>.decline.json``; return what was written.

    Without ``lease_id`` the lease is the one in the peer's lease file, which must
    be in state granted."""
    layout = RunLayout.at(run_dir)
    peer = _peer(peer)
    if lease_id is not None:
        _name("lease id", lease_id)
    _require_run(layout)
    generation = _resolve_generation(layout, generation)
    if lease_id is None:
        path = lease_file(layout, generation, peer)
        doc = read_json(path)
        if not isinstance(doc, dict):
            raise SupplyError(f"peer {peer} has no lease in generation {generation} "
                              f"({path} is missing or unreadable); nothing to decline")
        if doc.get("state") != "granted":
            raise SupplyError(f"the lease {doc.get('lease_id')!r} of peer {peer} in generation "
                              f"{generation} is {doc.get('state')!r}, not granted; "
                              f"nothing to decline")
        lease_id = _name("lease id", _lease_id(doc))
    directory = idle_dir(layout, generation)
    directory.mkdir(parents=True, exist_ok=True)
    document = {"peer": peer, "generation": generation, "lease_id": lease_id}
    write_atomic(decline_file(layout, generation, peer), dumps(document))
    return document


# -- command line -----------------------------------------------------------------------
