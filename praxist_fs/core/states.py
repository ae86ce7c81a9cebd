"""Job states and the one table of allowed transitions.

Rule 1: every job state change goes through ``transition()``; a pair missing
from ``TRANSITIONS`` is a bug in the scheduler and raises ``InvalidTransition``
naming the job, the state and the trigger, leaving the job unchanged.
Rule 2: states are plain strings on disk (``JobState`` is a ``str`` enum).
docs/PROTOCOL.md's state diagram is generated from this table.
"""

from __future__ import annotations

from enum import Enum

from ..errors import InvalidTransition


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


class Trigger(str, Enum):
    LAUNCH = "launch"                # admitted: an attempt starts
    EXIT_OK = "exit_ok"              # the attempt exited 0
    EXIT_RETRY = "exit_retry"        # exit 75 with infrastructure retries left
    EXIT_FAIL = "exit_fail"          # any other exit, or 75 with none left
    RELEASE = "release"              # the attempt never started its command
    LOST = "lost"                    # the attempt vanished without an exit record
    RETRY_TERMINAL = "retry_terminal"  # a --retry-terminal request reopens the job
    FREEZE = "freeze"                # its generation closed before it started
    CANCEL = "cancel"                # the run was stopped
    SUSPEND = "suspend"              # preempted by suspension: its group is stopped (R-POL-3)
    RESUME = "resume"                # a suspended attempt continues
    PREEMPT = "preempt"              # an attempt preempted for requeue ended: queued again
    EXPIRE = "expire"                # its admission timeout passed while it was queued
    RESUBMIT = "resubmit"            # a request for an expired job's tag: accepted as new


TRANSITIONS: dict[tuple[JobState, Trigger], JobState] = {
    (JobState.QUEUED, Trigger.LAUNCH): JobState.RUNNING,
    (JobState.QUEUED, Trigger.FREEZE): JobState.REJECTED,
    (JobState.QUEUED, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, Trigger.EXIT_OK): JobState.COMPLETED,
    (JobState.RUNNING, Trigger.EXIT_RETRY): JobState.QUEUED,
    (JobState.RUNNING, Trigger.EXIT_FAIL): JobState.FAILED,
    (JobState.RUNNING, Trigger.RELEASE): JobState.QUEUED,
    (JobState.RUNNING, Trigger.LOST): JobState.DRAINED_UNKNOWN,
    (JobState.RUNNING, Trigger.SUSPEND): JobState.SUSPENDED,
    (JobState.RUNNING, Trigger.PREEMPT): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.RESUME): JobState.RUNNING,
    # a suspended attempt is still an attempt: it may end (killed, lost, the run stopped)
    (JobState.SUSPENDED, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.SUSPENDED, Trigger.EXIT_OK): JobState.COMPLETED,
    (JobState.SUSPENDED, Trigger.EXIT_RETRY): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.EXIT_FAIL): JobState.FAILED,
    (JobState.SUSPENDED, Trigger.RELEASE): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.LOST): JobState.DRAINED_UNKNOWN,
    (JobState.FAILED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.REJECTED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.CANCELLED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.QUEUED, Trigger.EXPIRE): JobState.EXPIRED,
    (JobState.EXPIRED, Trigger.RESUBMIT): JobState.QUEUED,
}


def transition(job_id: str, state: JobState, trigger: Trigger) -> JobState:
    """The state after ``trigger``, or ``InvalidTransition`` if the table has no entry."""
    try:
        return TRANSITIONS[(state, trigger)]
    except KeyError:
        raise InvalidTransition(
            f"can't handle {trigger.value} in state {state.value} for job {job_id}"
        ) from None
