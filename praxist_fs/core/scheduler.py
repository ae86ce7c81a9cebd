"""The scheduler: ``handle(event) -> [effects]`` and ``next_launches(at)``.

This, with the desks it owns, is the only mutator of scheduling state. ``handle``
returns effects or raises ``InvalidTransition`` (a bug of ours); anything else is
a bug too. A peer's bad input never raises: it becomes a rejected reply.

A desk is a collaborator that sees the scheduler only through its narrow board:
``SubmissionDesk`` (core/submissions.py: request admission and admission
timeouts), ``AttemptDesk`` (core/attempts.py: an attempt's launch, what is seen of
it, its end), ``GenerationDesk`` (core/generations.py) and ``PreemptionDesk``
(core/preemption.py); job control is a mixin (core/jobcontrol.py). What stays
here: the dispatch of events, the scheduling pass, the queue and its indexes,
control replies and the budget.

Durability contract with the daemon: ``version`` grows on every state change.
The daemon journals (and fsyncs) each event that changed the version before
it carries out any of that event's effects, so a transition is provisional
until committed and nothing outside the process sees it before then. Events
that change nothing (a retransmitted request, a READY sighting) are not
journaled; their effects are idempotent.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from functools import partial
from operator import attrgetter
from typing import Any

from ..errors import InvalidTransition
from . import tenancy, trust
from .admission import ConcurrencyController, pressure_hold, reason_kind, upper_bound
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
from .jobcontrol import JobControlDesk, utc_iso
from .model import Attempt, Job, Reply
from .observations import Envelope
from .pickers.base import JobPicker, each, tier_pickers
from .pickers.context import Pass
from .pickers.ledger import Usage
from .pickers.walk import Openings
from .placement import Demand, DeviceLoad, KeptLoads, device_loads
from .policy import Policy
from .request import JOB_ACTIONS
from .preemption import PreemptionDesk, preemptible_classes
from .states import (
    AttemptOutcome, ControlOutcome, GenerationStage, JobState, Trigger, Verdict, transition,
)
from .shelf import Shelf
from .submissions import SubmissionDesk
from .supply import Generation, Maturity

# R-SUB-4: a barrier that keeps failing backs off (a second release in a row waits 2 s,
# then 4, 8, ... up to the cap) instead of failing the job: no attempt of it ran
RELEASE_BACKOFF_CAP_SECONDS = 300.0
_RANK = attrgetter("rank")
# the finished states, in the order a shelved job's mark names them (``Shelf.mark``)
FINISHED = tuple(state for state in JobState if state.terminal)


class Scheduler(JobControlDesk):
    def __init__(self, policy: Policy | None = None, job_files: bool = True) -> None:
        self.policy = policy or Policy()
        # whether a WriteJob carries what the job's file says; a simulation writes no job
        # files, and made 60,000 documents for a Philly replay only to drop them
        self.job_files = job_files
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
        self._dependents: dict[str, list[str]] = {}  # job id -> jobs that wait for it
        self._settled: dict[str, None] = {}  # scratch: jobs with dependents that changed state
        # ``real_loads`` from one pass to the next: (the policy it was for, the loads, the
        # running jobs it followed and ``_running_moves`` then)
        self._kept_loads: tuple[Policy, KeptLoads, dict[str, Job | None], int] | None = None
        self._running_moves = 0  # jobs that started or stopped running (``_transition``)
        self._held_memo: dict[str, tuple[Any, ...]] = {}  # job id -> (attempt, profile, envelopes)
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
        # Soft state, rebuilt from live observation after a restart and never journaled:
        self.host: HostSampled | None = None
        self.controller = ConcurrencyController.start(self.policy)
        self._pending: dict[str, str] = {}     # job id -> why it waits (``pending``)
        self._rest: Iterator[bool] | None = None  # the last pass's walk, if it stopped early
        self._rest_at_capacity = False         # every slot was taken as that rest began
        self._reason_dirty: set[str] = set()   # job files whose reason changed in kind
        self._slot_limited = False             # last pass held work only for a free slot
        self._here_room: int | None = None     # a run of several backends: this host's free
        self._last_pass: tuple[int, int] | None = None
        self._last_at = 0.0
        self._reasons_stale = False            # a pass was skipped: no slot was free
        self.samples_seen = 0
        self.idle_peers: dict[int, frozenset[str]] = {}
        self.idle_streak = 0                   # consecutive samples with unused capacity
        self.unused_slots = 0                  # free slots the last pass could not fill
        self.admissible: tuple[str, ...] = ()  # profiles that could start now
        self.release_pending: set[str] = set()  # leases whose host claim is not yet removed
        self._deadlines: list[tuple[float, str]] = []  # (admission deadline, job id), a heap
        # the desks: collaborators that see this scheduler through a narrow view (their board)
        self.submissions = SubmissionDesk(self)
        self.attempts = AttemptDesk(self)
        self.generations_desk = GenerationDesk(self)
        self.preemption = PreemptionDesk(self)

    # -- events -----------------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise InvalidTransition(f"can't handle event {type(event).__name__}")
        effects = handler(self, event)
        if self._settled:  # jobs that others wait for changed state (R-CTL-5)
            effects += self.settle_dependents(event.at)
        return effects

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
            effects += self.reassert_cancels()
        return effects

    def _on_sampled(self, ev: HostSampled) -> list[Effect]:
        """Soft: controller step, admissible profiles, the idle-capacity streak."""
        slot_limited = self._slot_limited_now()  # does work wait only for a slot?
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
            return self._on_job_control(ev, operator)
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
        several backends (issue 28) one pool; this host's jobs also within ``_here_room``."""
        if self.policy.backends:
            return self.upper_bound()
        if not self.policy.capabilities.on_this_host:
            return self.policy.max_concurrent_experiments
        return self.controller.target

    def upper_bound(self) -> int:
        return upper_bound(self.policy, self.host.capacity if self.host else None)

    def next_launches(self, at: float) -> list[AttemptLaunched]:
        """Queued jobs to start now, in the pickers' order, and why each other one waits.

        One pass (``_pass``): a job starts when a slot is free, its queue's rules and
        declared pressure domains allow it and, for GPU work, a placement exists. A
        demand that failed once in a pass is not tried again in that pass (R-POL-4), so
        the pass stays linear in the queue. Nothing is recomputed while neither the
        state nor the host sample changed since the last pass, and with no free slot
        nothing can start, so why each job waits is worked out only when asked
        (``refresh_reasons``): a burst of submissions then costs no pass per request."""
        if self._last_pass == (self.version, self.samples_seen) or self.stopped:
            return []
        self._last_pass, self._last_at = (self.version, self.samples_seen), at
        if self.concurrency_target() <= self.count(JobState.RUNNING) and \
                not self.preemption.may_preempt():
            self._drop_rest()
            self._reasons_stale, self.unused_slots = True, 0
            return []
        return self._pass(at)

    def refresh_reasons(self) -> None:
        """Bring the pending reasons (and the slot-limited flag) up to date."""
        if self._reasons_stale and not self.stopped:
            self._pass(self._last_at)
        self._finish_rest()

    def _slot_limited_now(self) -> bool:
        """Whether the last pass held work only for a free slot, with no more of its rest
        run than it takes to know: the flag only rises along the walk, the rest says when
        it rose (``_serve``), and it cannot rise in a rest that began with a slot free (a
        rest starts nothing, so that slot stays free). What is left of the rest stays for
        when reasons are asked for; it reads the host as its pass began
        (``Pass.pressure``), not this sample. At 10,000 queued jobs a whole rest is some
        15 ms, at every sample."""
        if self._reasons_stale and not self.stopped:
            self._pass(self._last_at)
        if not self._slot_limited and self._rest is not None and self._rest_at_capacity:
            for _ in self._rest:
                if self._slot_limited:
                    break
            else:
                self._finish_rest()
        return self._slot_limited

    def _pass(self, at: float) -> list[AttemptLaunched]:
        """The scheduling loop (R-POL-1): project -> queue tier -> job -> allocation.

        The walk skips runs of jobs whose demand is known to fail (``Pass.skim``) and
        stops once no job it has yet to visit could start (``Openings``): the rest would
        only restate why each job waits, so it is kept (``_rest``) and run when a reason
        is asked for (``pending``, ``refresh_reasons``) or before a queued job changes
        state other than by this pass's launches. Its inputs are copies or do not change
        until then, so it decides what a whole walk would have, at the cost of what can
        still change: the launches, and the first job of each demand."""
        self._drop_rest()
        self._reasons_stale = False
        self._slot_limited = False
        target, running, queue = self.concurrency_target(), self.running(), self._queue()
        self._here_room = (self.controller.target - sum(  # this host's slots, apart
            self.policy.runs_here(job.profile) for job in running)
            if self.policy.backends else None)
        queued = queue.lend()  # until the walk is done (``_finish_rest``, ``_drop_rest``)
        assessing = any(g.phase == GenerationStage.ASSESSMENT for g in self.generations.values())
        loads = self.real_loads()
        kept = self._kept_loads if loads is not None else None  # with ``fitting``'s counts
        ctx = Pass(at=at, policy=self.policy, target=target, free=target - len(running),
                   pressure=self.host.pressure if self.host else None,
                   gpus=self.host.gpus if self.host else None,
                   loads=loads, kept_fitting=kept[1].fitting if kept else None,
                   queued=queued, running=running, suspended=self.count(JobState.SUSPENDED),
                   classes=Counter(queue.by_class), mix=Counter(queue.by_profile),
                   backlog=queue,
                   ledger=Usage(dict(self.usage.peers)),
                   queue_ledger=Usage(dict(self.queue_usage.peers)),
                   ratio=math.exp(self.calibration.fit()[0]), assessing=assessing,
                   coordinator_uid=self.coordinator_uid,
                   assessment_holds={job.job_id: reason for job in queued
                                     if (reason := self.generations_desk.assessment_hold(
                                         job, at))}
                   if assessing else {})
        if not (ctx.assessing or self.count(JobState.SUSPENDED)
                or preemptible_classes(ctx.queues)):
            # assessment holds read the live calibration; preemption and resumption start
            # work that placement alone does not foresee: those passes walk every job
            ctx.openings = Openings(Counter(queue.by_profile), partial(self._could_start, ctx),
                                    queue.ending_by, queue.younger, queue.ending_after)
            ctx.openings.update(None)
        launches: list[AttemptLaunched] = []
        walk = self._walk(ctx, launches)
        if ctx.openings is not None and not ctx.openings.any_open():
            # no job could start: the whole walk would only say why each waits, so all of
            # it is the rest, reading the queue as this pass's copy has it (arrivals
            # enter the backlog before the rest is run)
            ctx.openings = ctx.backlog = None
            ctx.resting = True
            self._rest, self._rest_at_capacity = walk, ctx.free <= 0
        elif next(walk, False):
            self._rest, self._rest_at_capacity = walk, ctx.free <= 0
        else:
            queue.settle()
        self.unused_slots = max(0, ctx.free)
        return launches

    def _walk(self, ctx: Pass, launches: list[AttemptLaunched]) -> Iterator[bool]:
        policy = self.policy
        for project in each(ctx, "project", policy.project_picker, None):
            for tier in each(ctx, "queue", policy.queue_picker, project):
                # R-POL-3: before the tier's new work
                launches += self.preemption.resume(ctx, tier, self._pending)
                with tier_pickers(ctx, project, tier) as next_job:
                    yield from self._serve(ctx, next_job, launches)
        for job, reason in ctx.skimmed():  # the jobs ``Pass.skim`` skipped: known held
            if self._pending.get(job.job_id) != reason:
                self._hold(job, reason)

    def _finish_rest(self) -> None:
        """Run the rest of the last pass's walk, if it stopped early: every reason."""
        rest, self._rest = self._rest, None
        for _ in rest or ():
            pass
        self._backlog.settle()

    def _drop_rest(self) -> None:
        """Forget the last pass's unfinished walk (its pickers are finished): a new pass
        restates every reason."""
        rest, self._rest = self._rest, None
        if rest is not None:
            rest.close()
        self._backlog.settle()

    def _could_start(self, ctx: Pass, name: str, avoid: tuple[str, ...]) -> bool:
        """Whether a job of profile ``name`` might start now, keeping off ``avoid``
        (``Openings``): ``_admit``'s checks, with placement's feasibility for its choice.
        False is certain; True only means the walk goes on."""
        if ctx.free <= 0:
            return False
        if (need := ctx.needs.get(name)) is None:
            ctx.needs[name] = need = self._need(ctx, name)
        if isinstance(need, bool):
            return need
        return ctx.loads is not None and ctx.fitting(need, avoid) >= need.gpu_count

    def _need(self, ctx: Pass, name: str) -> Demand | bool:
        """What a job of profile ``name`` needs to start once a slot is free: nothing more
        (True), the impossible (False: no such profile, or its pressure domains are hot),
        or devices that take its demand. The same all through a pass (``Pass.needs``)."""
        profile = self.policy.profiles.get(name)
        if profile is None:
            return False
        can = self.policy.capabilities_of(profile)
        if can.on_this_host and pressure_hold(self.policy, profile, ctx.pressure):
            return False
        return Demand.of(profile) if profile.uses_gpu and not can.places_gpus else True

    def _serve(self, ctx: Pass, next_job: Callable[[], Job | None],
               launches: list[AttemptLaunched]) -> Iterator[bool]:
        """The jobs of one tier in the pickers' order: each starts now or is held (and why).

        A demand that failed once in a pass fails again for the rest of it (a pass only
        takes capacity away), so it is looked up, not retried (R-POL-4): the pass stays
        linear in the queue. The key holds the job picker too, so that each picker
        learns (``JobPicker.blocked``) of the first job of each demand it could not place.
        Yields True, once, when no job still to visit could start (``Pass.openings``):
        the caller may put off the rest, which only holds jobs. The rest yields False,
        once, when a job it holds waits only for a slot (``_slot_limited_now``)."""
        pending = self._pending
        while True:
            if (openings := ctx.openings) is not None and openings.exhausted:
                ctx.openings = openings = None
                ctx.resting = True
                yield True
            if (job := next_job()) is None:
                return
            if openings is not None:
                openings.visit(job)
            work_class = job.request.work_class
            reason = _backing_off(job, ctx.at)
            if reason is None:
                reason = ctx.assessment_holds.get(job.job_id)
            if reason is None and work_class in ctx.ruled:
                reason = ctx.queue_hold(ctx.by_class[work_class])
            limited = self._slot_limited
            if reason is None and ctx.free <= 0:
                reason = self._slot_verdict(ctx, job)
            if reason is None:
                avoid = () if ctx.reservation is None else ctx.reservation.avoid(job)
                picker = ctx.picker_of[work_class]
                key = (job.profile, type(picker), bool(avoid))
                reason = ctx.unsatisfiable.get(key) or ctx.peer_hold(job)
                if reason is None:
                    gpus, reason = self._admit(ctx, job, picker, avoid, key)
                    if reason is None:
                        ctx.place(job, gpus)
                        if self._here_room is not None and self.policy.runs_here(job.profile):
                            self._here_room -= 1
                        launches.append(AttemptLaunched(
                            at=ctx.at, job_id=job.job_id,
                            attempt_id=f"a{len(job.attempts) + 1}", gpus=gpus))
                        continue
            if reason in ctx.liftable and \
                    (made := self.preemption.preempt(ctx, job, reason)) is not None:
                launches += made  # R-POL-3: preemptions that make room, maybe its launch
                continue
            if pending.get(job.job_id) != reason:
                self._hold(job, reason)
            if ctx.resting and self._slot_limited and not limited:
                yield False  # the rest's news: this job waits only for a slot

    def _slot_verdict(self, ctx: Pass, job: Job) -> str:
        """Why a job waits once every slot is taken: what would hold it anyway, else the
        slot (and then the controller may raise concurrency: ``_slot_limited``)."""
        if job.profile not in ctx.verdicts:
            picker = ctx.picker_of[job.request.work_class]
            key = (job.profile, type(picker), False)
            if key not in ctx.unsatisfiable:
                self._admit(ctx, job, picker, (), key)
            ctx.verdicts[job.profile] = ctx.unsatisfiable.get(key)
        verdict = ctx.verdicts[job.profile] or ctx.peer_hold(job)
        self._slot_limited |= verdict is None and not self.policy.backends  # not this host's
        if verdict is not None:
            return verdict
        reason = f"waiting for a slot: {ctx.target - ctx.free} of {ctx.target} running"
        ctx.liftable.add(reason)  # preemption may free a slot
        return reason

    def _admit(self, ctx: Pass, job: Job, picker: JobPicker, avoid: tuple[str, ...],
               key: tuple[Any, ...]) -> tuple[tuple[str, ...], str | None]:
        """(GPU UUIDs, None) when the job may start now, else ((), why not), remembered
        under ``key``. ``avoid``: devices an EASY backfill reservation keeps free."""
        profile = self.policy.profiles.get(job.profile)
        unplaceable = False  # allocation itself failed (not pressure, not the reservation)
        can = self.policy.capabilities_of(profile) if profile else self.policy.capabilities
        core_places = profile is not None and profile.uses_gpu and not can.places_gpus
        if profile is None:
            reason = f"profile {job.profile!r} is no longer defined by the task file"
        elif core_places and ctx.loads is None:  # first: no pressure would lift it
            error = ctx.gpus.error if ctx.gpus else "not sampled yet"
            reason = (f"gpu placement: no GPU inventory ({error}); "
                      "GPU work is never run on the CPU")
        elif can.on_this_host and (held := pressure_hold(self.policy, profile, ctx.pressure)):
            reason = held
        elif can.on_this_host and self._here_room is not None and self._here_room <= 0:
            reason, self._slot_limited = (f"waiting for a slot on this host: all "
                                          f"{self.controller.target} of its taken"), True
        elif not core_places:  # CPU work, or the backend places it (a cluster's queue waits)
            return (), None
        else:
            gpus, reason = ctx.allocate(Demand.of(profile), avoid)
            if not reason:
                return gpus, None
            unplaceable = True
            if avoid:  # why it does not fit at all, or else that only the reservation stops it
                reason = ctx.allocate(Demand.of(profile))[1]
                if not reason:
                    reason, unplaceable = ctx.reservation.hold, False
        ctx.unsatisfiable[key] = reason
        if unplaceable:
            picker.blocked(job)
            if ctx.reservation is not None and ctx.reservation.job is job:
                reason = f"{reason}; {ctx.reservation.promise}"
            # preemption (R-POL-3) may make room: for this job, and for the cache's later ones
            ctx.liftable.update((ctx.unsatisfiable[key], reason))
        return (), reason

    def real_loads(self) -> list[DeviceLoad] | None:
        """Per-device load as placement sees it (real allocations; claims never block).

        Kept from call to call (``KeptLoads``) while the sample, the others' envelopes
        and the profiles are the same and no job is suspended: only the devices of jobs
        that started or stopped running since are worked out again, and when none did
        (an arrival while the devices are busy) the running jobs are not looked at."""
        sample = self.host.gpus if self.host else None
        if sample is None or not sample.devices:  # a partial sample still places on what it saw
            return None
        others, kept = self.host.others, self._kept_loads
        if self.count(JobState.SUSPENDED):  # what they keep holding is made anew each time
            self._kept_loads = None
            real = [e for e in others if not e.speculative]
            return device_loads(sample, [*self.held_envelopes(), *real])
        running = self._by_state[JobState.RUNNING]

        def holding(job_id: str) -> tuple[Attempt, list[Envelope]]:
            return running[job_id].attempts[-1], self._held(running[job_id])

        if kept is None or kept[0] is not self.policy or kept[1].sample is not sample or \
                kept[1].others is not others:
            kept = None
        elif kept[2] is running and kept[3] == self._running_moves:
            return list(kept[1].loads)  # no job started or stopped running since
        holders = {job_id: job.attempts[-1] for job_id, job in running.items()}
        if kept is None or not kept[1].update(holders, holding):
            kept = (self.policy, KeptLoads.of(
                sample, others, {job_id: holding(job_id) for job_id in running}))
        self._kept_loads = (*kept[:2], running, self._running_moves)
        return list(kept[1].loads)  # the caller's to change

    def held_envelopes(self) -> list[Envelope]:
        """The GPU envelopes this run's running jobs hold, through every phase of a job,
        and what suspended ones keep holding (their memory)."""
        return [envelope for job in self.running() for envelope in self._held(job)] + \
            self.preemption.suspended_envelopes()

    def _held(self, job: Job) -> list[Envelope]:
        """``preemption.envelopes(job)``, made once per attempt (and profile), since every
        pass may read them all."""
        attempt, profile = job.current, self.policy.profiles.get(job.profile)
        known = self._held_memo.get(job.job_id)
        if known is None or known[0] is not attempt or known[1] is not profile:
            known = self._held_memo[job.job_id] = (attempt, profile,
                                                   self.preemption.envelopes(job))
        return known[2]

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
        each waits as the batch's pass found it (the rest of its walk run if it was kept):
        an accepted job that finds no slot is written once, with its pending reason, not
        a second time at the next status (``reason_updates``)."""
        written = {e.job_id for e in effects
                   if isinstance(e, WriteJob) and e.directory == "queued"}
        if not written:
            return []
        self.refresh_reasons()
        fresh = sorted(j for j in written & self._reason_dirty
                       if self.jobs[j].state is JobState.QUEUED)
        self._reason_dirty.difference_update(fresh)
        return [self._write_job(self.jobs[j]) for j in fresh]

    # -- views ------------------------------------------------------------

    @property
    def pending(self) -> dict[str, str]:
        """Job id -> why it waits (Slurm's Reason), as the last pass found; read-only."""
        self._finish_rest()
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
                if (why := self.parked_reason(job)) is None:
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
        if (why := self.parked_reason(job)) is None:
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
        self._finish_rest()  # the unfinished walk saw the queue as it was
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
                self._finish_rest()
            if job.state is JobState.QUEUED:
                self._leave_queue(job)
        if job.job_id in self._dependents:
            self._settled[job.job_id] = None  # its dependents may start, wait or be cancelled
        if new is not JobState.QUEUED or job.state is JobState.SUSPENDED:
            self._pending.pop(job.job_id, None)  # why it waited to start, or to resume
        if job.state is JobState.RUNNING:
            self._held_memo.pop(job.job_id, None)
        if JobState.RUNNING in (job.state, new):
            self._running_moves += 1
        if new.directory != job.state.directory:
            self._moved_from.setdefault(job.job_id, job.state.directory)
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

    def _take_order(self) -> int:
        self._next_order += 1
        return self._next_order

    def job_document(self, job: Job) -> dict[str, Any]:
        """What the job's file says: its state, and for a queued job the pending reason."""
        document = job.to_dict()
        if job.state is JobState.QUEUED and job.job_id in self._pending:
            document["reason"] = self._pending[job.job_id]
        return document

    def _write_job(self, job: Job) -> WriteJob:
        moved_from = self._moved_from.pop(job.job_id, None)
        return WriteJob(job_id=job.job_id, directory=job.state.directory,
                        document=self.job_document(job) if self.job_files else {},
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
    NodeProbeStarted: Scheduler._on_node,
    NodeListed: Scheduler._on_node,
}


def release_backoff(releases: int) -> float:
    """Seconds a job waits after ``releases`` barrier releases in a row: none after the
    first (a transient failure), then 2, 4, 8, ... up to RELEASE_BACKOFF_CAP_SECONDS."""
    return 0.0 if releases < 2 else min(2.0 ** (releases - 1), RELEASE_BACKOFF_CAP_SECONDS)


def _backing_off(job: Job, at: float) -> str | None:
    """Why a job whose barrier keeps failing waits before its next attempt, or None."""
    last = job.current
    if last is None or last.outcome != AttemptOutcome.RELEASED:
        return None
    releases = job.barrier_releases
    until = last.ended_at + release_backoff(releases)
    if at >= until:
        return None
    return (f"launch barrier released {releases} times in a row (last: attempt "
            f"{last.attempt_id}, see attempts/{job.job_id}/{last.attempt_id}/shim.log); "
            f"backing off until {utc_iso(until)}")


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
