"""Queues and projects: how jobs are ordered and constrained, and who owns them
(R-POL-1, seed 002). Plain values, no decisions.

A queue takes the jobs of its work classes; every work class is in exactly one
queue. Without a ``queues`` block in the task file the work classes are the
queues, and ``default_queues`` expresses today's rules in these terms: ``mature``
has the higher priority, and it leaves the last ``exploration_reserve`` free
slots to queued ``scout``/``ordinary`` work. A project owns queues; every queue is
in exactly one project, and without a ``projects`` block there is one, ``default``,
owning them all. The loop that applies them is ``PassDesk._pass``; the pickers
that order them are in ``pickers``.

A queue's time ``windows`` are read against the pass's time (``at``, from its
event) shifted by a fixed UTC offset: the core reads no clock and no time zone
database, so a zone's daylight saving time is not followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .states import PreemptMode

PREEMPT_MODES = tuple(PreemptMode)
MATURE_PRIORITY = 1  # above scout and ordinary (0), which share a tier: submit order
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_MINUTES = 24 * 60
_EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (mon = 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Minutes ``start``..``end`` of the ``days`` it starts on (mon = 0); an ``end`` at or
    before ``start`` runs past midnight into the next day. All day: 0..1440."""

    days: tuple[int, ...] = tuple(range(7))
    start: int = 0
    end: int = DAY_MINUTES

    def contains(self, day: int, minute: int) -> bool:
        if self.start < self.end:
            return day in self.days and self.start <= minute < self.end
        return (day in self.days and minute >= self.start) or \
            ((day - 1) % 7 in self.days and minute < self.end)

    def to_dict(self) -> dict[str, Any]:
        return {"days": [DAYS[d] for d in self.days],
                "hours": f"{_clock(self.start)}-{_clock(self.end)}"}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Window:
        start, end = (_minutes(t) for t in data["hours"].split("-"))
        return cls(days=tuple(DAYS.index(d) for d in data["days"]), start=start, end=end)


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _minutes(clock: str) -> int:
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def window_hold(queue: Queue, at: float, utc_offset_minutes: int) -> str | None:
    """Why ``queue`` starts nothing at ``at`` (outside all of its windows), or None; the
    reason says when it opens next."""
    if not queue.windows:
        return None
    local = at + utc_offset_minutes * 60
    days, second = divmod(local, 86400)
    day, minute = int(days + _EPOCH_WEEKDAY) % 7, int(second // 60)
    if any(w.contains(day, minute) for w in queue.windows):
        return None
    midnight = local - second
    opens = min(midnight + (ahead * DAY_MINUTES + w.start) * 60
                for w in queue.windows for ahead in range(8)
                if (day + ahead) % 7 in w.days and
                midnight + (ahead * DAY_MINUTES + w.start) * 60 > local)
    wait = int(opens - local)
    day_name = DAYS[int(opens // 86400 + _EPOCH_WEEKDAY) % 7]
    sign, offset = "+-"[utc_offset_minutes < 0], abs(utc_offset_minutes)
    return (f"queue {queue.name}: outside its time windows; opens {day_name} "
            f"{_clock(int(opens % 86400) // 60)} (UTC{sign}{_clock(offset)}), "
            f"in {wait // 3600}h{wait % 3600 // 60:02d}m")


@dataclass(frozen=True, slots=True, kw_only=True)
class Queue:
    """One queue. ``picker`` None defers to the project's, then the global job picker.

    ``leave_slots`` free slots are not taken by this queue while the queues in
    ``leave_slots_for`` have that many jobs queued (the exploration reserve,
    generalized). ``preemptible_queues``/``preempt`` are R-POL-3's settings, which
    ``core/preemption.py`` applies: whose running jobs this queue's may preempt (of a
    lower priority only), and how; ``preemptible`` lets every queue of a higher priority
    preempt its running jobs, as if each listed it; ``preempt_policy`` (None: the
    global one) orders the victims of this queue's jobs. Outside all of its
    ``windows`` (none: always open) it starts and resumes nothing."""

    name: str
    priority: int = 0
    work_classes: tuple[str, ...] = ()
    picker: str | None = None
    max_running: int | None = None
    leave_slots: int = 0
    leave_slots_for: tuple[str, ...] = ()
    preemptible_queues: tuple[str, ...] = ()
    preempt: PreemptMode = PreemptMode.SUSPEND
    preemptible: bool = False
    preempt_policy: str | None = None
    windows: tuple[Window, ...] = ()

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
            "preemptible": self.preemptible,
            "preempt_policy": self.preempt_policy,
            "windows": [w.to_dict() for w in self.windows],
        }

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Queue:
        return cls(name=name, priority=data["priority"],
                   work_classes=tuple(data["work_classes"]), picker=data["picker"],
                   max_running=data["limits"]["max_running"],
                   leave_slots=data["leave_slots"]["slots"],
                   leave_slots_for=tuple(data["leave_slots"]["for"]),
                   preemptible_queues=tuple(data["preemptible_queues"]),
                   preempt=PreemptMode(data["preempt"]),
                   # journals written before these keys existed lack them
                   preemptible=data.get("preemptible", False),
                   preempt_policy=data.get("preempt_policy"),
                   windows=tuple(Window.from_dict(w) for w in data.get("windows", ())))


@dataclass(frozen=True, slots=True, kw_only=True)
class Project:
    """Who owns the work of its ``queues`` (seed 002). ``share`` weighs its usage for the
    ``fair_share`` project picker; ``picker`` is the job picker of its queues that name
    none."""

    name: str
    queues: tuple[str, ...]
    share: float = 1.0
    picker: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"queues": list(self.queues), "share": self.share, "picker": self.picker}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Project:
        return cls(name=name, queues=tuple(data["queues"]), share=data["share"],
                   picker=data["picker"])


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
