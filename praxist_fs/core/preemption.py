"""Preemption (R-POL-3, seed 002's level 3): victims, suspensions and resumes.

A collaborator the ``Scheduler`` owns (``Scheduler.preemption``), like the
``GenerationDesk``: it reads and changes the scheduler's state only through the
narrow view it is given (``PreemptionBoard``), under the scheduler's rules (every
change bumps ``version`` and is journaled before its effects).

**What triggers it.** A queued job of a queue that may preempt (it has
``preemptible_queues``, or a ``preemptible`` queue is below it) that a pass cannot
start because every slot is taken, or because its GPU allocation failed. Nothing
else: a generation in assessment, its own queue's limits, reserve or time windows,
hot pressure, an undefined profile, a missing GPU inventory or a
backfill reservation are never lifted by preempting anyone.

**Victims.** Running jobs (with a known shim) of the listed queues, and of every
``preemptible`` queue, whose priority is below the job's queue's; a queue of equal
or higher priority is never preempted. The preempt policy (a picker of kind
``preempt``: the queue's ``preempt_policy``, else the global one) orders them; the
builtin ``lowest_priority_first`` takes the lowest queue priority first, then the
youngest attempt. Of those, the fewest, taken in that order, whose room would let
the job start (victims it turns out not to need are dropped again, the last taken
first).

**Modes.** ``suspend`` stops a victim's process group (SIGTSTP, then SIGSTOP; the
job is ``suspended``, its file in ``jobs/queued/``): it gives back its slot and its
declared GPU utilization, and keeps its GPU memory (and a device it holds
exclusively), which placement goes on counting. So suspending helps a job held by a
full house or by GPU utilization, never one held by GPU memory or waiting for an
idle device; the job then starts in the same pass. ``requeue`` terminates a victim
(TERM, a grace, KILL); the job waits until the victim's end is observed, which
queues the victim again under the same job id with the attempt outcome
``preempted`` and no retry used (an exit 0 in the meantime still completes it).

**No livelock (R-SIM-1).** While a job waits for its victims to end, the room it
will take (its devices once they are gone) is its own from its turn in each pass:
work served after it, its victims' queues among it, keeps off those devices, where
the victims' envelopes count too until they end. Without that, a job of a lower
queue took the room in the same pass, the job preempted that one, its first victim
came back into the freed room, and so on for ever. Work ahead of it in the pass
(higher queues, older jobs of its tier) goes first as always, and once the victims
have ended the job is served before every queue it preempts. The room is kept only
while the job is queued and still needs its victims to end: cancelled, rejected,
held or changed, it is not served and keeps nothing. And a job is preempted at most
``MAX_PREEMPTIONS_FOR_ONE`` times for the same job (counted from its attempts'
journaled preemptions); that job then waits, saying so, or preempts others.

**Resume.** A suspended job continues (SIGCONT) at the first pass where, at its
queue's turn (after the queues above it, before its own queue's and lower queues'
queued work), a slot is free, its queue's limits allow it, its pressure domains
are calm, and its declared utilization fits again on its own devices; it does not
wait for the job it made room for to end. A suspended job holds no slot and does
not count towards its queue's ``max_running``.

Preemptions and resumes are decisions (``AttemptPreempted``, ``AttemptResumed``)
that a pass proposes next to its launches, the daemon journals and ``handle``
applies, so a replay never decides again. A start carries every one out again (all
are idempotent): a decision journaled just before a crash may not have been.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidTransition
from .admission import pressure_hold
from .effects import Effect, EvictAttempt, ResumeAttempt, SuspendAttempt, WriteJob
from .events import AttemptLaunched, AttemptObserved, AttemptPreempted, AttemptResumed, Event
from .observations import Envelope
from .pickers.base import VictimScope, each, picker_class
from .pickers.context import peer_of
from .placement import Demand, DeviceLoad, envelopes_of, fitting, holding, place, refit, \
    releasing, with_envelopes, without_envelopes
from .queues import Queue
from .states import AttemptOutcome, JobState, PreemptMode, Trigger

# R-SIM-1: a job is preempted at most this many times for the same job; that job then
# waits for it to end (or preempts others). Each time needs the preemptor to have lost
# its room in between (preempted itself, say), so a few are legitimate; more are thrash.
MAX_PREEMPTIONS_FOR_ONE = 3

if TYPE_CHECKING:
    from .attempts import AttemptDesk
    from .events import HostSampled
    from .model import Attempt, Job
    from .pickers.context import Pass
    from .policy import Policy, Profile


class PreemptionBoard(Protocol):
    """What the preemption desk reads and changes of the scheduler that owns it."""

    policy: Policy
    host: HostSampled | None
    version: int
    preempted_jobs: dict[str, None]  # jobs with a preemption on record
    attempts: AttemptDesk  # a requeued victim's end settles there

    def running(self) -> list[Job]: ...
    def suspended(self) -> list[Job]: ...
    def count(self, state: JobState) -> int: ...
    def _job(self, job_id: str) -> Job: ...
    def _transition(self, job: Job, trigger: Trigger) -> None: ...
    def _write_job(self, job: Job) -> WriteJob: ...
    def _hold(self, job: Job, reason: str) -> None: ...


class PreemptionDesk:
    """Preemption's decisions and events for the scheduler whose ``board`` it is given."""

    def __init__(self, board: PreemptionBoard) -> None:
        self.board = board
        self._preemptors: tuple[tuple[Queue, ...], dict[str, frozenset[str]]] = ((), {})
        # ``_everyone``'s last answer: (the loads, the victims' ids, the mode, their
        # envelopes and what they keep suspended by device, the room, and the policy and
        # victims' attempts they were made for)
        self._everyone_memo: tuple[list[DeviceLoad], tuple[str, ...], PreemptMode,
                                   dict[str, tuple[list[Envelope], list[Envelope]]],
                                   list[DeviceLoad], tuple[Any, ...]] | None = None
        # ``placement.fitting`` of that room by (utilization, memory, devices avoided)
        self._everyone_fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] = {}
        # ``_holds``: job id -> (its attempt, profile, envelopes, what it keeps suspended)
        self._victims: dict[str, tuple[Attempt, Profile | None, list[Envelope],
                                       list[Envelope]]] = {}
        # ``_candidates`` of the pass it was made for: (the pass, by (classes, policy))
        self._pass_candidates: tuple[Pass | None, dict[tuple[frozenset[str], str], tuple[
            list[Job], list[Job] | None]]] = (None, {})
        self._by_uuid: tuple[list[DeviceLoad] | None, dict[str, DeviceLoad]] = (None, {})

    def _preemptors_of(self, queues: tuple[Queue, ...]) -> dict[str, frozenset[str]]:
        """``preemptible_classes(queues)``, known by the tuple's identity: a pass asks at
        every job that waits for a slot, and the cache's key would hash each queue."""
        if self._preemptors[0] is not queues:
            self._preemptors = (queues, preemptible_classes(queues))
        return self._preemptors[1]

    # -- views ------------------------------------------------------------------

    def suspended_envelopes(self) -> list[Envelope]:
        """What suspended jobs keep holding on their devices (``paused``)."""
        return paused([e for job in self.board.suspended() for e in self.envelopes(job)])

    def envelopes(self, job: Job) -> list[Envelope]:
        """What the job's attempt holds on its devices, as its profile declares."""
        return envelopes_of(self.board.policy.profiles.get(job.profile), job.current.gpus,
                            job.job_id)

    def may_preempt(self) -> bool:
        """Whether a pass with every slot taken may still start work: a running job is
        in a queue that another one preempts."""
        board = self.board
        classes = frozenset().union(*preemptible_classes(board.policy.queue_set()).values())
        return bool(classes) and any(j.request.work_class in classes for j in board.running())

    # -- events -----------------------------------------------------------------

    def on_preempted(self, ev: AttemptPreempted) -> list[Effect]:
        board = self.board
        job = board._job(ev.job_id)
        attempt = job.current
        if job.state is not JobState.RUNNING or attempt.attempt_id != ev.attempt_id or \
                not attempt.seen or attempt.evicting is not None:
            raise InvalidTransition(f"can't preempt {ev.attempt_id} of job {job.job_id} "
                                    f"({job.state.value})")
        attempt.preemptions += ({"at": ev.at, "mode": ev.mode, "by": ev.by,
                                 "reason": ev.reason, "resumed_at": None},)
        board.preempted_jobs[job.job_id] = None
        board.version += 1
        key = {"job_id": job.job_id, "attempt_id": attempt.attempt_id}
        if ev.mode == PreemptMode.SUSPEND:
            board._transition(job, Trigger.SUSPEND)
            job.reason = f"suspended: preempted by job {ev.by} ({ev.reason})"
            return [board._write_job(job), SuspendAttempt(**key)]
        job.reason = f"preempted by job {ev.by} ({ev.reason}): terminating, to be requeued"
        return [board._write_job(job), EvictAttempt(**key)]

    def on_resumed(self, ev: AttemptResumed) -> list[Effect]:
        board = self.board
        job = board._job(ev.job_id)
        attempt = job.current
        if job.state is not JobState.SUSPENDED or attempt.attempt_id != ev.attempt_id:
            raise InvalidTransition(f"can't resume {ev.attempt_id} of job {job.job_id} "
                                    f"({job.state.value})")
        attempt.preemptions[-1]["resumed_at"] = ev.at
        board._transition(job, Trigger.RESUME)
        job.reason = f"attempt {attempt.attempt_id} running (resumed)"
        board.version += 1
        return [board._write_job(job),
                ResumeAttempt(job_id=job.job_id, attempt_id=attempt.attempt_id)]

    def requeue(self, job: Job, attempt: Attempt, ev: AttemptObserved) -> list[Effect]:
        """An attempt preempted for requeue ended (any end but exit 0): the job is queued
        again, and the attempt's outcome ``preempted`` uses up no retry."""
        attempt.exit_code, attempt.signal, attempt.failure = ev.exit_code, ev.signal, ev.failure
        attempt.outcome = AttemptOutcome.PREEMPTED
        return self.board.attempts.settle(job, attempt, ev.ended_at or ev.at, Trigger.PREEMPT,
                                          f"attempt {attempt.attempt_id} preempted by job "
                                          f"{attempt.evicting['by']} (requeue): queued again, "
                                          "no retry used")

    def reassert(self) -> list[Effect]:
        """At a start, every preemption decision is carried out again: stops, continues
        and terminations are idempotent, and the last coordinator may have journaled one
        and died before its signal."""
        effects: list[Effect] = [SuspendAttempt(job_id=j.job_id, attempt_id=j.current.attempt_id)
                                 for j in self.board.suspended()]
        for job in self.board.running():
            key = {"job_id": job.job_id, "attempt_id": job.current.attempt_id}
            if job.current.evicting is not None:
                effects.append(EvictAttempt(**key))
            elif job.current.preemptions:  # a suspension that ended: it was resumed
                effects.append(ResumeAttempt(**key))
        return effects

    # -- the pass ---------------------------------------------------------------

    def preempt(self, ctx: Pass, job: Job, reason: str) -> list[Event] | None:
        """R-POL-3 where ``job`` could not start for ``reason``, one that preemption may
        lift (``Pass.liftable``): the preemptions that make room for it (and its launch
        when suspending made the room now), or None when its queue preempts nothing or
        no victims would make room. When it must wait for victims to end, it is held here."""
        queue = ctx.by_class[job.request.work_class]
        classes = self._preemptors_of(ctx.queues).get(queue.name)
        if not classes:
            return None
        if ctx.evicting is None:
            ctx.evicting = {}
            for other in ctx.running:
                if (eviction := other.current.evicting) is not None:
                    ctx.evicting.setdefault(eviction["by"], []).append(other)
        mine = ctx.evicting.get(job.job_id, [])
        # R-POL-4: once per demand, priority (a preempt policy may read it) and queue
        hopeless = ("preempt", job.profile, job.priority, queue.name)
        if not mine and hopeless in ctx.unsatisfiable:
            return None
        profile = self.board.policy.profiles[job.profile]
        demand = Demand.of(profile) if profile.uses_gpu else None
        avoid = () if ctx.reservation is None else ctx.reservation.avoid(job)
        loads = self._room(ctx.loads, mine, PreemptMode.REQUEUE) if demand else ctx.loads
        free = ctx.free + len(mine)

        # the loads once the victims tried so far made room, by their ids, with how many
        # devices there take the job's demand: each try adds one victim to the last or
        # takes one away, so the room is changed by that one (``_room``, ``_unroom``)
        # instead of made anew from every victim's envelopes, and the count by the few
        # devices it changed. A placement fails exactly when fewer than ``gpu_count``
        # devices take the demand, so only a try that succeeds places the job.
        rooms: dict[tuple[str, ...], tuple[list[DeviceLoad], int]] = {}
        if demand is not None:
            rooms[()] = (loads, ctx.fitting(demand, avoid) + _gained(
                demand, avoid, ctx.loads, loads))

        def room(victims: list[Job]) -> tuple[list[DeviceLoad], int]:
            key = tuple(v.job_id for v in victims)
            if (found := rooms.get(key)) is None:
                if (shorter := rooms.get(key[:-1])) is not None:
                    base, made = shorter, self._room(shorter[0], victims[-1:], queue.preempt)
                elif len(held_by) == len(key) + 1 and (longer := rooms.get(
                        tuple(v.job_id for v in held_by))) is not None:
                    kept = set(key)
                    base, made = longer, self._unroom(
                        longer[0], [v for v in held_by if v.job_id not in kept], queue.preempt)
                else:
                    base, made = rooms[()], self._room(loads, victims, queue.preempt)
                found = rooms[key] = (made, base[1] + _gained(demand, avoid, base[0], made))
            return found

        def fits(victims: list[Job]) -> bool:
            """Whether the job could start once ``victims`` made room: not when its own
            queue's rules would keep that room for others, such as a reserve for the
            very queue the requeued victims go back to."""
            if free + len(victims) < 1:
                return False
            requeued = mine + victims if queue.preempt == PreemptMode.REQUEUE else mine
            if ctx.queue_hold(queue, len(mine) + len(victims), Counter(
                    ctx.by_class[v.request.work_class].name for v in requeued)):
                return False
            return demand is None or room(victims)[1] >= demand.gpu_count

        def devices(victims: list[Job]) -> tuple[str, ...]:
            """The job's devices once ``victims`` made room (() for CPU work); they do."""
            return () if demand is None else place(demand, room(victims)[0], avoid,
                                                   ctx.packing)[0]

        victims: list[Job] = []
        held_by: list[Job] = victims  # the victims ``room`` takes one away from
        if fits([]):
            gpus = devices([])
        else:
            name = queue.preempt_policy or self.board.policy.preempt_policy
            running, in_order = self._candidates(ctx, job, queue, classes, name)
            candidates, spared, taken = [], [], ctx.taken
            preempted = self.board.preempted_jobs
            for j in running:
                if j.job_id not in taken:
                    (spared if j.job_id in preempted and times_preempted(j, job.job_id)
                     >= MAX_PREEMPTIONS_FOR_ONE else candidates).append(j)
            if in_order is None:
                ordered = list(each(ctx, "preempt", name,
                                    VictimScope(job, queue, tuple(candidates))))
            else:  # the policy's order of these is the order of all of them, less the rest
                left = {j.job_id for j in candidates}
                ordered = [j for j in in_order if j.job_id in left]
            # more victims never take room away, so when all of them together make none,
            # no fewer do: one placement says so instead of one per victim
            hopeless_room = demand is not None and bool(ordered) and self._fitting_everyone(
                loads, ordered, queue.preempt, demand, avoid) < demand.gpu_count
            for candidate in () if hopeless_room else ordered:
                victims.append(candidate)
                if fits(victims):
                    break
            else:
                if hopeless_room:
                    victims = list(ordered)  # where trying each in turn leaves them
                if spared and fits(victims + spared):
                    # the bound holds it, not its demand: a job like it may still preempt
                    self.board._hold(job, f"{reason}; not preempting "
                                    f"{', '.join(j.job_id for j in spared)} again: "
                                    f"{MAX_PREEMPTIONS_FOR_ONE} preemptions for this job")
                    return []
                if not mine:
                    ctx.unsatisfiable[hopeless] = reason
                return None
            for victim in reversed(victims):  # the fewest: the most valuable go first
                rest = [v for v in victims if v is not victim]
                held_by = victims
                if fits(rest):
                    victims = rest
            gpus = devices(victims)
        ctx.taken.update(v.job_id for v in victims)
        events: list[Event] = [AttemptPreempted(
            at=ctx.at, job_id=v.job_id, attempt_id=v.current.attempt_id, mode=queue.preempt,
            by=job.job_id, reason=f"queue {queue.name}: {reason}") for v in victims]
        if queue.preempt == PreemptMode.SUSPEND and not mine:
            for victim in victims:
                ctx.free += 1
                ctx.running_in[ctx.by_class[victim.request.work_class].name] -= 1
                ctx.running_of[peer_of(victim)] -= 1
            if demand:
                ctx.loads = self._room(ctx.loads, victims, PreemptMode.SUSPEND)
            ctx.place(job, gpus)
            return [*events, AttemptLaunched(at=ctx.at, job_id=job.job_id,
                                             attempt_id=f"a{len(job.attempts) + 1}", gpus=gpus)]
        if gpus:  # R-SIM-1: the room it waits for is its own for the rest of the pass, and
            # its victims keep theirs until they end (on its devices both count till then)
            ctx.loads = with_envelopes(ctx.loads, envelopes_of(profile, gpus, job.job_id))
        names = [v.job_id for v in (*mine, *victims)]
        self.board._hold(job, f"{reason}; preempting {', '.join(names)}: waiting for "
                        f"{'it' if len(names) == 1 else 'them'} to end")
        return events

    def _candidates(self, ctx: Pass, job: Job, queue: Queue, classes: frozenset[str],
                    name: str) -> tuple[list[Job], list[Job] | None]:
        """The running jobs of ``classes`` that may be preempted at all in this pass (their
        shim seen, no eviction or cancel under way), in ``ctx.running``'s order, and in the
        preempt policy ``name``'s order when that order is theirs alone
        (``PreemptPolicy.by_victim_alone``), else None. Made once per pass: every blocked
        job of a queue that preempts asks, and they stay the same all through it."""
        if self._pass_candidates[0] is not ctx:
            self._pass_candidates = (ctx, {})
        known = self._pass_candidates[1]
        if (found := known.get((classes, name))) is None:
            running = [j for j in ctx.running if j.request.work_class in classes and
                       j.current.seen and j.current.evicting is None and
                       j.current.cancel is None]
            in_order = list(each(ctx, "preempt", name, VictimScope(job, queue, tuple(running)))) \
                if picker_class("preempt", name).by_victim_alone else None
            found = known[(classes, name)] = (running, in_order)
        return found

    def _room(self, loads: list[DeviceLoad], victims: list[Job] | tuple[Job, ...],
              mode: PreemptMode) -> list[DeviceLoad]:
        """``loads`` once ``victims`` are suspended (``paused``) or gone (``requeue``)."""
        if not victims:
            return loads
        held, kept = self._holds(victims)
        loads = without_envelopes(loads, held)
        return with_envelopes(loads, kept) if mode == PreemptMode.SUSPEND else loads

    def _unroom(self, loads: list[DeviceLoad], victims: list[Job],
                mode: PreemptMode) -> list[DeviceLoad]:
        """``loads`` with ``victims`` back as they were before ``_room``: its inverse."""
        held, kept = self._holds(victims)
        if mode == PreemptMode.SUSPEND:
            loads = without_envelopes(loads, kept)
        return with_envelopes(loads, held)

    def _holds(self, victims: list[Job] | tuple[Job, ...]
               ) -> tuple[list[Envelope], list[Envelope]]:
        """What ``victims`` hold (``envelopes``) and what they would keep suspended
        (``paused``), in their order; each victim's made once while it stays a candidate
        (``_everyone`` keeps them for the candidates it was last asked about), since a
        pass tries the same running jobs for every job that waits."""
        held: list[Envelope] = []
        kept: list[Envelope] = []
        for victim in victims:
            profile = self.board.policy.profiles.get(victim.profile)
            known = self._victims.get(victim.job_id)
            if known is None or known[0] is not victim.current or known[1] is not profile:
                envelopes = self.envelopes(victim)
                known = self._victims[victim.job_id] = (victim.current, profile, envelopes,
                                                        paused(envelopes))
            held += known[2]
            kept += known[3]
        return held, kept

    def _everyone(self, loads: list[DeviceLoad], victims: list[Job],
                  mode: PreemptMode) -> list[DeviceLoad]:
        """``_room`` of every candidate victim. A pass asks it for each demand that waits,
        of the same running jobs, and the next pass mostly of the same loads again (the
        devices no job started or ended on keep their ``DeviceLoad``): a device whose
        load and victims' envelopes are those of the last answer keeps its room from it,
        and only the others are worked out (as ``_room`` would, to the last bit)."""
        ids, memo = tuple(v.job_id for v in victims), self._everyone_memo
        if memo is not None and memo[0] is loads and memo[1] == ids and memo[2] == mode:
            return memo[4]
        # the same victims, in the same attempts, under the same profiles: the same
        # envelopes, without making them again
        attempts = (self.board.policy, *(v.current for v in victims))
        if memo is not None and memo[1] == ids and len(memo[5]) == len(attempts) and all(
                a is b for a, b in zip(attempts, memo[5])):
            on = memo[3]
        else:
            self._victims = {v.job_id: known for v in victims
                             if (known := self._victims.get(v.job_id)) is not None}
            on = {}
            for victim in victims:
                for envelope, kept in zip(*self._holds((victim,))):
                    mine = on.setdefault(envelope.uuid, ([], []))
                    mine[0].append(envelope)
                    mine[1].append(kept)
        same = memo is not None and memo[2] == mode and len(memo[0]) == len(loads)
        last_loads, last_on, last_room = (memo[0], memo[3], memo[4]) if same else ((), {}, ())
        if same and (on is last_on or on == last_on):  # the same victims: the loads changed
            room = list(last_room)
            for index in [i for i, (new, old) in enumerate(zip(loads, last_loads))
                          if new is not old]:
                room[index] = self._made(loads[index], on.get(loads[index].device.uuid), mode)
        else:
            room = [last_room[index] if same and load is last_loads[index]
                    and on.get(load.device.uuid) == last_on.get(load.device.uuid)
                    else self._made(load, on.get(load.device.uuid), mode)
                    for index, load in enumerate(loads)]
        if same:
            refit(self._everyone_fitting, [(old, new) for old, new in zip(last_room, room)
                                           if old is not new])
        else:
            self._everyone_fitting = {}
        self._everyone_memo = (loads, ids, mode, on, room, attempts)
        return room

    @staticmethod
    def _made(load: DeviceLoad, mine: tuple[list[Envelope], list[Envelope]] | None,
              mode: PreemptMode) -> DeviceLoad:
        """``_room`` on one device, given what the victims hold there and keep there
        suspended (``without_envelopes``, then ``with_envelopes`` of what they keep)."""
        if mine is None:
            return load
        load = releasing(load, mine[0])
        return holding(load, mine[1]) if mode == PreemptMode.SUSPEND else load

    def _fitting_everyone(self, loads: list[DeviceLoad], victims: list[Job],
                          mode: PreemptMode, demand: Demand, avoid: tuple[str, ...]) -> int:
        """How many devices of ``_everyone``'s room take one of ``demand``'s shares,
        keeping off ``avoid`` (``placement.fitting``): counted once per shape of demand,
        and carried over to the next room on the devices it changed (``refit``)."""
        room = self._everyone(loads, victims, mode)
        key = (demand.utilization_pct, demand.memory_mib, avoid)
        if key not in self._everyone_fitting:
            self._everyone_fitting[key] = (demand, fitting(demand, room, avoid))
        return self._everyone_fitting[key][1][""]

    def resume(self, ctx: Pass, tier: tuple[Queue, ...], pending: dict[str, str]
               ) -> list[Event]:
        """The suspended jobs of ``tier`` whose room is back, the earliest suspended first;
        why each other one still waits goes to ``pending`` (status shows it)."""
        if not self.board.count(JobState.SUSPENDED):
            return []
        names = {queue.name for queue in tier}
        waiting = sorted((j for j in self.board.suspended()
                          if ctx.by_class[j.request.work_class].name in names
                          and j.current.cancel is None),  # ending: not to run on
                         key=lambda j: (j.current.preemptions[-1]["at"], j.order))
        events: list[Event] = []
        shapes: dict[str, tuple[str | None, Demand | None]] = {}
        for job in waiting:
            why = self._resume_hold(ctx, job, shapes)
            if why is not None:
                pending[job.job_id] = why
                continue
            ctx.free -= 1
            ctx.running_in[ctx.by_class[job.request.work_class].name] += 1
            ctx.running_of[peer_of(job)] += 1
            ctx.taken.add(job.job_id)
            if ctx.loads is not None and job.current.gpus:
                held = self.envelopes(job)
                ctx.loads = with_envelopes(without_envelopes(ctx.loads, paused(held)), held)
            events.append(AttemptResumed(at=ctx.at, job_id=job.job_id,
                                         attempt_id=job.current.attempt_id))
        return events

    def _resume_hold(self, ctx: Pass, job: Job,
                     shapes: dict[str, tuple[str | None, Demand | None]]) -> str | None:
        """Why a suspended job cannot continue now, or None. Its memory never left its
        devices (nor did an exclusive hold), so only its utilization must fit again.
        ``shapes``: what its profile asks (``_resume_shape``), by profile, for one call
        of ``resume``."""
        if ctx.free <= 0:
            return (f"suspended, waiting for a slot to resume: {ctx.target - ctx.free} of "
                    f"{ctx.target} running")
        if held := ctx.queue_hold(ctx.by_class[job.request.work_class]) or ctx.peer_hold(job):
            return f"suspended, {held}"
        if (shape := shapes.get(job.profile)) is None:
            shape = shapes[job.profile] = self._resume_shape(job.profile)
        held, utilization = shape
        if held is not None or utilization is None:
            return held
        if ctx.loads is None:
            return "suspended: no usable GPU sample to check its devices"
        loads = self._loads_by_uuid(ctx.loads)
        for uuid in job.current.gpus:
            load = loads.get(uuid)
            limit = "not in the inventory" if load is None else load.fit(utilization)[1]
            if limit:
                return (f"suspended, its {utilization.utilization_pct:g}% utilization does "
                        f"not fit back on {uuid}: {limit}")
        return None

    def _resume_shape(self, name: str) -> tuple[str | None, Demand | None]:
        """What a suspended job of profile ``name`` needs to resume besides a slot and its
        queue's and peer's leave: (why its pressure domains hold it, or None; the
        utilization that must fit back on each of its devices, or None when nothing
        must: no GPU share to fit, or a device held exclusively all along)."""
        policy, host = self.board.policy, self.board.host
        profile = policy.profiles.get(name)
        if profile is None:  # it holds its devices exclusively, and declares no domains
            return None, None
        if held := pressure_hold(policy, profile, host.pressure if host else None):
            return f"suspended, {held}", None
        demand = Demand.of(profile)
        if not profile.uses_gpu or demand.exclusive:
            return None, None
        return None, Demand(1, demand.utilization_pct, 0.0)

    def _loads_by_uuid(self, loads: list[DeviceLoad]) -> dict[str, DeviceLoad]:
        """``loads`` by device, made once for each list: a pass asks it for every
        suspended job in turn, and the list only changes when one resumes."""
        if self._by_uuid[0] is not loads:
            self._by_uuid = (loads, {load.device.uuid: load for load in loads})
        return self._by_uuid[1]


def _gained(demand: Demand, avoid: tuple[str, ...], before: list[DeviceLoad],
            after: list[DeviceLoad]) -> int:
    """How many more devices take one of ``demand``'s shares (keeping off ``avoid``) in
    ``after`` than in ``before``: the same devices, of which only those whose
    ``DeviceLoad`` changed are looked at (``with_envelopes`` keeps the others')."""
    if before is after:
        return 0
    gained = 0
    for old, new in zip(before, after):
        if old is not new and old.device.uuid not in avoid:
            gained += (new.fit(demand)[0] is not None) - (old.fit(demand)[0] is not None)
    return gained


def times_preempted(victim: Job, by: str) -> int:
    """How often ``victim`` was preempted for job ``by``, over all its attempts (journaled)."""
    return sum(p["by"] == by for attempt in victim.attempts for p in attempt.preemptions)


def paused(envelopes: list[Envelope]) -> list[Envelope]:
    """What a suspended job still holds: its memory, and a device it holds exclusively
    (unknown demand: how much memory it keeps is not known); not its utilization."""
    return [e if e.exclusive else replace(e, utilization_pct=0.0) for e in envelopes]


@lru_cache(maxsize=64)
def preemptible_classes(queues: tuple[Queue, ...]) -> dict[str, frozenset[str]]:
    """queue name -> the work classes whose running jobs it may preempt: those of its
    ``preemptible_queues``, and of every ``preemptible`` queue, of a lower priority than
    its own. Empty without preemption."""
    found = {}
    for queue in queues:
        classes = frozenset(c for other in queues
                            if other.priority < queue.priority and (
                                other.preemptible or other.name in queue.preemptible_queues)
                            for c in other.work_classes)
        if classes:
            found[queue.name] = classes
    return found
