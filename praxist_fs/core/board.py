"""What the desks that change jobs share of the scheduler that owns them.

Each desk (``AttemptDesk``, ``SubmissionDesk``) sees the scheduler only through the
narrow view its own module declares, a ``Protocol`` the ``Scheduler`` satisfies. The
part they have in common stands here once: the run's policy and stop, the jobs, the
job machine's transitions and job files, the calibration and budget every admission
and end consults, job control, and ``version``, which every change bumps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .budget import Ledger
    from .calibration import Calibration
    from .effects import WriteJob
    from .jobcontrol import JobControlDesk
    from .model import Job
    from .policy import Policy
    from .shelf import Shelf
    from .states import Trigger


class JobBoard(Protocol):
    """What a desk that changes jobs reads and changes of the scheduler that owns it."""

    policy: Policy
    version: int
    stopped: str | None
    jobs: Shelf[Job]
    coordinator_uid: int | None
    calibration: Calibration
    ledger: Ledger
    jobcontrol: JobControlDesk

    def _job(self, job_id: str) -> Job: ...
    def _transition(self, job: Job, trigger: Trigger) -> None: ...
    def _write_job(self, job: Job) -> WriteJob: ...
    def _closed_to_new_work(self, generation: int | None) -> str | None: ...
