"""How long each turn of the coordinator's loop keeps it from its selector (issue 31
item 3: no turn over 50 ms at 100,000 finished jobs), for metrics.prom.

A turn runs from the moment the selector returns to the moment the loop waits on it
again: while it runs, no request, exit or signal is looked at. Its wall time and the
loop thread's CPU time in it are kept apart: a turn long in CPU is the coordinator's own
work (to slice, or to move off the loop); one long in wall time alone waited (an fsync,
a directory read on a busy disk, or a machine with no core to spare). Two clock reads
per turn; two histograms, never a list.
"""

from __future__ import annotations

import time

from .core.metrics import TURN_BUCKETS, Histogram


class LoopTurns:
    """The loop's turns, wall and CPU (``began`` as the selector returns, ``ended`` as the
    loop waits on it again)."""

    __slots__ = ("wall", "cpu", "_began")

    def __init__(self) -> None:
        self.wall, self.cpu = Histogram(TURN_BUCKETS), Histogram(TURN_BUCKETS)
        self._began: tuple[float, float] | None = None

    def began(self) -> None:
        self._began = (time.perf_counter(), time.thread_time())

    def ended(self) -> None:
        if self._began is not None:
            wall, cpu = self._began
            self.wall.observe(time.perf_counter() - wall)
            self.cpu.observe(time.thread_time() - cpu)
            self._began = None
