"""The inboxes peers write to: the spool (requests), control/ (job control, leases, run
stop) and each generation's results/ and idle/ (idle registrations, declines).

Readers only: each turns what it finds into events and returns them; the loop alone
feeds them to the core (a file is consumed or rejected later, by the effect its event
yields). A peer's bad file becomes an event that says why, or a warning: never a crash.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import replace

from .adapters import spool
from .adapters.layout import RunLayout
from .adapters.vault import Vault
from .core.events import ControlSeen, DeclineSeen, Event, IdleSeen, RequestSeen, ResultSeen
from .core.supply import Generation
from .core.request import parse_control, parse_decline, parse_result, request_id_from_filename
from .errors import BadRequest

log = logging.getLogger("praxist_fs")


class Inboxes:
    def __init__(self, layout: RunLayout, vault: Vault,
                 quota: tuple[int, int] | None = None) -> None:
        self.layout = layout
        self.vault = vault
        self.quota = quota  # (files, bytes) of one uid in the spool (core/tenancy.py)
        # generation -> result files already read: a result counts once, and a late one
        # stays in results/ (quarantined by the core) without being read every scan
        self._results_seen: dict[int, set[str]] = {}
        self.grace_left: float | None = None  # the last scan's spool.grace_left

    def requests(self) -> tuple[list[RequestSeen], bool]:
        """One batch of requests, in arrival order, and whether the batch was full (more
        files are waiting). Files left for their grace set ``grace_left``."""
        incoming = self.layout.incoming
        found, more = spool.pending(incoming, quota=self.quota)
        events, left = [], []
        dir_fd = os.open(incoming, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for waiting in found:
                seen = spool.read_request(incoming, dir_fd, waiting.name, time.time(),
                                          self.vault.digest, (waiting.position, waiting.bytes))
                if seen is None:
                    left.append(waiting.name)  # gone, or within its grace
                else:
                    events.append(self._redacted(seen))
        finally:
            os.close(dir_fd)
        self.grace_left = spool.grace_left(incoming, left, time.time())
        return events, more

    def _redacted(self, seen: RequestSeen) -> RequestSeen:
        """Credential-shaped env values never reach the core, the journal or any view. A
        request with none is the fact as read: no copy of it made per request."""
        if seen.request is None or (redacted := self.vault.redact(seen.request)) is seen.request:
            return seen
        return replace(seen, request=redacted)

    def controls(self) -> list[ControlSeen]:
        """Every control file, parsed, or with the field it got wrong and why."""
        events = []
        names = [waiting.name for waiting in spool.pending(self.layout.control)[0]]
        for name, data, error in spool.read_inbox(self.layout.control, names=names):
            digest = hashlib.sha256(data or str(error).encode()).hexdigest()
            request_id = request_id_from_filename(name)
            if error is None:
                try:
                    control = parse_control(name, data)
                    events.append(ControlSeen(at=time.time(), name=name, digest=digest,
                                              request_id=control.request_id, control=control,
                                              uid=data.uid))
                    continue
                except BadRequest as exc:
                    error = exc
            events.append(ControlSeen(at=time.time(), name=name, digest=digest,
                                      request_id=request_id, error_field=error.field,
                                      error_problem=error.problem))
        return events

    def generations(self, generations: dict[int, Generation]) -> list[Event]:
        """Results (every generation, so late ones are quarantined), idle peers and
        declines (generations still accepting). A result returned here counts as seen:
        not to be read while its event cannot be journaled (``forget_results``)."""
        events: list[Event] = []
        for number, gen in generations.items():
            seen = self._results_seen.setdefault(number, set())
            for name, data, error in spool.read_inbox(self.layout.results(number), skip=seen):
                try:
                    if error is not None:
                        raise error
                    result_id, peer, mature = parse_result(name, data)
                except BadRequest as exc:
                    log.warning("gen_%d/results/%s ignored: %s", number, name, exc)
                else:
                    events.append(ResultSeen(at=time.time(), generation=number,
                                             result_id=result_id, peer=peer, mature=mature))
                seen.add(name)
            if not gen.accepting:
                continue
            idle, declines = [], []
            for name, data, error in spool.read_inbox(self.layout.idle(number)):
                if name.endswith(".decline.json"):
                    try:
                        if error is not None:
                            raise error
                        peer, lease_id = parse_decline(name, data)
                        declines.append(DeclineSeen(at=time.time(), generation=number,
                                                    peer=peer, lease_id=lease_id, name=name))
                    except BadRequest as exc:
                        log.warning("gen_%d decline %s ignored: %s", number, name, exc)
                elif (peer := request_id_from_filename(name)) is not None:
                    idle.append(peer)
            events += [IdleSeen(at=time.time(), generation=number, peers=tuple(sorted(idle))),
                       *declines]
        return events

    def forget_results(self) -> None:
        """The results read since the last commit were never journaled (a batch rolled
        back): read them all again."""
        self._results_seen.clear()
