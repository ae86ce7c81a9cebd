"""Preempt policies (seed 002's level 3): the order victims are taken in for one job."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import Job
from .base import PreemptPolicy, VictimScope, register_picker

if TYPE_CHECKING:
    from .context import Pass


class LowestPriorityFirst(PreemptPolicy):
    """The lowest queue priority first, then the youngest attempt (the latest start)."""

    by_victim_alone = True  # a key of each job's own, and no two jobs share one

    def init(self, ctx: Pass, scope: VictimScope) -> None:
        self._victims = iter(sorted(scope.candidates, key=lambda j: (
            ctx.by_class[j.request.work_class].priority, -j.current.started_at, -j.order)))

    def next(self) -> Job | None:
        return next(self._victims, None)


register_picker("preempt", "lowest_priority_first", LowestPriorityFirst)
