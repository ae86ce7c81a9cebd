"""Placement strategies (issue 18 item 2): the task file's ``placement`` orders the
devices the per-device limits allow: ``spread`` (most headroom first, the default),
``best_fit`` (least headroom first) and ``fragmentation`` (FGD: where the expected
fragmentation against the queued demand mix grows least); ties by device index.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from praxist_fs.config import load_policy
from praxist_fs.core.events import HostSampled
from praxist_fs.core.observations import Envelope, GpuDevice, GpuSample, PressureSample
from praxist_fs.core.placement import (
    PLACEMENTS, Demand, Packing, device_loads, fragmentation, place, with_envelopes,
)
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.errors import PolicyError

from .helpers import Harness

TOTAL = 100_000.0  # MiB: the memory ceiling is 95,000


def device(index: int, util: float = 0.0, used: float = 0.0) -> GpuDevice:
    return GpuDevice(uuid=f"GPU-{index}", index=index, name="test", memory_total_mib=TOTAL,
                     memory_used_mib=used, utilization_pct=util)


def loads(*devices: GpuDevice, held: tuple[Envelope, ...] = ()):
    return device_loads(GpuSample(source="fake", devices=tuple(devices)), list(held))


def packing(strategy: str, *mix: tuple[Demand, float]) -> Packing:
    return Packing(strategy, tuple(mix))


def test_each_strategy_picks_its_own_device():
    """seed 002 "Approach C": "Allocation plugins: different strategies as plugins:
    greedy, bin-packing, ...". Three devices with 0, 40 and 45 % taken by others, a
    10 % job, and jobs of 50 % waiting: spread takes the idle one, best fit the fullest
    one, and fragmentation the one where 50 % still fits afterwards, so that no device
    strands a share the waiting jobs could use."""
    pool = loads(device(0), device(1, util=40.0), device(2, util=45.0))
    small, half = Demand(1, 10.0, 1000.0), Demand(1, 50.0, 1000.0)
    assert place(small, pool)[0] == ("GPU-0",)
    assert place(small, pool, packing=packing("best_fit"))[0] == ("GPU-2",)
    assert place(small, pool, packing=packing("fragmentation", (half, 1.0)))[0] == ("GPU-1",)


def test_best_fit_keeps_whole_devices_free_for_wide_work():
    """seed 002 "Approach C" (bin-packing): two 45 % jobs share one device under
    best fit, so a job that needs two whole devices can start at once; spreading them
    over two devices keeps it waiting."""
    def wide_after_two_shares(strategy: str) -> tuple[str, ...]:
        pool, share = loads(device(0), device(1), device(2)), Demand(1, 45.0, 20_000.0)
        for owner in ("a", "b"):
            gpus, _ = place(share, pool, packing=packing(strategy))
            pool = with_envelopes(pool, [Envelope(uuid=gpus[0], utilization_pct=45.0,
                                                  memory_mib=20_000.0, owner=owner)])
        return place(Demand(2, None, None), pool)[0]

    assert wide_after_two_shares("best_fit") == ("GPU-1", "GPU-2")
    assert wide_after_two_shares("spread") == ()


def test_fragmentation_counts_the_free_share_a_waiting_shape_cannot_use():
    """FGD's measure on one device: the free utilization lost to each shape of the mix
    that no longer fits there, weighed by its share."""
    pool = loads(device(0, util=60.0))
    quarter, half = Demand(1, 25.0, 1000.0), Demand(1, 50.0, 1000.0)
    assert fragmentation(pool[0], ((quarter, 0.5), (half, 0.5))) == pytest.approx(20.0)
    assert fragmentation(pool[0], ((quarter, 1.0),)) == 0.0
    assert fragmentation(loads(device(1))[0], ((Demand(1, None, None), 1.0),)) == 0.0


def test_the_mix_is_the_queued_gpu_demand_most_common_first():
    profiles = {
        "half": Profile(name="half", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
                        gpu_utilization_pct=50.0),
        "half2": Profile(name="half2", accelerator="gpu", gpu_count=2, gpu_memory_gb=10.0,
                         gpu_utilization_pct=50.0),  # one share per device: the same shape
        "whole": Profile(name="whole", accelerator="gpu", gpu_count=1),
        "cpu": Profile(name="cpu", accelerator="cpu"),
    }
    mix = Packing.of("fragmentation", profiles, {"half": 1, "half2": 2, "whole": 1, "cpu": 9})
    assert [(shape.utilization_pct, share) for shape, share in mix.mix] == [
        (50.0, 0.75), (None, 0.25)]
    assert Packing.of("best_fit", profiles, {"half": 1}) == Packing("best_fit")


@st.composite
def pools(draw):
    """Up to 6 devices with external load and jobs already held, a demand, and a mix."""
    count = draw(st.integers(1, 6))
    devices = [device(i, util=draw(st.sampled_from((0.0, 10.0, 30.0, 55.0, 90.0))),
                      used=draw(st.sampled_from((0.0, 20_000.0, 70_000.0))))
               for i in range(count)]
    held = []
    for i in range(count):
        for n in range(draw(st.integers(0, 2))):
            held.append(Envelope(uuid=f"GPU-{i}", utilization_pct=draw(
                st.sampled_from((10.0, 25.0, 40.0))), memory_mib=10_000.0, owner=f"j{i}{n}",
                exclusive=draw(st.booleans()) and n == 0))
    shapes = st.sampled_from((Demand(1, 25.0, 8_000.0), Demand(1, 50.0, 30_000.0),
                              Demand(1, None, None), Demand(1, 10.0, 60_000.0)))
    demand = draw(shapes)
    demand = Demand(draw(st.integers(1, 3)), demand.utilization_pct, demand.memory_mib)
    mix = tuple((shape, 1.0 / 3) for shape in draw(st.lists(shapes, min_size=0, max_size=3)))
    return devices, held, demand, mix, draw(st.randoms(use_true_random=False))


@settings(max_examples=300, deadline=None)
@given(pools())
def test_every_strategy_keeps_the_limits_and_places_whenever_spread_does(case):
    """R-GPU-2, R-GPU-3: a strategy only orders the feasible devices. Whatever it picks
    fits each device's declared + external utilization (<= 100 %) and memory (< 95 %),
    takes distinct devices, places exactly when spreading would, and does not depend
    on the order the inventory lists the devices in (ties go to the lower index)."""
    devices, held, demand, mix, rng = case
    pool = loads(*devices, held=tuple(held))
    shuffled = list(pool)
    rng.shuffle(shuffled)
    spread_gpus, spread_reason = place(demand, pool)
    for strategy in PLACEMENTS:
        pack = packing(strategy, *mix)
        gpus, reason = place(demand, pool, packing=pack)
        assert place(demand, shuffled, packing=pack) == (gpus, reason)
        assert bool(gpus) == bool(spread_gpus) and reason == spread_reason
        assert len(set(gpus)) == len(gpus) == (demand.gpu_count if gpus else 0)
        by_uuid = {load.device.uuid: load for load in pool}
        for uuid in gpus:
            load = by_uuid[uuid]
            assert not load.exclusive and not load.device.mig_mode
            if demand.exclusive:
                assert load.allocations == 0
            else:
                assert load.declared_util + load.external_util + demand.utilization_pct <= 100.0
                assert load.declared_mem + load.external_mem + demand.memory_mib < 0.95 * TOTAL


CALM = PressureSample(source="psi", cpu=0.0, memory=0.0, io=0.0)
PROFILES = {
    "share": Profile(name="share", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
                     gpu_utilization_pct=45.0),
    "wide": Profile(name="wide", accelerator="gpu", gpu_count=2),
}


@pytest.mark.parametrize("strategy,wide_starts", [("spread", False), ("best_fit", True),
                                                  ("fragmentation", True)])
def test_the_task_files_placement_decides_whether_wide_work_finds_whole_devices(
        strategy, wide_starts):
    """seed 002 "Approach C" (allocation strategies as plugins), through the scheduler:
    on three idle devices two 45 % jobs, then a job wanting two whole devices. Packing
    puts the two shares on one device and the wide job starts in the same pass;
    spreading leaves it waiting for an idle device."""
    h = Harness(Policy(profiles=PROFILES, default_profile="share", placement=strategy,
                       initial_concurrent_experiments=8, max_concurrent_experiments=8))
    h.handle(HostSampled(at=h.now, gpus=GpuSample(source="fake", devices=tuple(
        device(i) for i in range(3))), pressure=CALM))
    jobs = [h.submit(f"s{i}", profile="share")["job_id"] for i in range(2)]
    wide = h.submit("w", profile="wide")["job_id"]
    started = dict(h.launch_all())
    assert set(jobs) <= set(started)
    assert (wide in started) is wide_starts
    if not wide_starts:
        assert h.sched.pending[wide].startswith("gpu exclusive: no idle device (1 of 2")


def test_placement_in_the_task_file_is_checked_and_travels_through_the_journal(tmp_path: Path):
    """A bad value names the key and what was expected; a good one survives the policy's
    round trip through the journal (``Policy.to_dict``/``from_dict``)."""
    task = tmp_path / "task.yaml"
    task.write_text("compute_budget:\n  resource_scheduler:\n    mode: central\n"
                    "    placement: packed\n")
    with pytest.raises(PolicyError, match=r"resource_scheduler\.placement: got 'packed', "
                                          r"expected one of spread, best_fit, fragmentation"):
        load_policy(task)
    task.write_text(task.read_text().replace("packed", "fragmentation"))
    policy = load_policy(task)
    assert policy.placement == "fragmentation"
    assert Policy.from_dict(policy.to_dict()).placement == "fragmentation"
    assert load_policy(None).placement == "spread"

