"""The scheduling pass (R-POL-1, R-POL-4): which queued jobs start now, and why each
other one waits.

A collaborator the ``Scheduler`` owns (``Scheduler.passes``), like the submission,
attempt, generation and preemption desks: it reads and changes the scheduler's state
only through the narrow view it is given (``PassBoard``). It changes no journaled
state: a pass proposes decisions (``AttemptLaunched``, and the preemption desk's
``AttemptPreempted``/``AttemptResumed``) that the daemon journals and ``handle``
applies, and it states why each queued job waits (``Scheduler.pending``), which is
soft. What it keeps from one pass to the next is soft too: the unfinished rest of
the last walk, whether that pass held work only for a slot, and the per-device loads
placement saw.

A pass walks project -> queue tier -> job (the pickers' order, core/pickers/) and
tries each job: a barrier that keeps failing backs off (R-SUB-4), a generation in
assessment holds its work, the queue's rules, a free slot, the peer's cap, then
pressure and placement (``_admit``). A demand that failed once is not tried again
in that pass (R-POL-4), and the walk stops early once no job it has yet to visit
could start (``Openings``): the rest only restates reasons, so it is run when a
reason is asked for (``finish_rest``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from .admission import pressure_hold
from .events import AttemptLaunched
from .jobcontrol import utc_iso
from .model import Attempt, Job
from .observations import Envelope
from .pickers.base import JobPicker, each, tier_pickers
from .pickers.context import Pass
from .pickers.ledger import Usage
from .pickers.walk import Openings
from .placement import Demand, DeviceLoad, KeptLoads
from .preemption import paused, preemptible_classes
from .states import AttemptOutcome, GenerationStage, JobState

if TYPE_CHECKING:
    from .backlog import Backlog
    from .calibration import Calibration
    from .events import HostSampled
    from .generations import GenerationDesk
    from .policy import Policy
    from .preemption import PreemptionDesk
    from .queues import Queue
    from .supply import Generation

# R-SUB-4: a barrier that keeps failing backs off (a second release in a row waits 2 s,
# then 4, 8, ... up to the cap) instead of failing the job: no attempt of it ran
RELEASE_BACKOFF_CAP_SECONDS = 300.0


class PassBoard(Protocol):
    """What the pass desk reads and changes of the scheduler that owns it."""

    policy: Policy
    version: int
    samples_seen: int          # with ``version``: nothing changed since the last pass
    stopped: str | None
    host: HostSampled | None
    generations: dict[int, Generation]
    calibration: Calibration
    usage: Usage
    queue_usage: Usage
    coordinator_uid: int | None
    unused_slots: int          # the free slots the last pass could not fill
    _by_state: dict[JobState, dict[str, Job | None]]  # the running jobs, as one index
    _backlog: Backlog          # settled once a walk is done with its copy
    _pending: dict[str, str]   # job id -> why it waits, as ``_hold`` keeps it
    preemption: PreemptionDesk  # preempts and resumes within a pass
    generations_desk: GenerationDesk  # a generation in assessment holds its work

    def concurrency_target(self) -> int: ...
    def host_target(self) -> int: ...
    def running(self) -> list[Job]: ...
    def count(self, state: JobState) -> int: ...
    def _queue(self) -> Backlog: ...
    def _hold(self, job: Job, reason: str) -> None: ...


class PassDesk:
    """Scheduling passes for the scheduler whose ``board`` it is given."""

    def __init__(self, board: PassBoard) -> None:
        self.board = board
        self.rest: Iterator[bool] | None = None  # the last pass's walk, if it stopped early
        self.rest_at_capacity = False        # every slot was taken as that rest began
        self.slot_limited = False            # last pass held work only for a free slot
        self.here_room: int | None = None    # a run of several backends: this host's free
        self.last_pass: tuple[int, int] | None = None  # (version, samples seen) it was for
        self.last_at = 0.0
        self.reasons_stale = False           # a pass was skipped: no slot was free
        # ``real_loads`` from one pass to the next: (the policy it was for, the loads, the
        # running jobs it followed and ``running_moves`` then)
        self.kept_loads: tuple[Policy, KeptLoads, dict[str, Job | None], int] | None = None
        self.running_moves = 0  # jobs that started or stopped running (``running_moved``)
        self.held_memo: dict[str, tuple[Any, ...]] = {}  # job id -> (attempt, profile, envelopes)

    def running_moved(self, job_id: str) -> None:
        """A job started or stopped running (``Scheduler._transition``): the loads kept
        from the last pass are out of date, and a job no longer running holds nothing."""
        self.running_moves += 1
        self.held_memo.pop(job_id, None)

    def next_launches(self, at: float) -> list[AttemptLaunched]:
        """Queued jobs to start now, in the pickers' order, and why each other one waits.

        One pass (``_pass``): a job starts when a slot is free, its queue's rules and
        declared pressure domains allow it and, for GPU work, a placement exists. A
        demand that failed once in a pass is not tried again in that pass (R-POL-4), so
        the pass stays linear in the queue. Nothing is recomputed while neither the
        state nor the host sample changed since the last pass, and with no free slot
        nothing can start, so why each job waits is worked out only when asked
        (``refresh_reasons``): a burst of submissions then costs no pass per request."""
        board = self.board
        if self.last_pass == (board.version, board.samples_seen) or board.stopped:
            return []
        self.last_pass, self.last_at = (board.version, board.samples_seen), at
        self.drop_rest()  # whatever was added meanwhile now counts in the queue's length
        if not board._queue() and not board._by_state[JobState.SUSPENDED]:
            # nothing to start or resume, nobody to hold: an exit or a shim's word with
            # the queue empty (31 us a pass of nothing: a third of a launch's own pass)
            self.reasons_stale = self.slot_limited = False
            board.unused_slots = max(0, board.concurrency_target() -
                                     board.count(JobState.RUNNING))
            return []
        if self._no_slot():
            self.reasons_stale, board.unused_slots = True, 0
            return []
        return self._pass(at)

    def _no_slot(self) -> bool:
        """Whether a pass now could start nothing: every slot taken, and no queued job
        may preempt to make one."""
        board = self.board
        return board.concurrency_target() <= board.count(JobState.RUNNING) and \
            not board.preemption.may_preempt()

    def reasons_of(self, jobs: list[Job]) -> None:
        """Bring the pending reasons of ``jobs`` (queued, written in this batch) up to
        date. With no slot free, a pass starts nothing and each job's reason is its own
        (its backoff, its queue's rules, its demand's verdict, its peer's cap, else the
        slot): nothing a walk learns from the jobs ahead of it changes it. So a job the
        last pass never saw (an arrival, in a batch whose pass was skipped or apart from
        it, as a run on the host registry accepts) is held for that alone (``_hold_alone``),
        without a walk of the whole queue at every acceptance: at 2,000 queued that walk
        made each acceptance 4x slower. The others' reasons (an arrival may change a
        queue's reserve) wait for the next whole pass, at status's cadence
        (``reasons_stale``). With a slot free the next pass decides the job, and may start
        it: a pass run only for reasons would drop what it started."""
        if not jobs:  # every job written is held or waiting: its reason is said already
            return
        if self._no_slot() and not self.board.stopped and not self._assessing():
            self.drop_rest()
            self.reasons_stale = True
            self._hold_alone(jobs)
            return
        self.refresh_reasons()

    def refresh_reasons(self) -> None:
        """Bring the pending reasons (and the slot-limited flag) up to date."""
        if self.reasons_stale and not self.board.stopped:
            self._pass(self.last_at)
        self.finish_rest()

    def slot_limited_now(self) -> bool:
        """Whether the last pass held work only for a free slot, with no more of its rest
        run than it takes to know: the flag only rises along the walk, the rest says when
        it rose (``_serve``), and it cannot rise in a rest that began with a slot free (a
        rest starts nothing, so that slot stays free). What is left of the rest stays for
        when reasons are asked for; it reads the host as its pass began
        (``Pass.pressure``), not this sample. At 10,000 queued jobs a whole rest is some
        15 ms, at every sample."""
        board = self.board
        if self.reasons_stale and not board.stopped:
            self._pass(self.last_at)
        if not self.slot_limited and self.rest is not None and self.rest_at_capacity:
            for _ in self.rest:
                if self.slot_limited:
                    break
            else:
                self.finish_rest()
        return self.slot_limited

    def _pass(self, at: float) -> list[AttemptLaunched]:
        """The scheduling loop (R-POL-1): project -> queue tier -> job -> allocation.

        The walk skips runs of jobs whose demand is known to fail (``Pass.skim``) and
        stops once no job it has yet to visit could start (``Openings``): the rest would
        only restate why each job waits, so it is kept (``rest``) and run when a reason
        is asked for (``pending``, ``refresh_reasons``) or before a queued job changes
        state other than by this pass's launches. Its inputs are copies or do not change
        until then, so it decides what a whole walk would have, at the cost of what can
        still change: the launches, and the first job of each demand."""
        board = self.board
        self.drop_rest()
        self.reasons_stale = False
        self.slot_limited = False
        queue = board._queue()
        ctx = self._context(at, queue, queue.lend())  # until the walk is done
        if not ctx.assessing:  # assessment holds read the live calibration: walk every job
            # preemption and resumption start work that placement alone does not foresee,
            # and give room back: the walk visits every job until no job still to visit
            # may preempt and no suspended job may still resume (``_may_open``)
            preempting = {name for name in preemptible_classes(ctx.queues)
                          if ctx.waiting[name] > 0}
            suspended = {ctx.by_class[job.request.work_class].name
                         for job in board._by_state[JobState.SUSPENDED].values()}
            ctx.unopened = (Counter(queue.by_profile), preempting, suspended, [])
            self._may_open(ctx, queue, ())
        launches: list[AttemptLaunched] = []
        walk = self._walk(ctx, launches, queue)
        if ctx.openings is not None and not ctx.openings.any_open():
            # no job could start: the whole walk would only say why each waits, so all of
            # it is the rest, reading the queue as this pass's copy has it (arrivals
            # enter the backlog before the rest is run)
            ctx.openings = ctx.backlog = None
            ctx.resting = True
            self.rest, self.rest_at_capacity = walk, ctx.free <= 0
        elif next(walk, False):
            self.rest, self.rest_at_capacity = walk, ctx.free <= 0
        else:
            queue.settle()
        board.unused_slots = max(0, ctx.free)
        return launches

    def _context(self, at: float, queue: Backlog, queued: list[Job]) -> Pass:
        """What a pass at ``at`` starts from: the host as sampled, the running jobs and
        the queue (``queued``: lent until the walk is done, ``finish_rest``,
        ``drop_rest``)."""
        board = self.board
        target, running = board.concurrency_target(), board.running()
        self.here_room = (board.host_target() - sum(  # this host's slots, apart
            board.policy.runs_here(job.profile) for job in running)
            if board.policy.backends else None)
        assessing = self._assessing()
        loads = self.real_loads()
        kept = self.kept_loads if loads is not None else None  # with ``fitting``'s counts
        return Pass(at=at, policy=board.policy, target=target, free=target - len(running),
                    pressure=board.host.pressure if board.host else None,
                    gpus=board.host.gpus if board.host else None,
                    loads=loads, kept_fitting=kept[1].fitting if kept else None,
                    queued=queued, running=running, suspended=board.count(JobState.SUSPENDED),
                    classes=Counter(queue.by_class), mix=Counter(queue.by_profile),
                    backlog=queue,
                    ledger=Usage(dict(board.usage.peers)),
                    queue_ledger=Usage(dict(board.queue_usage.peers)),
                    ratio=math.exp(board.calibration.fit()[0]), assessing=assessing,
                    coordinator_uid=board.coordinator_uid,
                    assessment_holds={job.job_id: reason for job in queued
                                      if (reason := board.generations_desk.assessment_hold(
                                          job, at))}
                    if assessing else {})

    def _assessing(self) -> bool:
        """Whether a generation is in assessment (its holds read the live calibration)."""
        return any(g.phase == GenerationStage.ASSESSMENT
                   for g in self.board.generations.values())

    def _walk(self, ctx: Pass, launches: list[AttemptLaunched], queue: Backlog
              ) -> Iterator[bool]:
        board, policy = self.board, self.board.policy
        for project in each(ctx, "project", policy.project_picker, None):
            for tier in each(ctx, "queue", policy.queue_picker, project):
                # R-POL-3: before the tier's new work. A rest (the walk stopped early) is
                # past every tier whose queues had suspended jobs as the pass began
                # (``_may_open``): what it would find suspended now, this pass's own
                # victims, the whole walk did not see suspended
                if not ctx.resting:
                    launches += board.preemption.resume(ctx, tier, board._pending)
                self._may_open(ctx, queue, tier)
                with tier_pickers(ctx, project, tier) as next_job:
                    yield from self._serve(ctx, next_job, launches)
                if ctx.unopened is not None:
                    ctx.unopened[1].difference_update(q.name for q in tier)
        for job, reason in ctx.skimmed():  # the jobs ``Pass.skim`` skipped: known held
            if board._pending.get(job.job_id) != reason:
                board._hold(job, reason)

    def _may_open(self, ctx: Pass, queue: Backlog, tier: tuple[Queue, ...]) -> None:
        """Let the walk stop early and skim (``Openings``) from here on, once nothing
        still to come in it may preempt or resume: no queued job of a queue that preempts
        is left to visit in ``tier`` (whose suspended jobs have just had their turn to
        resume) or after it, and no suspended job is in a queue after it. From then on
        the pass only takes room away, as a pass without preemption does. The jobs
        visited so far count as visited."""
        if (unopened := ctx.unopened) is None:
            return
        left, preempting, suspended, walked = unopened
        suspended.difference_update(q.name for q in tier)
        if suspended or preempting:
            return
        ctx.unopened = None
        left.subtract(job.profile for job in walked)
        ctx.openings = Openings(left, partial(self._could_start, ctx), queue.ending_by,
                                queue.younger, queue.ending_after, seen=walked,
                                visited=len(walked))
        ctx.openings.update(ctx.reservation)

    def finish_rest(self) -> None:
        """Run the rest of the last pass's walk, if it stopped early: every reason."""
        rest, self.rest = self.rest, None
        for _ in rest or ():
            pass
        self.board._backlog.settle()

    def drop_rest(self) -> None:
        """Forget the last pass's unfinished walk (its pickers are finished): a new pass
        restates every reason."""
        rest, self.rest = self.rest, None
        if rest is not None:
            rest.close()
        self.board._backlog.settle()

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
        policy = self.board.policy
        profile = policy.profiles.get(name)
        if profile is None:
            return False
        can = policy.capabilities_of(profile)
        if can.on_this_host and pressure_hold(policy, profile, ctx.pressure):
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
        once, when a job it holds waits only for a slot (``slot_limited_now``)."""
        board = self.board
        pending = board._pending
        while True:
            if (openings := ctx.openings) is not None and openings.exhausted:
                ctx.openings = openings = None
                ctx.resting = True
                yield True
            if (job := next_job()) is None:
                return
            if openings is not None:
                openings.visit(job)
            elif ctx.unopened is not None:
                ctx.unopened[3].append(job)
            work_class = job.request.work_class
            reason = self._own_hold(ctx, job)
            limited = self.slot_limited
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
                        if self.here_room is not None and \
                                board.policy.runs_here(job.profile):
                            self.here_room -= 1
                        launches.append(AttemptLaunched(
                            at=ctx.at, job_id=job.job_id,
                            attempt_id=f"a{len(job.attempts) + 1}", gpus=gpus))
                        continue
            if reason in ctx.liftable and \
                    (made := board.preemption.preempt(ctx, job, reason)) is not None:
                launches += made  # R-POL-3: preemptions that make room, maybe its launch
                continue
            reason = _kept_from_the_next_slot(ctx, work_class, reason)
            if pending.get(job.job_id) != reason:
                board._hold(job, reason)
            if ctx.resting and self.slot_limited and not limited:
                yield False  # the rest's news: this job waits only for a slot

    def _own_hold(self, ctx: Pass, job: Job) -> str | None:
        """What holds ``job`` whatever the slots: its barrier's backoff, its generation's
        assessment, its queue's rules."""
        reason = _backing_off(job, ctx.at)
        if reason is None:
            reason = ctx.assessment_holds.get(job.job_id)
        if reason is None and (work_class := job.request.work_class) in ctx.ruled:
            reason = ctx.queue_hold(ctx.by_class[work_class])
        return reason

    def _hold_alone(self, jobs: list[Job]) -> None:
        """Hold each of ``jobs`` for the reason a pass with no slot free gives it
        (``reasons_of``), as ``_serve`` would, without a walk: the pass's context, but no
        picker orders anything. A picker's ``blocked`` only places a reservation, whose
        words a job held for a full house never carries (``_slot_verdict``), so the base
        one, which does nothing, stands in for each; no job here may preempt
        (``_no_slot``)."""
        board = self.board
        queue = board._queue()
        ctx = self._context(self.last_at, queue, queue.lend())
        stand_in = JobPicker()
        ctx.picker_of.update((work_class, stand_in) for work_class in ctx.by_class)
        for job in jobs:
            reason = self._own_hold(ctx, job) or self._slot_verdict(ctx, job)
            reason = _kept_from_the_next_slot(ctx, job.request.work_class, reason)
            if board._pending.get(job.job_id) != reason:
                board._hold(job, reason)
        queue.settle()

    def _slot_verdict(self, ctx: Pass, job: Job) -> str:
        """Why a job waits once every slot is taken: what would hold it anyway, else the
        slot (and then the controller may raise concurrency: ``slot_limited``)."""
        if job.profile not in ctx.verdicts:
            picker = ctx.picker_of[job.request.work_class]
            key = (job.profile, type(picker), False)
            if key not in ctx.unsatisfiable:
                self._admit(ctx, job, picker, (), key)
            ctx.verdicts[job.profile] = ctx.unsatisfiable.get(key)
        verdict = ctx.verdicts[job.profile] or ctx.peer_hold(job)
        self.slot_limited |= verdict is None and not self.board.policy.backends  # not this host's
        if verdict is not None:
            return verdict
        reason = _slot_wait(ctx)
        ctx.liftable.add(reason)  # preemption may free a slot
        return reason

    def _admit(self, ctx: Pass, job: Job, picker: JobPicker, avoid: tuple[str, ...],
               key: tuple[Any, ...]) -> tuple[tuple[str, ...], str | None]:
        """(GPU UUIDs, None) when the job may start now, else ((), why not), remembered
        under ``key``. ``avoid``: devices an EASY backfill reservation keeps free."""
        policy = self.board.policy
        profile = policy.profiles.get(job.profile)
        unplaceable = False  # allocation itself failed (not pressure, not the reservation)
        can = policy.capabilities_of(profile) if profile else policy.capabilities
        core_places = profile is not None and profile.uses_gpu and not can.places_gpus
        if profile is None:
            reason = f"profile {job.profile!r} is no longer defined by the task file"
        elif core_places and ctx.loads is None:  # first: no pressure would lift it
            error = ctx.gpus.error if ctx.gpus else "not sampled yet"
            reason = (f"gpu placement: no GPU inventory ({error}); "
                      "GPU work is never run on the CPU")
        elif can.on_this_host and (held := pressure_hold(policy, profile, ctx.pressure)):
            reason = held
        elif can.on_this_host and self.here_room is not None and self.here_room <= 0:
            reason, self.slot_limited = (f"waiting for a slot on this host: all "
                                         f"{self.board.host_target()} of its taken"), True
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
        and the profiles are the same: only the devices of jobs that started, stopped
        running or were suspended since are worked out again, and when none did (an
        arrival while the devices are busy, no job suspended) the running jobs are not
        looked at. A suspended job holds what it keeps (``paused``) after every running
        job, as ``held_envelopes`` has it; a resumed job goes back among the running
        ones, before the suspended ones, and its envelopes are summed in that place
        (``KeptLoads.update``)."""
        board = self.board
        sample = board.host.gpus if board.host else None
        if sample is None or not sample.devices:  # a partial sample still places on what it saw
            return None
        others, kept = board.host.others, self.kept_loads
        running = board._by_state[JobState.RUNNING]
        suspended = board._by_state[JobState.SUSPENDED]

        def holding(holder: str | tuple[str, ...]) -> tuple[Attempt, list[Envelope]]:
            if isinstance(holder, tuple):  # suspended: what it keeps (``paused``)
                job = suspended[holder[0]]
                return job.attempts[-1], paused(board.preemption.envelopes(job))
            return running[holder].attempts[-1], self._held(running[holder])

        if kept is None or kept[0] is not board.policy or kept[1].sample is not sample or \
                kept[1].others is not others:
            kept = None
        elif kept[2] is running and kept[3] == self.running_moves and not suspended and \
                len(kept[1].holders) == len(running):  # and none was suspended then
            return list(kept[1].loads)  # no job started or stopped running since
        # the running jobs, then the suspended ones (a key apart: a job suspended or
        # resumed leaves one holder and becomes another), as ``held_envelopes`` has them
        holders: dict[str | tuple[str, ...], Attempt] = {
            job_id: job.attempts[-1] for job_id, job in running.items()}
        holders.update(((job_id,), job.attempts[-1]) for job_id, job in suspended.items())
        if kept is None or not kept[1].update(holders, holding):
            kept = (board.policy, KeptLoads.of(
                sample, others, {holder: holding(holder) for holder in holders}))
        self.kept_loads = (*kept[:2], running, self.running_moves)
        return list(kept[1].loads)  # the caller's to change

    def held_envelopes(self) -> list[Envelope]:
        """The GPU envelopes this run's running jobs hold, through every phase of a job,
        and what suspended ones keep holding (their memory)."""
        board = self.board
        return [envelope for job in board.running() for envelope in self._held(job)] + \
            board.preemption.suspended_envelopes()

    def _held(self, job: Job) -> list[Envelope]:
        """``preemption.envelopes(job)``, made once per attempt (and profile), since every
        pass may read them all."""
        board = self.board
        attempt, profile = job.current, board.policy.profiles.get(job.profile)
        known = self.held_memo.get(job.job_id)
        if known is None or known[0] is not attempt or known[1] is not profile:
            known = self.held_memo[job.job_id] = (attempt, profile,
                                                  board.preemption.envelopes(job))
        return known[2]


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


def _kept_from_the_next_slot(ctx: Pass, work_class: str, reason: str) -> str:
    """With every slot taken, the next one freed may be kept from a job of a queue with
    rules too (leave_slots), and then that, not the slot, is why it waits."""
    if work_class in ctx.ruled and reason == _slot_wait(ctx):
        return ctx.queue_hold(ctx.by_class[work_class], freed=1) or reason
    return reason


def _slot_wait(ctx: Pass) -> str:
    """Why a job waits that would start in the next free slot: the same words for every
    job a pass holds for a slot while no slot frees, made once (a rest at 10,000 queued
    jobs asks 10,000 times)."""
    running = ctx.target - ctx.free
    if ctx.slot_wait[0] != running:
        ctx.slot_wait = (running, f"waiting for a slot: {running} of {ctx.target} running")
    return ctx.slot_wait[1]
