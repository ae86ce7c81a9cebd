"""The concurrency controller and pressure holds (R-ADM-1..3), on plain samples."""

from __future__ import annotations

from praxist_fs.core.admission import (
    ConcurrencyController, pressure_hold, reason_kind, upper_bound,
)
from praxist_fs.core.events import HostSampled
from praxist_fs.core.observations import HostCapacity, PressureSample
from praxist_fs.core.policy import Policy, Profile

from .helpers import Harness, make_policy

CALM = PressureSample(source="psi", cpu=1.0, memory=0.0, io=0.0)
HOT_CPU = PressureSample(source="psi", cpu=87.0, memory=0.0, io=0.0)
WARM = PressureSample(source="psi", cpu=60.0, memory=0.0, io=0.0)  # between low and high


def run(policy, samples, slot_limited=True, capacity=None):
    controller = ConcurrencyController.start(policy)
    targets = []
    for sample in samples:
        controller.observe(policy, sample, capacity, slot_limited)
        targets.append(controller.target)
    return targets


def test_rises_one_step_per_calm_streak_up_to_max():
    policy = Policy(initial_concurrent_experiments=1, max_concurrent_experiments=3, calm_samples=2)
    assert run(policy, [CALM] * 7) == [1, 2, 2, 3, 3, 3, 3]


def test_does_not_rise_without_work_waiting_for_a_slot_or_when_not_calm():
    policy = Policy(initial_concurrent_experiments=1, max_concurrent_experiments=3, calm_samples=1)
    assert run(policy, [CALM] * 3, slot_limited=False) == [1, 1, 1]
    assert run(policy, [WARM] * 3) == [1, 1, 1]
    assert run(policy, [CALM, WARM, CALM]) == [2, 2, 3]


def test_falls_one_step_per_hot_sample_down_to_min():
    policy = Policy(initial_concurrent_experiments=4, min_concurrent_experiments=2)
    assert run(policy, [HOT_CPU] * 4) == [3, 2, 2, 2]


def test_a_hot_sample_resets_the_calm_streak():
    policy = Policy(initial_concurrent_experiments=2, max_concurrent_experiments=8, calm_samples=2)
    assert run(policy, [CALM, HOT_CPU, CALM, CALM]) == [2, 1, 1, 2]


def test_auto_is_bounded_by_the_resolved_host_capacity():
    policy = Policy(initial_concurrent_experiments=2, max_concurrent_experiments="auto",
                    calm_samples=1)
    capacity = HostCapacity(limit=3, bound="memory-bound at 3")
    assert upper_bound(policy, capacity) == 3 and upper_bound(policy, None) == 8
    assert run(policy, [CALM] * 4, capacity=capacity) == [3, 3, 3, 3]


def test_declared_domains_hold_a_profile_and_undeclared_ones_do_not():
    policy = Policy()
    cpu_bound = Profile(name="a", accelerator="cpu", pressure_domains=("cpu",))
    io_bound = Profile(name="b", accelerator="cpu", pressure_domains=("io",))
    assert pressure_hold(policy, cpu_bound, HOT_CPU) == "cpu pressure 87% > 80%"
    assert pressure_hold(policy, io_bound, HOT_CPU) is None
    assert pressure_hold(policy, cpu_bound, None) is None  # unobserved is not a hold
    assert pressure_hold(policy, cpu_bound, PressureSample(source="psutil")) is None


def test_a_pressure_reason_never_reads_80_percent_over_80_percent():
    """Issue 29: "80% > 80%" was printed for 80.4% over a threshold of 80%."""
    policy = Policy()
    profile = Profile(name="a", accelerator="cpu", pressure_domains=("cpu",))
    for value, said in ((87.0, "87% > 80%"), (80.4, "80.4% > 80%"), (80.04, "80.04% > 80%")):
        sample = PressureSample(source="psi", cpu=value, memory=0.0, io=0.0)
        assert pressure_hold(policy, profile, sample) == f"cpu pressure {said}"


def test_a_gpu_job_on_a_host_without_gpus_says_so_before_any_pressure():
    """Issue 29: a GPU job showed "cpu pressure" while the real blocker was "no GPU"."""
    h = Harness(make_policy(profiles={"gpu": Profile(name="gpu", accelerator="gpu",
                                                       pressure_domains=("cpu",))},
                            default_profile="gpu"))
    h.handle(HostSampled(at=h.tick(), pressure=HOT_CPU))  # hot, and no GPU inventory
    job_id = h.submit("exp")["job_id"]
    assert h.launch_all() == []
    assert h.sched.pending[job_id].startswith("gpu placement: no GPU inventory")


def test_a_reason_whose_numbers_alone_changed_is_the_same_kind():
    assert reason_kind("cpu pressure 87% > 80%") == reason_kind("cpu pressure 90.5% > 80%")
    assert reason_kind("cpu pressure 87% > 80%") != reason_kind("io pressure 87% > 80%")
