"""Outputs of the core: what the adapters must make true on disk or in processes.

Each effect is idempotent to carry out, so a restart may simply redo the
effects of the last events ("destination exists and source is gone" is done).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Effect:
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteJob(Effect):
    """Place jobs/<directory>/<job_id>.json with ``document``; when the job moved,
    remove its file from ``replaces``, the directory it was in (start-up repair, not
    this effect, removes copies no move explains)."""

    job_id: str
    directory: str
    document: dict[str, Any]
    replaces: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteReply(Effect):
    request_id: str
    document: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeRequest(Effect):
    """The request is answered and journaled: remove it from spool/incoming."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RejectRequest(Effect):
    """Move the request to spool/rejected/ beside ``<name>.error.json``."""

    name: str
    error: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnAttempt(Effect):
    """Start the attempt's shim in a new session; it waits for GO before the command."""

    job_id: str
    attempt_id: str
    argv: tuple[str, ...] | None
    command: str | None
    cwd: str | None
    env: dict[str, str] = field(default_factory=dict)
    profile: str
    gpus: tuple[str, ...] = ()
    uid: int | None = None  # the uid the command switches to (R-SEC-3); None: ours
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteGo(Effect):
    """Open the launch barrier: the intent, pid and allocation are journaled."""

    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AbortAttempt(Effect):
    """Tell a shim that never got GO to exit without running the command."""

    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminateAttempts(Effect):
    """The run is stopping: signal these attempts' process groups (TERM, grace, KILL),
    revalidating each process's identity before every signal."""

    attempts: tuple[tuple[str, str], ...]  # (job_id, attempt_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class SuspendAttempt(Effect):
    """Preempted by suspension (R-POL-3): SIGTSTP, then SIGSTOP, to the attempt's process
    group and its shim's descendants, their identity revalidated before each signal; the
    job it makes room for starts its command only once they are all stopped. Stopping a
    stopped group is a no-op."""

    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeAttempt(Effect):
    """A suspended attempt continues: SIGCONT to its group, identity revalidated."""

    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EvictAttempt(Effect):
    """Preempted for requeue (R-POL-3): TERM the attempt's group (ABORT it if still at the
    barrier), KILL it after a grace; its end is then observed like any other. Unlike
    ``TerminateAttempts`` it touches this one group only, and does not wait."""

    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelAttempt(Effect):
    """Cancelled (R-CTL-1): like ``EvictAttempt`` (ABORT at the barrier, TERM to the group,
    KILL after ``grace`` seconds), but a suspended group gets SIGCONT first, since a
    stopped process does not act on TERM. Its end is observed like any other."""

    job_id: str
    attempt_id: str
    grace: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteControlReply(Effect):
    request_id: str
    document: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class DisposeControl(Effect):
    """Remove an answered control file; a rejected one is kept with its error."""

    name: str
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteGenerationFile(Effect):
    """A coordinator-owned file of gen_<N>/: ``kind`` is lease, stats, peer or closing."""

    generation: int
    kind: str
    name: str
    document: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeDecline(Effect):
    generation: int
    name: str
