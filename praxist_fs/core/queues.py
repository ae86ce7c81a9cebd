"""Queues: how jobs are ordered and constrained (R-POL-1). Plain values, no decisions.

A queue takes the jobs of its work classes; every work class is in exactly one
queue. Without a ``queues`` block in the task file the work classes are the
queues, and ``default_queues`` expresses today's rules in these terms: ``mature``
has the higher priority, and it leaves the last ``exploration_reserve`` free
slots to queued ``scout``/``ordinary`` work. The loop that applies them is
``Scheduler._pass``; the pickers that order them are in ``pickers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

PREEMPT_MODES = ("suspend", "requeue")
MATURE_PRIORITY = 1  # above scout and ordinary (0), which share a tier: submit order


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """One queue. ``picker`` None defers to the project's, then the global job picker.

    ``leave_slots`` free slots are not taken by this queue while the queues in
    ``leave_slots_for`` have that many jobs queued (the exploration reserve,
    generalized). ``preemptible_queues``/``preempt`` are R-POL-3's settings, which
    ``core/preemption.py`` applies: whose running jobs this queue's may preempt (of a
    lower priority only), and how."""

    name: str
    priority: int = 0
    work_classes: tuple[str, ...] = ()
    picker: str | None = None
    max_running: int | None = None
    leave_slots: int = 0
    leave_slots_for: tuple[str, ...] = ()
    preemptible_queues: tuple[str, ...] = ()
    preempt: str = "suspend"

    def to_dict(self) -> dict[str, Any]:
        """The task file's shape, so policy.json reads like what the user wrote."""
        return {
            "priority": self.priority,
            "work_classes": list(self.work_classes),
            "picker": self.picker,
            "limits": {"max_running": self.max_running},
            "leave_slots": {"slots": self.leave_slots, "for": list(self.leave_slots_for)},
            "preemptible_queues": list(self.preemptible_queues),
            "preempt": self.preempt,
        }

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Queue:
        return cls(name=name, priority=data["priority"],
                   work_classes=tuple(data["work_classes"]), picker=data["picker"],
                   max_running=data["limits"]["max_running"],
                   leave_slots=data["leave_slots"]["slots"],
                   leave_slots_for=tuple(data["leave_slots"]["for"]),
                   preemptible_queues=tuple(data["preemptible_queues"]),
                   preempt=data["preempt"])


@lru_cache(maxsize=64)
def default_queues(exploration_reserve: int) -> tuple[Queue, ...]:
    """The work classes as queues: today's mature-first rule and exploration reserve."""
    return (
        Queue(name="mature", priority=MATURE_PRIORITY, work_classes=("mature",),
              leave_slots=exploration_reserve, leave_slots_for=("scout", "ordinary")),
        Queue(name="scout", work_classes=("scout",)),
        Queue(name="ordinary", work_classes=("ordinary",)),
    )


@lru_cache(maxsize=64)
def queue_of_class(queues: tuple[Queue, ...]) -> dict[str, Queue]:
    """work class -> its queue (config validation guarantees exactly one each)."""
    return {work_class: queue for queue in queues for work_class in queue.work_classes}
