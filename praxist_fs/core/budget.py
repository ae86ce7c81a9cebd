"""The run budget (R-BUD-1): spend from attempt wall time, its verdict, and estimates.

An attempt spends its GPUs x wall seconds (launch to end, whatever the outcome)
and costs the rate of its profile x units x hours, where units are its GPUs, or 1
for CPU work: rates are per GPU-hour, or per hour of a CPU attempt. Ended
attempts are charged once, when they settle (``AttemptDesk.settle``), so replaying
the journal rebuilds the ledger; running attempts count what they spent so far.
Spend is kept by kind, so that a flaky node does not pass for expensive science:
``infrastructure`` (exit 75, a launch barrier that never let the command start, an
attempt lost without an exit record, an attempt preempted for requeue, whose work is
lost) and ``experiment`` (every other end). Time an attempt spends suspended by
preemption is not spent at all: the job it made room for spends those GPUs (R-POL-3).

The budget is advisory, as in seed 003: its verdict (under, at, over) is published
and journaled each time it changes, and it never holds or denies work. Only a
request's own ``max_cost`` is a hard ceiling, checked against its ETA ``estimate``.
Seed 003's other rules: an operator may raise a limit at run time and never lower it
(``with_ceilings``), every launch records where the budget stood, and work enqueued
while the verdict is not ``under`` raises a budget alert, journaled at most once per
``ALERT_INTERVAL_S``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .states import AttemptOutcome, Verdict

INFRA_EXIT_CODE = 75  # R-SUB-4: the one exit code that means "infrastructure"
EXPERIMENT, INFRASTRUCTURE, RUNNING = "experiment", "infrastructure", "running"
KINDS = (EXPERIMENT, INFRASTRUCTURE)  # what an ended attempt is charged as
VERDICTS = tuple(Verdict)             # in rising severity
LIMITS = ("gpu_hours", "cost")        # the limits a budget may have, and an operator raise
ALERT_INTERVAL_S = 60.0  # the journal holds at most one budget alert a minute
# ends not of the experiment's doing
_INFRA_OUTCOMES = (AttemptOutcome.RELEASED, AttemptOutcome.LOST, AttemptOutcome.PREEMPTED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """``compute_budget.resource_scheduler.budget``: limits (None: none) and rates."""

    gpu_hours: float | None = None
    cost: float | None = None
    rates: dict[str, float] = field(default_factory=dict)  # profile -> cost per unit-hour
    at_fraction: float = 0.9  # the verdict is "at" from this share of a limit on

    @property
    def limited(self) -> bool:
        return self.gpu_hours is not None or self.cost is not None

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_hours": self.gpu_hours, "cost": self.cost,
                "rates": dict(sorted(self.rates.items())), "at_fraction": self.at_fraction}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Budget:
        return cls(**{**data, "rates": dict(data["rates"])})


def with_ceilings(budget: Budget, raised: dict[str, float]) -> Budget:
    """The budget in force: each limit of the task file, or the higher one an operator
    raised it to at run time. A limit the task file leaves out stays out: none is the
    highest, so no raise applies to it. Nothing raised: the task file's, as it is (asked
    at every launch)."""
    if not raised:
        return budget
    return replace(budget, **{key: max(limit, value) for key, value in raised.items()
                              if (limit := getattr(budget, key)) is not None})


def raise_refusal(budget: Budget, key: str, value: float) -> str | None:
    """Why ``key`` may not become ``value`` (seed 003's ``raise`` rejects a lower
    ceiling), or None."""
    limit = getattr(budget, key)
    if limit is None:
        return (f"the run has no {key} limit, which no ceiling is above; a limit is set in "
                "the task file's budget")
    if value < limit:
        return f"{value:g} is lower than the ceiling in force, {limit:g}; it can only be raised"
    return None


@dataclass(frozen=True, slots=True)
class Spend:
    gpu_seconds: float = 0.0
    cost: float = 0.0

    def __add__(self, other: Spend) -> Spend:
        return Spend(self.gpu_seconds + other.gpu_seconds, self.cost + other.cost)

    def to_dict(self) -> dict[str, float]:
        return {"gpu_hours": round(self.gpu_seconds / 3600, 6), "cost": round(self.cost, 6)}


def attempt_spend(gpus: int, wall_s: float, rate: float | None) -> Spend:
    """What ``wall_s`` seconds on ``gpus`` GPUs (0: CPU work) spend; no rate, no cost."""
    wall_s = max(0.0, wall_s)
    cost = 0.0 if rate is None else rate * max(gpus, 1) * wall_s / 3600
    return Spend(gpus * wall_s, cost)


def kind_of(outcome: str | None, exit_code: int | None,
            infrastructure: str | None = None) -> str:
    """The kind an ended attempt is charged as: ``infrastructure`` is why it ended by a
    failure of the infrastructure (a node's), whatever its command's exit."""
    if exit_code == INFRA_EXIT_CODE or outcome in _INFRA_OUTCOMES or infrastructure:
        return INFRASTRUCTURE
    return EXPERIMENT


def verdict(budget: Budget, total: Spend) -> Verdict | None:
    """The worst over the configured limits: ``over`` above one, ``at`` from
    ``at_fraction`` of it up to it, else ``under``; None without limits."""
    levels = [VERDICTS.index(_level(spent, limit, budget.at_fraction))
              for spent, limit in ((total.gpu_seconds / 3600, budget.gpu_hours),
                                   (total.cost, budget.cost)) if limit is not None]
    return VERDICTS[max(levels)] if levels else None


def _level(spent: float, limit: float, at_fraction: float) -> Verdict:
    if spent > limit:
        return Verdict.OVER
    return Verdict.AT if spent >= at_fraction * limit else Verdict.UNDER


@dataclass(slots=True)
class Ledger:
    """Spend of ended attempts by kind, the verdict last journaled (and since when), the
    limits an operator raised, and the budget alerts: how many were journaled, the last
    one, and the enqueues since that the next one stands for."""

    ended: dict[str, Spend] = field(default_factory=dict)
    verdict: Verdict | None = None
    since: float | None = None
    raised: dict[str, float] = field(default_factory=dict)
    alerts: int = 0
    last_alert: dict[str, Any] | None = None
    unalerted: int = 0

    def charge(self, kind: str, spend: Spend) -> None:
        self.ended[kind] = self.ended.get(kind, Spend()) + spend

    def alert_due(self, at: float) -> bool:
        """Work was enqueued while not ``under``, and the last alert is old enough."""
        return self.unalerted > 0 and (
            self.last_alert is None or at - self.last_alert["at"] >= ALERT_INTERVAL_S)

    def to_dict(self) -> dict[str, Any]:
        return {"ended": {kind: [s.gpu_seconds, s.cost] for kind, s in sorted(self.ended.items())},
                "verdict": self.verdict, "since": self.since,
                "raised": dict(sorted(self.raised.items())), "alerts": self.alerts,
                "last_alert": self.last_alert, "unalerted": self.unalerted}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        """Snapshots written before raises and alerts existed lack their keys."""
        return cls({kind: Spend(*pair) for kind, pair in data["ended"].items()},
                   _verdict(data["verdict"]), data["since"], dict(data.get("raised", {})),
                   data.get("alerts", 0), data.get("last_alert"), data.get("unalerted", 0))


def _verdict(value: str | None) -> Verdict | None:
    return None if value is None else Verdict(value)


def estimate(eta_s: float, ratio: float, gpus: int, rate: float) -> dict[str, Any]:
    """A request's expected spend, for its ``max_cost``: one attempt of ``eta_s`` scaled
    by ``ratio``, the calibrated median of wall time / eta_s (R-SUP-7; 1 until jobs end)."""
    wall_s = eta_s * ratio
    spend = attempt_spend(gpus, wall_s, rate)
    return {"cost": round(spend.cost, 6), "gpu_hours": round(spend.gpu_seconds / 3600, 6),
            "wall_s": round(wall_s, 3), "eta_s": eta_s, "ratio": round(ratio, 6),
            "gpus": gpus, "rate": rate, "rate_per": "GPU-hour" if gpus else "hour"}
