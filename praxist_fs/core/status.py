"""status.json, rendered from scheduler state (R-RUN-4, R-OPS-1).

A compact derived view; deterministic for a given state and ``now``.
``running`` is a lifecycle count (a shim or its command group is alive), not
GPU activity.
"""

from __future__ import annotations

from typing import Any

from .scheduler import Scheduler
from .states import JobState

QUEUE_PREVIEW = 50


def render_status(sched: Scheduler, now: float, runtime: dict[str, Any]) -> dict[str, Any]:
    """``runtime`` carries what only the daemon knows (observer kind, journal seq)."""
    running = sorted(sched.running(), key=lambda j: j.order)
    queued = sched.queued()
    return {
        "protocol": 1,
        "updated_at": now,
        "coordinator": {**(sched.coordinator or {}), **runtime},
        "concurrency": {"target": sched.concurrency_target(),
                        "min": sched.policy.min_concurrent_experiments,
                        "max": sched.policy.max_concurrent_experiments},
        "counts": {state.value: sched.count(state) for state in JobState},
        "running": len(running),
        "active": [_active(job, now) for job in running],
        "queue": [{"job_id": j.job_id, "tag": j.request.tag, "peer": j.request.peer,
                   "profile": j.profile, "work_class": j.request.work_class,
                   "age_s": round(now - j.submitted_at, 3),
                   "reason": sched.pending_reason(j)} for j in queued[:QUEUE_PREVIEW]],
        "queue_length": len(queued),
    }


def _active(job: Any, now: float) -> dict[str, Any]:
    attempt = job.current
    return {
        "job_id": job.job_id,
        "tag": job.request.tag,
        "peer": job.request.peer,
        "profile": job.profile,
        "work_class": job.request.work_class,
        "attempt_id": attempt.attempt_id,
        "attempt": attempt.number,
        "phase": attempt.phase,
        "pid": attempt.pid,
        "gpus": list(attempt.gpus),
        "age_s": round(now - attempt.started_at, 3),
        "eta_s": job.request.eta_s,
        "resource_activity": "non_gpu_allocation" if not attempt.gpus else "unknown",
        "attribution": "complete" if not attempt.gpus else "unavailable",
    }
