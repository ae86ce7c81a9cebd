"""The scheduler: ``handle(event) -> [effects]`` and ``next_launches(at)``.

This is the only mutator of scheduling state. ``handle`` returns effects or
raises ``InvalidTransition`` (a bug of ours); anything else is a bug too.
A peer's bad input never raises: it becomes a rejected reply.

Durability contract with the daemon: ``version`` grows on every state change.
The daemon journals (and fsyncs) each event that changed the version before
it carries out any of that event's effects, so a transition is provisional
until committed and nothing outside the process sees it before then. Events
that change nothing (a retransmitted request, a READY sighting) are not
journaled; their effects are idempotent.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidTransition
from .effects import (
    AbortAttempt, ConsumeRequest, Effect, RejectRequest, SpawnAttempt, WriteGo, WriteJob,
    WriteReply,
)
from .events import AttemptLaunched, AttemptObserved, CoordinatorStarted, Event, RequestSeen
from .identity import fingerprint, job_id_for
from .model import Attempt, AttemptPhase, Job, Reply
from .policy import Policy
from .states import JobState, Trigger, transition

INFRA_EXIT_CODE = 75
MAX_RELEASES_IN_A_ROW = 3  # a barrier that keeps failing is an error, not a retry loop
REPLAYABLE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.SUSPENDED,
                     JobState.COMPLETED, JobState.DRAINED_UNKNOWN)


class Scheduler:
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.jobs: dict[str, Job] = {}
        self.replies: dict[str, Reply] = {}
        self.coordinator: dict[str, Any] | None = None
        self.version = 0
        self._by_state: dict[JobState, dict[str, Job]] = {state: {} for state in JobState}
        self._next_order = 0

    # -- events -----------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        if isinstance(event, RequestSeen):
            return self._on_request(event)
        if isinstance(event, AttemptObserved):
            return self._on_observed(event)
        if isinstance(event, AttemptLaunched):
            return self._on_launched(event)
        if isinstance(event, CoordinatorStarted):
            self.policy = Policy.from_dict(event.policy)
            self.coordinator = {"pid": event.pid, "host": event.host,
                                "boot_id": event.boot_id, "since": event.at}
            self.version += 1
            return []
        raise InvalidTransition(f"can't handle event {type(event).__name__}")

    def _on_request(self, ev: RequestSeen) -> list[Effect]:
        prior = self.replies.get(ev.request_id) if ev.request_id else None
        if prior is not None:
            if prior.digest == ev.digest:  # a retransmission: answer again, change nothing
                return self._answer(ev.name, prior)
            return [RejectRequest(name=ev.name, error=_error(
                ev.request_id, "request_id",
                f"already used by a different request (answered {prior.outcome}); "
                "use a unique request_id or file name"))]
        if ev.request is None:
            if ev.request_id is None:
                return [RejectRequest(name=ev.name, error=_error(
                    None, ev.error_field, ev.error_problem))]
            return self._reply(ev, "rejected", None, ev.error_field, ev.error_problem)
        request = ev.request
        profile = request.profile or self.policy.default_profile
        if profile not in self.policy.profiles:
            return self._reply(ev, "rejected", None, "profile",
                               f"unknown profile {profile!r}; the task defines "
                               + ", ".join(sorted(self.policy.profiles)))
        job_id = job_id_for(request.tag)
        digest = fingerprint(request, profile)
        job = self.jobs.get(job_id)
        if job is None:
            job = Job(job_id=job_id, request=request, profile=profile, fingerprint=digest,
                      submitted_at=ev.at, order=self._take_order())
            self.jobs[job_id] = job
            self._by_state[job.state][job_id] = job
            job.reason = self.hold_reason(job) or job.reason
            return [self._write_job(job), *self._reply(ev, "accepted", job)]
        if job.state in REPLAYABLE_STATES:
            if digest == job.fingerprint:
                return self._reply(ev, "duplicate", job, reason=f"same request as job {job_id}")
            problem = (f"tag {request.tag!r} already names job {job_id} ({job.state.value}) "
                       "with a different command, profile, cwd or env")
            if request.retry_terminal:
                problem += "; retry_terminal applies only to failed, rejected or cancelled jobs"
            return self._reply(ev, "rejected", job, "tag", problem)
        if not request.retry_terminal:
            return self._reply(ev, "terminal_duplicate", job, reason=(
                f"job {job_id} is {job.state.value} ({job.reason}); "
                "submit again with retry_terminal to run it again under the same tag"))
        self._transition(job, Trigger.RETRY_TERMINAL)
        job.request, job.profile, job.fingerprint = request, profile, digest
        job.round += 1
        job.reason = self.hold_reason(job) or f"retry accepted (round {job.round})"
        return [self._write_job(job), *self._reply(ev, "retry_accepted", job)]

    def _on_launched(self, ev: AttemptLaunched) -> list[Effect]:
        job = self._job(ev.job_id)
        expected = f"a{len(job.attempts) + 1}"
        if ev.attempt_id != expected:
            raise InvalidTransition(
                f"can't launch {ev.attempt_id} for job {job.job_id}: next attempt is {expected}")
        self._transition(job, Trigger.LAUNCH)
        attempt = Attempt(attempt_id=ev.attempt_id, number=len(job.attempts) + 1,
                          round=job.round, started_at=ev.at, gpus=ev.gpus)
        job.attempts.append(attempt)
        job.reason = f"attempt {attempt.attempt_id} launching"
        self.version += 1
        req = job.request
        return [self._write_job(job), SpawnAttempt(
            job_id=job.job_id, attempt_id=attempt.attempt_id, argv=req.argv,
            command=req.command, cwd=req.cwd, env=dict(req.env), profile=job.profile,
            gpus=attempt.gpus, metadata={
                "job_id": job.job_id, "attempt_id": attempt.attempt_id, "tag": req.tag,
                "peer": req.peer, "profile": job.profile, "work_class": req.work_class,
                "gpus": list(attempt.gpus), "decided_at": ev.at, "round": job.round,
            })]

    def _on_observed(self, ev: AttemptObserved) -> list[Effect]:
        job = self.jobs.get(ev.job_id)
        attempt = _find(job, ev.attempt_id) if job else None
        if attempt is None or attempt.phase == AttemptPhase.ENDED:
            return []  # a late sighting of an attempt already settled
        if ev.exited:
            return self._end(job, attempt, ev)
        if not ev.alive:
            if ev.go:  # it was allowed to run, and left no exit record
                attempt.outcome = "lost"
                return self._settle(job, attempt, ev.at, Trigger.LOST,
                                    f"attempt {attempt.attempt_id} vanished without an exit record")
            attempt.outcome = "released"
            abort = AbortAttempt(job_id=job.job_id, attempt_id=attempt.attempt_id)
            if _released_in_a_row(job) >= MAX_RELEASES_IN_A_ROW:
                return [abort, *self._settle(job, attempt, ev.at, Trigger.EXIT_FAIL, (
                    f"the launch barrier failed {MAX_RELEASES_IN_A_ROW} times in a row; "
                    f"see attempts/{job.job_id}/{attempt.attempt_id}/shim.log"))]
            return [abort, *self._settle(job, attempt, ev.at, Trigger.RELEASE,
                                         f"attempt {attempt.attempt_id} never started; requeued")]
        effects: list[Effect] = []
        if attempt.pid is None and ev.pid is not None:
            attempt.pid, attempt.pid_start, attempt.boot_id = ev.pid, ev.pid_start, ev.boot_id
            attempt.phase = AttemptPhase.BARRIER
            job.reason = f"attempt {attempt.attempt_id} running"
            self.version += 1
            effects.append(self._write_job(job))
        if ev.ready and not ev.go and attempt.phase == AttemptPhase.BARRIER:
            effects.append(WriteGo(job_id=job.job_id, attempt_id=attempt.attempt_id))
        return effects

    def _end(self, job: Job, attempt: Attempt, ev: AttemptObserved) -> list[Effect]:
        attempt.exit_code, attempt.signal = ev.exit_code, ev.signal
        code = ev.exit_code
        if code == 0:
            attempt.outcome = "completed"
            return self._settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_OK, "exit code 0")
        if code == INFRA_EXIT_CODE:
            used = sum(1 for a in job.attempts if a.round == job.round and a.outcome == "infra_retry")
            if used < self.policy.infrastructure_retries:
                attempt.outcome = "infra_retry"
                return self._settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_RETRY,
                                    f"exit code 75 (infrastructure): retry {used + 1} of "
                                    f"{self.policy.infrastructure_retries} queued")
            reason = (f"exit code 75 (infrastructure) with no retries left "
                      f"({self.policy.infrastructure_retries} used)")
        elif ev.signal:
            reason = f"killed by signal {ev.signal} (exit code {code})"
        else:
            reason = f"exit code {code}"
        if ev.error:
            reason += f": {ev.error}"
        attempt.outcome = "failed"
        return self._settle(job, attempt, ev.ended_at or ev.at, Trigger.EXIT_FAIL, reason)

    def _settle(self, job: Job, attempt: Attempt, at: float, trigger: Trigger,
                reason: str) -> list[Effect]:
        self._transition(job, trigger)
        attempt.phase, attempt.ended_at = AttemptPhase.ENDED, at
        job.reason = reason
        self.version += 1
        return [self._write_job(job)]

    # -- decisions --------------------------------------------------------

    def concurrency_target(self) -> int:
        """Fixed at initial_concurrent_experiments until the adaptive controller lands."""
        return self.policy.initial_concurrent_experiments

    def next_launches(self, at: float) -> list[AttemptLaunched]:
        """Queued jobs to start now, oldest first, within the concurrency target."""
        free = self.concurrency_target() - self.count(JobState.RUNNING)
        launches = []
        for job in self.queued():
            if free <= 0:
                break
            if self.hold_reason(job) is None:
                launches.append(AttemptLaunched(
                    at=at, job_id=job.job_id, attempt_id=f"a{len(job.attempts) + 1}"))
                free -= 1
        return launches

    def hold_reason(self, job: Job) -> str | None:
        """Why a queued job cannot start regardless of free slots, or None."""
        profile = self.policy.profiles.get(job.profile)
        if profile is None:
            return f"profile {job.profile!r} is no longer defined by the task file"
        if profile.uses_gpu:
            return "gpu placement: no GPU inventory yet (GPU work is never run on the CPU)"
        return None

    def pending_reason(self, job: Job) -> str:
        held = self.hold_reason(job)
        if held:
            return held
        return (f"waiting for a slot: {self.count(JobState.RUNNING)} of "
                f"{self.concurrency_target()} running")

    # -- views ------------------------------------------------------------

    def queued(self) -> list[Job]:
        return sorted(self._by_state[JobState.QUEUED].values(), key=lambda j: j.order)

    def running(self) -> list[Job]:
        return list(self._by_state[JobState.RUNNING].values())

    def count(self, state: JobState) -> int:
        return len(self._by_state[state])

    def derived_views(self) -> list[Effect]:
        """Every job file and reply the journal implies, for repair at start."""
        effects: list[Effect] = [self._write_job(j) for j in self.jobs.values()]
        effects += [WriteReply(request_id=r.request_id, document=r.to_dict())
                    for r in self.replies.values()]
        return effects

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain values: equal snapshots mean equal schedulers."""
        return {
            "policy": self.policy.to_dict(),
            "coordinator": self.coordinator,
            "jobs": {jid: {**j.to_dict(), "round": j.round, "order": j.order}
                     for jid, j in sorted(self.jobs.items())},
            "replies": {rid: {**r.to_dict(), "digest": r.digest}
                        for rid, r in sorted(self.replies.items())},
            "next_order": self._next_order,
        }

    # -- helpers ----------------------------------------------------------

    def _job(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise InvalidTransition(f"no job {job_id}") from None

    def _transition(self, job: Job, trigger: Trigger) -> None:
        """The one place a job changes state; keeps the per-state index in step."""
        new = transition(job.job_id, job.state, trigger)
        del self._by_state[job.state][job.job_id]
        job.state = new
        self._by_state[new][job.job_id] = job

    def _take_order(self) -> int:
        self._next_order += 1
        return self._next_order

    def _write_job(self, job: Job) -> WriteJob:
        return WriteJob(job_id=job.job_id, directory=job.state.directory, document=job.to_dict())

    def _reply(self, ev: RequestSeen, outcome: str, job: Job | None,
               field: str | None = None, problem: str | None = None,
               reason: str | None = None) -> list[Effect]:
        if reason is None:
            reason = f"{field}: {problem}" if field else f"job {job.job_id} {job.state.value}"
        reply = Reply(request_id=ev.request_id, outcome=outcome,
                      job_id=job.job_id if job else None,
                      state=job.state.value if job else None,
                      reason=reason, digest=ev.digest, field=field, problem=problem)
        self.replies[reply.request_id] = reply
        self.version += 1
        return self._answer(ev.name, reply)

    @staticmethod
    def _answer(name: str, reply: Reply) -> list[Effect]:
        """Reply, and dispose of the request file; a rejection is filed before the reply."""
        reply_effect = WriteReply(request_id=reply.request_id, document=reply.to_dict())
        if reply.outcome == "rejected":
            return [RejectRequest(name=name, error=_error(
                reply.request_id, reply.field, reply.problem)), reply_effect]
        return [reply_effect, ConsumeRequest(name=name)]


def _released_in_a_row(job: Job) -> int:
    count = 0
    for attempt in reversed(job.attempts):
        if attempt.outcome != "released":
            break
        count += 1
    return count


def _find(job: Job, attempt_id: str) -> Attempt | None:
    return next((a for a in job.attempts if a.attempt_id == attempt_id), None)


def _error(request_id: str | None, field: str | None, problem: str | None) -> dict[str, Any]:
    return {"request_id": request_id, "field": field, "problem": problem,
            "reason": f"{field}: {problem}"}

