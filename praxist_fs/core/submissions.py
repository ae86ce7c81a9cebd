"""Request admission (R-SUB-1..4, R-SEC-3, R-SEC-5): a peer's request file, answered.

A collaborator the ``Scheduler`` owns (``Scheduler.submissions``), like the
``GenerationDesk`` and the ``PreemptionDesk``: it reads and changes the scheduler's
state only through the narrow view it is given (``SubmissionBoard``), under the
scheduler's rules (every change bumps ``version`` and is journaled before its
effects).

A request (``RequestSeen``) is checked in order (its request id's earlier reply,
the owner's spool quota, the parse, the uid's trust, the profile, Slurm options,
whose tag it names, a stopped run, a closed generation, dependencies, the cost
ceiling) and answered with one reply whose outcome is a transition of the job its
tag names (``reply_transition``): a new job queued, a duplicate, a terminal
duplicate, a retry of an ended job, or a rejection naming the field. A
retransmission of the same file is answered again and changes nothing. A job that
has not started by its admission deadline expires (``AdmissionExpired``), and its tag
is free again.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidTransition
from . import tenancy, trust
from .board import JobBoard
from .budget import estimate
from .effects import ConsumeRequest, Effect, RejectRequest, WriteReply
from .events import AdmissionExpired, Event, RequestSeen
from .identity import differences, differing, fingerprint, job_id_for
from .jobcontrol import utc_iso
from .model import NEW_WORK, Job, Reply
from .request import Request
from .secrets import holds_placeholder
from .slurm_options import refusal as slurm_refusal
from .states import (
    REPLAYABLE_STATES, JobState, ReplyOutcome, Trigger, Verdict, reply_transition,
)

if TYPE_CHECKING:
    from .backlog import Backlog
    from .generations import GenerationDesk
    from .shelf import Shelf
    from .supply import Generation


class SubmissionBoard(JobBoard, Protocol):
    """What the submission desk reads and changes of the scheduler that owns it, beyond
    a ``JobBoard``: a cost estimate uses the calibrated ratio (R-BUD-1), work
    enqueued while the budget is not under is alerted, and job control keeps the tags,
    the dependencies (``after``) and who asked for a hold."""

    replies: Shelf[Reply]
    generations: dict[int, Generation]
    generation_jobs: dict[int, dict[str, str]]  # generation -> {job id: its peer}
    generations_desk: GenerationDesk  # a request may carry a lease (R-SUP-4)
    pending: dict[str, str]   # why each queued job waits: what an expiry says it waited for
    _deadlines: list[tuple[float, str]]  # (admission deadline, job id), a heap (``_queue``)

    def current_generation(self) -> Generation | None: ...
    def _not_theirs(self, job: Job, uid: int | None) -> str | None: ...
    def _take_order(self) -> int: ...
    def _queue(self) -> Backlog: ...
    def _enter(self, job: Job) -> None: ...


class SubmissionDesk:
    """Request admission for the scheduler whose ``board`` it is given."""

    def __init__(self, board: SubmissionBoard) -> None:
        self.board = board

    def on_request(self, ev: RequestSeen) -> list[Effect]:
        """Answer a request file: queue its job, say what it duplicates, or reject it."""
        board = self.board
        prior = board.replies.get(ev.request_id) if ev.request_id else None
        if prior is not None:
            if theirs := tenancy.foreign_id(prior.uid, ev.uid, board.coordinator_uid):
                return [RejectRequest(name=ev.name, error=_error(  # their reply stays
                    ev.request_id, "request_id", theirs))]
            if prior.digest == ev.digest:  # a retransmission: answer again, change nothing
                return self._answer(ev, prior)
            return [RejectRequest(name=ev.name, error=_error(
                ev.request_id, "request_id",
                f"already used by a different request (answered {prior.outcome}); "
                "use a unique request_id or file name"))]
        if ev.request_id is not None and (over := tenancy.over_quota(
                ev.spool_position, board.policy.spool_quota_requests,
                board.policy.spool_quota_bytes, trust.owner(ev.uid, board.coordinator_uid))):
            return self._reply(ev, ReplyOutcome.REJECTED, None, "quota", over)
        if ev.request is None:
            if ev.request_id is None:
                return [RejectRequest(name=ev.name, error=_error(
                    None, ev.error_field, ev.error_problem))]
            return self._reply(ev, ReplyOutcome.REJECTED, None, ev.error_field,
                              ev.error_problem)
        request = ev.request
        if refused := trust.refusal(ev.uid, board.coordinator_uid, board.policy.trusted_uids):
            return self._reply(ev, ReplyOutcome.REJECTED, None, "uid", refused)
        profile = request.profile or board.policy.default_profile
        if profile not in board.policy.profiles:
            return self._reply(ev, ReplyOutcome.REJECTED, None, "profile",
                              f"unknown profile {profile!r}; the task defines "
                              + ", ".join(sorted(board.policy.profiles)))
        if request.slurm is not None and (
                refused := slurm_refusal(request.slurm, board.policy, profile)):
            return self._reply(ev, ReplyOutcome.REJECTED, None, *refused)
        job = board.jobcontrol.tagged(request.tag, ev.uid)
        job_id = job.job_id if job else job_id_for(
            request.tag, tenancy.namespace(ev.uid, board.coordinator_uid))
        digest = fingerprint(request, profile)
        if job is not None and (problem := board._not_theirs(job, ev.uid)):
            return self._reply(ev, ReplyOutcome.REJECTED, None, "tag", problem)
        if board.stopped and (job is None or job.state not in REPLAYABLE_STATES):
            return self._reply(ev, ReplyOutcome.REJECTED, job, "run",
                              f"the run is stopped ({board.stopped})")
        generation = request.generation
        if generation is None and (current := board.current_generation()) is not None:
            generation = current.number
        closed = board._closed_to_new_work(generation)
        if job is None:
            if closed:
                return self._reply(ev, ReplyOutcome.REJECTED, None, "generation", closed)
            after, problem = board.jobcontrol.resolve_after(request, job_id, ev.uid)
            if problem:
                return self._reply(ev, ReplyOutcome.REJECTED, None, "after", problem)
            cost, refused = self._ceiling(ev, None, profile)
            if refused:
                return refused
            job = Job(job_id=job_id, request=request, profile=profile, fingerprint=digest,
                      submitted_at=ev.at, order=board._take_order(), generation=generation,
                      priority=request.priority, after=after,
                      held=self._asked(request.peer, ev) if request.hold else None,
                      uid=ev.uid, admission_deadline=self._admission_deadline(request, ev.at))
            board.jobs[job_id] = job
            self._place_in_generation(job, generation)
            board.jobcontrol.link_dependencies(job)
            board._enter(job)
            return [board._write_job(job),
                    *self._reply(ev, ReplyOutcome.ACCEPTED, job, estimate=cost, before=None)]
        if job.state is JobState.EXPIRED:  # no attempt ran: the tag is not bound (R-SUB-4)
            return self._reopen(ev, job, profile, digest, generation, closed, Trigger.RESUBMIT,
                                ReplyOutcome.ACCEPTED, "resubmitted after an admission timeout")
        if job.state in REPLAYABLE_STATES:
            if digest == job.fingerprint:
                return self._reply(ev, ReplyOutcome.DUPLICATE, job,
                                  reason=f"same request as job {job_id}")
            if not request.retry_terminal and board.policy.same_tag_different_request == "share":
                differs = differing(job.request, job.profile, request, profile)
                return self._reply(ev, ReplyOutcome.DUPLICATE, job, differs=differs, reason=(
                    f"same tag as job {job_id}, which this request shares (the tag is the "
                    f"experiment's identity); it differs in {', '.join(differs)}"))
            changed = differences(job.request, job.profile, request, profile)
            problem = (f"tag {request.tag!r} already names job {job_id} ({job.state.value}) "
                       f"with a different {changed}")
            if request.retry_terminal:
                problem += "; retry_terminal applies only to failed, rejected or cancelled jobs"
            return self._reply(ev, ReplyOutcome.REJECTED, job, "tag", problem)
        if not request.retry_terminal:
            return self._reply(ev, ReplyOutcome.TERMINAL_DUPLICATE, job, reason=(
                f"job {job_id} is {job.state.value} ({job.reason}); "
                "submit again with retry_terminal to run it again under the same tag"))
        return self._reopen(ev, job, profile, digest, generation, closed, Trigger.RETRY_TERMINAL,
                            ReplyOutcome.RETRY_ACCEPTED, "retry accepted")

    def _reopen(self, ev: RequestSeen, job: Job, profile: str, digest: str,
                generation: int | None, closed: str | None, trigger: Trigger,
                outcome: ReplyOutcome, why: str) -> list[Effect]:
        """Queue an ended job again as a new round, as ``ev``'s request asks."""
        board = self.board
        if closed:
            return self._reply(ev, ReplyOutcome.REJECTED, job, "generation", closed)
        request = ev.request
        after, problem = board.jobcontrol.resolve_after(request, job.job_id, ev.uid)
        if problem:
            return self._reply(ev, ReplyOutcome.REJECTED, job, "after", problem)
        cost, refused = self._ceiling(ev, job, profile)
        if refused:
            return refused
        job.request, job.profile, job.fingerprint = request, profile, digest  # queued as such
        job.priority, job.after = request.priority, after
        job.held = self._asked(request.peer, ev) if request.hold else None
        job.admission_deadline = self._admission_deadline(request, ev.at)
        board.jobcontrol.link_dependencies(job)
        before = job.state
        board._transition(job, trigger)
        self._place_in_generation(job, generation)
        job.round += 1
        job.reason = f"{why} (round {job.round})"
        return [board._write_job(job), *self._reply(ev, outcome, job, estimate=cost, before=before)]

    def _place_in_generation(self, job: Job, generation: int | None) -> None:
        """Set the generation ``job`` is in, and keep ``generation_jobs`` in step."""
        board = self.board
        if job.generation is not None and job.job_id in board.generation_jobs.get(
                job.generation, {}):
            del board.generation_jobs[job.generation][job.job_id]
            if not board.generation_jobs[job.generation]:  # as a restore derives it
                del board.generation_jobs[job.generation]
        job.generation = generation
        if generation is not None:
            board.generation_jobs.setdefault(generation, {})[job.job_id] = job.request.peer

    def _admission_deadline(self, request: Request, at: float) -> float | None:
        """When a job accepted at ``at`` expires unless it has started (R-SUB-4)."""
        timeout = request.admission_timeout_s
        if timeout is None:
            timeout = self.board.policy.admission_timeout_seconds
        return None if timeout is None else at + timeout

    def _ceiling(self, ev: RequestSeen, job: Job | None, profile: str
                 ) -> tuple[dict[str, Any] | None, list[Effect]]:
        """A request's ``max_cost`` against its estimate (R-BUD-1): (the estimate, and the
        rejection when the estimate is over the ceiling or cannot be made). The ceiling
        is the peer's own and hard, so an unknown estimate does not pass it."""
        board = self.board
        ceiling = ev.request.max_cost
        if ceiling is None:
            return None, []
        eta_s, rate = ev.request.eta_s, board.policy.budget.rates.get(profile)
        if eta_s is None or rate is None:
            missing = " and ".join(what for what, absent in (
                ("the request gives no eta_s", eta_s is None),
                (f"the task's budget.rates has no rate for profile {profile!r}", rate is None))
                if absent)
            return None, self._reply(ev, ReplyOutcome.REJECTED, job, "max_cost", (
                f"{ceiling:g} cannot be checked: an estimate needs eta_s and a rate, "
                f"and {missing}"))
        cost = estimate(eta_s, math.exp(board.calibration.fit()[0]),
                        board.policy.profiles[profile].gpu_count, rate)
        if cost["cost"] <= ceiling:
            return cost, []
        return cost, self._reply(ev, ReplyOutcome.REJECTED, job, "max_cost", (
            f"estimated cost {cost['cost']:g} is over {ceiling:g} (eta_s {eta_s:g} x "
            f"calibrated ratio {cost['ratio']:.3g} x {max(cost['gpus'], 1)} "
            f"{'GPU(s)' if cost['gpus'] else 'CPU attempt'} x rate {rate:g} per "
            f"{cost['rate_per']})"), estimate=cost)

    def _asked(self, peer: str, ev: RequestSeen) -> dict[str, Any]:
        """A hold its own request asked for: the job's record of who asked (``JobControlDesk.asker``)."""
        return {**self.board.jobcontrol.asker(peer, ev.uid), "at": ev.at}

    def _reply(self, ev: RequestSeen, outcome: ReplyOutcome, job: Job | None,
              field: str | None = None, problem: str | None = None,
              reason: str | None = None, estimate: dict[str, Any] | None = None,
              before: JobState | None = None, differs: tuple[str, ...] = ()) -> list[Effect]:
        """Answer ``ev``: ``before`` is the state of the job a request queued (None: it
        created it); any other outcome leaves the job as it was (``reply_transition``)."""
        board = self.board
        state = job.state if job else None
        if outcome not in NEW_WORK:
            before = state
        if reply_transition(ev.request_id or ev.name, before, outcome) != state:
            raise InvalidTransition(f"request {ev.request_id or ev.name} answered {outcome} "
                                    f"left job {job and job.job_id} {state and state.value}")
        if reason is None and field is not None:
            reason = f"{field}: {problem}"  # else Reply's own: "job <job_id> <state>"
        request, lease, touched = ev.request, None, []
        if request is not None and outcome != ReplyOutcome.REJECTED:
            if request.lease is not None:
                lease, touched = board.generations_desk.use_lease(request.peer, request.lease,
                                                                  ev.at, outcome)
            if outcome in NEW_WORK and board.ledger.verdict in (Verdict.AT, Verdict.OVER):
                board.ledger.unalerted += 1  # seed 003: each enqueue while not under alerts
            if outcome in NEW_WORK and job.generation in board.generations:
                cooldowns = board.generations[job.generation].cooldowns
                for key in [k for k in cooldowns if k[0] == request.peer]:
                    del cooldowns[key]  # a new submission resets the peer's decline backoff
        request_id = ev.request_id
        if request is not None and request.request_id == request_id:
            request_id = request.request_id  # one string for both: every reply is kept
        reply = Reply(request_id=request_id, outcome=outcome,
                      job_id=job.job_id if job else None,
                      state=job.state.value if job else None,
                      reason=reason, digest=ev.digest, field=field, problem=problem, lease=lease,
                      estimate=estimate, uid=ev.uid, differs=differs)
        board.replies[reply.request_id] = reply
        board.version += 1
        return touched + self._answer(ev, reply)

    @staticmethod
    def _answer(ev: RequestSeen, reply: Reply) -> list[Effect]:
        """Reply, and dispose of the request file; a rejection is filed before the reply.
        A request read with a secret in its env (a placeholder now) says so: its file
        holds the raw value (``ConsumeRequest.holds_secret``)."""
        reply_effect = WriteReply(request_id=reply.request_id, document=reply.to_dict())
        if reply.outcome == ReplyOutcome.REJECTED:
            return [RejectRequest(name=ev.name, error=_error(
                reply.request_id, reply.field, reply.problem)), reply_effect]
        held = ev.request is None or holds_placeholder(ev.request.env)
        return [reply_effect, ConsumeRequest(name=ev.name, holds_secret=held)]

    # -- admission timeouts (R-SUB-4) --------------------------------------

    def expired(self, at: float) -> list[Event]:
        """Queued jobs whose admission deadline passed (R-SUB-4). A deadline stays in the
        heap until its event was handled: an event that could not be journaled comes
        again; entries of jobs that started, ended or were reopened since are dropped."""
        board = self.board
        board._queue()  # after a snapshot restore, builds the heap too
        heap, due = board._deadlines, []
        while heap and heap[0][0] <= at:
            deadline, job_id = heapq.heappop(heap)
            job = board.jobs[job_id]
            if job.state is JobState.QUEUED and job.admission_deadline == deadline:
                due.append((deadline, job_id))
        for entry in due:
            heapq.heappush(heap, entry)
        return [AdmissionExpired(at=at, job_id=job_id,
                                 waited_for=board.pending.get(job_id, board.jobs[job_id].reason))
                for _, job_id in dict.fromkeys(due)]

    def on_expired(self, ev: AdmissionExpired) -> list[Effect]:
        """It never started within its timeout: it ends ``expired``, holding nothing, and
        its tag is free for a plain new submission (``_reopen``)."""
        board = self.board
        job = board._job(ev.job_id)
        if job.state is not JobState.QUEUED or job.admission_deadline is None:
            return []
        board._transition(job, Trigger.EXPIRE)
        job.reason = (f"admission timeout: not started by {utc_iso(job.admission_deadline)} "
                      f"(waiting: {ev.waited_for}); submit it again to queue it anew")
        job.admission_deadline = None
        board.version += 1
        return [board._write_job(job)]


def _error(request_id: str | None, field: str | None, problem: str | None) -> dict[str, Any]:
    return {"request_id": request_id, "field": field, "problem": problem,
            "reason": f"{field}: {problem}"}
