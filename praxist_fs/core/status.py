"""status.json, rendered from scheduler state (R-RUN-4, R-OPS-1).

A compact derived view; deterministic for a given state, sample and ``now``.
``running`` is a lifecycle count (a shim or its command group is alive), not
GPU activity; ``resource_activity`` is separate telemetry that never feeds a
scheduling decision. ``active[].phase`` is where the attempt stands: ``launching``
(decided, its shim not yet recorded), ``barrier`` (the shim is recorded and waits
for GO), ``running`` (GO is given: the command runs, or starts this instant).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .budget import Spend
from .model import Job
from .observations import GpuDevice, GpuSample
from .pickers.ledger import slot_usage
from .queues import queue_of_class
from .scheduler import Scheduler
from .states import JobState, PreemptMode

QUEUE_PREVIEW = 50
RECENT_PREEMPTIONS = 20


def render_status(sched: Scheduler, now: float, runtime: dict[str, Any],
                  reports: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``runtime``: what only the daemon knows (observer kind, journal seq).
    ``reports``: task-owned progress.json / failure.json per active job id (R-OPS-3)."""
    reports = reports or {}
    host = sched.host
    gpus = host.gpus if host else None
    running = sorted(sched.running(), key=lambda j: j.order)
    queued = sched.queued()
    active = [_active(job, now, gpus, reports.get(job.job_id, {})) for job in running]
    return {
        "protocol": 1,
        "updated_at": now,
        "coordinator": {**(sched.coordinator or {}), **runtime},
        "run_stopped": sched.stopped,  # why the run was stopped for good, or null
        "concurrency": _concurrency(sched),
        "counts": {state.value: sched.count(state) for state in JobState},
        "running": len(running),
        # of those, admitted but waiting in a cluster scheduler's queue (their command has
        # not started: no ``started_at`` in the handle yet)
        "pending_in_slurm": sum(
            1 for job in running if sched.policy.capabilities_of(
                sched.policy.profiles.get(job.profile)).queues_attempts
            and (handle := job.current.handle) is not None and not handle.get("started_at")),
        "running_activity": dict(Counter(a["resource_activity"] for a in active)),
        "peers": {"max_concurrent_per_peer": sched.policy.max_concurrent_per_peer,
                  "running": dict(sorted(Counter(j.request.peer for j in running).items()))},
        "active": active,
        "queue": [{"job_id": j.job_id, "tag": j.request.tag, "peer": j.request.peer,
                   "profile": j.profile, "work_class": j.request.work_class,
                   "priority": j.priority, "held": j.held is not None,
                   "age_s": round(now - j.submitted_at, 3),
                   "reason": sched.pending.get(j.job_id, "queued"),
                   "admission_deadline": j.admission_deadline,
                   "barrier_releases": j.barrier_releases}
                  for j in queued[:QUEUE_PREVIEW]],
        "queue_length": len(queued),
        "suspended": [_suspended(sched, job, now) for job in sorted(sched.suspended(),
                                                                     key=lambda j: j.order)],
        "preemptions": _preemptions(sched),
        "projects": _projects(sched, running, now),
        "pressure": _pressure(sched),
        "gpus": _gpus(sched, gpus),
        "generation": (sched.generation_status(current)
                       if (current := sched.current_generation()) else None),
        "generations": [{"number": g.number, "phase": g.phase, "results": len(g.results),
                         "quarantined": len(g.quarantined), "stats": g.stats_document(),
                         "drain": (g.closing_signal or {}).get("drain")}
                        for g in sorted(sched.generations.values(), key=lambda g: g.number)],
        "budget": _budget(sched, now),
        "nodes": _nodes(sched, running, now),  # R-BUD-2: a cluster backend's nodes, by health
    }


def _nodes(sched: Scheduler, running: list[Job], now: float) -> list[dict[str, Any]]:
    """The cluster's nodes and, in a run that uses this host beside them (issue 28), this
    host first as seed 003's implicit local node: its jobs, its latest sample, its GPUs."""
    policy, host = sched.policy, sched.host
    on_node = Counter(node for job in running
                      if (node := (job.current.handle or {}).get("node")))
    here = None
    if policy.backends and (policy.capabilities.on_this_host or any(
            can.on_this_host for can in policy.backends.values())):
        coordinator = sched.coordinator or {}
        here = {"since": coordinator.get("since"), "last_seen": host.at if host else None,
                "running": sum(1 for job in running if policy.runs_here(job.profile)),
                "labels": {"host": coordinator.get("host"),
                           "gpus": len(host.gpus.devices) if host and host.gpus else 0}}
    return sched.nodes.status(now, dict(on_node), here)


def _suspended(sched: Scheduler, job: Job, now: float) -> dict[str, Any]:
    attempt = job.current
    last = attempt.preemptions[-1]
    return {"job_id": job.job_id, "tag": job.request.tag, "peer": job.request.peer,
            "profile": job.profile, "work_class": job.request.work_class,
            "attempt_id": attempt.attempt_id, "pid": attempt.pid, "gpus": list(attempt.gpus),
            "suspended_s": round(now - last["at"], 3), "by": last["by"],
            "reason": last["reason"], "waiting": sched.pending.get(job.job_id, "suspended")}


def _projects(sched: Scheduler, running: list[Job], now: float) -> list[dict[str, Any]]:
    """Each project in force (seed 002; one, ``default``, without a projects block): its
    queues and share, its running and queued jobs, and the usage fair share reads."""
    policy = sched.policy
    by_class = queue_of_class(policy.queue_set())
    project_of = {c: p.name for p in policy.project_set() for c, q in by_class.items()
                  if q.name in p.queues}
    counts = {"running": Counter(project_of[j.request.work_class] for j in running),
              "queued": Counter()}
    for work_class, count in sched.queued_by_class().items():
        counts["queued"][project_of[work_class]] += count
    return [{"name": p.name, "queues": list(p.queues), "share": p.share,
             "running": counts["running"][p.name], "queued": counts["queued"][p.name],
             "usage_slot_s": round(slot_usage(p, sched.queue_usage, running, by_class, now,
                                              policy.fair_share_half_life_seconds), 3)}
            for p in policy.project_set()]


def _preemptions(sched: Scheduler) -> dict[str, Any]:
    """Every preemption on record (R-POL-3), counted, and the latest ones."""
    records = sorted(({"job_id": job.job_id, "attempt_id": attempt.attempt_id, **record}
                      for job in map(sched.jobs.__getitem__, sched.preempted_jobs)
                      for attempt in job.attempts for record in attempt.preemptions),
                     key=lambda r: (r["at"], r["job_id"]))
    modes = Counter(r["mode"] for r in records)
    return {"suspended": modes[PreemptMode.SUSPEND], "requeued": modes[PreemptMode.REQUEUE],
            "resumed": sum(1 for r in records if r["resumed_at"] is not None),
            "recent": records[-RECENT_PREEMPTIONS:]}


def _budget(sched: Scheduler, now: float) -> dict[str, Any]:
    """Spend now, by kind; the verdict is the journaled one (``Scheduler.due``); the limits
    in force (the task file's, or what an operator raised them to) and the alerts."""
    budget, by_kind, ledger = sched.budget, sched.spend(now), sched.ledger
    return {"verdict": ledger.verdict, "since": ledger.since,
            "limits": {"gpu_hours": budget.gpu_hours, "cost": budget.cost,
                       "at_fraction": budget.at_fraction},
            "raised": dict(sorted(ledger.raised.items())),
            "alerts": {"count": ledger.alerts, "last": ledger.last_alert,
                       "pending": ledger.unalerted},
            "rates": dict(sorted(budget.rates.items())),
            "spend": sum(by_kind.values(), Spend()).to_dict(),
            **{kind: spend.to_dict() for kind, spend in by_kind.items()}}


def _concurrency(sched: Scheduler) -> dict[str, Any]:
    policy = sched.policy
    capacity = sched.host.capacity if sched.host else None
    if policy.max_concurrent_experiments == "auto":
        bound = capacity.bound if capacity else "auto: host not sampled yet"
    else:
        bound = f"configured max {policy.max_concurrent_experiments}"
    return {"target": sched.concurrency_target(), "min": policy.min_concurrent_experiments,
            "max": policy.max_concurrent_experiments, "upper_bound": sched.upper_bound(),
            "bound": bound, "last_move": sched.controller.last_move}


def _pressure(sched: Scheduler) -> dict[str, Any]:
    sample = sched.host.pressure if sched.host else None
    return {
        "source": sample.source if sample else None,
        "domains": {domain: {"avg10": sample.get(domain) if sample else None,
                             "high": threshold.high, "low": threshold.low}
                    for domain, threshold in sched.policy.pressure_thresholds.items()},
    }


def _gpus(sched: Scheduler, sample: GpuSample | None) -> dict[str, Any]:
    if sample is None:
        return {"source": None, "error": "not sampled yet", "devices": []}
    held = sched.held_envelopes()
    devices = []
    for load in sched.real_loads() or []:
        device = load.device
        devices.append({
            "uuid": device.uuid, "index": device.index, "name": device.name,
            "memory_total_mib": device.memory_total_mib,
            "memory_used_mib": device.memory_used_mib,
            "utilization_pct": device.utilization_pct,
            "declared_utilization_pct": load.declared_util,
            "declared_memory_mib": load.declared_mem,
            "external_utilization_pct": load.external_util,
            "external_memory_mib": load.external_mem,
            "jobs": sorted(e.owner for e in held if e.uuid == device.uuid),
            "other_runs_allocations": sum(1 for e in sched.host.others
                                          if e.uuid == device.uuid and not e.speculative),
            "lease_claims": sum(1 for e in (*sched.host.others, *sched.own_claims())
                                if e.uuid == device.uuid and e.speculative),
            "mig_mode": device.mig_mode,
            "attribution": _attribution([device]),
        })
    return {"source": sample.source, "error": sample.error, "devices": devices}


def _attribution(devices: list[GpuDevice]) -> str:
    if any(not d.processes_visible for d in devices):
        return "unavailable"
    if any(p.in_namespace is False for d in devices for p in d.processes):
        return "partial"
    return "complete"


def _activity(job: Job, sample: GpuSample | None) -> tuple[str, str]:
    """(resource_activity, attribution) of a running job, from the last GPU sample."""
    gpus = job.current.gpus
    if not gpus:
        return "non_gpu_allocation", "complete"
    if sample is None or sample.error is not None:
        return "unknown", "unavailable"
    devices = [d for d in sample.devices if d.uuid in gpus]
    attribution = _attribution(devices)
    if attribution == "unavailable":
        return "gpu_process_attribution_unavailable", attribution
    mine = [p for d in devices for p in d.processes if p.owner == job.job_id]
    if any((p.sm_util_pct or 0) > 0 for p in mine):
        return "gpu_compute_active", attribution
    if mine and all(p.sm_util_pct == 0 for p in mine):
        return "gpu_context_idle", attribution
    if mine:
        return "gpu_context_present", attribution
    if attribution == "partial":
        return "gpu_process_attribution_unavailable", attribution
    return "no_gpu_process_observed", attribution


def _active(job: Job, now: float, sample: GpuSample | None,
            report: dict[str, Any]) -> dict[str, Any]:
    attempt = job.current
    activity, attribution = _activity(job, sample)
    return {
        "job_id": job.job_id,
        "tag": job.request.tag,
        "peer": job.request.peer,
        "profile": job.profile,
        "work_class": job.request.work_class,
        "attempt_id": attempt.attempt_id,
        "attempt": attempt.number,
        "phase": attempt.phase,
        "go": attempt.go,
        "pid": attempt.pid,
        "handle": attempt.shown_handle,  # a cluster backend's: Slurm's job id and node
        "reason": job.reason,
        "gpus": list(attempt.gpus),
        "age_s": round(now - attempt.started_at, 3),
        "eta_s": job.request.eta_s,
        "resource_activity": activity,
        "attribution": attribution,
        "progress": report.get("progress"),
        "failure": report.get("failure"),
    }
