"""Queue pickers (seed 002's level 1): the tiers of a project's queues, in turn."""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING

from ..queues import Project, Queue
from .base import QueuePicker, register_picker

if TYPE_CHECKING:
    from .context import Pass


class StrictPriority(QueuePicker):
    """The project's queues by priority, highest first; equal priorities form one tier
    (config order)."""

    def init(self, ctx: Pass, scope: Project) -> None:
        queues = sorted((q for q in ctx.queues if q.name in scope.queues),
                        key=lambda q: -q.priority)
        self._tiers = (tuple(tier) for _, tier in groupby(queues, key=lambda q: q.priority))

    def next(self) -> tuple[Queue, ...] | None:
        return next(self._tiers, None)


register_picker("queue", "strict_priority", StrictPriority)
