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

    @property
    def directory(self) -> str:
        """The jobs/ subdirectory that holds a job in this state (R-FS-6)."""
        if self in (JobState.QUEUED, JobState.SUSPENDED):
            return "queued"
        if self is JobState.RUNNING:
            return "running"
        return "done"

    @property
    def terminal(self) -> bool:
        return self.directory == "done"
