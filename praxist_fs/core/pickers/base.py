"""The picker contract (seed 002) and the registry pickers are found in by name.

Every level is a picker: ``init(ctx, scope)`` once per pass, ``next()`` until it
returns None, ``fini()`` once. ``PICKERS`` holds them by kind and name;
``register_picker`` adds one (the builtins register themselves in their family's
module; ``praxist_fs.config`` registers those installed packages publish).
``each`` and ``tier_pickers`` drive pickers the way the scheduling pass does.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from ..model import Job
from ..queues import Project, Queue

if TYPE_CHECKING:
    from .context import Pass

KINDS = ("project", "queue", "job", "preempt")
RANK = attrgetter("rank")


@dataclass(frozen=True, slots=True)
class JobScope:
    """What a job picker orders: the queued jobs of ``queues`` in ``project``, in rank order
    (their own priority, highest first, then oldest first: ``Job.rank``)."""

    project: Project
    queues: tuple[Queue, ...]
    jobs: list[Job]


@dataclass(frozen=True, slots=True)
class VictimScope:
    """What a preempt policy orders: the running jobs that ``job`` (of ``queue``) may
    preempt, in no particular order. A policy may leave some out, judging by the job's
    profile and priority and its queue only: the pass reuses a verdict that none would
    make room for jobs alike in these (R-POL-4)."""

    job: Job
    queue: Queue
    candidates: tuple[Job, ...]


class Picker:
    """Seed 002's picker contract. ``init`` may keep ``ctx``; ``next`` returns None when done."""

    kind: ClassVar[str]

    def init(self, ctx: Pass, scope: Any) -> None:
        raise NotImplementedError

    def next(self) -> Any:
        raise NotImplementedError

    def fini(self) -> None:
        """Release what ``init`` took; called even when the pass stops early."""


class ProjectPicker(Picker):
    kind = "project"


class QueuePicker(Picker):
    kind = "queue"


class PreemptPolicy(Picker):
    """Orders the candidate victims of one job (``VictimScope``). ``by_victim_alone``: the
    order of any candidates is the order of all of them less the others (it reads no
    more than each candidate, not the job or which others are there), so a pass may
    order every running job once and take each blocked job's victims from that."""

    kind = "preempt"
    by_victim_alone: ClassVar[bool] = False


class JobPicker(Picker):
    """Yields each job of its scope at most once (the loop counts what is left to visit:
    ``Openings``), in the order it chooses."""

    kind = "job"

    def blocked(self, job: Job) -> None:
        """``job``, picked last, could not be placed now. Only the first job of each
        demand is reported: later ones are held from the pass's cache (R-POL-4)."""


PICKERS: dict[str, dict[str, type[Picker]]] = {kind: {} for kind in KINDS}


def register_picker(kind: str, name: str, cls: type[Picker]) -> None:
    if kind not in PICKERS:
        raise ValueError(f"picker kind {kind!r}: expected one of {', '.join(KINDS)}")
    if not (isinstance(cls, type) and issubclass(cls, Picker) and cls.kind == kind):
        raise TypeError(f"{kind} picker {name!r}: {cls!r} is not a {kind} Picker subclass")
    PICKERS[kind][name] = cls


def picker_class(kind: str, name: str) -> type[Picker]:
    try:
        return PICKERS[kind][name]
    except KeyError:
        raise LookupError(f"no {kind} picker {name!r} (known: "
                          f"{', '.join(sorted(PICKERS[kind]))})") from None


def each(ctx: Pass, kind: str, name: str, scope: Any) -> Iterator[Any]:
    """Run one project or queue picker through init / next ... / fini."""
    picker = picker_class(kind, name)()
    picker.init(ctx, scope)
    try:
        while (item := picker.next()) is not None:
            yield item
    finally:
        picker.fini()


@contextmanager
def tier_pickers(ctx: Pass, project: Project, tier: tuple[Queue, ...]
                 ) -> Iterator[Callable[[], Job | None]]:
    """``next_job()`` over one tier, with its job pickers initialized (and finished on
    exit). Queues resolving to the same job picker share one; several pickers are merged
    by the rank of their next jobs. ``ctx.picker_of`` maps each work class to
    its picker, for ``JobPicker.blocked``."""
    groups: dict[str, list[Queue]] = {}
    for queue in tier:
        groups.setdefault(queue.picker or project.picker or ctx.policy.job_picker,
                          []).append(queue)
    pickers: list[JobPicker] = []
    try:
        for name, queues in groups.items():
            picker = picker_class("job", name)()
            pickers.append(picker)
            picker.init(ctx, JobScope(project, tuple(queues), ctx.jobs(queues)))
            ctx.picker_of.update((c, picker) for queue in queues for c in queue.work_classes)
        if len(pickers) == 1:
            yield pickers[0].next
        else:
            merged = heapq.merge(*map(_stream, pickers), key=RANK)
            yield partial(next, merged, None)
    finally:
        for picker in pickers:
            picker.fini()


def _stream(picker: JobPicker) -> Iterator[Job]:
    while (job := picker.next()) is not None:
        yield job


# -- builtins --------------------------------------------------------------------------
