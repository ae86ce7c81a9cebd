"""Generations, results, idle supply and close (R-SUP-1..8): the Scheduler's second half.

A collaborator the ``Scheduler`` owns (``Scheduler.generations_desk``), kept in its
own file because it is a subject of its own. It reads and changes the scheduler's
state only through the narrow view it is given (``GenerationBoard``), under the
same rules (see scheduler.py): every change bumps ``version`` and is journaled by
the daemon before its effects.

Leases are decisions (``LeaseGranted``, ``LeaseExpired``, ``GenerationPhase``)
that the core proposes from ``next_grants`` and ``due``, the daemon journals,
and ``handle`` applies; so replay never re-decides. A restart revokes every
grant that was still waiting for its peer's answer.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidTransition
from .admission import pressure_hold
from .effects import ConsumeDecline, Effect, WriteGenerationFile, WriteJob
from .events import (
    ClaimsReleased, ControlSeen, DeclineSeen, Event, GenerationPhase, IdleSeen, LeaseExpired,
    LeaseGranted, LeaseRevoked, ResultSeen,
)
from .model import NEW_WORK
from .observations import Envelope
from .placement import Demand, DeviceLoad, device_loads, held_envelope, place, with_envelopes
from .states import (
    AttemptOutcome, ControlOutcome, GenerationStage, GenerationTrigger, LeaseTrigger, LeaseUse,
    ReplyOutcome, Trigger, generation_transition, lease_transition,
)
from .supply import (
    IGNORED_AFTER, MATURE, Generation, Lease, Maturity, cooldown_seconds, maturity,
    plan_priorities,
)

if TYPE_CHECKING:
    from .calibration import Calibration
    from .events import HostSampled
    from .model import Job
    from .policy import Policy
    from .shelf import Shelf

ASSESSMENT_HOLD = "generation {n} is in assessment: only mature top-ups start"
DRAIN_GRACE_FACTOR = 2.0  # a job started just before the close needs about one run time


class GenerationBoard(Protocol):
    """What the generation desk reads and changes of the scheduler that owns it."""

    policy: Policy
    host: HostSampled | None
    version: int
    stopped: str | None
    jobs: Shelf[str, Job]
    generations: dict[int, Generation]
    generation_jobs: dict[int, dict[str, str]]  # generation -> {job id: its peer}
    calibration: Calibration
    # soft: the idle registrations, the leases whose host claim is not yet removed, and
    # what the last host sample and pass found (the supply signal's inputs)
    idle_peers: dict[int, frozenset[str]]
    release_pending: set[str]
    idle_streak: int
    unused_slots: int
    admissible: tuple[str, ...]

    def queued(self) -> list[Job]: ...
    def running(self) -> list[Job]: ...
    def in_flight(self) -> list[Job]: ...
    def real_loads(self) -> list[DeviceLoad] | None: ...
    def held_envelopes(self) -> list[Envelope]: ...
    def _transition(self, job: Job, trigger: Trigger) -> None: ...
    def _write_job(self, job: Job) -> WriteJob: ...


class GenerationDesk:
    """Generations and supply for the scheduler whose ``board`` it is given."""

    def __init__(self, board: GenerationBoard) -> None:
        self.board = board

    # -- operator control ---------------------------------------------------

    def control(self, ev: ControlSeen
                ) -> tuple[list[Effect], ControlOutcome, str, Generation | None]:
        """An operator's generation_open, _assess or _close: (its effects, and the control
        reply's outcome, reason and generation)."""
        control, number = ev.control, ev.control.generation
        gen = self.board.generations.get(number)
        effects: list[Effect] = []
        if control.action == "generation_open":
            if gen is not None:
                return [], ControlOutcome.REJECTED, (
                    f"generation {number} already exists ({gen.phase})"), gen
            gen = Generation(number=number, cohort=control.cohort, deadline=control.deadline,
                             opened_at=ev.at)
            self.board.generations[number] = gen
            effects += [WriteGenerationFile(generation=number, kind="peer", name=peer,
                                            document={"peer": peer, "generation": number})
                        for peer in gen.cohort]
            effects.append(self._stats_file(gen))
            return effects, ControlOutcome.OK, f"generation {number} open", gen
        if gen is None:
            return [], ControlOutcome.REJECTED, f"generation {number} was never opened", None
        if not gen.accepting:
            return [], ControlOutcome.REJECTED, f"generation {number} is {gen.phase}", gen
        if control.action == "generation_assess":
            gen.phase = generation_transition(number, gen.phase, GenerationTrigger.ASSESS)
            over = self._assessment_over(gen, ev.at)
            return [], ControlOutcome.OK, f"generation {number} in assessment" + (
                f"; it closes now ({over})" if over else ""), gen
        gen.close_requested = True
        mature = self.maturity(gen)
        if mature.hard_quorum is not None and mature.m < mature.hard_quorum and \
                (gen.deadline is None or ev.at < gen.deadline):
            gen.phase = generation_transition(number, gen.phase, GenerationTrigger.ASSESS)
            return [], ControlOutcome.OK, (
                f"generation {number} in assessment: {mature.m} of {mature.hard_quorum} mature "
                "peers; it closes when the quorum is met or the deadline passes"), gen
        effects = self._close(gen, ev.at, "closed by the operator")
        return effects, ControlOutcome.OK, f"generation {number} closing", gen

    def _close(self, gen: Generation, at: float, reason: str) -> list[Effect]:
        """Freeze the generation's queue, revoke its leases, then write CLOSING_SIGNAL."""
        gen.phase = generation_transition(gen.number, gen.phase, GenerationTrigger.CLOSE)
        effects: list[Effect] = []
        for job in self.board.queued():
            if job.generation == gen.number:
                self.board._transition(job, Trigger.FREEZE)
                job.reason = f"generation {gen.number} closed before it started ({reason})"
                effects.append(self.board._write_job(job))
        for lease in gen.outstanding():
            effects += self._end_lease(gen, lease, LeaseTrigger.REVOKE, at,
                                       f"generation closing ({reason})")
        gen.closing_signal = {"generation": gen.number, "at": at, "reason": reason,
                              "drain": self.drain_grace(gen, at)}
        effects.append(self._closing_file(gen))
        self.board.version += 1
        return effects

    # -- peers: results, idle registrations, declines -----------------------

    def on_result(self, ev: ResultSeen) -> list[Effect]:
        gen = self.board.generations.get(ev.generation)
        if gen is None or ev.result_id in gen.results or ev.result_id in gen.quarantined:
            return []
        if gen.phase == GenerationStage.CLOSED:  # after the drain: kept, never counted
            gen.quarantined[ev.result_id] = ev.peer
        else:
            gen.results[ev.result_id] = (ev.peer, ev.mature)
        self.board.version += 1
        return []

    def on_idle(self, ev: IdleSeen) -> list[Effect]:
        self.board.idle_peers[ev.generation] = frozenset(ev.peers)
        return []

    def on_decline(self, ev: DeclineSeen) -> list[Effect]:
        effects: list[Effect] = [ConsumeDecline(generation=ev.generation, name=ev.name)]
        gen = self.board.generations.get(ev.generation)
        lease = gen.leases.get(ev.lease_id) if gen else None
        if lease is None or lease.peer != ev.peer or not lease.outstanding:
            return effects
        declines = gen.cooldowns.get((lease.peer, lease.priority), (0, 0.0))[0] + 1
        gen.cooldowns[(lease.peer, lease.priority)] = (declines,
                                                       ev.at + cooldown_seconds(declines))
        return self._end_lease(gen, lease, LeaseTrigger.DECLINE, ev.at,
                               "declined by the peer") + effects

    # -- decisions ------------------------------------------------------------

    def on_granted(self, ev: LeaseGranted) -> list[Effect]:
        gen = self.board.generations[ev.generation]
        lease = Lease(lease_id=ev.lease_id, peer=ev.peer, generation=ev.generation,
                      priority=ev.priority, profiles=ev.profiles, granted_at=ev.at,
                      expires_at=ev.expires_at, claim=ev.claim)
        gen.leases[lease.lease_id] = lease
        gen.count(lease.priority, "granted")
        for key in [k for k in gen.cooldowns if k[0] == lease.peer and k[1] != lease.priority]:
            del gen.cooldowns[key]  # a changed priority resets the peer's decline backoff
        self.board.version += 1
        return [self._lease_file(lease), self._stats_file(gen)]

    def on_expired(self, ev: LeaseExpired) -> list[Effect]:
        gen = self.board.generations[ev.generation]
        lease = gen.leases[ev.lease_id]
        if not lease.outstanding:
            return []
        return self._end_lease(gen, lease, LeaseTrigger.EXPIRE, ev.at,
                               "expired unused (the submission window closed)")

    def on_revoked(self, ev: LeaseRevoked) -> list[Effect]:
        gen = self.board.generations[ev.generation]
        lease = gen.leases[ev.lease_id]
        if not lease.outstanding:
            return []
        return self._end_lease(gen, lease, LeaseTrigger.REVOKE, ev.at, ev.reason)

    def on_claims_released(self, ev: ClaimsReleased) -> list[Effect]:
        """Soft: leases whose host claim could not be removed show release_pending: true
        until a later reconciliation removes it (R-SUP-5)."""
        changed = self.board.release_pending.symmetric_difference(ev.pending)
        self.board.release_pending = set(ev.pending)
        return [self._lease_file(lease) for gen in self.board.generations.values()
                for lease in _latest_leases(gen).values() if lease.lease_id in changed]

    def on_phase(self, ev: GenerationPhase) -> list[Effect]:
        gen = self.board.generations[ev.generation]
        if ev.phase == GenerationStage.CLOSING:
            return self._close(gen, ev.at, ev.reason)
        if ev.phase != GenerationStage.CLOSED:  # the only other phase the core decides
            raise InvalidTransition(f"can't move generation {gen.number} to {ev.phase}")
        gen.phase = generation_transition(gen.number, gen.phase, GenerationTrigger.DRAIN)
        self.board.version += 1
        return []

    def revoke_outstanding(self, at: float, reason: str) -> list[Effect]:
        """Revoke every lease still waiting for its peer's answer: at a (re)start (R-SUP-6)
        and when the run stops (R-SUP-8)."""
        effects: list[Effect] = []
        for gen in self.board.generations.values():
            for lease in gen.outstanding():
                effects += self._end_lease(gen, lease, LeaseTrigger.REVOKE, at, reason)
        return effects

    def _end_lease(self, gen: Generation, lease: Lease, trigger: LeaseTrigger,
                   at: float, reason: str) -> list[Effect]:
        lease.state = lease_transition(lease.lease_id, lease.state, trigger)
        lease.reason, lease.ended_at = reason, at
        gen.count(lease.priority, lease.state)
        self.board.version += 1
        return [self._lease_file(lease), self._stats_file(gen)]

    def use_lease(self, peer: str, lease_id: str, at: float, outcome: ReplyOutcome
                  ) -> tuple[dict[str, str], list[Effect]]:
        """What a submission carrying ``lease_id`` and answered ``outcome`` does to that
        lease (R-SUP-4), and the generation files it touched. Only a submission that queued
        work uses one: a duplicate leaves it as it was, still the peer's to use for work
        it has not submitted yet."""
        if outcome not in NEW_WORK:
            return {"lease_id": lease_id, "outcome": LeaseUse.DUPLICATE_IGNORED}, []
        for gen in self.board.generations.values():
            lease = gen.leases.get(lease_id)
            if lease is None or lease.peer != peer:
                continue
            if lease.outstanding:
                lease.state = lease_transition(lease_id, lease.state, LeaseTrigger.CONSUME)
                lease.ended_at, lease.reason = at, "consumed by a submission"
                gen.count(lease.priority, lease.state)
                return ({"lease_id": lease_id, "outcome": LeaseUse.CONSUMED},
                        [self._lease_file(lease), self._stats_file(gen)])
            key = IGNORED_AFTER[lease.state]
            gen.count(lease.priority, key)
            return {"lease_id": lease_id, "outcome": key}, [self._stats_file(gen)]
        return {"lease_id": lease_id, "outcome": LeaseUse.UNKNOWN}, []

    def due(self, at: float) -> list[Event]:
        """Time- and state-driven decisions: expiries, assessment ending, drain finished."""
        events: list[Event] = []
        real = self.board.real_loads()
        for gen in self.board.generations.values():
            if gen.phase == GenerationStage.CLOSED:
                continue
            for lease in gen.outstanding():
                if at >= lease.expires_at:
                    events.append(LeaseExpired(at=at, generation=gen.number,
                                               lease_id=lease.lease_id))
                elif lease.claim and real is not None and not _claim_fits(lease.claim, real):
                    events.append(LeaseRevoked(
                        at=at, generation=gen.number, lease_id=lease.lease_id,
                        reason="preempted: real work took the capacity its claim promised"))
            if gen.phase == GenerationStage.ASSESSMENT:
                if reason := self._assessment_over(gen, at):
                    events.append(GenerationPhase(at=at, generation=gen.number,
                                                  phase=GenerationStage.CLOSING, reason=reason))
            elif gen.phase == GenerationStage.CLOSING:
                draining = sum(1 for j in self.board.in_flight() if j.generation == gen.number)
                drain = gen.closing_signal.get("drain")  # none in older journals: no bound
                if not draining:
                    events.append(GenerationPhase(at=at, generation=gen.number,
                                                  phase=GenerationStage.CLOSED,
                                                  reason="running work drained"))
                elif drain is not None and at >= drain["deadline"]:
                    events.append(GenerationPhase(
                        at=at, generation=gen.number, phase=GenerationStage.CLOSED, reason=(
                            f"drain grace over ({drain['grace_s']:g} s): {draining} job(s) "
                            "still running keep running, their results no longer count")))
        return events

    def _assessment_over(self, gen: Generation, at: float) -> str | None:
        """Why a generation in assessment closes now, or None (seed 000: "Once the quota
        is met, or the generation reaches its safety bound, the normal strict close path
        takes over"). The deadline is that bound, asked for or not: past it no top-up can
        finish in time. The quorum ends only an assessment a close asked for: ``assess``
        alone is the operator's pause, not a request to close."""
        if gen.deadline is not None and at >= gen.deadline:
            return "deadline passed"
        if gen.close_requested:
            mature = self.maturity(gen)
            if mature.hard_quorum is not None and mature.m >= mature.hard_quorum:
                return "mature quorum met"
        return None

    def next_grants(self, at: float) -> list[LeaseGranted]:
        """Leases for idle peers when slots sit unused that the queue cannot fill (R-SUP-3)."""
        board, gen = self.board, self.current_generation()
        if board.stopped or not board.policy.supply_signal_enabled or gen is None or \
                board.idle_streak < board.policy.supply_idle_samples or not board.admissible:
            return []
        slots = board.unused_slots - self.outstanding_leases()
        busy = {lease.peer for lease in gen.outstanding()}
        peers = sorted(p for p in board.idle_peers.get(gen.number, ())
                       if p not in busy and (not gen.cohort or p in gen.cohort))
        if slots <= 0 or not peers:
            return []
        first_wave = not any(gen.stats[p]["granted"] for p in gen.stats)
        priorities = plan_priorities(min(slots, len(peers)), self.maturity(gen), first_wave)
        if gen.phase == GenerationStage.ASSESSMENT:
            priorities = [p for p in priorities if p == MATURE]
        grants, serial = [], sum(gen.stats[p]["granted"] for p in gen.stats)
        loads = self._supply_loads()
        for priority in priorities:
            peer = next((p for p in peers
                         if gen.cooldowns.get((p, priority), (0, 0.0))[1] <= at), None)
            if peer is None:
                continue
            profiles, claim = self._claim(loads)
            if not profiles:
                break
            peers.remove(peer)
            serial += 1
            lease_id = f"g{gen.number}-{peer}-{serial}"
            if claim is not None:
                loads = _with_claim(loads, claim, lease_id)
            grants.append(LeaseGranted(
                at=at, generation=gen.number, lease_id=lease_id, peer=peer, priority=priority,
                profiles=profiles, expires_at=at + board.policy.supply_lease_seconds,
                claim=claim))
        return grants

    def _claim(self, loads: list[DeviceLoad] | None
               ) -> tuple[tuple[str, ...], dict[str, Any] | None]:
        """The profiles a lease may name, and the GPU envelope it claims on the host.

        The claim is sized for the most demanding admissible GPU profile, placed like
        real work; GPU profiles are left out of the lease when no claim fits."""
        admissible, profiles = self.board.admissible, self.board.policy.profiles
        cpu = tuple(n for n in admissible if not profiles[n].uses_gpu)
        gpu = [profiles[n] for n in admissible if profiles[n].uses_gpu]
        if not gpu or loads is None:
            return cpu, None
        biggest = max(gpu, key=lambda p: (Demand.of(p).exclusive, p.gpu_memory_gb or 0.0,
                                          p.gpu_utilization_pct or 0.0))
        uuids, reason = place(Demand.of(biggest), loads)
        if reason:
            return cpu, None
        envelope = held_envelope(biggest, uuids[0], "")
        return tuple(admissible), {"uuid": envelope.uuid,
                                   "utilization_pct": envelope.utilization_pct,
                                   "memory_mib": envelope.memory_mib,
                                   "exclusive": envelope.exclusive}

    def _supply_loads(self) -> list[DeviceLoad] | None:
        """Loads as promises see them: real allocations plus every outstanding claim."""
        board = self.board
        sample = board.host.gpus if board.host else None
        if sample is None or not sample.devices:
            return None
        return device_loads(sample, [*board.held_envelopes(), *board.host.others,
                                     *self.own_claims()])

    def own_claims(self) -> list[Envelope]:
        return [_claim_envelope(lease.claim, lease.lease_id)
                for gen in self.board.generations.values() for lease in gen.outstanding()
                if lease.claim]

    # -- views ----------------------------------------------------------------

    def current_generation(self) -> Generation | None:
        accepting = [g for g in self.board.generations.values() if g.accepting]
        return max(accepting, key=lambda g: g.number) if accepting else None

    def outstanding_leases(self) -> int:
        return sum(len(g.outstanding()) for g in self.board.generations.values())

    def maturity(self, gen: Generation) -> Maturity:
        mature_results = [peer for peer, is_mature in gen.results.values() if is_mature]
        commitments = sum(1 for j in (*self.board.queued(), *self.board.running())
                          if j.generation == gen.number and j.request.work_class == MATURE)
        commitments += sum(1 for lease in gen.outstanding() if lease.priority == MATURE)
        cohort = len(gen.cohort) or len(self.known_peers(gen)) or 1
        policy = self.board.policy
        return maturity(cohort_size=cohort, fraction=policy.mature_supply_fraction,
                        redundancy=policy.mature_supply_redundancy,
                        quorum_fraction=policy.mature_quorum_fraction,
                        mature_results=len(mature_results), mature_peers=len(set(mature_results)),
                        commitments=commitments)

    def known_peers(self, gen: Generation) -> set[str]:
        """Without a named cohort: the peers the journal knows in this generation (their
        jobs, results and leases). Never the soft idle registrations: a decision taken
        with them would replay differently."""
        return (set(self.board.generation_jobs.get(gen.number, {}).values())
                | {peer for peer, _ in gen.results.values()}
                | {lease.peer for lease in gen.leases.values()})

    def admissible_profiles(self) -> tuple[str, ...]:
        """Profiles that could start now: declared domains calm and, for GPUs, a placement."""
        policy, host = self.board.policy, self.board.host
        pressure = host.pressure if host else None
        loads = self._supply_loads()
        names = []
        for name, profile in sorted(policy.profiles.items()):
            if pressure_hold(policy, profile, pressure):
                continue
            if profile.uses_gpu and (loads is None or place(Demand.of(profile), loads)[1]):
                continue
            names.append(name)
        return tuple(names)

    def assessment_hold(self, job: Job, at: float) -> str | None:
        """In assessment only deadline-safe mature top-ups start (R-SUP-7)."""
        gen = self.board.generations.get(job.generation) if job.generation else None
        if gen is None or gen.phase != GenerationStage.ASSESSMENT:
            return None
        if job.request.work_class != MATURE:
            return ASSESSMENT_HOLD.format(n=gen.number)
        if gen.deadline is None:
            return None
        p = self.board.calibration.p_finish(job.request.eta_s, gen.deadline - at)
        if p is None:
            return (f"generation {gen.number} is in assessment: the ETA is unknown, so it "
                    "cannot be shown to finish before the deadline")
        floor = self.board.policy.mature_assessment_min_completion_probability
        if p < floor:
            return (f"generation {gen.number} is in assessment: P(finish before the deadline) = "
                    f"{p:.2f} < {floor:g}")
        return None

    def status(self, gen: Generation, soft: bool = True
                          ) -> dict[str, Any]:
        """The generation as status.json shows it; ``soft=False`` leaves out what only
        live observation knows (idle peers), for documents kept in durable state."""
        doc = gen.to_dict()
        doc.pop("cooldowns")
        doc["results"] = {"count": len(gen.results),
                          "mature": sum(1 for _, m in gen.results.values() if m),
                          "quarantined": sorted(gen.quarantined)}
        doc.pop("quarantined")
        doc["maturity"] = self.maturity(gen).to_dict()
        doc["leases"] = [lease.to_dict() for lease in gen.outstanding()]
        if soft:
            doc["idle_peers"] = sorted(self.board.idle_peers.get(gen.number, ()))
        return doc

    def views(self) -> list[Effect]:
        """Every generation file the journal implies, for repair at start."""
        effects: list[Effect] = []
        for gen in self.board.generations.values():
            effects += [WriteGenerationFile(generation=gen.number, kind="peer", name=peer,
                                            document={"peer": peer, "generation": gen.number})
                        for peer in gen.cohort]
            effects += [self._lease_file(lease) for lease in _latest_leases(gen).values()]
            effects.append(self._stats_file(gen))
            if gen.closing_signal is not None:
                effects.append(self._closing_file(gen))
        return effects

    def drain_grace(self, gen: Generation, at: float) -> dict[str, Any]:
        """How long the generation closing at ``at`` waits for its running work (seed 000
        "adaptive drain grace"): DRAIN_GRACE_FACTOR x the 90th percentile of the run
        times its completed attempts took, within the task's drain_grace_min/max_seconds;
        the maximum while none completed (unknown stays unknown). Then it closes, and
        whatever still runs keeps running (a close never kills an experiment)."""
        policy = self.board.policy
        low, high = policy.drain_grace_min_seconds, policy.drain_grace_max_seconds
        times = sorted(a.active_seconds(a.ended_at) for job in map(
            self.board.jobs.peek, self.board.generation_jobs.get(gen.number, ()))
                       for a in job.attempts if a.outcome == AttemptOutcome.COMPLETED)
        if times:
            p90 = times[math.ceil(0.9 * len(times)) - 1]
            grace = min(max(DRAIN_GRACE_FACTOR * p90, low), high)
            rule = (f"{DRAIN_GRACE_FACTOR:g} x p90 of {len(times)} observed run time(s) "
                    f"({p90:.3g} s), within {low:g}..{high:g} s")
        else:
            grace, rule = high, f"no run time observed: the upper bound, {high:g} s"
        return {"deadline": at + grace, "grace_s": round(grace, 3), "rule": rule}

    def _closing_file(self, gen: Generation) -> WriteGenerationFile:
        return WriteGenerationFile(generation=gen.number, kind="closing", name="CLOSING_SIGNAL",
                                   document=gen.closing_signal)

    def _lease_file(self, lease: Lease) -> WriteGenerationFile:
        document = {**lease.to_dict(),
                    "release_pending": lease.lease_id in self.board.release_pending}
        return WriteGenerationFile(generation=lease.generation, kind="lease", name=lease.peer,
                                   document=document)

    def _stats_file(self, gen: Generation) -> WriteGenerationFile:
        return WriteGenerationFile(generation=gen.number, kind="stats", name="stats",
                                   document=gen.stats_document())


def _latest_leases(gen: Generation) -> dict[str, Lease]:
    """Each peer's newest lease: the one its lease file shows."""
    return {lease.peer: lease for lease in sorted(gen.leases.values(),
                                                  key=lambda lease: lease.granted_at)}


def _claim_envelope(claim: dict[str, Any], lease_id: str) -> Envelope:
    return Envelope(uuid=claim["uuid"], utilization_pct=claim["utilization_pct"],
                    memory_mib=claim["memory_mib"], exclusive=claim["exclusive"],
                    owner=lease_id, speculative=True)


def _with_claim(loads: list[DeviceLoad], claim: dict[str, Any], lease_id: str
                ) -> list[DeviceLoad]:
    return with_envelopes(loads, [_claim_envelope(claim, lease_id)])


def _claim_fits(claim: dict[str, Any], real: list[DeviceLoad]) -> bool:
    """Does the claimed envelope still fit beside the real work now on its device?"""
    load = next((load for load in real if load.device.uuid == claim["uuid"]), None)
    if load is None:
        return False
    demand = Demand(1, None, None) if claim["exclusive"] else \
        Demand(1, claim["utilization_pct"], claim["memory_mib"])
    return load.fit(demand)[0] is not None
