"""Fair share's ledger: decayed usage by peer (or, for projects, by queue)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..model import Job
from ..queues import Project, Queue


@dataclass(slots=True)
class Usage:
    """Fair share's ledger: GPU-seconds per peer, halving every half-life. The projects'
    is the same, of slot-seconds per queue (``Pass.project_usage``); ``peers`` then
    holds queue names.

    An attempt's GPUs x wall seconds are charged when it ends (``AttemptDesk.settle``,
    so replay rebuilds the ledger from the journal) and decay from then on; running
    attempts count their GPU-seconds so far, undecayed (``Pass.usages``)."""

    peers: dict[str, tuple[float, float]] = field(default_factory=dict)  # (value, as of)

    def charge(self, peer: str, gpu_seconds: float, at: float, half_life: float) -> None:
        value, as_of = self.peers.get(peer, (0.0, at))
        if at >= as_of:
            self.peers[peer] = (_decay(value, at - as_of, half_life) + gpu_seconds, at)
        else:  # an end seen late: decay the charge, not the ledger
            self.peers[peer] = (value + _decay(gpu_seconds, as_of - at, half_life), as_of)

    def of(self, peer: str, at: float, half_life: float) -> float:
        return self.of_each((peer,), at, half_life)[peer]

    def of_each(self, peers: Iterable[str], at: float, half_life: float) -> dict[str, float]:
        """``of`` of each of ``peers``, in one loop: a pass reads every queued peer's."""
        charged, found = self.peers, {}
        for peer in peers:
            entry = charged.get(peer)
            if entry is None:  # never charged: nothing to decay
                found[peer] = 0.0
            else:
                found[peer] = _decay(entry[0], max(0.0, at - entry[1]), half_life)
        return found

    def to_dict(self) -> dict[str, list[float]]:
        return {peer: list(entry) for peer, entry in sorted(self.peers.items())}


def slot_usage(project: Project, ledger: Usage, running: list[Job],
               by_class: dict[str, Queue], at: float, half_life: float) -> float:
    """Decayed slot-seconds of the ended attempts of ``project``'s queues (``ledger``),
    plus the active seconds so far of its ``running`` ones."""
    return sum(ledger.of(name, at, half_life) for name in project.queues) + \
        sum(job.current.active_seconds(at) for job in running
            if by_class[job.request.work_class].name in project.queues)


def _decay(value: float, seconds: float, half_life: float) -> float:
    return value * math.pow(2.0, -seconds / half_life)
