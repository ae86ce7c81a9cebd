"""Project pickers (seed 002's level 0): which project a pass serves first."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..queues import Project
from .base import ProjectPicker, register_picker

if TYPE_CHECKING:
    from .context import Pass


class Flat(ProjectPicker):
    """The projects in the order the task file lists them; without a ``projects`` block,
    the one implicit project holding every queue (seed 002's builtin_flat)."""

    def init(self, ctx: Pass, scope: None) -> None:
        self._projects = iter(ctx.policy.project_set())

    def next(self) -> Project | None:
        return next(self._projects, None)


class ProjectFairShare(ProjectPicker):
    """Projects by usage per share, least first (``Pass.project_usage``): slot-seconds, so
    CPU work counts too. Equal ones (no history yet, say) in the order of their
    first-ranked queued jobs. Fixed for the pass, like the peers' ``FairShare``."""

    def init(self, ctx: Pass, scope: None) -> None:
        first: dict[str, int] = {}  # queue -> the rank of its first queued job
        queues = {ctx.by_class[c].name for c, count in ctx.classes.items() if count}
        for job in ctx.queued:  # rank order: stop once every queue with work is seen
            if len(first) == len(queues):
                break
            first.setdefault(ctx.by_class[job.request.work_class].name, job.rank)
        self._projects = iter(sorted(ctx.policy.project_set(), key=lambda p: (
            ctx.project_usage(p) / p.share,
            min((first[q] for q in p.queues if q in first), default=math.inf))))

    def next(self) -> Project | None:
        return next(self._projects, None)


register_picker("project", "flat", Flat)
register_picker("project", "fair_share", ProjectFairShare)
