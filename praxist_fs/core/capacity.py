"""``max_concurrent_experiments: auto`` (SPEC R-ADM-3), as a pure function of host facts.

Like seed 003's ``resolveLocalConcurrency``: the limit is the smallest of a
set of candidate bounds, and the one that won is named for status
("memory-bound at 2"). Each candidate is floored at 1, so the limit never is
below 1 however small the host. The facts are gathered by
``praxist_fs.adapters.capacity``; this module only does the arithmetic.

Candidates, in tie-break order (on a tie the earlier one is reported):

- ``cap``: the fixed ceiling (8), so a large host reports "cap-bound at 8";
- ``cpu``: the CPUs this process may run on (its affinity mask, which a
  Slurm or taskset cpuset narrows);
- ``memory``: ``floor((available + own_running - reserve) / per_experiment)``.
  ``own_running`` is the memory the run's own running experiments hold; it is
  added back so the limit does not collapse as admitted work starts (their
  memory is no longer "available", yet it is already spent on them);
- ``cgroup-memory``: the same against the cgroup memory limit (only when one
  is set): ``floor((limit - reserve) / per_experiment)``, or, when the cgroup's
  current use is known, ``floor((min(limit, limit - used + own_running) -
  reserve) / per_experiment)``;
- ``cgroup-cpu``: the cgroup CPU quota in CPUs (``cpu.max`` quota / period),
  floored (only when one is set).
"""

from __future__ import annotations

import math

from praxist_fs.core.observations import HostCapacity

__all__ = ["AUTO_CAP", "BOUND_ORDER", "OS_RESERVE_MIB", "resolve_capacity"]

AUTO_CAP = 8
OS_RESERVE_MIB = 2048.0  # left for the OS, the coordinator and whatever else the host runs
BOUND_ORDER = ("cap", "cpu", "memory", "cgroup-memory", "cgroup-cpu")


def _at_least_one(value: float) -> int:
    """floor(value), never below 1; a NaN (an unreadable fact) counts as 1."""
    if math.isnan(value):
        return 1
    if math.isinf(value):
        return 1 if value < 0 else 2**31 - 1
    return max(1, math.floor(value))


def resolve_capacity(
    *,
    cap: int = AUTO_CAP,
    cpus: int,
    available_memory_mib: float,
    own_running_memory_mib: float,
    per_experiment_mib: float,
    reserve_mib: float = OS_RESERVE_MIB,
    cgroup_memory_limit_mib: float | None,
    cgroup_cpu_limit: float | None,
    cgroup_memory_used_mib: float | None = None,
) -> HostCapacity:
    """The minimum of the candidate bounds and the name of the one that won.

    ``details`` maps each candidate that took part (``cap``, ``cpu``,
    ``memory``, and ``cgroup-memory``/``cgroup-cpu`` when the cgroup sets
    them) to its value. ``per_experiment_mib`` must be > 0 (the task file
    guarantees it).
    """
    if not per_experiment_mib > 0:
        raise ValueError(f"per_experiment_mib must be > 0, got {per_experiment_mib!r}")
    own = max(0.0, own_running_memory_mib)
    details: dict[str, int] = {
        "cap": _at_least_one(cap),
        "cpu": _at_least_one(cpus),
        "memory": _at_least_one(
            (available_memory_mib + own - reserve_mib) / per_experiment_mib),
    }
    if cgroup_memory_limit_mib is not None:
        room = cgroup_memory_limit_mib
        if cgroup_memory_used_mib is not None:
            # never more than the limit itself (own work may sit in another cgroup)
            room = min(room, cgroup_memory_limit_mib - cgroup_memory_used_mib + own)
        details["cgroup-memory"] = _at_least_one((room - reserve_mib) / per_experiment_mib)
    if cgroup_cpu_limit is not None:
        details["cgroup-cpu"] = _at_least_one(cgroup_cpu_limit)
    winner = min(details, key=lambda name: (details[name], BOUND_ORDER.index(name)))
    limit = details[winner]
    return HostCapacity(limit=limit, bound=f"{winner}-bound at {limit}", details=details)
