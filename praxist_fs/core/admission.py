"""Admission under live host pressure (R-ADM-1, R-ADM-2).

The concurrency target starts at initial_concurrent_experiments and moves one
step at a time within [min, max]: up after ``calm_samples`` consecutive calm
samples while work waits only for a slot, down on a sample where a domain is
above its high threshold. Lowering the target never stops running work; it
only stops new admissions until the running count falls below it. A profile
that declares a domain is not admitted while that domain is above its high
threshold. The target is soft state: a restarted coordinator begins again at
initial_concurrent_experiments.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from .observations import HostCapacity, PressureSample
from .policy import Policy, Profile


@dataclass(slots=True)
class ConcurrencyController:
    target: int
    calm: int = 0
    last_move: str = "initial"

    @classmethod
    def start(cls, policy: Policy) -> ConcurrencyController:
        return cls(target=policy.initial_concurrent_experiments)

    def observe(self, policy: Policy, pressure: PressureSample | None, capacity: HostCapacity | None,
                slot_limited: bool) -> None:
        low, high = policy.min_concurrent_experiments, upper_bound(policy, capacity)
        hot = hot_domains(policy, pressure)
        if hot:
            self.calm = 0
            if self.target > low:
                self.target -= 1
                self.last_move = f"lowered: {hot[0]}"
        elif slot_limited and is_calm(policy, pressure):
            self.calm += 1
            if self.calm >= policy.calm_samples and self.target < high:
                self.target += 1
                self.calm = 0
                self.last_move = f"raised after {policy.calm_samples} calm samples"
        else:
            self.calm = 0
        self.target = max(low, min(self.target, high))


def upper_bound(policy: Policy, capacity: HostCapacity | None) -> int:
    """max_concurrent_experiments, or for ``auto`` the host's resolved capacity (8 until known)."""
    if policy.max_concurrent_experiments == "auto":
        return max(policy.min_concurrent_experiments, capacity.limit if capacity else 8)
    return policy.max_concurrent_experiments


def hot_domains(policy: Policy, pressure: PressureSample | None,
                domains: Iterable[str] | None = None) -> list[str]:
    """Domains (all configured ones, or ``domains``) above their high threshold,
    each said as 'cpu pressure 87% > 80%'."""
    if pressure is None:
        return []
    hot = []
    for domain in policy.pressure_thresholds if domains is None else domains:
        value, threshold = pressure.get(domain), policy.pressure_thresholds.get(domain)
        if value is not None and threshold is not None and value > threshold.high:
            hot.append(f"{domain} pressure {_above(value, threshold.high)}")
    return hot


def _above(value: float, threshold: float) -> str:
    """'87% > 80%', with the decimals that tell the two apart ('80.4% > 80%', never
    '80% > 80%')."""
    for digits in (0, 1):
        if float(shown := f"{value:.{digits}f}") > threshold:
            break
    else:
        shown = f"{value:.2f}"
    return f"{shown}% > {threshold:g}%"


@lru_cache(maxsize=1024)
def reason_kind(reason: str) -> str:
    """A reason without its live numbers ('cpu pressure #% > #%'): a reason that only
    changed its numbers is the same reason to a person reading it."""
    return re.sub(r"\d+(\.\d+)?", "#", reason)


def is_calm(policy: Policy, pressure: PressureSample | None) -> bool:
    if pressure is None:
        return False
    return all(pressure.get(d) is None or pressure.get(d) < t.low
               for d, t in policy.pressure_thresholds.items())


def pressure_hold(policy: Policy, profile: Profile, pressure: PressureSample | None) -> str | None:
    """Why a profile's declared domains hold it back now, or None."""
    hot = hot_domains(policy, pressure, profile.pressure_domains)
    return hot[0] if hot else None
