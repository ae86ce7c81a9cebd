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

import re
from dataclasses import replace
from functools import lru_cache
from typing import Any

from ..errors import InvalidTransition
from .admission import ConcurrencyController, pressure_hold, upper_bound
from .effects import (
    AbortAttempt, ConsumeRequest, Effect, RejectRequest, SpawnAttempt, TerminateAttempts,
    WriteGo, WriteJob, WriteReply,
)
from .calibration import Calibration
from .events import (
    AttemptLaunched, AttemptObserved, ClaimsReleased, ClaimsSeen, ControlSeen,
    CoordinatorStarted, DeclineSeen, Event, GenerationPhase, HostSampled, IdleSeen, LeaseExpired,
    LeaseGranted, LeaseRevoked, RequestSeen, ResultSeen, RunStopRequested,
)
from .generations import GenerationDesk
from .identity import fingerprint, job_id_for
from .model import Attempt, AttemptPhase, Job, Reply
from .observations import Envelope
from .placement import Demand, DeviceLoad, device_loads, held_envelope, place, with_envelopes
from .policy import Policy
from .states import JobState, Trigger, transition
from .supply import MATURE, Generation

INFRA_EXIT_CODE = 75
MAX_RELEASES_IN_A_ROW = 3  # a barrier that keeps failing is an error, not a retry loop
REPLAYABLE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.SUSPENDED,
                     JobState.COMPLETED, JobState.DRAINED_UNKNOWN)


class Scheduler(GenerationDesk):
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.jobs: dict[str, Job] = {}
        self.replies: dict[str, Reply] = {}
        self.coordinator: dict[str, Any] | None = None
        self.version = 0
        self._by_state: dict[JobState, dict[str, Job]] = {state: {} for state in JobState}
        self._next_order = 0
        self.stopped: str | None = None  # why the run was stopped: it admits nothing more
        self.stop_calls = 0  # soft: run_stop requests seen by this coordinator
        self.generations: dict[int, Generation] = {}
        self.control_replies: dict[str, dict[str, Any]] = {}
        self.calibration = Calibration()        # derived from journaled exits, so replayed
        self._lease_effects: list[Effect] = []  # scratch: lease files touched by one request
        # Soft state, rebuilt from live observation after a restart and never journaled:
        self.host: HostSampled | None = None
        self.controller = ConcurrencyController.start(self.policy)
        self.pending: dict[str, str] = {}      # job id -> why it waits (Slurm's Reason)
        self._reason_dirty: set[str] = set()   # job files whose reason changed in kind
        self._slot_limited = False             # last pass held work only for a free slot
        self._last_pass: tuple[int, int] | None = None
        self._last_at = 0.0
        self._reasons_stale = False            # a pass was skipped: no slot was free
        self.samples_seen = 0
        self.idle_peers: dict[int, frozenset[str]] = {}
        self.idle_streak = 0                   # consecutive samples with unused capacity
        self.unused_slots = 0                  # free slots the last pass could not fill
        self.admissible: tuple[str, ...] = ()  # profiles that could start now
        self.release_pending: set[str] = set()  # leases whose host claim is not yet removed

    # -- events -----------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise InvalidTransition(f"can't handle event {type(event).__name__}")
        return handler(self, event)

    def _on_started(self, ev: CoordinatorStarted) -> list[Effect]:
        self.policy = Policy.from_dict(ev.policy)
        self.controller = ConcurrencyController.start(self.policy)
        self.coordinator = {"pid": ev.pid, "host": ev.host, "boot_id": ev.boot_id,
                            "since": ev.at}
        self.version += 1
        effects = self._revoke_interrupted(ev.at)
        running = tuple((j.job_id, j.current.attempt_id) for j in self.running())
        if self.stopped and running:  # a stop the last coordinator did not finish
            effects.append(TerminateAttempts(attempts=running))
        return effects

    def _on_sampled(self, ev: HostSampled) -> list[Effect]:
        """Soft: controller step, admissible profiles, the idle-capacity streak."""
        self.refresh_reasons()  # the controller needs to know if work waits only for a slot
        self.host = ev
        self.samples_seen += 1
        self.controller.observe(self.policy, ev.pressure, ev.capacity, self._slot_limited)
        self.admissible = self.admissible_profiles()
        spare = self.unused_slots - self.outstanding_leases() > 0
        self.idle_streak = self.idle_streak + 1 if spare and self.admissible else 0
        return []

    def _on_claims(self, ev: ClaimsSeen) -> list[Effect]:
        if self.host is not None and ev.others != self.host.others:
            self.host = replace(self.host, others=ev.others)
            self.samples_seen += 1
        return []

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
        if self.stopped and (job is None or job.state not in REPLAYABLE_STATES):
            return self._reply(ev, "rejected", job, "run", f"the run is stopped ({self.stopped})")
        generation = request.generation
        if generation is None and (current := self.current_generation()) is not None:
            generation = current.number
        closed = self._closed_to_new_work(generation)
        if job is None:
            if closed:
                return self._reply(ev, "rejected", None, "generation", closed)
            job = Job(job_id=job_id, request=request, profile=profile, fingerprint=digest,
                      submitted_at=ev.at, order=self._take_order(), generation=generation)
            self.jobs[job_id] = job
            self._by_state[job.state][job_id] = job
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
        if closed:
            return self._reply(ev, "rejected", job, "generation", closed)
        self._transition(job, Trigger.RETRY_TERMINAL)
        job.generation = generation
        job.request, job.profile, job.fingerprint = request, profile, digest
        job.round += 1
        job.reason = f"retry accepted (round {job.round})"
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
                "request_id": req.request_id,
                "peer": req.peer, "profile": job.profile, "work_class": req.work_class,
                "gpus": list(attempt.gpus), "decided_at": ev.at, "round": job.round,
            })]

    def _on_observed(self, ev: AttemptObserved) -> list[Effect]:
        job = self.jobs.get(ev.job_id)
        attempt = _find(job, ev.attempt_id) if job else None
        if attempt is None or attempt.phase == AttemptPhase.ENDED:
            return []  # a late sighting of an attempt already settled
        if self.stopped and not (ev.exited and ev.exit_code == 0) and (ev.exited or not ev.alive):
            attempt.exit_code, attempt.signal = ev.exit_code, ev.signal
            attempt.outcome = "cancelled"
            return self._settle(job, attempt, ev.at, Trigger.CANCEL,
                                f"run stopped ({self.stopped})")
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
            barrier = AbortAttempt if self.stopped else WriteGo  # a stopped run starts nothing
            effects.append(barrier(job_id=job.job_id, attempt_id=attempt.attempt_id))
        return effects

    def _end(self, job: Job, attempt: Attempt, ev: AttemptObserved) -> list[Effect]:
        attempt.exit_code, attempt.signal, attempt.failure = ev.exit_code, ev.signal, ev.failure
        code = ev.exit_code
        if code == 0:
            attempt.outcome = "completed"
            if job.request.eta_s is not None:
                self.calibration.observe((ev.ended_at or ev.at) - attempt.started_at,
                                         job.request.eta_s)
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
        if job.state is JobState.QUEUED and (closed := self._closed_to_new_work(job.generation)):
            self._transition(job, Trigger.FREEZE)  # its generation's queue is frozen
            job.reason = f"{reason}; not requeued: {closed}"
        self.version += 1
        return [self._write_job(job)]

    # -- decisions --------------------------------------------------------

    def concurrency_target(self) -> int:
        return self.controller.target

    def upper_bound(self) -> int:
        return upper_bound(self.policy, self.host.capacity if self.host else None)

    def next_launches(self, at: float) -> list[AttemptLaunched]:
        """Queued jobs to start now, oldest first, and why each other one waits.

        One pass over the queue: a job starts when a slot is free, its declared
        pressure domains are calm and, for GPU work, a placement exists. A demand
        that failed once in a pass is not tried again in that pass (R-POL-4), so
        the pass stays linear in the queue. Nothing is recomputed while neither
        the state nor the host sample changed since the last pass, and with no free
        slot nothing can start, so why each job waits is worked out only when asked
        (``refresh_reasons``): a burst of submissions then costs no pass per request."""
        if self._last_pass == (self.version, self.samples_seen) or self.stopped:
            return []
        self._last_pass, self._last_at = (self.version, self.samples_seen), at
        if self.concurrency_target() <= self.count(JobState.RUNNING):
            self._reasons_stale, self.unused_slots = True, 0
            return []
        return self._pass(at)

    def refresh_reasons(self) -> None:
        """Bring the pending reasons (and the slot-limited flag) up to date."""
        if self._reasons_stale and not self.stopped:
            self._pass(self._last_at)

    def _pass(self, at: float) -> list[AttemptLaunched]:
        self._reasons_stale = False
        target = self.concurrency_target()
        free = target - self.count(JobState.RUNNING)
        loads = self.real_loads()
        unsatisfiable: dict[str, str] = {}
        verdicts: dict[str, str | None] = {}  # profile -> hold reason, once the slots are full
        launches: list[AttemptLaunched] = []
        self._slot_limited = False
        queue = self.queued()
        mature = [j for j in queue if j.request.work_class == MATURE]
        exploring = len(queue) - len(mature)
        for job in [*mature, *(j for j in queue if j.request.work_class != MATURE)]:
            if (held := self.assessment_hold(job, at)) is not None:
                self._hold(job, held)
                continue
            if job.request.work_class == MATURE and 0 < free <= min(
                    self.policy.exploration_reserve, exploring):
                self._hold(job, f"exploration_reserve: {free} slot(s) kept for queued "
                                "exploration")
                continue
            if free <= 0:
                if job.profile not in verdicts:
                    verdicts[job.profile] = self._admit(job, loads, unsatisfiable)[1]
                self._slot_limited |= verdicts[job.profile] is None
                self._hold(job, verdicts[job.profile] or
                           f"waiting for a slot: {target - free} of {target} running")
                continue
            gpus, reason = self._admit(job, loads, unsatisfiable)
            if reason:
                self._hold(job, reason)
                continue
            launches.append(AttemptLaunched(at=at, job_id=job.job_id,
                                            attempt_id=f"a{len(job.attempts) + 1}", gpus=gpus))
            free -= 1
            if job.request.work_class != MATURE:
                exploring -= 1
            if gpus:
                profile = self.policy.profiles[job.profile]
                loads = with_envelopes(loads, [held_envelope(profile, u, job.job_id)
                                                for u in gpus])
        self.unused_slots = max(0, free)
        return launches

    def _admit(self, job: Job, loads: list[DeviceLoad] | None,
               unsatisfiable: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
        """(GPU UUIDs, None) when the job may start now, else ((), why not).

        Every hold depends only on the profile within one pass, and a pass only ever
        takes capacity away, so a profile held once stays held for the pass."""
        if job.profile in unsatisfiable:
            return (), unsatisfiable[job.profile]
        profile = self.policy.profiles.get(job.profile)
        if profile is None:
            reason = f"profile {job.profile!r} is no longer defined by the task file"
        elif held := pressure_hold(self.policy, profile,
                                   self.host.pressure if self.host else None):
            reason = held
        elif not profile.uses_gpu:
            return (), None
        elif loads is None:
            error = self.host.gpus.error if self.host and self.host.gpus else "not sampled yet"
            reason = (f"gpu placement: no GPU inventory ({error}); "
                      "GPU work is never run on the CPU")
        else:
            gpus, reason = place(Demand.of(profile), loads)
            if not reason:
                return gpus, None
        unsatisfiable[job.profile] = reason
        return (), reason

    def real_loads(self) -> list[DeviceLoad] | None:
        """Per-device load as placement sees it (real allocations; claims never block)."""
        sample = self.host.gpus if self.host else None
        if sample is None or not sample.devices:  # a partial sample still places on what it saw
            return None
        real = [e for e in self.host.others if not e.speculative]
        return device_loads(sample, [*self.held_envelopes(), *real])

    def held_envelopes(self) -> list[Envelope]:
        """The GPU envelopes this run's running jobs hold, through every phase of a job."""
        envelopes = []
        for job in self.running():
            profile = self.policy.profiles.get(job.profile)
            for uuid in job.current.gpus:
                envelopes.append(held_envelope(profile, uuid, job.job_id) if profile else
                                 Envelope(uuid=uuid, utilization_pct=100.0, memory_mib=0.0,
                                          exclusive=True, owner=job.job_id))
        return envelopes

    def _hold(self, job: Job, reason: str) -> None:
        before = self.pending.get(job.job_id, "")
        if before != reason:
            if _reason_kind(before) != _reason_kind(reason):
                self._reason_dirty.add(job.job_id)
            self.pending[job.job_id] = reason

    def reason_updates(self) -> list[Effect]:
        """Job files of queued jobs whose pending reason changed in kind since last asked.

        Soft: not journaled; the reason's live numbers reach only status.json."""
        self.refresh_reasons()
        dirty, self._reason_dirty = self._reason_dirty, set()
        return [self._write_job(self.jobs[j]) for j in sorted(dirty)
                if self.jobs[j].state is JobState.QUEUED]

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
        return effects + self.generation_views()

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
            "generations": {n: g.to_dict() for n, g in sorted(self.generations.items())},
            "stopped": self.stopped,
            "control_replies": dict(sorted(self.control_replies.items())),
            "calibration": [self.calibration.count, self.calibration.total,
                            self.calibration.total_sq],
        }

    # -- helpers ----------------------------------------------------------

    def _job(self, job_id: str) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise InvalidTransition(f"no job {job_id}") from None

    def _stop(self, at: float, reason: str) -> list[Effect]:
        """Freeze all admission for good, cancel queued work, revoke leases, and terminate
        the running attempts (R-SUP-8). Idempotent: a second stop changes nothing."""
        if self.stopped:
            return []
        self.stopped = reason
        effects: list[Effect] = []
        for job in self.queued():
            self._transition(job, Trigger.CANCEL)
            job.reason = f"run stopped before it started ({reason})"
            effects.append(self._write_job(job))
        for gen in self.generations.values():
            for lease in gen.outstanding():
                effects += self._end_lease(gen, lease, "revoked", at, f"run stopped ({reason})")
        running = tuple((j.job_id, j.current.attempt_id) for j in self.running())
        if running:
            effects.append(TerminateAttempts(attempts=running))
        self.version += 1
        return effects

    def _transition(self, job: Job, trigger: Trigger) -> None:
        """The one place a job changes state; keeps the per-state index in step."""
        new = transition(job.job_id, job.state, trigger)
        if new is not JobState.QUEUED:
            self.pending.pop(job.job_id, None)
        del self._by_state[job.state][job.job_id]
        job.state = new
        self._by_state[new][job.job_id] = job

    def _take_order(self) -> int:
        self._next_order += 1
        return self._next_order

    def _write_job(self, job: Job) -> WriteJob:
        document = job.to_dict()
        if job.state is JobState.QUEUED and job.job_id in self.pending:
            document["reason"] = self.pending[job.job_id]
        return WriteJob(job_id=job.job_id, directory=job.state.directory, document=document)

    def _reply(self, ev: RequestSeen, outcome: str, job: Job | None,
               field: str | None = None, problem: str | None = None,
               reason: str | None = None) -> list[Effect]:
        if reason is None:
            reason = (f"{field}: {problem}" if field is not None
                      else f"job {job.job_id} {job.state.value}")
        request, lease = ev.request, None
        if request is not None and outcome != "rejected":
            if request.lease is not None:
                lease = self._use_lease(request.peer, request.lease, ev.at)
            if outcome in ("accepted", "retry_accepted") and job.generation in self.generations:
                cooldowns = self.generations[job.generation].cooldowns
                for key in [k for k in cooldowns if k[0] == request.peer]:
                    del cooldowns[key]  # a new submission resets the peer's decline backoff
        reply = Reply(request_id=ev.request_id, outcome=outcome,
                      job_id=job.job_id if job else None,
                      state=job.state.value if job else None,
                      reason=reason, digest=ev.digest, field=field, problem=problem, lease=lease)
        self.replies[reply.request_id] = reply
        self.version += 1
        touched, self._lease_effects = self._lease_effects, []
        return touched + self._answer(ev.name, reply)

    def _closed_to_new_work(self, generation: int | None) -> str | None:
        gen = self.generations.get(generation) if generation is not None else None
        if gen is None or gen.accepting:
            return None
        return f"generation {generation} is {gen.phase}: queued and new work is rejected"

    @staticmethod
    def _answer(name: str, reply: Reply) -> list[Effect]:
        """Reply, and dispose of the request file; a rejection is filed before the reply."""
        reply_effect = WriteReply(request_id=reply.request_id, document=reply.to_dict())
        if reply.outcome == "rejected":
            return [RejectRequest(name=name, error=_error(
                reply.request_id, reply.field, reply.problem)), reply_effect]
        return [reply_effect, ConsumeRequest(name=name)]


_HANDLERS = {
    RequestSeen: Scheduler._on_request,
    AttemptLaunched: Scheduler._on_launched,
    AttemptObserved: Scheduler._on_observed,
    CoordinatorStarted: Scheduler._on_started,
    HostSampled: Scheduler._on_sampled,
    ClaimsSeen: Scheduler._on_claims,
    ControlSeen: Scheduler._on_control,
    ResultSeen: Scheduler._on_result,
    IdleSeen: Scheduler._on_idle,
    DeclineSeen: Scheduler._on_decline,
    LeaseGranted: Scheduler._on_granted,
    LeaseExpired: Scheduler._on_expired,
    LeaseRevoked: Scheduler._on_revoked,
    ClaimsReleased: Scheduler._on_claims_released,
    GenerationPhase: Scheduler._on_phase,
    RunStopRequested: lambda sched, ev: sched._stop(ev.at, ev.reason),
}


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



@lru_cache(maxsize=1024)
def _reason_kind(reason: str) -> str:
    """A reason without its live numbers: 'cpu pressure #% > #%'."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)
