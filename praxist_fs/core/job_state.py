"""A job's states (R-FS-6), apart from core/states.py's machines and their tables: the
``jobs`` verb names them (its ``--state``, the index's queries) and loads this alone,
not the other machines' enums, which take milliseconds to build (R-PERF-3).
core/states.py holds the job's transitions and re-exports ``JobState``."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    DRAINED_UNKNOWN = "drained_unknown"
    # R-SUB-4: its admission timeout passed before any attempt ran; its tag is not bound
    EXPIRED = "expired"

    def __init__(self, value: str) -> None:
        # ``directory``: the jobs/ subdirectory that holds a job in this state (R-FS-6);
        # ``terminal``: whether it is done. Set once on each member, not worked out at
        # each ask: 40 to 50 asks a job in the loop, as properties ~10 us of its CPU.
        self.directory = "queued" if value in ("queued", "suspended") else \
            "running" if value == "running" else "done"
        self.terminal = self.directory == "done"
