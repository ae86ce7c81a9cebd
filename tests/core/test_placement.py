"""Placement arithmetic (R-GPU-2, R-GPU-3, R-CFG-5), table-driven on plain values."""

from __future__ import annotations

import pytest

from praxist_fs.core.observations import Envelope, GpuDevice, GpuProcess, GpuSample
from praxist_fs.core.placement import (
    Demand, Plan, device_loads, place, plans, with_envelopes, without_envelopes,
)

TOTAL = 100_000.0  # MiB, so 95 % is 95,000


def device(index, used=0.0, util=0.0, processes=(), visible=True, mig=False, topology=()):
    return GpuDevice(uuid=f"GPU-{index}", index=index, name="test", memory_total_mib=TOTAL,
                     memory_used_mib=used, utilization_pct=util, processes=tuple(processes),
                     processes_visible=visible, mig_mode=mig, topology=tuple(topology))


def loads(*devices, held=()):
    return device_loads(GpuSample(source="fake", devices=tuple(devices)), list(held))


def env(index, util, mem, owner="j", exclusive=False):
    return Envelope(uuid=f"GPU-{index}", utilization_pct=util, memory_mib=mem,
                    exclusive=exclusive, owner=owner)


def demand(util=45.0, mem=20_000.0, count=1):
    return Demand(count, util, mem)


@pytest.mark.parametrize("external_util,declared_util,fits", [
    (10.0, 45.0, True),    # 45 + 10 + 45 = 100: the limit is inclusive
    (10.1, 45.0, False),
    (55.0, 0.0, True),
    (56.0, 0.0, False),
])
def test_utilization_limit_is_declared_plus_external_at_most_100(external_util, declared_util,
                                                                 fits):
    held = [env(0, declared_util, 1000.0)] if declared_util else []
    gpus, reason = place(demand(), loads(device(0, util=external_util), held=held))
    assert (gpus == ("GPU-0",)) is fits
    assert fits or "utilization" in reason


@pytest.mark.parametrize("external_mem,fits", [
    (74_999.0, True),   # 74,999 + 20,000 < 95,000
    (75_000.0, False),  # equal to 95 % is not below it
])
def test_memory_limit_is_strictly_below_95_percent(external_mem, fits):
    gpus, reason = place(demand(), loads(device(0, used=external_mem)))
    assert bool(gpus) is fits
    assert fits or reason == "gpu memory: no device with 19.5312 GiB headroom"


def test_devices_are_ordered_by_the_tighter_headroom():
    # device 0: lots of compute, little memory; device 1: the reverse; device 2: balanced.
    candidates = loads(device(0, used=70_000.0), device(1, util=50.0),
                       device(2, used=20_000.0, util=20.0))
    assert place(demand(util=10.0, mem=1000.0), candidates)[0] == ("GPU-2",)


def test_multi_gpu_takes_distinct_devices_or_waits():
    candidates = loads(device(0), device(1, util=90.0), device(2))
    assert place(demand(count=2), candidates)[0] == ("GPU-0", "GPU-2")
    gpus, reason = place(demand(count=3), candidates)
    assert gpus == () and "(2 of 3)" in reason


def test_unknown_demand_needs_an_idle_device_and_holds_it_exclusively():
    unknown = Demand(1, None, None)
    assert unknown.exclusive
    busy = loads(device(0, util=5.0), device(1, used=3000.0), device(2), held=[env(2, 1, 1)])
    assert place(unknown, busy) == ((), "gpu exclusive: no idle device (0 of 1 found)")
    idle = loads(device(0), device(1, util=4.0))
    assert place(unknown, idle)[0] == ("GPU-0",)
    taken = loads(device(0), held=[env(0, 100.0, 0.0, exclusive=True)])
    assert place(demand(util=1.0, mem=1.0), taken)[0] == ()


def test_external_is_observed_minus_attributed_and_unmapped_counts_as_external():
    ours = GpuProcess(pid=10, used_memory_mib=20_000.0, sm_util_pct=45.0, owner="j")
    stranger = GpuProcess(pid=11, used_memory_mib=10_000.0, sm_util_pct=30.0, owner=None)
    [load] = loads(device(0, used=30_000.0, util=75.0, processes=[ours, stranger]),
                   held=[env(0, 45.0, 20_000.0)])
    assert (load.external_mem, load.external_util) == (10_000.0, 30.0)
    assert (load.declared_mem, load.declared_util) == (20_000.0, 45.0)


def test_use_beyond_the_declared_envelope_counts_as_load():
    greedy = GpuProcess(pid=10, used_memory_mib=50_000.0, sm_util_pct=80.0, owner="j")
    [load] = loads(device(0, used=50_000.0, util=80.0, processes=[greedy]),
                   held=[env(0, 45.0, 20_000.0)])
    assert (load.external_mem, load.external_util) == (30_000.0, 35.0)


def test_hidden_processes_make_all_observed_load_external():
    ours = GpuProcess(pid=10, used_memory_mib=20_000.0, sm_util_pct=45.0, owner="j")
    [load] = loads(device(0, used=20_000.0, util=45.0, processes=[ours], visible=False))
    assert (load.external_mem, load.external_util) == (20_000.0, 45.0)


def test_mig_enabled_devices_are_never_placed_on():
    assert place(demand(), loads(device(0, mig=True), device(1)))[0] == ("GPU-1",)
    assert place(demand(), loads(device(0, mig=True)))[0] == ()


# -- lazy allocation plans (R-POL-2) ---------------------------------------------------


def test_plans_prefer_fewer_hosts_then_the_tightest_shared_group():
    assert list(plans(1, depth=2)) == [Plan(1, 1, None)]
    assert list(plans(4, depth=2)) == [Plan(1, 4, 0), Plan(1, 4, 1), Plan(1, 4, None)]
    # seed 002's host split, ready for multi-node: 1 x N, 2 x ceil(N/2), ...
    assert list(plans(3, depth=0, hosts=3)) == [Plan(1, 3, None), Plan(2, 2, None),
                                                Plan(3, 1, None)]
    lazy = plans(10**9, depth=1, hosts=10**9)  # nothing is built up front
    assert next(lazy) == Plan(1, 10**9, 0)


def test_devices_that_share_a_topology_group_are_placed_together():
    # NVLink pairs (0, 2) and (1, 3) under one NUMA node; 0 and 1 have the most headroom
    nvlink = ["nv-a", "nv-b", "nv-a", "nv-b"]
    devices = [device(i, util=util, topology=(nvlink[i], "numa-0"))
               for i, util in enumerate((0.0, 0.0, 20.0, 30.0))]
    assert place(demand(count=2), loads(*devices)) == (("GPU-0", "GPU-2"), "")
    # without topology the two devices with the most headroom win
    plain = [device(i, util=util) for i, util in enumerate((0.0, 0.0, 20.0, 30.0))]
    assert place(demand(count=2), loads(*plain)) == (("GPU-0", "GPU-1"), "")
    # no group has room for both: the looser level, then any devices
    devices[2] = device(2, util=90.0, topology=("nv-a", "numa-0"))
    devices[3] = device(3, util=90.0, topology=("nv-b", "numa-1"))
    assert place(demand(count=2), loads(*devices)) == (("GPU-0", "GPU-1"), "")


def test_avoided_devices_are_never_placed_on():
    free = loads(device(0), device(1), device(2))
    assert place(demand(), free, avoid=("GPU-0",)) == (("GPU-1",), "")
    assert place(demand(count=2), free, avoid=("GPU-0", "GPU-1"))[0] == ()


def test_released_envelopes_give_back_exactly_what_they_took():
    before = loads(device(0, util=10.0), device(1), held=[env(0, 30.0, 5000.0, "x")])
    envelopes = [env(0, 45.0, 20_000.0, "a"), env(1, 100.0, 0.0, "b", exclusive=True)]
    held = with_envelopes(before, envelopes)
    assert held[1].exclusive_held and held[0].allocations == 2
    assert without_envelopes(held, envelopes) == before
