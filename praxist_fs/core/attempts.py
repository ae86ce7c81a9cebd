"""An attempt's life (R-RUN-2, R-SUB-4): its launch, what is seen of it, and its end.

A collaborator the ``Scheduler`` owns (``Scheduler.attempts``), like the
``GenerationDesk`` and the ``PreemptionDesk``: it reads and changes the scheduler's
state only through the narrow view it is given (``AttemptBoard``), under the
scheduler's rules (every change bumps ``version`` and is journaled before its
effects).

An attempt is launched by a journaled decision (``AttemptLaunched``: the job runs,
its shim is spawned), then observed (``AttemptObserved``): its shim seen at the
barrier, GO decided and journaled before the GO file is written, and finally its
end. How it ended decides the job's next state (``settle``): exit 0 completes it,
exit 75 or an infrastructure failure retries it while retries are left, a shim
that died before GO releases it (queued again, backing off), one that may have run
without leaving an exit record loses it (``drained_unknown``), anything else fails
it. Every end is charged to fair share's ledgers and to the budget.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidTransition
from . import trust
from .board import JobBoard
from .budget import INFRA_EXIT_CODE, kind_of
from .effects import AbortAttempt, Effect, SpawnAttempt, WriteGo
from .events import AttemptLaunched, AttemptObserved
from .model import Attempt, Job, kept_handle
from .queues import queue_of_class
from .states import (
    AttemptOutcome, AttemptPhase, AttemptTrigger, JobState, Trigger, attempt_transition,
)

if TYPE_CHECKING:
    from .budget import Spend
    from .pickers.ledger import Usage
    from .preemption import PreemptionDesk


class AttemptBoard(JobBoard, Protocol):
    """What the attempt desk reads and changes of the scheduler that owns it, beyond
    a ``JobBoard``: an end with an ETA calibrates (R-SUP-7), every end is charged
    to fair share's ledgers and the budget's, a cancelled attempt's end is decided by
    job control, and one evicted for requeue ends in the preemption desk."""

    coordinator: dict[str, Any] | None
    usage: Usage
    queue_usage: Usage
    preemption: PreemptionDesk

    def _spent(self, job: Job, attempt: Attempt, until: float) -> Spend: ...
    def budget_snapshot(self, at: float) -> dict[str, Any] | None: ...


class AttemptDesk:
    """The life of attempts for the scheduler whose ``board`` it is given."""

    def __init__(self, board: AttemptBoard) -> None:
        self.board = board

    def on_launched(self, ev: AttemptLaunched) -> list[Effect]:
        board = self.board
        job = board._job(ev.job_id)
        expected = f"a{len(job.attempts) + 1}"
        if ev.attempt_id != expected:
            raise InvalidTransition(
                f"can't launch {ev.attempt_id} for job {job.job_id}: next attempt is {expected}")
        budget = board.budget_snapshot(ev.at)  # before this job counts as running
        board._transition(job, Trigger.LAUNCH)
        attempt = Attempt(attempt_id=sys.intern(ev.attempt_id), number=len(job.attempts) + 1,
                          round=job.round, started_at=ev.at, gpus=ev.gpus, budget=budget)
        job.attempts.append(attempt)
        job.reason = f"attempt {attempt.attempt_id} launching"
        board.version += 1
        req = job.request
        return [board._write_job(job), SpawnAttempt(
            job_id=job.job_id, attempt_id=attempt.attempt_id, argv=req.argv,
            command=req.command, cwd=req.cwd, env=dict(req.env), profile=job.profile,
            gpus=attempt.gpus,
            uid=trust.run_as(job.uid, board.coordinator_uid, board.policy.trusted_uids), metadata={
                "job_id": job.job_id, "attempt_id": attempt.attempt_id, "tag": req.tag,
                "request_id": req.request_id,
                "peer": req.peer, "profile": job.profile, "work_class": req.work_class,
                "gpus": list(attempt.gpus), "decided_at": ev.at, "round": job.round,
                "budget": attempt.budget, "eta_s": req.eta_s,
            })]

    def on_observed(self, ev: AttemptObserved) -> list[Effect]:
        board = self.board
        job = board.jobs.get(ev.job_id)
        attempt = _find(job, ev.attempt_id) if job else None
        if attempt is None or attempt.phase == AttemptPhase.ENDED:
            return []  # a late sighting of an attempt already settled
        if not ev.alive and ev.handle is not None and attempt.handle is not None:
            attempt.handle = ev.handle  # where it ran and since when: its end's last word
        if board.stopped and not (ev.exited and ev.exit_code == 0) and (ev.exited or not ev.alive):
            attempt.exit_code, attempt.signal = ev.exit_code, ev.signal
            attempt.outcome = AttemptOutcome.CANCELLED
            return self.settle(job, attempt, ev.at, Trigger.CANCEL,
                               f"run stopped ({board.stopped})")
        if attempt.cancel and (ev.exited or not ev.alive) and \
                not (ev.exited and ev.exit_code == 0):
            return board.jobcontrol.end_cancelled(job, attempt, ev)
        if attempt.evicting and (ev.exited or not ev.alive) and \
                not (ev.exited and ev.exit_code == 0):
            # R-POL-3: an end but a success requeues
            return board.preemption.requeue(job, attempt, ev)
        if ev.exited or ev.infrastructure is not None:
            return self._end(job, attempt, ev)
        if ev.cancelled is not None:
            attempt.outcome = AttemptOutcome.CANCELLED
            return self.settle(job, attempt, ev.at, Trigger.CANCEL, ev.cancelled)
        if ev.fenced:
            return self._fenced(job, attempt, ev)
        if not ev.alive:
            if ev.go or (attempt.go and (ev.ready or self._rebooted_since(attempt))):
                # it was allowed to run, and left no exit record. GO is journaled before
                # the shim is told, then the GO file is written (no fsync): a shim that
                # reached READY may have run without the file; one that did not, never
                # did. After a reboot READY may be gone too: the journal alone decides
                attempt.outcome = AttemptOutcome.LOST
                return self.settle(job, attempt, ev.at, Trigger.LOST,
                                   f"attempt {attempt.attempt_id} vanished without an exit record")
            attempt.outcome = AttemptOutcome.RELEASED
            abort = AbortAttempt(job_id=job.job_id, attempt_id=attempt.attempt_id)
            return [abort, *self.settle(job, attempt, ev.at, Trigger.RELEASE, (
                f"attempt {attempt.attempt_id} never started (see attempts/{job.job_id}/"
                f"{attempt.attempt_id}/shim.log); requeued"))]
        effects: list[Effect] = []
        if not attempt.seen and ev.handle is not None:
            attempt.phase = self._attempt_step(job, attempt, AttemptTrigger.SHIM_SEEN)
            attempt.handle = kept_handle(ev.handle)
            job.reason = ev.note or f"attempt {attempt.attempt_id} running"
            board.version += 1
            effects.append(board._write_job(job))
        elif attempt.handle is not None and ev.handle is not None and (
                ev.handle != attempt.handle or (ev.note and ev.note != job.reason)):
            attempt.handle = kept_handle(ev.handle)  # where it runs, why it waits: for status
            job.reason = ev.note or job.reason
            board.version += 1
            effects.append(board._write_job(job))
        if ev.ready and not ev.go and attempt.phase in (AttemptPhase.BARRIER,
                                                        AttemptPhase.RUNNING):
            if board.stopped or attempt.evicting or attempt.cancel:  # a stopped run starts
                effects.append(AbortAttempt(job_id=job.job_id,  # nothing, nor does a
                                            attempt_id=attempt.attempt_id))  # preempted or
                # cancelled attempt
                return effects
            if not attempt.go:  # journaled before GO is written: GO itself needs no fsync
                attempt.go = True
                attempt.phase = self._attempt_step(job, attempt, AttemptTrigger.GO)
                if job.admission_deadline is not None:  # it started: it can no longer expire
                    job.admission_deadline = None
                    effects.append(board._write_job(job))
                board.version += 1
            effects.append(WriteGo(job_id=job.job_id, attempt_id=attempt.attempt_id))
        return effects

    def _rebooted_since(self, attempt: Attempt) -> bool:
        """The host restarted since the attempt's shim was recorded (or we cannot tell). An
        attempt whose handle names no boot of this host (a cluster backend's) did not run
        here: whether it may have run is its own observation's ``go`` (its durable READY
        and GO)."""
        handle = attempt.handle
        if handle is not None and "boot_id" not in handle:
            return False
        coordinator = self.board.coordinator
        return coordinator is None or handle is None or handle["boot_id"] != coordinator["boot_id"]

    def _fenced(self, job: Job, attempt: Attempt, ev: AttemptObserved) -> list[Effect]:
        """Its shim died while its command ran, and the coordinator terminated what was
        left: the command did not finish, so the job is retried like an exit 75 (an end
        whose exit status is unknown is never rerun: that is ``lost`` above)."""
        board = self.board
        used = self._infra_retries_used(job)
        attempt.outcome = AttemptOutcome.LOST
        attempt.error = f"{ev.error or 'supervisor died'}; command terminated"
        lost = f"attempt {attempt.attempt_id} lost: {attempt.error}"
        if used < board.policy.infrastructure_retries:
            return self.settle(job, attempt, ev.at, Trigger.EXIT_RETRY,
                               f"{lost}: retry {used + 1} of "
                               f"{board.policy.infrastructure_retries} queued")
        return self.settle(job, attempt, ev.at, Trigger.EXIT_FAIL,
                           f"{lost}; no infrastructure retries left "
                           f"({board.policy.infrastructure_retries} used)")

    def _infra_retries_used(self, job: Job) -> int:
        """Automatic retries the job's round has used: its attempts that exited 75, or
        were lost and fenced (``_fenced``), with a retry left. A lost attempt otherwise ends
        its round: ``drained_unknown`` is final, and ``failed`` reopens as a new round."""
        return sum(1 for a in job.attempts
                   if a.round == job.round
                   and a.outcome in (AttemptOutcome.INFRA_RETRY, AttemptOutcome.LOST))

    def _end(self, job: Job, attempt: Attempt, ev: AttemptObserved) -> list[Effect]:
        """Its command exited, or its infrastructure failed under it (``infrastructure``:
        retried as an exit 75 is, whatever the command's own exit, which is kept)."""
        board = self.board
        attempt.exit_code, attempt.signal, attempt.failure = ev.exit_code, ev.signal, ev.failure
        attempt.error, attempt.infrastructure = ev.error, ev.infrastructure
        code = ev.exit_code
        if code == 0 and ev.infrastructure is None:
            attempt.outcome = AttemptOutcome.COMPLETED
            if job.request.eta_s is not None:
                board.calibration.observe(attempt.active_seconds(ev.ended_at or ev.at),
                                          job.request.eta_s)
            return self.settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_OK, "exit code 0")
        if code == INFRA_EXIT_CODE or ev.infrastructure is not None:
            what = "exit code 75 (infrastructure)" if ev.infrastructure is None else (
                f"infrastructure failure: {ev.infrastructure}"
                + ("" if code is None else f" (the command exited {code})"))
            used = self._infra_retries_used(job)
            if used < board.policy.infrastructure_retries:
                attempt.outcome = AttemptOutcome.INFRA_RETRY
                return self.settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_RETRY,
                                   f"{what}: retry {used + 1} of "
                                   f"{board.policy.infrastructure_retries} queued")
            reason = f"{what} with no retries left ({board.policy.infrastructure_retries} used)"
        elif ev.signal:
            reason = f"killed by signal {ev.signal} (exit code {code})"
        else:
            reason = f"exit code {code}"
        if ev.error:
            reason += f": {ev.error}"
        attempt.outcome = AttemptOutcome.FAILED
        return self.settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_FAIL, reason)

    def settle(self, job: Job, attempt: Attempt, at: float, trigger: Trigger,
               reason: str) -> list[Effect]:
        """``attempt`` ended at ``at`` (its outcome set): the job takes ``trigger`` for
        ``reason``, and the end is charged to fair share's ledgers and the budget. A job
        queued again in a generation closed meanwhile is rejected instead. Preemption
        and job control end attempts here too."""
        board = self.board
        ended = self._attempt_step(job, attempt, AttemptTrigger.END)
        board._transition(job, trigger)
        attempt.phase, attempt.ended_at = ended, at
        spent = board._spent(job, attempt, at)  # whatever the outcome
        half_life = board.policy.fair_share_half_life_seconds
        if attempt.gpus:  # fair share's ledger: GPU-seconds
            board.usage.charge(job.request.peer, spent.gpu_seconds, at, half_life)
        queue = queue_of_class(board.policy.queue_set())[job.request.work_class]
        board.queue_usage.charge(queue.name, attempt.active_seconds(at), at, half_life)
        board.ledger.charge(kind_of(attempt.outcome, attempt.exit_code, attempt.infrastructure),
                            spent)
        job.reason = sys.intern(reason)  # "exit code 0", for most of a run's finished jobs
        if job.state is JobState.QUEUED and (closed := board._closed_to_new_work(job.generation)):
            board._transition(job, Trigger.FREEZE)  # its generation's queue is frozen
            job.reason = f"{reason}; not requeued: {closed}"
        board.version += 1
        return [board._write_job(job)]

    @staticmethod
    def _attempt_step(job: Job, attempt: Attempt, trigger: AttemptTrigger) -> AttemptPhase:
        """The attempt's phase after ``trigger`` (``attempt_transition``), not yet set."""
        return attempt_transition(f"{job.job_id}/{attempt.attempt_id}", attempt.phase, trigger)


def _find(job: Job, attempt_id: str) -> Attempt | None:
    return next((a for a in job.attempts if a.attempt_id == attempt_id), None)

