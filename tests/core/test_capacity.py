"""max_concurrent_experiments: auto (SPEC R-ADM-3): the pure resolver, table-driven."""

from __future__ import annotations

import re

import pytest

from praxist_fs.core.capacity import AUTO_CAP, BOUND_ORDER, OS_RESERVE_MIB, resolve_capacity

GIB = 1024.0
BOUND = re.compile(r"(cap|cpu|memory|cgroup-memory|cgroup-cpu)-bound at [1-9][0-9]*")


def host(**overrides):
    """A roomy host: 32 CPUs, 64 GiB available, 4 GiB per experiment, no cgroup limits."""
    facts = dict(cpus=32, available_memory_mib=64 * GIB, own_running_memory_mib=0.0,
                 per_experiment_mib=4 * GIB, cgroup_memory_limit_mib=None,
                 cgroup_cpu_limit=None)
    facts.update(overrides)
    return resolve_capacity(**facts)


CASES = [
    # id, facts, limit, bound
    ("roomy host fits the cap", {}, 8, "cap-bound at 8"),
    ("two cpus", {"cpus": 2}, 2, "cpu-bound at 2"),
    ("memory: (12 - 2) / 4 = 2.5 -> 2", {"available_memory_mib": 12 * GIB}, 2,
     "memory-bound at 2"),
    ("low memory floors at one", {"available_memory_mib": 2.5 * GIB}, 1, "memory-bound at 1"),
    ("less than the reserve floors at one", {"available_memory_mib": 1 * GIB}, 1,
     "memory-bound at 1"),
    ("no memory at all floors at one", {"available_memory_mib": 0.0}, 1, "memory-bound at 1"),
    ("cgroup memory: (14 - 2) / 4 = 3", {"cgroup_memory_limit_mib": 14 * GIB}, 3,
     "cgroup-memory-bound at 3"),
    ("cgroup quota 1.5 cpus -> 1", {"cgroup_cpu_limit": 1.5}, 1, "cgroup-cpu-bound at 1"),
    ("cgroup quota below one cpu floors at one", {"cgroup_cpu_limit": 0.2}, 1,
     "cgroup-cpu-bound at 1"),
    ("cgroup quota of 3 cpus", {"cgroup_cpu_limit": 3.0}, 3, "cgroup-cpu-bound at 3"),
    ("a smaller cap", {"cap": 4}, 4, "cap-bound at 4"),
    ("cap of zero floors at one", {"cap": 0}, 1, "cap-bound at 1"),
    ("zero cpus floors at one", {"cpus": 0}, 1, "cpu-bound at 1"),
    ("a smaller reserve", {"available_memory_mib": 12 * GIB, "reserve_mib": 0.0}, 3,
     "memory-bound at 3"),
    ("a larger per-experiment estimate", {"per_experiment_mib": 30 * GIB}, 2,
     "memory-bound at 2"),
    # ties report the earlier candidate: cap, cpu, memory, cgroup-memory, cgroup-cpu
    ("tie cap = cpu", {"cpus": 8}, 8, "cap-bound at 8"),
    ("tie cpu = memory", {"cpus": 2, "available_memory_mib": 10 * GIB}, 2, "cpu-bound at 2"),
    ("tie memory = cgroup memory", {"available_memory_mib": 10 * GIB,
                                    "cgroup_memory_limit_mib": 10 * GIB}, 2,
     "memory-bound at 2"),
    ("tie cgroup memory = cgroup cpu", {"cgroup_memory_limit_mib": 10 * GIB,
                                        "cgroup_cpu_limit": 2.0}, 2,
     "cgroup-memory-bound at 2"),
    ("tie cpu = cgroup cpu", {"cpus": 2, "cgroup_cpu_limit": 2.0}, 2, "cpu-bound at 2"),
    ("all at one", {"cap": 1, "cpus": 1, "available_memory_mib": 0.0,
                    "cgroup_memory_limit_mib": 0.0, "cgroup_cpu_limit": 0.5}, 1,
     "cap-bound at 1"),
]


@pytest.mark.parametrize("facts,limit,bound", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_bound_wins_and_names_itself(facts, limit, bound):
    result = host(**facts)
    assert (result.limit, result.bound) == (limit, bound)
    assert BOUND.fullmatch(result.bound)
    assert result.limit == min(result.details.values()) >= 1
    assert result.details[bound.split("-bound")[0]] == limit


def test_details_hold_every_candidate_that_took_part():
    plain = host(available_memory_mib=12 * GIB, cpus=4)
    assert plain.details == {"cap": 8, "cpu": 4, "memory": 2}
    limited = host(cgroup_memory_limit_mib=22 * GIB, cgroup_cpu_limit=6.0)
    assert limited.details == {"cap": 8, "cpu": 32, "memory": 15, "cgroup-memory": 5,
                               "cgroup-cpu": 6}
    assert list(limited.details) == list(BOUND_ORDER)


def test_own_running_memory_is_added_back():
    """8 GiB free at the start gives 6 one-GiB slots; once 5 of them run (and
    hold 5 GiB), the limit must stay 6, not collapse to 1 (seed 003's sampler test)."""
    before = host(available_memory_mib=8 * GIB, per_experiment_mib=GIB)
    assert (before.limit, before.bound) == (6, "memory-bound at 6")
    running = host(available_memory_mib=3 * GIB, own_running_memory_mib=5 * GIB,
                   per_experiment_mib=GIB)
    assert running.limit == 6
    without = host(available_memory_mib=3 * GIB, per_experiment_mib=GIB)
    assert without.limit == 1


def test_negative_own_memory_counts_as_none():
    assert host(available_memory_mib=12 * GIB, own_running_memory_mib=-50 * GIB).limit == 2


CGROUP_USED = [
    # limit, used, own running, expected cgroup-memory bound
    (22 * GIB, None, 0.0, 5),  # the limit alone: (22 - 2) / 4
    (22 * GIB, 10 * GIB, 0.0, 2),  # others hold 10 GiB: (12 - 2) / 4 = 2.5
    (22 * GIB, 10 * GIB, 8 * GIB, 4),  # 8 of the 10 are ours: (20 - 2) / 4 = 4.5
    (22 * GIB, 2 * GIB, 8 * GIB, 5),  # own work outside the cgroup: never above the limit
    (22 * GIB, 40 * GIB, 0.0, 1),  # over the limit: floors at one
]


@pytest.mark.parametrize("limit,used,own,expected", CGROUP_USED)
def test_cgroup_memory_in_use_and_own_add_back(limit, used, own, expected):
    result = host(cgroup_memory_limit_mib=limit, cgroup_memory_used_mib=used,
                  own_running_memory_mib=own)
    assert result.details["cgroup-memory"] == expected


def test_defaults_are_seed_003s():
    assert AUTO_CAP == 8 and OS_RESERVE_MIB == 2048
    result = resolve_capacity(cpus=64, available_memory_mib=1e9, own_running_memory_mib=0,
                              per_experiment_mib=1, cgroup_memory_limit_mib=None,
                              cgroup_cpu_limit=None)
    assert result.bound == "cap-bound at 8"


@pytest.mark.parametrize("per_experiment", [0.0, -1.0, float("nan")])
def test_per_experiment_must_be_positive(per_experiment):
    with pytest.raises(ValueError):
        host(per_experiment_mib=per_experiment)


def test_unreadable_facts_floor_at_one():
    assert host(available_memory_mib=float("nan")).details["memory"] == 1
    assert host(cgroup_cpu_limit=float("inf")).details["cgroup-cpu"] > AUTO_CAP
