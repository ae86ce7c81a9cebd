"""The replay's own audit of the per-device limits (issue 32, R-GPU-2): the simulator
follows what each job holds on each device from the core's decisions alone, and names
any decision that breaks a limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from praxist_fs.config import load_policy
from praxist_fs.simulate import load_trace, replay
from praxist_fs.simulated_devices import DeviceLedger, Share

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "trace_philly.csv"
H200_MIB = 143771.0


def test_each_limit_broken_is_named_and_a_legal_mix_is_not():
    ledger = DeviceLedger(3, H200_MIB)
    half, big = Share.of(50, 40), Share.of(40, 120)
    ledger.take("a", (0,), half, 0)
    ledger.take("b", (0,), half, 1)  # 100 %: the limit itself, allowed
    assert (ledger.broken, ledger.idle) == (0, 2)
    ledger.take("c", (0,), Share.of(10, 1), 2)
    ledger.take("d", (1,), big, 3)
    ledger.take("e", (1,), Share.of(10, 20), 4)  # 140 GiB of 140.4: above 95 %
    ledger.take("x", (2,), Share.of(None, None), 5)
    ledger.take("f", (2,), Share.of(10, 1), 6)  # beside a job of unknown demand
    assert ledger.broken == 3
    assert ledger.violations == [
        "t=2 s: job c on device 0: 110% utilization declared",
        "t=4 s: job e on device 1: 140.0 GiB declared of 140.4",
        "t=6 s: job f on device 2: a job of unknown demand shares it with 1 other(s)"]


def test_a_suspended_job_keeps_its_memory_and_its_utilization_comes_back_checked():
    ledger = DeviceLedger(1, H200_MIB)
    victim, urgent = Share.of(60, 60), Share.of(60, 60)
    ledger.take("v", (0,), victim, 0)
    ledger.pause((0,), victim)
    ledger.take("u", (0,), urgent, 1)  # 60 % + the victim's memory: legal
    assert ledger.broken == 0
    ledger.resume("v", (0,), victim, 2)  # back while u runs: 120 %
    assert ledger.violations == ["t=2 s: job v on device 0: 120% utilization declared"]
    ledger.release((0,), urgent)
    ledger.release((0,), victim)
    assert (ledger.idle, ledger.util, ledger.memory) == (1, [0.0], [0.0])


@pytest.mark.skipif(not PHILLY.exists(), reason="../shared/traces is not checked out")
@pytest.mark.parametrize("name", ["fcfs", "backfill", "preempt", "requeue", "recommended"])
def test_every_shipped_policy_keeps_the_limits_on_real_arrivals(name):
    """The first 1,500 Philly jobs (one in five declaring a share, every tenth mature) on
    24 GPUs: every launch, suspension and resume of every shipped policy file, audited."""
    jobs = load_trace(PHILLY, limit=1500)
    for i, job in enumerate(jobs):
        share = {"gpu_util_pct": 30.0, "gpu_mem_gb": 50.0} if i % 5 == 0 else {}
        jobs[i] = type(job)(**{**{f: getattr(job, f) for f in job.__slots__}, **share,
                               "work_class": "mature" if i % 10 == 0 else None})
    result = replay(jobs, gpus=24, policy=load_policy(str(ROOT / "fixtures" / "policies"
                                                         / f"{name}.yaml")),
                    uncapped=True, eta_noise=0.5)
    assert result.completed == 1500 - len(result.unrunnable)
    assert (result.capacity_violations, result.violations) == (0, [])
