"""A pass that stops walking early, or skips runs of jobs known held, decides and explains
exactly what a whole walk would: the same launches, and the same pending reason for
every queued job once the reasons are asked for."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from praxist_fs.config import load_policy
from praxist_fs.core import pickers
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.simulate import TraceJob, replay

POLICIES = Path(__file__).resolve().parents[2] / "fixtures" / "policies"
FCFS, BACKFILL = POLICIES / "fcfs.yaml", POLICIES / "backfill.yaml"


def busy_trace(seed: int, jobs: int = 400) -> list[TraceJob]:
    """Narrow and wide jobs, some sharing GPUs, arriving faster than 8 GPUs serve them."""
    rng = random.Random(seed)
    at, trace = 0.0, []
    for i in range(jobs):
        at += rng.expovariate(1 / 40)
        shared = rng.random() < 0.3
        trace.append(TraceJob(job_id=f"j{i}", submit_s=round(at), user=f"u{rng.randint(1, 5)}",
                              duration_s=rng.choice([30, 300, 3000, 20000]),
                              gpus=rng.choice([1, 1, 1, 2, 4, 8]),
                              gpu_util_pct=rng.choice([30, 50]) if shared else None,
                              gpu_mem_gb=rng.choice([20, 70]) if shared else None))
    return trace


def passes(monkeypatch: pytest.MonkeyPatch, trace: list[TraceJob], policy: Any,
           whole: bool, passed_over: list[str]) -> list[tuple[list[Any], dict[str, str]]]:
    """Every pass's decisions and, read right after it, the pending reasons; the jobs
    held without a visit (``Pass.skimmed``) go to ``passed_over``."""
    if whole:  # the walk as it was: every job, every pass
        monkeypatch.setattr(pickers.Openings, "exhausted", property(lambda self: False))
        monkeypatch.setattr(pickers.Pass, "skims", lambda self, jobs: False)
    seen, skimmed = [], pickers.Pass.skimmed
    decide = Scheduler.next_launches

    def counted(self: pickers.Pass) -> Any:
        for job, reason in skimmed(self):
            passed_over.append(job.job_id)
            yield job, reason

    monkeypatch.setattr(pickers.Pass, "skimmed", counted)

    def recorded(self: Scheduler, at: float) -> list[Any]:
        events = decide(self, at)
        seen.append((events, dict(self.pending)))
        return events

    monkeypatch.setattr(Scheduler, "next_launches", recorded)
    replay(trace, gpus=8, policy=policy, eta_noise=0.5, seed=7)
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("picker", ["fcfs", "backfill", "fair_share", "shortest_expected_first",
                                    "multifactor", "least_attained_service"])
@pytest.mark.parametrize("seed", [1, 2])
def test_stopping_and_skimming_change_no_decision_and_no_reason(monkeypatch, picker, seed):
    policy = load_policy(BACKFILL if picker == "backfill" else FCFS)
    if picker != "backfill":
        policy = replace(policy, job_picker=picker)
    trace = busy_trace(seed)
    passed_over: list[str] = []
    fast = passes(monkeypatch, trace, policy, False, passed_over)
    whole = passes(monkeypatch, trace, policy, True, [])
    assert len(fast) == len(whole)
    for number, (mine, theirs) in enumerate(zip(fast, whole)):
        assert mine == theirs, f"pass {number} differs"
    assert sum(len(events) for events, _ in fast) >= 400
    assert passed_over, "the fast walk held no job without a visit: nothing was compared"
