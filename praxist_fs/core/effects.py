"""Outputs of the core: what the adapters must make true on disk or in processes.

Each effect is idempotent to carry out, so a restart may simply redo the
effects of the last events ("destination exists and source is gone" is done).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


effect = dataclass(frozen=True, slots=True, kw_only=True)  # every effect: a frozen record


@effect
class Effect:
    pass


@effect
class _Reply(Effect):
    """A reply file: a request's (spool/replies/) or a control request's."""

    request_id: str
    document: dict[str, Any]


@effect
class _InboxFile(Effect):
    """A file a peer wrote into an inbox, done with: ``name`` there."""

    name: str


@effect
class _AttemptSignal(Effect):
    """What is told to one attempt's barrier or process group."""

    job_id: str
    attempt_id: str


@effect
class WriteJob(Effect):
    """Place jobs/<directory>/<job_id>.json with ``document``; when the job moved,
    remove its file from ``replaces``, the directory it was in (start-up repair, not
    this effect, removes copies no move explains).

    The core's own writes leave ``document`` None: the file says the job as the core
    holds it when the file is written (``Scheduler.written_document``). A batch writes
    only the last of a job's writes (``driver``), and a replay none, so the document of
    a write that is dropped is never built (2 of every 5 a job's life made)."""

    job_id: str
    directory: str
    document: dict[str, Any] | None = None
    replaces: str | None = None


@effect
class WriteReply(_Reply):
    """spool/replies/<request_id>.json: what became of a request."""


@effect
class ConsumeRequest(_InboxFile):
    """The request is answered and journaled: remove it from spool/incoming. Its file
    may be kept to be written into (``adapters/spares.py``) unless ``holds_secret``: a
    value of its env was a secret, which must not outlive the job in the file's bytes
    (docs/PROTOCOL.md section 3)."""

    holds_secret: bool = False


@effect
class RejectRequest(_InboxFile):
    """Move the request to spool/rejected/ beside ``<name>.error.json``."""

    error: dict[str, Any]


@effect
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


@effect
class WriteGo(_AttemptSignal):
    """Open the launch barrier: the intent, pid and allocation are journaled."""


@effect
class AbortAttempt(_AttemptSignal):
    """Tell a shim that never got GO to exit without running the command."""


@effect
class TerminateAttempts(Effect):
    """The run is stopping: signal these attempts' process groups (TERM, grace, KILL),
    revalidating each process's identity before every signal."""

    attempts: tuple[tuple[str, str], ...]  # (job_id, attempt_id)


@effect
class SuspendAttempt(_AttemptSignal):
    """Preempted by suspension (R-POL-3): SIGTSTP, then SIGSTOP, to the attempt's process
    group and its shim's descendants, their identity revalidated before each signal; the
    job it makes room for starts its command only once they are all stopped. Stopping a
    stopped group is a no-op."""


@effect
class ResumeAttempt(_AttemptSignal):
    """A suspended attempt continues: SIGCONT to its group, identity revalidated."""


@effect
class EvictAttempt(_AttemptSignal):
    """Preempted for requeue (R-POL-3): TERM the attempt's group (ABORT it if still at the
    barrier), KILL it after a grace; its end is then observed like any other. Unlike
    ``TerminateAttempts`` it touches this one group only, and does not wait."""


@effect
class CancelAttempt(_AttemptSignal):
    """Cancelled (R-CTL-1): like ``EvictAttempt`` (ABORT at the barrier, TERM to the group,
    KILL after ``grace`` seconds), but a suspended group gets SIGCONT first, since a
    stopped process does not act on TERM. Its end is observed like any other."""

    grace: float


@effect
class WriteControlReply(_Reply):
    """control/replies/<request_id>.json: what became of a control request."""


@effect
class DisposeControl(_InboxFile):
    """Remove an answered control file; a rejected one is kept with its error."""

    error: dict[str, Any] | None = None


@effect
class WriteGenerationFile(Effect):
    """A coordinator-owned file of gen_<N>/: ``kind`` is lease, stats, peer or closing."""

    generation: int
    kind: str
    name: str
    document: dict[str, Any]


@effect
class ConsumeDecline(Effect):
    generation: int
    name: str


# Notices (``core/notices.py``): what a committed batch did or allows that no file effect
# says by itself. The driver carries none out; it hands them, with the rest of the batch,
# to the sinks after the commit (``praxist_fs/sinks.py``).


@effect
class JobEnded(Effect):
    """The job reached ``state``, a terminal one (its file moves to jobs/done/); a sink
    reads the rest from the core it is handed."""

    job_id: str
    state: str


@effect
class GenerationClosed(Effect):
    """The generation closed (drained, or its grace is over), for ``reason``."""

    generation: int
    reason: str


@effect
class RunHook(Effect):
    """Start one of the task's completion hook commands (``core/notices.py`` decides which):
    ``name`` is its log's stem, ``document`` goes to its stdin, ``env`` over the
    coordinator's environment (the shell adds what only it knows: the run directory)."""

    name: str
    argv: tuple[str, ...]
    document: dict[str, Any]
    env: dict[str, str]


@effect
class ScrubSecrets(Effect):
    """The request's secrets are no longer needed (its job ended, or it will never
    launch): what the vault keeps of them may go (R-SEC-2; ``SecretsSink``). Not a
    file effect: a start sweeps the vault of every request not queued or in flight, so
    none is owed to a crash."""

    request_id: str


# for the sinks: the driver carries none of these out
NOTICES = (JobEnded, GenerationClosed, RunHook, ScrubSecrets)
