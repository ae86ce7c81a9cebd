"""The scheduler: ``handle(event) -> [effects]`` and ``next_launches(at)``.

This, with the desks it owns, is the only mutator of scheduling state. ``handle``
returns effects or raises ``InvalidTransition`` (a bug of ours); anything else is
a bug too. A peer's bad input never raises: it becomes a rejected reply.

A desk is a collaborator that sees the scheduler only through its narrow board:
``SubmissionDesk`` (core/submissions.py: request admission and admission
timeouts), ``AttemptDesk`` (core/attempts.py: an attempt's launch, what is seen of
it, its end), ``PassDesk`` (core/passes.py: the scheduling pass, which jobs start
and why the others wait), ``GenerationDesk`` (core/generations.py) and
``PreemptionDesk`` (core/preemption.py) and ``JobControlDesk`` (core/jobcontrol.py:
cancel, hold, release, update, dependencies). What stays here: the dispatch of events, the queue and its
indexes with why each queued job waits, control replies and the budget.

Durability contract with the daemon: ``version`` grows on every state change.
The daemon journals (and fsyncs) each event that changed the version before
it carries out any of that event's effects, so a transition is provisional
until committed and nothing outside the process sees it before then. Events
that change nothing (a retransmitted request, a READY sighting) are not
journaled; their effects are idempotent.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace
from operator import attrgetter
from typing import Any

from ..errors import InvalidTransition
from . import tenancy, trust
from .admission import ConcurrencyController, reason_kind, upper_bound
from .backlog import Backlog
from .attempts import AttemptDesk
from .effects import (
    DisposeControl, Effect, TerminateAttempts, WriteControlReply, WriteJob, WriteReply,
)
from .budget import (
    KINDS, LIMITS, RUNNING, Budget, Ledger, Spend, attempt_spend, raise_refusal, verdict,
    with_ceilings,
)
from .calibration import Calibration
from .events import (
    AdmissionExpired, AttemptLaunched, AttemptObserved, AttemptPreempted, AttemptResumed,
    ClaimsReleased, ClaimsSeen, ControlSeen,
    CoordinatorStarted, DeclineSeen, Event, GenerationPhase, HostSampled, IdleSeen, LeaseExpired,
    LeaseGranted, LeaseRevoked, NodeListed, NodeOutcome, NodeProbeStarted, RequestSeen,
    ResultSeen, RunStopRequested, BudgetAlert, BudgetVerdict,
)
from .generations import GenerationDesk
from .nodes import NodeRegistry
from .notices import notices
from .jobcontrol import JobControlDesk
from .model import Attempt, Job, Reply
from .observations import Envelope
from .passes import PassDesk
from .pickers.ledger import Usage
from .placement import DeviceLoad
from .policy import Policy
from .request import JOB_ACTIONS
from .preemption import PreemptionDesk
from .states import ControlOutcome, JobState, Trigger, Verdict, transition
from .shelf import Shelf
from .submissions import SubmissionDesk
from .supply import Generation, Maturity

_RANK = attrgetter("rank")
# the finished states, in the order a shelved job's mark names them (``Shelf.mark``)
FINISHED = tuple(state for state in JobState if state.terminal)


class Scheduler:
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        # a finished job and a reply change no more: each may wait in the last snapshot
        # (a finished job's mark there: its state's place in FINISHED)
        self.jobs: Shelf[Job] = Shelf(brought_back=self._brought_back)
        self.replies: Shelf[Reply] = Shelf()
        self.coordinator: dict[str, Any] | None = None
        self.version = 0
        # the jobs in memory in each state; a finished job's entry is its id alone (None),
        # since its object may go back on the shelf (a shelved one is in none: ``state_of``)
        self._by_state: dict[JobState, dict[str, Job | None]] = {state: {} for state in JobState}
        self._backlog = Backlog()  # the queued jobs in order, with counts (``_queue``)
        self._backlog_of = self._by_state[JobState.QUEUED]
        self._parked: dict[str, Job] = {}  # queued jobs no pass may start: held, or waiting
        self._next_order = 0
        self.stopped: str | None = None  # why the run was stopped: it admits nothing more
        self.stop_calls = 0  # soft: run_stop requests seen by this coordinator
        self.generations: dict[int, Generation] = {}
        # generation -> {job id: its peer}, of the jobs in it now: a generation's desk asks
        # for its jobs without building every finished one (kept by the submission desk)
        self.generation_jobs: dict[int, dict[str, str]] = {}
        self.control_replies: dict[str, dict[str, Any]] = {}
        self.calibration = Calibration()        # derived from journaled exits, so replayed
        self.usage = Usage()                    # fair share's ledger, likewise
        self.queue_usage = Usage()              # slot-seconds by queue (projects), likewise
        self.ledger = Ledger()                  # the budget's spend and verdict, likewise
        self.preempted_jobs: dict[str, None] = {}  # jobs with a preemption on record, likewise
        # R-BUD-2: a cluster backend's nodes and their health
        self.nodes = NodeRegistry(self.policy.node_cooldown_s)
        self._moved_from: dict[str, str] = {}    # scratch: a moved job's old directory
        self._ended: list[str] = []              # scratch: the jobs an event ended
        # Soft state, rebuilt from live observation after a restart and never journaled:
        self.host: HostSampled | None = None
        self.controller = ConcurrencyController.start(self.policy)
        self._pending: dict[str, str] = {}     # job id -> why it waits (``pending``)
        self._reason_dirty: set[str] = set()   # job files whose reason changed in kind
        self.samples_seen = 0
        self.idle_peers: dict[int, frozenset[str]] = {}
        self.idle_streak = 0                   # consecutive samples with unused capacity
        self.unused_slots = 0                  # free slots the last pass could not fill
        self.admissible: tuple[str, ...] = ()  # profiles that could start now
        self.release_pending: set[str] = set()  # leases whose host claim is not yet removed
        self._deadlines: list[tuple[float, str]] = []  # (admission deadline, job id), a heap
        # the desks: collaborators that see this scheduler through a narrow view (their board)
        self.submissions = SubmissionDesk(self)
        self.jobcontrol = JobControlDesk(self)
        self.attempts = AttemptDesk(self)
        self.generations_desk = GenerationDesk(self)
        self.preemption = PreemptionDesk(self)
        self.passes = PassDesk(self)

    # -- events -----------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise InvalidTransition(f"can't handle event {type(event).__name__}")
        self._ended = []
        effects = handler(self, event)
        if self.jobcontrol.settled:  # jobs that others wait for changed state (R-CTL-5)
            effects += self.jobcontrol.settle_dependents(event.at)
        return effects + notices(self, event, effects, self._ended)

    def _on_node(self, ev: NodeOutcome | NodeProbeStarted | NodeListed) -> list[Effect]:
        """R-BUD-2: what an attempt's end says of its node (core/nodes.py decides)."""
        self.nodes.handle(ev)
        self.version += 1
        return []

    def _on_started(self, ev: CoordinatorStarted) -> list[Effect]:
        self.policy = Policy.from_dict(ev.policy)
        self.controller = ConcurrencyController.start(self.policy)
        self.nodes.cooldown_s = self.policy.node_cooldown_s  # from its next cool-down on
        self.coordinator = {"pid": ev.pid, "host": ev.host, "boot_id": ev.boot_id,
                            "since": ev.at, "uid": ev.uid}
        self.version += 1
        # R-SUP-6: grants still waiting for an answer are revoked at a (re)start
        effects = self.generations_desk.revoke_outstanding(
            ev.at, "the coordinator restarted before the peer answered")
        running = tuple((j.job_id, j.current.attempt_id) for j in self.in_flight())
        if self.stopped and running:  # a stop the last coordinator did not finish
            effects.append(TerminateAttempts(attempts=running))
        elif not self.stopped:
            effects += self.preemption.reassert()
            effects += self.jobcontrol.reassert_cancels()
        return effects

    def _on_sampled(self, ev: HostSampled) -> list[Effect]:
        """Soft: controller step, admissible profiles, the idle-capacity streak."""
        slot_limited = self.passes.slot_limited_now()  # does work wait only for a slot?
        self.host = ev
        self.samples_seen += 1
        self.controller.observe(self.policy, ev.pressure, ev.capacity, slot_limited)
        self.admissible = self.generations_desk.admissible_profiles()
        spare = self.unused_slots - self.outstanding_leases() > 0
        self.idle_streak = self.idle_streak + 1 if spare and self.admissible else 0
        return []

    def _on_claims(self, ev: ClaimsSeen) -> list[Effect]:
        if self.host is not None and ev.others != self.host.others:
            self.host = replace(self.host, others=ev.others)
            self.samples_seen += 1
        return []

    def _on_control(self, ev: ControlSeen) -> list[Effect]:
        """An operator's or a peer's control request: to the desk of its action."""
        prior = self.control_replies.get(ev.request_id) if ev.request_id else None
        if prior is not None:
            if theirs := tenancy.foreign_id(prior["document"].get("uid"), ev.uid,
                                            self.coordinator_uid, "control request"):
                return [DisposeControl(name=ev.name, error=_problem("request_id", theirs))]
            if prior["digest"] == ev.digest:
                return _control_answer(ev.name, prior["document"])
            return [DisposeControl(name=ev.name, error=_problem(
                "request_id", "already used by a different control request"))]
        if ev.control is None:
            if ev.request_id is None:
                return [DisposeControl(name=ev.name, error=_problem(ev.error_field,
                                                                     ev.error_problem))]
            return self._control_reply(
                ev, ControlOutcome.REJECTED, f"{ev.error_field}: {ev.error_problem}", None)
        control = ev.control
        operator = trust.is_operator(ev.uid, self.coordinator_uid, self.policy.operators)
        if control.action in JOB_ACTIONS:
            return self.jobcontrol.on_control(ev, operator)
        if not operator:
            return self._control_reply(ev, ControlOutcome.REJECTED, (
                f"uid: {control.action} is for operators (root, the coordinator's uid, the "
                f"task's operators); this control file is owned by uid {ev.uid}"), None)
        if control.action == "run_stop":
            self.stop_calls += 1  # soft: tells this coordinator to exit once work is gone
            effects = self._stop(ev.at, f"stopped by the operator (control {ev.request_id})")
            return effects + self._control_reply(ev, ControlOutcome.OK, (
                "run stopping: admission frozen, running work is being terminated"), None)
        if control.action == "budget_raise":
            return self.raise_budget(ev)
        effects, outcome, reason, gen = self.generations_desk.control(ev)
        return effects + self._control_reply(ev, outcome, reason, gen)

    def _control_reply(self, ev: ControlSeen, outcome: ControlOutcome, reason: str,
                       gen: Generation | None, **more: Any) -> list[Effect]:
        document = {"request_id": ev.request_id, "outcome": outcome, "reason": reason,
                    "generation": self.generation_status(gen, soft=False) if gen else None,
                    **more}
        if ev.uid is not None:  # who asked, as the kernel says (R-SEC-5)
            document["uid"] = ev.uid
        self.control_replies[ev.request_id] = {"digest": ev.digest, "document": document}
        self.version += 1
        return _control_answer(ev.name, document)

    def _on_verdict(self, ev: BudgetVerdict) -> list[Effect]:
        """Advisory (seed 003): recorded and published, it holds and denies nothing."""
        if ev.verdict == self.ledger.verdict:
            return []
        self.ledger.verdict, self.ledger.since = ev.verdict, ev.at
        if ev.verdict in (None, Verdict.UNDER):
            self.ledger.unalerted = 0  # back under: what was enqueued before needs no alert
        self.version += 1
        return []

    def _on_alert(self, ev: BudgetAlert) -> list[Effect]:
        """Recorded and published (status.json ``budget.alerts``); it denies nothing."""
        ledger = self.ledger
        ledger.alerts += 1
        ledger.unalerted = 0
        ledger.last_alert = {"at": ev.at, "level": ev.level, "gpu_hours": ev.gpu_hours,
                             "cost": ev.cost, "limits": {"gpu_hours": ev.gpu_hours_limit,
                                                         "cost": ev.cost_limit},
                             "enqueues": ev.enqueues}
        self.version += 1
        return []

    def raise_budget(self, ev: ControlSeen) -> list[Effect]:
        """An operator's ``budget_raise`` (seed 003's ``raise``): each limit it names
        becomes the new ceiling, unless one is lower than the ceiling in force, or names
        a limit the run does not have; then nothing changes. The verdict follows
        (``due``)."""
        control, budget = ev.control, self.budget
        asked = {key: value for key in LIMITS if (value := getattr(control, key)) is not None}
        for key, value in asked.items():
            if refused := raise_refusal(budget, key, value):
                return self._control_reply(ev, ControlOutcome.REJECTED, f"{key}: {refused}",
                                           None, budget=_limits(budget))
        self.ledger.raised.update(asked)
        raised = self.budget
        return self._control_reply(ev, ControlOutcome.OK, "budget ceiling raised: " + ", ".join(
            f"{key} {getattr(budget, key):g} -> {getattr(raised, key):g}" for key in asked),
            None, budget=_limits(raised))

    @property
    def budget(self) -> Budget:
        """The run budget in force: the task file's, with the limits operators raised."""
        return with_ceilings(self.policy.budget, self.ledger.raised)

    def budget_snapshot(self, at: float) -> dict[str, Any] | None:
        """Where the budget stands at ``at``, for a launch record (seed 003 records it on
        every reservation); None when the task sets no budget."""
        budget = self.budget
        if not (budget.limited or budget.rates):
            return None
        total = sum(self.spend(at).values(), Spend())
        return {"verdict": verdict(budget, total), **total.to_dict(), "limits": _limits(budget)}

    # -- decisions --------------------------------------------------------

    def due(self, at: float) -> list[Event]:
        """Time-driven decisions: the generations' (``GenerationDesk.due``), and a budget
        verdict that differs from the journaled one, since running work spends by the
        second (R-BUD-1). Without limits (and none before) it costs nothing."""
        events = self.generations_desk.due(at) + self.submissions.expired(at)
        budget = self.budget
        if budget.limited or self.ledger.verdict is not None:
            total = sum(self.spend(at).values(), Spend())
            now = verdict(budget, total)
            if now != self.ledger.verdict:
                events.append(BudgetVerdict(at=at, verdict=now, cost=total.cost,
                                            gpu_hours=total.gpu_seconds / 3600))
            elif self.ledger.alert_due(at):
                events.append(BudgetAlert(
                    at=at, level=now, gpu_hours=total.gpu_seconds / 3600, cost=total.cost,
                    gpu_hours_limit=budget.gpu_hours, cost_limit=budget.cost,
                    enqueues=self.ledger.unalerted))
        return events

    def spend(self, at: float) -> dict[str, Spend]:
        """The run's spend at ``at`` by kind: the ended attempts' charges, and what the
        running (and suspended) ones have spent so far (``running``)."""
        running = sum((self._spent(job, job.current, at) for job in self.in_flight()), Spend())
        ended = self.ledger.ended
        return {**{kind: ended.get(kind, Spend()) for kind in KINDS}, RUNNING: running}

    def _spent(self, job: Job, attempt: Attempt, until: float) -> Spend:
        """Suspended time is not spent (R-POL-3): the job it made room for spends it."""
        return attempt_spend(len(attempt.gpus), attempt.active_seconds(until),
                             self.policy.budget.rates.get(job.profile))

    def concurrency_target(self) -> int:
        """Off this host the configured maximum: the host's pressure is not the jobs'. Of
        several backends (issue 28) one pool; this host's jobs also within the pass's
        ``here_room``."""
        if self.policy.backends:
            return self.upper_bound()
        if not self.policy.capabilities.on_this_host:
            return self.policy.max_concurrent_experiments
        return self.controller.target

    def host_target(self) -> int:
        """This host's slots as its controller sets them (a run of several backends keeps
        its local jobs within them)."""
        return self.controller.target

    def upper_bound(self) -> int:
        return upper_bound(self.policy, self.host.capacity if self.host else None)

    # the pass desk's proposals and views, as the daemon, status and tests ask them

    def next_launches(self, at: float) -> list[AttemptLaunched]:
        """Queued jobs to start now, in the pickers' order (``PassDesk.next_launches``)."""
        return self.passes.next_launches(at)

    def refresh_reasons(self) -> None:
        """Bring the pending reasons (and the slot-limited flag) up to date."""
        self.passes.refresh_reasons()

    def real_loads(self) -> list[DeviceLoad] | None:
        """Per-device load as placement sees it (``PassDesk.real_loads``)."""
        return self.passes.real_loads()

    def held_envelopes(self) -> list[Envelope]:
        """The GPU envelopes this run's running and suspended jobs hold."""
        return self.passes.held_envelopes()

    def _hold(self, job: Job, reason: str) -> None:
        before = self._pending.get(job.job_id, "")
        if before != reason:
            if reason_kind(before) != reason_kind(reason):
                self._reason_dirty.add(job.job_id)
            self._pending[job.job_id] = reason

    def reason_updates(self) -> list[Effect]:
        """Job files of queued jobs whose pending reason changed in kind since last asked.

        Soft: not journaled; the reason's live numbers reach only status.json."""
        self.refresh_reasons()
        dirty, self._reason_dirty = self._reason_dirty, set()
        return [self._write_job(self.jobs[j]) for j in sorted(dirty)
                if self.jobs[j].state is JobState.QUEUED]

    def reasons_of_written(self, effects: list[Effect]) -> list[Effect]:
        """The job files ``effects`` writes for jobs that stay queued, again, saying why
        each waits as the batch's pass found it (the rest of its walk run if it was kept;
        with no slot free, each job's own reason: ``PassDesk.reasons_of``): an accepted
        job that finds no slot is written once, with its pending reason, not a second
        time at the next status (``reason_updates``)."""
        written = {e.job_id for e in effects
                   if isinstance(e, WriteJob) and e.directory == "queued"}
        if not written:
            return []
        self._queue()  # a held or waiting job (``_parked``) says so, from ``_enter_queue``
        self.passes.reasons_of([self.jobs[j] for j in sorted(written)
                                if self.jobs[j].state is JobState.QUEUED
                                and j not in self._parked])
        fresh = sorted(j for j in written & self._reason_dirty
                       if self.jobs[j].state is JobState.QUEUED)
        self._reason_dirty.difference_update(fresh)
        return [self._write_job(self.jobs[j]) for j in fresh]

    # -- views ------------------------------------------------------------

    @property
    def pending(self) -> dict[str, str]:
        """Job id -> why it waits (Slurm's Reason), as the last pass found; read-only."""
        self.passes.finish_rest()
        return self._pending

    def queued(self) -> list[Job]:
        """Every queued job, held and waiting ones too, in rank order (a copy)."""
        jobs = self._queue().jobs()
        if not self._parked:
            return jobs
        return list(heapq.merge(jobs, sorted(self._parked.values(), key=_RANK), key=_RANK))

    def queued_by_class(self) -> Counter[str]:
        """Every queued job (held and waiting ones too) counted by work class, from the
        backlog's counts: status reads it on every render."""
        counts = Counter(self._queue().by_class)
        counts.update(job.request.work_class for job in self._parked.values())
        return counts

    def _queue(self) -> Backlog:
        """The index of the queued jobs a pass may start (not the held or waiting ones:
        ``_parked``), rebuilt when the per-state index was replaced (``snapshot.restore``
        installs it directly)."""
        queued = self._by_state[JobState.QUEUED]
        if self._backlog_of is not queued:
            self._parked, eligible = {}, []
            self._deadlines = [(job.admission_deadline, job.job_id) for job in queued.values()
                               if job.admission_deadline is not None]
            heapq.heapify(self._deadlines)
            for job in queued.values():
                if (why := self.jobcontrol.parked_reason(job)) is None:
                    eligible.append(job)
                else:
                    self._parked[job.job_id] = job
                    self._pending[job.job_id] = why
            self._backlog, self._backlog_of = Backlog(eligible), queued
        return self._backlog

    def _enter_queue(self, job: Job) -> None:
        """A job became queued: into the backlog, or parked with the reason it waits."""
        backlog = self._queue()  # built (with the deadlines) before ``_parked`` changes
        if job.admission_deadline is not None:
            heapq.heappush(self._deadlines, (job.admission_deadline, job.job_id))
        if (why := self.jobcontrol.parked_reason(job)) is None:
            backlog.add(job)
        else:
            self._parked[job.job_id] = job
            self._hold(job, why)

    def _leave_queue(self, job: Job) -> None:
        if self._parked.pop(job.job_id, None) is None:
            self._queue().remove(job)

    def _enter(self, job: Job) -> None:
        """A job just accepted: into the queue, then the per-state index."""
        self._enter_queue(job)  # before the per-state index knows it (``_queue``)
        self._by_state[job.state][job.job_id] = job

    def _requeue_in_place(self, job: Job, change: Callable[[], None]) -> None:
        """Change what decides where a queued job stands (its hold, its priority, its
        dependencies' states) between taking it out of the queue and putting it back."""
        self.passes.finish_rest()  # the unfinished walk saw the queue as it was
        self._leave_queue(job)
        change()
        self._pending.pop(job.job_id, None)  # a pass restates why it waits
        self._enter_queue(job)

    def running(self) -> list[Job]:
        return list(self._by_state[JobState.RUNNING].values())

    def suspended(self) -> list[Job]:
        return list(self._by_state[JobState.SUSPENDED].values())

    def in_flight(self) -> list[Job]:
        """Jobs with an attempt open: running, then suspended."""
        return [*self.running(), *self.suspended()]

    # the generation desk's views and proposals, as the daemon, status and tests ask them

    def current_generation(self) -> Generation | None:
        return self.generations_desk.current_generation()

    def generation_status(self, gen: Generation, soft: bool = True) -> dict[str, Any]:
        return self.generations_desk.status(gen, soft)

    def maturity(self, gen: Generation) -> Maturity:
        return self.generations_desk.maturity(gen)

    def outstanding_leases(self) -> int:
        return self.generations_desk.outstanding_leases()

    def own_claims(self) -> list[Envelope]:
        return self.generations_desk.own_claims()

    def next_grants(self, at: float) -> list[LeaseGranted]:
        return self.generations_desk.next_grants(at)

    def state_of(self, job_id: str) -> JobState | None:
        """A job's state without building it (a finished one waits on the shelf)."""
        if (job := self.jobs.in_memory(job_id)) is not None:
            return job.state
        mark = self.jobs.mark(job_id)
        return None if mark is None else FINISHED[mark]

    def count(self, state: JobState) -> int:
        shelved = self.jobs.marked(FINISHED.index(state)) if state.terminal else 0
        return len(self._by_state[state]) + shelved

    def _brought_back(self, job_id: str, job: Job) -> None:
        """A finished job off the shelf is in memory (the caller may change it)."""
        self._by_state[job.state][job_id] = None

    def derived_views(self, current: Callable[[str, str], bool] | None = None,
                      shelved: tuple[Iterable[str], Iterable[str]] | None = None
                      ) -> list[Effect]:
        """Every job file and reply the journal implies, for repair at start.

        ``current(directory, key)`` (a job's state directory and id, or ``"replies"`` and a
        request id) may say a file is known to be up to date: its document is not built.
        ``shelved``: of the jobs and replies on the shelf, only these (their ids, and
        request ids)."""
        current = current or (lambda directory, key: False)
        if shelved is None:
            jobs, replies = (job_id for job_id, _ in self.jobs.shelved()), self.replies
        else:
            jobs, replies = shelved[0], (*shelved[1], *(r.request_id for r in self.replies.live()))
        effects: list[Effect] = [self._write_job(self.jobs.peek(job_id))
                                 for state, in_memory in self._by_state.items()
                                 for job_id in in_memory if not current(state.directory, job_id)]
        effects += [self._write_job(self.jobs.peek(job_id)) for job_id in jobs
                    if not current("done", job_id)]  # a finished job's directory
        effects += [WriteReply(request_id=request_id,
                               document=self.replies.peek(request_id).to_dict())
                    for request_id in replies if not current("replies", request_id)]
        effects += [WriteControlReply(request_id=rid, document=c["document"])
                    for rid, c in self.control_replies.items()]
        return effects + self.generations_desk.views()

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
            "usage": self.usage.to_dict(),
            "queue_usage": self.queue_usage.to_dict(),
            "budget": self.ledger.to_dict(),
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
        effects += self.generations_desk.revoke_outstanding(at, f"run stopped ({reason})")
        running = tuple((j.job_id, j.current.attempt_id) for j in self.in_flight())
        if running:
            effects.append(TerminateAttempts(attempts=running))
        self.version += 1
        return effects

    def _transition(self, job: Job, trigger: Trigger) -> None:
        """The one place a job changes state; keeps the per-state index in step."""
        new = transition(job.job_id, job.state, trigger)
        if job.state is JobState.QUEUED or new is JobState.QUEUED:
            if trigger is not Trigger.LAUNCH:  # the unfinished walk saw the queue as it was
                self.passes.finish_rest()
            if job.state is JobState.QUEUED:
                self._leave_queue(job)
        self.jobcontrol.changed_state(job.job_id)
        if new is not JobState.QUEUED or job.state is JobState.SUSPENDED:
            self._pending.pop(job.job_id, None)  # why it waited to start, or to resume
        if JobState.RUNNING in (job.state, new):
            self.passes.running_moved(job.job_id)
        if new.directory != job.state.directory:
            self._moved_from.setdefault(job.job_id, job.state.directory)
            if new.terminal:
                self._ended.append(job.job_id)
        if new is JobState.QUEUED:
            self._enter_queue(job)  # before the per-state index knows it (``_queue``)
        del self._by_state[job.state][job.job_id]
        job.state = new
        self._by_state[new][job.job_id] = None if new.terminal else job

    @property
    def coordinator_uid(self) -> int | None:
        """The uid the coordinator runs as (R-SEC-3); None before one said (older journals)."""
        return self.coordinator.get("uid") if self.coordinator else None

    def _not_theirs(self, job: Job, uid: int | None) -> str | None:
        """Why a file of ``uid`` may not name ``job`` (a job belongs to the uid that
        created it), or None. Operators act on others' jobs through control requests."""
        coordinator = self.coordinator_uid
        if trust.owner(job.uid, coordinator) == trust.owner(uid, coordinator):
            return None
        return (f"job {job.job_id} ({job.request.tag!r}) belongs to uid "
                f"{trust.owner(job.uid, coordinator)}; this file is owned by uid "
                f"{trust.owner(uid, coordinator)}, and a job is its submitter's alone")

    @property
    def last_order(self) -> int:
        """The submission order of the job submitted last (0: none yet): every job known
        now has an order up to it, one submitted later a greater one
        (``AttemptTally.forget_finished``)."""
        return self._next_order

    def resume_orders_after(self, last_order: int) -> None:
        """Number the next submission after ``last_order``, the ``last_order`` a snapshot
        saved: a job submitted after a restore then gets a greater order than every job
        before it, shelved ones included, as ``last_order`` promises."""
        self._next_order = last_order

    def _take_order(self) -> int:
        self._next_order += 1
        return self._next_order

    def job_document(self, job: Job) -> dict[str, Any]:
        """What the job's file says: its state, and for a queued job the pending reason."""
        document = job.to_dict()
        if job.state is JobState.QUEUED and job.job_id in self._pending:
            document["reason"] = self._pending[job.job_id]
        return document

    def written_document(self, write: Any) -> dict[str, Any]:
        """What a file effect (one with a ``document``: a job file, a reply, a generation
        file) puts in its file: its own document, or for the core's job writes the job as
        it stands now (rendered when written: ``WriteJob``)."""
        if write.document is not None:
            return write.document
        return self.job_document(self.jobs.peek(write.job_id))

    def _write_job(self, job: Job) -> WriteJob:
        moved_from = self._moved_from.pop(job.job_id, None)
        return WriteJob(job_id=job.job_id, directory=job.state.directory,
                        replaces=moved_from if moved_from != job.state.directory else None)

    def _closed_to_new_work(self, generation: int | None) -> str | None:
        gen = self.generations.get(generation) if generation is not None else None
        if gen is None or gen.accepting:
            return None
        return f"generation {generation} is {gen.phase}: queued and new work is rejected"


_HANDLERS = {
    RequestSeen: lambda sched, ev: sched.submissions.on_request(ev),
    AttemptLaunched: lambda sched, ev: sched.attempts.on_launched(ev),
    AttemptObserved: lambda sched, ev: sched.attempts.on_observed(ev),
    CoordinatorStarted: Scheduler._on_started,
    HostSampled: Scheduler._on_sampled,
    ClaimsSeen: Scheduler._on_claims,
    ControlSeen: Scheduler._on_control,
    ResultSeen: lambda sched, ev: sched.generations_desk.on_result(ev),
    IdleSeen: lambda sched, ev: sched.generations_desk.on_idle(ev),
    DeclineSeen: lambda sched, ev: sched.generations_desk.on_decline(ev),
    LeaseGranted: lambda sched, ev: sched.generations_desk.on_granted(ev),
    LeaseExpired: lambda sched, ev: sched.generations_desk.on_expired(ev),
    LeaseRevoked: lambda sched, ev: sched.generations_desk.on_revoked(ev),
    ClaimsReleased: lambda sched, ev: sched.generations_desk.on_claims_released(ev),
    GenerationPhase: lambda sched, ev: sched.generations_desk.on_phase(ev),
    RunStopRequested: lambda sched, ev: sched._stop(ev.at, ev.reason),
    AttemptPreempted: lambda sched, ev: sched.preemption.on_preempted(ev),
    AttemptResumed: lambda sched, ev: sched.preemption.on_resumed(ev),
    BudgetVerdict: Scheduler._on_verdict,
    BudgetAlert: Scheduler._on_alert,
    AdmissionExpired: lambda sched, ev: sched.submissions.on_expired(ev),
    NodeOutcome: Scheduler._on_node,
    NodeListed: Scheduler._on_node,
    NodeProbeStarted: Scheduler._on_node,
}


def _limits(budget: Budget) -> dict[str, float | None]:
    return {key: getattr(budget, key) for key in LIMITS}


def _control_answer(name: str, document: dict[str, Any]) -> list[Effect]:
    """Like a request: a rejection is filed before the reply, an answer before the consume."""
    reply = WriteControlReply(request_id=document["request_id"], document=document)
    if document["outcome"] == ControlOutcome.REJECTED:
        return [DisposeControl(name=name, error={"request_id": document["request_id"],
                                                  "reason": document["reason"]}), reply]
    return [reply, DisposeControl(name=name)]


def _problem(field: str | None, problem: str | None) -> dict[str, Any]:
    return {"field": field, "problem": problem, "reason": f"{field}: {problem}"}
