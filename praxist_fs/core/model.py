"""The core's whole world: jobs, their attempts, and the replies owed to peers.

Plain mutable dataclasses owned by ``Scheduler``; nothing else mutates them.
``to_dict`` gives the persisted shapes (R-FS-5, R-FS-6) and the comparison
used by the replay-equivalence tests.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from .request import PRIORITY_RANGE, Request
from .states import AttemptOutcome, AttemptPhase, JobState, PreemptMode, ReplyOutcome


# The keys of a handle for a process on this host (the local backend's shim): its pid,
# the pid's start time (a reused pid is another process) and the host's boot id. The job
# file shows the first two (``pid``, ``pid_start``: R-FS-5); the core reads ``boot_id`` to
# tell whether the host restarted since the attempt was recorded.
PROCESS_KEYS = ("pid", "pid_start", "boot_id")


def identity_into_handle(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (an AttemptObserved or a snapshot's attempt) as it is now: one written
    before a process's identity moved into the handle carries ``pid``, ``pid_start`` and
    ``boot_id`` beside it (null when unknown), which become its handle."""
    if not any(key in record for key in PROCESS_KEYS):
        return record
    record = dict(record)
    identity = {key: record.pop(key, None) for key in PROCESS_KEYS}
    if identity["pid"] is not None and record.get("handle") is None:
        record["handle"] = identity
    return record


def kept_handle(handle: dict[str, Any]) -> dict[str, Any]:
    """A handle as its attempt keeps it, its strings interned: a run's attempts share their
    host's boot id (or their cluster's name) instead of holding a copy each."""
    return {key: sys.intern(value) if type(value) is str else value
            for key, value in handle.items()}


@dataclass(slots=True, kw_only=True)
class Attempt:
    attempt_id: str
    number: int
    round: int
    started_at: float
    gpus: tuple[str, ...] = ()
    phase: AttemptPhase = AttemptPhase.LAUNCHING  # changed by ``attempt_transition`` only
    # its backend's identity of it, from the AttemptObserved that first reported it: opaque
    # to the core but for the documented keys (PROCESS_KEYS, Slurm's ``node`` and
    # ``started_at``); None until its backend has reported it
    handle: dict[str, Any] | None = None
    # GO decided and journaled: after a power cut the command may have run even if the GO
    # file (written without fsync) is gone, so a shim dead without an exit record is lost
    go: bool = False
    ended_at: float | None = None
    exit_code: int | None = None
    signal: int | None = None
    outcome: AttemptOutcome | None = None
    failure: dict[str, Any] | None = None  # the task's failure.json, when it wrote one
    # what went wrong where the exit code does not say: the shim's (the command could not
    # start), or a supervisor's death whose command the coordinator terminated
    error: str | None = None
    # why it ended by a failure of the infrastructure, not of its command (Slurm's
    # NODE_FAIL on a node), whatever ``exit_code`` the command had: retried like exit 75
    infrastructure: str | None = None
    # R-POL-3, oldest first: {"at", "mode" (suspend or requeue), "by" (the job it made room
    # for), "reason" (why that job could not start), "resumed_at" (a suspension's end).
    # A tuple, so that the attempts never preempted (most) share the empty one
    preemptions: tuple[dict[str, Any], ...] = ()
    # R-CTL-1: the cancel under way ({"at", "by", "reason", "grace"}): its group is being
    # terminated, and its end, whatever it is but exit 0, makes the job cancelled
    cancel: dict[str, Any] | None = None
    # seed 003: where the run budget stood when it was launched ({"verdict", "gpu_hours",
    # "cost", "limits"}); None when the task sets no budget (no limits, no rates)
    budget: dict[str, Any] | None = None

    @property
    def seen(self) -> bool:
        """Its backend has reported it (a shim's pid, a Slurm job id): it can be signalled."""
        return self.handle is not None

    @property
    def pid(self) -> int | None:
        """The pid of the process on this host that carries it (the local backend's shim),
        as the job file and status.json show it; None for any other backend's."""
        return self.handle.get("pid") if self.handle is not None else None

    @property
    def evicting(self) -> dict[str, Any] | None:
        """The requeue preemption under way (the attempt is being terminated), or None."""
        last = self.preemptions[-1] if self.preemptions else None
        return last if last is not None and last["mode"] == PreemptMode.REQUEUE else None

    def active_seconds(self, until: float) -> float:
        """Wall seconds from its start to ``until``, less the time it spent suspended."""
        stopped = sum((p["resumed_at"] or until) - p["at"]
                      for p in self.preemptions if p["mode"] == PreemptMode.SUSPEND)
        return until - self.started_at - stopped

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempt_id": self.attempt_id,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "gpus": list(self.gpus),
            "outcome": self.outcome,
            "signal": self.signal,
            "pid": self.pid,
            "pid_start": self.handle.get("pid_start") if self.handle is not None else None,
            "round": self.round,
            "failure": self.failure,
            "error": self.error,
            "preemptions": [dict(p) for p in self.preemptions],
            "cancel": self.cancel,
            "budget": self.budget,
            **({"handle": handle} if (handle := self.shown_handle) else {}),
            **({"infrastructure": self.infrastructure} if self.infrastructure else {}),
        }

    @property
    def shown_handle(self) -> dict[str, Any] | None:
        """The ``handle`` the job file and status.json show: the handle less a process's
        identity, which they show as ``pid`` and ``pid_start`` (R-FS-5); None when
        nothing is left (a local attempt's)."""
        if self.handle is None:
            return None
        return {key: value for key, value in self.handle.items()
                if key not in PROCESS_KEYS} or None


PRIORITY_SPAN = PRIORITY_RANGE[1]  # ``Job.rank`` keeps every rank positive


@dataclass(slots=True, kw_only=True)
class Job:
    job_id: str
    request: Request
    profile: str
    fingerprint: str
    submitted_at: float
    order: int
    state: JobState = JobState.QUEUED
    reason: str = "queued"
    round: int = 1
    generation: int | None = None
    attempts: list[Attempt] = field(default_factory=list)
    priority: int = 0  # R-CTL-5: from the request, changed by ``update`` while queued
    held: dict[str, Any] | None = None  # {"by", "at"}: it starts only once released
    after: tuple[tuple[str, str], ...] = ()  # (job id, kind): the request's, resolved
    uid: int | None = None  # R-SEC-3: whose job it is (core/trust.py); None: the coordinator's
    # R-SUB-4: when it ends ``expired`` if no attempt of its round has run by then; None
    # without a timeout, and once an attempt ran (GO)
    admission_deadline: float | None = None

    @property
    def rank(self) -> int:
        """Where it stands in its queue: higher priority first, then arrival order."""
        return ((PRIORITY_SPAN - self.priority) << 40) | self.order

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def exit_code(self) -> int | None:
        ended = [a for a in self.attempts if a.exit_code is not None]
        return ended[-1].exit_code if ended else None

    def to_dict(self) -> dict[str, Any]:
        """The job file (R-FS-6); the first fields are the public contract."""
        req = self.request
        return {
            "job_id": self.job_id,
            "tag": req.tag,
            "peer": req.peer,
            "uid": self.uid,
            "profile": self.profile,
            "work_class": req.work_class,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "attempts": [a.to_dict() for a in self.attempts],
            "eta_s": req.eta_s,
            "submitted_at": self.submitted_at,
            "request_id": req.request_id,
            "fingerprint": self.fingerprint,
            "argv": list(req.argv) if req.argv is not None else None,
            "command": req.command,
            "cwd": req.cwd,
            "generation": self.generation,
            "priority": self.priority,
            "hold": self.held,
            "after": [{"job": job, "when": when} for job, when in self.after],
            "admission_deadline": self.admission_deadline,
            "barrier_releases": self.barrier_releases,
            **({"slurm": req.slurm} if req.slurm is not None else {}),
        }

    @property
    def barrier_releases(self) -> int:
        """Its last attempts in a row that never started their command (``released``)."""
        count = 0
        for attempt in reversed(self.attempts):
            if attempt.outcome != AttemptOutcome.RELEASED:
                break
            count += 1
        return count


NEW_WORK = (ReplyOutcome.ACCEPTED, ReplyOutcome.RETRY_ACCEPTED)  # the outcomes that queued work


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """What a peer is told about one request (R-FS-5); ``digest`` spots retransmissions."""

    request_id: str
    outcome: ReplyOutcome  # checked by ``reply_transition``
    job_id: str | None
    state: str | None
    reason: str | None  # None: "job <job_id> <state>", most replies' reason, not kept in each
    digest: str
    field: str | None = None
    problem: str | None = None
    lease: dict[str, str] | None = None  # what the submission did to the lease it carried
    estimate: dict[str, Any] | None = None  # the cost estimate a max_cost was checked against
    uid: int | None = None  # the owner of the request file (R-SEC-3)
    # a duplicate that shares a job its tag names though it differs: what differs (R-SUB-7)
    differs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "request_id": self.request_id,
            "outcome": self.outcome,
            "job_id": self.job_id,
            "state": self.state,
            "reason": self.reason if self.reason is not None
            else f"job {self.job_id} {self.state}",
        }
        if self.field is not None:
            doc["field"] = self.field
            doc["problem"] = self.problem
        if self.lease is not None:
            doc["lease"] = self.lease
        if self.estimate is not None:
            doc["estimate"] = self.estimate
        if self.uid is not None:
            doc["uid"] = self.uid
        if self.differs:
            doc["differs"] = list(self.differs)
        return doc
