"""Inputs to the core: immutable facts, each carrying its own time ``at``.

Events that change scheduler state are what the journal stores; replaying
them through ``Scheduler.handle`` rebuilds the state exactly. ``to_record`` /
``from_record`` are the journal codec (plain JSON values only).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from .budget import VERDICTS
from .model import identity_into_handle
from .observations import Envelope, GpuSample, HostCapacity, PressureSample
from .queues import PREEMPT_MODES
from .request import ControlRequest, Request
from .states import GenerationStage, PreemptMode, Verdict


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    at: float

    def __post_init__(self) -> None:
        if not isinstance(self.at, (int, float)) or self.at != self.at:
            raise ValueError(f"{type(self).__name__}.at must be a number, got {self.at!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorStarted(Event):
    """A coordinator took the run; ``policy`` is the resolved policy it runs with."""

    kind: ClassVar[str] = "coordinator_started"
    policy: dict[str, Any]
    pid: int
    host: str
    boot_id: str
    uid: int | None = None  # the coordinator's uid (R-SEC-3); None in older journals


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestSeen(Event):
    """A request file was read. Exactly one of ``request`` / ``error_field`` is set."""

    kind: ClassVar[str] = "request_seen"
    name: str
    digest: str
    request_id: str | None
    request: Request | None = None
    error_field: str | None = None
    error_problem: str | None = None
    uid: int | None = None  # the file's owner (R-SEC-3); None in older journals
    # (n, bytes): the file was the n-th oldest of its owner's waiting in the spool, which
    # with the older ones came to ``bytes`` (R-SEC-5, the spool quota); None in older ones
    spool_position: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        if (self.request is None) == (self.error_field is None):
            raise ValueError("RequestSeen needs exactly one of request or error_field")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptLaunched(Event):
    """The core admitted a queued job: a new attempt with this allocation starts."""

    kind: ClassVar[str] = "attempt_launched"
    job_id: str
    attempt_id: str
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptPreempted(Event):
    """The core preempted a running attempt to make room for job ``by`` (R-POL-3):
    ``suspend`` stops its process group until ``AttemptResumed``; ``requeue`` terminates
    it, and its end queues the job again without using a retry. ``reason``: why ``by``
    could not start."""

    kind: ClassVar[str] = "attempt_preempted"
    job_id: str
    attempt_id: str
    mode: PreemptMode
    by: str
    reason: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _hold_as_member(self, "mode", PREEMPT_MODES)


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptResumed(Event):
    """The core continues a suspended attempt: its room is there again (R-POL-3)."""

    kind: ClassVar[str] = "attempt_resumed"
    job_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptObserved(Event):
    """What the adapters saw of an attempt's shim: identity, barrier files, exit record.

    ``fenced``: the shim was found dead without an exit record while processes of its
    attempt still ran, and the coordinator terminated them (they are gone now): the
    command did not finish. ``error`` then says how the shim ended."""

    kind: ClassVar[str] = "attempt_observed"
    job_id: str
    attempt_id: str
    alive: bool
    ready: bool = False
    go: bool = False
    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    ended_at: float | None = None
    error: str | None = None
    failure: dict[str, Any] | None = None  # the task's own failure.json summary (R-OPS-3)
    fenced: bool = False
    # the backend's own identity of the attempt, opaque to the core but for its documented
    # keys (model.PROCESS_KEYS; Slurm's {"backend", "cluster", "job_id", "job_name",
    # "node"}): journaled, and kept by the attempt the first time it is reported
    handle: dict[str, Any] | None = None
    # what the backend says of it while it waits or runs (Slurm's pending reason): the
    # job's reason while it is in flight
    note: str | None = None
    # it ended by a failure of the infrastructure, not of its command (Slurm: NODE_FAIL,
    # BOOT_FAIL, no READY within the launch timeout): retried like exit 75; ``exit_code``
    # is then the command's own exit, None (and not ``exited``) if it left none
    infrastructure: str | None = None
    # the backend's own scheduler cancelled it before its command ran (Slurm: a scancel
    # from outside praxist_fs while it was pending): the job ends cancelled, this the why
    cancelled: str | None = None

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        if self.exited and self.exit_code is None:
            raise ValueError("an exited attempt needs an exit_code")
        if self.fenced and (self.alive or self.exited):
            raise ValueError("a fenced attempt is neither alive nor exited")
        if (self.infrastructure is not None or self.cancelled is not None) and self.alive:
            raise ValueError("an attempt that ended by its infrastructure or was cancelled "
                             "is not alive")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSampled(Event):
    """A periodic look at the host: pressure, GPUs, capacity and other runs' envelopes.

    Soft state only: it never changes durable state, so it is never journaled."""

    kind: ClassVar[str] = "host_sampled"
    pressure: PressureSample | None = None
    gpus: GpuSample | None = None
    capacity: HostCapacity | None = None
    others: tuple[Envelope, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimsSeen(Event):
    """Other runs' GPU envelopes, read under the host registry lock just before placing.

    Soft state only, never journaled."""

    kind: ClassVar[str] = "claims_seen"
    others: tuple[Envelope, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlSeen(Event):
    """An operator's control file was read. Exactly one of ``control`` / ``error_field``."""

    kind: ClassVar[str] = "control_seen"
    name: str
    digest: str
    request_id: str | None
    control: ControlRequest | None = None
    error_field: str | None = None
    error_problem: str | None = None
    uid: int | None = None  # the file's owner (R-SEC-3); None in older journals


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultSeen(Event):
    """An evaluator published gen_N/results/<result_id>.json."""

    kind: ClassVar[str] = "result_seen"
    generation: int
    result_id: str
    peer: str
    mature: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleSeen(Event):
    """The peers registered idle in gen_N/resource_supply/idle/ (soft, never journaled)."""

    kind: ClassVar[str] = "idle_seen"
    generation: int
    peers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclineSeen(Event):
    """A peer declined its lease (gen_N/resource_supply/idle/<peer>.decline.json)."""

    kind: ClassVar[str] = "decline_seen"
    generation: int
    peer: str
    lease_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseGranted(Event):
    """The core decided to wake an idle peer with a directed lease."""

    kind: ClassVar[str] = "lease_granted"
    generation: int
    lease_id: str
    peer: str
    priority: str
    profiles: tuple[str, ...]
    expires_at: float
    claim: dict[str, Any] | None = None  # the GPU envelope promised on the host, if any


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseExpired(Event):
    kind: ClassVar[str] = "lease_expired"
    generation: int
    lease_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRevoked(Event):
    """The core revoked a lease: real work took the capacity its claim promised."""

    kind: ClassVar[str] = "lease_revoked"
    generation: int
    lease_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimsReleased(Event):
    """Whether the host registry still shows claims of ended leases (soft, never journaled)."""

    kind: ClassVar[str] = "claims_released"
    pending: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerationPhase(Event):
    """The core moved a generation on (assessment -> closing -> closed)."""

    kind: ClassVar[str] = "generation_phase"
    generation: int
    phase: GenerationStage
    reason: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _hold_as_member(self, "phase", tuple(GenerationStage))


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStopRequested(Event):
    """The run's stop sentinel was found (``praxist-fs stop`` fenced a dead coordinator)."""

    kind: ClassVar[str] = "run_stop_requested"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetVerdict(Event):
    """The core found the run's spend on the other side of a budget threshold (R-BUD-1):
    the new verdict (None: no limits any more) and the spend that made it. Advisory."""

    kind: ClassVar[str] = "budget_verdict"
    verdict: Verdict | None
    gpu_hours: float
    cost: float

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        if self.verdict is not None:  # None: the run has no limits any more
            _hold_as_member(self, "verdict", VERDICTS, " or None")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetAlert(Event):
    """Work was enqueued while the budget's verdict was not ``under`` (seed 003's
    ``budget.alert``): the verdict, the spend and the limits in force, and how many
    enqueues it stands for (at most one alert a minute is journaled). Advisory."""

    kind: ClassVar[str] = "budget_alert"
    level: Verdict
    gpu_hours: float
    cost: float
    gpu_hours_limit: float | None
    cost_limit: float | None
    enqueues: int

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _hold_as_member(self, "level", VERDICTS[1:])


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionExpired(Event):
    """A queued job's admission timeout passed before any attempt of its round ran
    (R-SUB-4); ``waited_for`` is why it was still waiting (the pending reason, soft
    state, so the journal carries it)."""

    kind: ClassVar[str] = "admission_expired"
    job_id: str
    waited_for: str


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls for cls in (CoordinatorStarted, RequestSeen, AttemptLaunched, AttemptObserved,
                              AttemptPreempted, AttemptResumed, ControlSeen, ResultSeen,
                              DeclineSeen, LeaseGranted, LeaseExpired, LeaseRevoked,
                              GenerationPhase, RunStopRequested, BudgetVerdict, BudgetAlert,
                              AdmissionExpired)
}


def _hold_as_member(event: Event, name: str, members: tuple[StrEnum, ...],
                    also: str = "") -> None:
    """Check that ``event``'s field ``name`` is one of ``members`` and hold it as that
    member: a replayed journal gives its string, the core the member itself."""
    value = getattr(event, name)
    if value not in members:
        raise ValueError(f"{type(event).__name__}.{name} must be one of "
                         f"{tuple(member.value for member in members)}{also}, got {value!r}")
    object.__setattr__(event, name, type(members[0])(value))


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # an event type's field names, asked once
_CONVERTED = (Request, ControlRequest, tuple)  # the values a record holds in JSON's terms


def to_record(event: Event) -> dict[str, Any]:
    record: dict[str, Any] = {"type": event.kind}
    names = _FIELD_NAMES.get(type(event))
    if names is None:  # ``dataclasses.fields`` builds its answer anew at every call
        names = _FIELD_NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    for name in names:
        value = getattr(event, name)
        if isinstance(value, _CONVERTED):  # one test for the many plain values
            value = list(value) if isinstance(value, tuple) else value.to_dict()
        record[name] = value
    return record


def from_record(record: dict[str, Any]) -> Event:
    values = dict(record)
    cls = EVENT_TYPES[values.pop("type")]
    if cls is AttemptObserved:
        values = identity_into_handle(values)
    if values.get("request") is not None:
        values["request"] = Request.from_dict(values["request"])
    if values.get("control") is not None:
        values["control"] = ControlRequest.from_dict(values["control"])
    for key in ("gpus", "profiles", "spool_position"):
        if isinstance(values.get(key), list):
            values[key] = tuple(values[key])
    return cls(**values)


NODE_NAME_MAX = 255  # a longer "node" is not one Slurm printed for a single node


def node_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be one cluster node's (or partition's) name, or None.

    Names are kept exactly as Slurm printed them (non-ASCII included), because they go
    back to Slurm in ``--exclude`` and ``--nodelist``. Refused: what is not one name
    there: empty, over ``NODE_NAME_MAX`` characters, unprintable, or with the commas,
    brackets or spaces of a node list (``a,b`` or ``gpu[1-4]`` would exclude several)."""
    if not isinstance(name, str) or not name:
        return "a non-empty string"
    if len(name) > NODE_NAME_MAX:
        return f"at most {NODE_NAME_MAX} characters"
    if not name.isprintable() or any(c in name for c in ", []"):
        return "one name: printable, without commas, brackets or spaces"
    return None


def _check_name(event: Event, field: str) -> None:
    value = getattr(event, field)
    if (problem := node_name_problem(value)) is not None:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ValueError(f"{type(event).__name__}.{field} must be {problem}, got {shown}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeOutcome(Event):
    """An attempt ended on a cluster node, and what that says about the node (R-BUD-2).

    ``infrastructure``: True for a failure of the node (NODE_FAIL or BOOT_FAIL, no READY
    within the launch timeout, exit 75), False when the attempt ran its command and ended
    otherwise (any other exit, a signal's 128+N included), None when the end says nothing
    about the node (cancelled before it ran): only a probe's ending is reported so. ``partition``: where the attempt ran,
    which is how the registry learns partitions. ``probe``: the attempt was the node's
    probe (``NodeProbeStarted``). A name Slurm could not have meant as one node raises
    ValueError: the backend drops that node outcome, the attempt's own outcome stands."""

    kind: ClassVar[str] = "node_outcome"
    node: str
    partition: str
    infrastructure: bool | None
    reason: str
    probe: bool = False

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _check_name(self, "node")
        _check_name(self, "partition")
        if not isinstance(self.infrastructure, (bool, type(None))):
            raise ValueError("NodeOutcome.infrastructure must be true, false or null, "
                             f"got {self.infrastructure!r}")
        if not isinstance(self.reason, str):
            raise ValueError(f"NodeOutcome.reason must be a string, got {self.reason!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeProbeStarted(Event):
    """The backend placed the one probe attempt an offline node's cool-down allows
    (``NodeRegistry.probes_due``); its ``NodeOutcome`` carries ``probe``."""

    kind: ClassVar[str] = "node_probe_started"
    node: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _check_name(self, "node")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeListed(Event):
    """The backend found a node of its partition that ran none of the run's work yet
    (issue 28): the registry keeps it out of rotation until its first probe succeeds."""

    kind: ClassVar[str] = "node_listed"
    node: str
    partition: str

    def __post_init__(self) -> None:
        Event.__post_init__(self)
        _check_name(self, "node")
        _check_name(self, "partition")


EVENT_TYPES.update({cls.kind: cls for cls in (NodeOutcome, NodeProbeStarted, NodeListed)})
