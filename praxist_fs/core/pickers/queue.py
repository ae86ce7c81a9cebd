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
    (config order). With ``shortest_first_priority_seconds``, when every one of them is
    ordered by shortest expected first and none preempts, they form one tier, and
    that picker weighs queue priority as a head start (``ShortestExpectedFirst``):
    strict tiers run a higher queue's longest, widest jobs before a lower queue's
    shortest, and under a backlog the lower queues' tail pays for it (issue 32)."""

    def init(self, ctx: Pass, scope: Project) -> None:
        queues = sorted((q for q in ctx.queues if q.name in scope.queues),
                        key=lambda q: -q.priority)
        if _one_tier(ctx, scope, queues):
            self._tiers = iter((tuple(queues),))
            return
        self._tiers = (tuple(tier) for _, tier in groupby(queues, key=lambda q: q.priority))

    def next(self) -> tuple[Queue, ...] | None:
        return next(self._tiers, None)


def _one_tier(ctx: Pass, project: Project, queues: list[Queue]) -> bool:
    """Whether queue priority is a head start, not a tier (``StrictPriority``)."""
    policy = ctx.policy
    return policy.shortest_first_priority_seconds is not None and all(
        (q.picker or project.picker or policy.job_picker) == "shortest_expected_first"
        and not q.preemptible_queues for q in queues)


register_picker("queue", "strict_priority", StrictPriority)
