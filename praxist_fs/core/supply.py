"""Generations, maturity arithmetic and idle-supply leases (R-SUP-1..7). Pure.

Maturity, exactly as seed 000 states it:
    Q = max(1, ceil(cohort_size * mature_supply_fraction))
    M = unique mature results (distinct mature peers when a hard close quorum is set)
    D = max(0, Q - M)
    A_target = min(cohort_size, ceil(mature_supply_redundancy * D))
A hard close quorum (synthesis_trigger.mature_quorum_fraction > 0) that is
larger than Q replaces Q. A zero fraction or redundancy disables mature-priority
supply, never ordinary idle backfill. Queued/running mature experiments of the
generation and outstanding mature leases are its mature commitments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .states import GenerationStage, LeaseState, LeaseUse

MATURE = "mature"
FRONTIER = "frontier_followup"
PRIORITIES = (MATURE, FRONTIER)
LEASE_OUTCOMES = (LeaseState.CONSUMED, LeaseState.DECLINED, LeaseState.EXPIRED,
                  LeaseState.REVOKED)
# a submission carrying a lease that has ended: its outcome (and counter) by the lease's
# state. Seed 000 names two: stale_submission is an expired locator, reuse_ignored a lease
# genuinely consumed once; a declined or revoked one is neither, so it is said apart
IGNORED_AFTER = {LeaseState.EXPIRED: LeaseUse.STALE_SUBMISSION,
                 LeaseState.CONSUMED: LeaseUse.REUSE_IGNORED,
                 LeaseState.DECLINED: LeaseUse.DECLINED_IGNORED,
                 LeaseState.REVOKED: LeaseUse.REVOKED_IGNORED}
STAT_KEYS = ("granted", "consumed", "declined", "expired", "revoked", "stale_submission",
             "reuse_ignored", "declined_ignored", "revoked_ignored")
COOLDOWN_BASE_S = 60.0     # the first decline of a priority rests the peer a minute ...
COOLDOWN_MAX_S = 3600.0    # ... doubling per decline, never more than an hour


@dataclass(frozen=True, slots=True)
class Maturity:
    cohort_size: int
    q: int
    m: int
    d: int
    a_target: int
    hard_quorum: int | None
    commitments: int
    mature_enabled: bool

    @property
    def mature_room(self) -> int:
        """How many more mature commitments the generation wants."""
        return max(0, self.a_target - self.commitments) if self.mature_enabled else 0

    def to_dict(self) -> dict[str, Any]:
        return {"cohort_size": self.cohort_size, "Q": self.q, "M": self.m, "D": self.d,
                "A_target": self.a_target, "hard_quorum": self.hard_quorum,
                "mature_commitments": self.commitments, "mature_supply": self.mature_enabled}


def maturity(*, cohort_size: int, fraction: float, redundancy: float, quorum_fraction: float,
             mature_results: int, mature_peers: int, commitments: int) -> Maturity:
    size = max(1, cohort_size)
    q = max(1, math.ceil(size * fraction))
    hard = math.ceil(size * quorum_fraction) if quorum_fraction > 0 else None
    if hard is not None and hard > q:
        q = hard
    m = mature_peers if hard is not None else mature_results
    d = max(0, q - m)
    a_target = min(size, math.ceil(redundancy * d))
    return Maturity(cohort_size=size, q=q, m=m, d=d, a_target=a_target, hard_quorum=hard,
                    commitments=commitments, mature_enabled=fraction > 0 and redundancy > 0)


def plan_priorities(slots: int, mature: Maturity, first_wave: bool) -> list[str]:
    """The priorities of the next ``slots`` leases: mature debt first, then follow-ups.

    At the first wave at most Q peers get mature advice, and in a cohort of several
    at least one keeps exploring."""
    count = min(slots, mature.mature_room)
    if first_wave:
        count = min(count, mature.q, mature.cohort_size - 1 if mature.cohort_size > 1 else 1)
    return [MATURE] * count + [FRONTIER] * (slots - count)


def cooldown_seconds(declines: int) -> float:
    return min(COOLDOWN_BASE_S * 2 ** max(0, declines - 1), COOLDOWN_MAX_S)


@dataclass(slots=True, kw_only=True)
class Lease:
    lease_id: str
    peer: str
    generation: int
    priority: str
    profiles: tuple[str, ...]
    granted_at: float
    expires_at: float
    state: LeaseState = LeaseState.GRANTED  # changed by ``lease_transition`` only
    reason: str = "granted: you may submit one already-planned experiment"
    ended_at: float | None = None
    claim: dict[str, Any] | None = None  # uuid, utilization_pct, memory_mib, exclusive

    @property
    def outstanding(self) -> bool:
        return self.state == LeaseState.GRANTED

    def to_dict(self) -> dict[str, Any]:
        return {"lease_id": self.lease_id, "peer": self.peer, "generation": self.generation,
                "priority": self.priority, "profiles": list(self.profiles),
                "granted_at": self.granted_at, "expires_at": self.expires_at,
                "state": self.state, "reason": self.reason, "ended_at": self.ended_at,
                "claim": self.claim}


@dataclass(slots=True, kw_only=True)
class Generation:
    number: int
    phase: GenerationStage = GenerationStage.OPEN  # changed by ``generation_transition`` only
    cohort: tuple[str, ...] = ()
    deadline: float | None = None
    opened_at: float = 0.0
    close_requested: bool = False
    closing_signal: dict[str, Any] | None = None  # the CLOSING_SIGNAL written at close
    results: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> (peer, mature)
    quarantined: dict[str, str] = field(default_factory=dict)           # id -> peer
    leases: dict[str, Lease] = field(default_factory=dict)
    cooldowns: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] = field(
        default_factory=lambda: {p: dict.fromkeys(STAT_KEYS, 0) for p in PRIORITIES})

    @property
    def accepting(self) -> bool:
        return self.phase in (GenerationStage.OPEN, GenerationStage.ASSESSMENT)

    def outstanding(self) -> list[Lease]:
        return [lease for lease in self.leases.values() if lease.outstanding]

    def count(self, priority: str, key: str) -> None:
        self.stats[priority][key] += 1

    def stats_document(self) -> dict[str, Any]:
        totals = {key: sum(self.stats[p][key] for p in PRIORITIES) for key in STAT_KEYS}
        granted = totals["granted"]
        return {**totals,
                "conversion_rate": round(totals["consumed"] / granted, 4) if granted else None,
                "by_priority": {p: dict(self.stats[p]) for p in PRIORITIES}}

    def to_dict(self) -> dict[str, Any]:
        return {"number": self.number, "phase": self.phase, "cohort": list(self.cohort),
                "deadline": self.deadline, "opened_at": self.opened_at,
                "close_requested": self.close_requested, "closing_signal": self.closing_signal,
                "results": {k: list(v) for k, v in sorted(self.results.items())},
                "quarantined": dict(sorted(self.quarantined.items())),
                "leases": {k: v.to_dict() for k, v in sorted(self.leases.items())},
                "cooldowns": {f"{p}|{q}": list(v) for (p, q), v in sorted(self.cooldowns.items())},
                "stats": self.stats_document()}
