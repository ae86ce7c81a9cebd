"""The adaptive drain grace after CLOSING_SIGNAL (seed 000 "Timing And Close").

Seed 000: "At generation close, Praxist freezes the scheduler queue before writing
CLOSING_SIGNAL. Queued/new work is rejected; already-running process groups continue
to drain and publish evidence. Once protected work is gone, the existing adaptive drain
grace bounds agent-only cleanup and passive tool waits; it does not kill evaluator
processes."
"""

from __future__ import annotations

import pytest

from praxist_fs.core.effects import CancelAttempt, TerminateAttempts
from praxist_fs.core.events import ControlSeen, GenerationPhase, ResultSeen
from praxist_fs.core.generations import DRAIN_GRACE_FACTOR
from praxist_fs.core.request import ControlRequest
from praxist_fs.core.snapshot import capture, restore

from .helpers import Harness, make_policy


def control(h: Harness, action: str, **fields) -> None:
    h.counter += 1
    rid = f"c{h.counter}"
    h.handle(ControlSeen(at=h.tick(), name=f"{rid}.json", digest=rid, request_id=rid,
                         control=ControlRequest(request_id=rid, action=action, generation=1,
                                                **fields)))


def generation_with_runs(run_times: list[float], **policy) -> tuple[Harness, str]:
    """Generation 1 open, jobs of it that completed in ``run_times`` seconds, and one job
    still running (returned)."""
    h = Harness(make_policy(initial_concurrent_experiments=8, max_concurrent_experiments=8,
                            **policy))
    control(h, "generation_open")
    for n, seconds in enumerate(run_times):
        job_id = h.submit(f"done-{n}")["job_id"]
        (launch,) = h.launch_all()
        h.go(*launch)
        h.now = h.sched.jobs[job_id].current.started_at + seconds - 0.5  # exit() adds 0.5
        h.exit(*launch, 0)
    running = h.submit("long")["job_id"]
    (launch,) = h.launch_all()
    h.go(*launch)
    return h, running


def phases(h: Harness, at: float) -> list[GenerationPhase]:
    h.now = at
    events = [e for e in h.sched.due(at) if isinstance(e, GenerationPhase)]
    for event in events:
        assert not [e for e in h.handle(event) if isinstance(e, (CancelAttempt,
                                                                   TerminateAttempts))]
    return events


def test_the_grace_follows_the_observed_run_times_then_the_close_completes():
    """seed 000: running groups drain; the adaptive grace bounds the wait, and never
    kills the evaluator (the job still running is left running)."""
    h, running = generation_with_runs([40.0, 100.0, 60.0], drain_grace_min_seconds=10.0,
                                      drain_grace_max_seconds=1000.0)
    control(h, "generation_close")
    gen = h.sched.generations[1]
    drain = gen.closing_signal["drain"]
    closed_at = gen.closing_signal["at"]
    assert drain["grace_s"] == pytest.approx(DRAIN_GRACE_FACTOR * 100.0)
    assert drain["deadline"] == pytest.approx(closed_at + DRAIN_GRACE_FACTOR * 100.0)
    assert "p90 of 3 observed run time(s)" in drain["rule"]
    assert gen.phase == "closing"
    assert phases(h, drain["deadline"] - 1) == []  # within the grace: it still drains
    (event,) = phases(h, drain["deadline"])
    assert event.phase == "closed" and event.reason.startswith("drain grace over (200 s)")
    assert "1 job(s) still running keep running" in event.reason
    assert gen.phase == "closed"
    assert h.job(running)["state"] == "running"  # not killed
    h.handle(ResultSeen(at=h.tick(), generation=1, result_id="late", peer="peer-a",
                        mature=True))
    assert "late" in gen.quarantined
    restored = restore(capture(h.sched))
    assert restored.snapshot() == h.sched.snapshot()


def test_work_that_drains_in_time_closes_the_generation_at_once():
    """seed 000 "Timing And Close": once protected work is gone the close completes;
    the grace only bounds a drain that takes longer."""
    h, running = generation_with_runs([30.0])
    control(h, "generation_close")
    attempt = h.sched.jobs[running].current.attempt_id
    h.exit(running, attempt, 0)
    (event,) = phases(h, h.now + 1)
    assert event.reason == "running work drained"


@pytest.mark.parametrize(("run_times", "grace", "rule"), [
    ([], 500.0, "no run time observed: the upper bound, 500 s"),
    ([1.0, 2.0], 30.0, "within 30..500 s"),     # 2 x 2 s is raised to the minimum
    ([400.0], 500.0, "within 30..500 s"),       # 2 x 400 s is lowered to the maximum
])
def test_the_grace_stays_within_the_task_bounds(run_times, grace, rule):
    """seed 000 "Timing And Close": the adaptive grace, within the task file's bounds;
    with no run time observed, unknown stays unknown: the upper bound."""
    h, _ = generation_with_runs(run_times, drain_grace_min_seconds=30.0,
                                drain_grace_max_seconds=500.0)
    control(h, "generation_close")
    drain = h.sched.generations[1].closing_signal["drain"]
    assert drain["grace_s"] == grace and rule in drain["rule"]
