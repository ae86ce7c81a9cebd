"""The resolved scheduler policy: plain values the core decides with.

Loading, validation and normalization of the task file live in
``praxist_fs.config``; this module only holds the result, so the core can be
driven by a policy without reading YAML. A policy travels in the journal (the
``CoordinatorStarted`` event), which makes replay independent of later edits
to the task file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .bounds import WORK_CLASSES  # here too: the policy's queues are of these classes
from .budget import Budget
from .capabilities import BEFORE_CAPABILITIES, ON_THIS_HOST, Capabilities
from .queues import Project, Queue, default_queues, queue_of_class
from .records import field_values

PRESSURE_DOMAINS = ("cpu", "memory", "io")
ACCELERATORS = ("cpu", "gpu")
NODE_COOLDOWN_S = 300.0  # R-BUD-2: an offline node's wait from its latest failure to its probe


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A declared resource shape. Missing GPU demand means exclusive placement."""

    name: str
    accelerator: str
    gpu_count: int = 0
    gpu_memory_gb: float | None = None
    gpu_utilization_pct: float | None = None
    pressure_domains: tuple[str, ...] = ()
    # R-DIST-1, issue 28: the backend its jobs run on, one the run lists; None: the run's
    # ``backend`` (a run of one backend routes nothing)
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.accelerator not in ACCELERATORS:
            raise ValueError(f"profile {self.name}: accelerator {self.accelerator!r}")
        for domain in self.pressure_domains:
            if domain not in PRESSURE_DOMAINS:
                raise ValueError(f"profile {self.name}: pressure domain {domain!r}")

    @property
    def uses_gpu(self) -> bool:
        return self.accelerator == "gpu"

    @property
    def demand_known(self) -> bool:
        """R-CFG-5: omitting either GPU demand field makes demand unknown."""
        return self.gpu_memory_gb is not None and self.gpu_utilization_pct is not None

    def to_dict(self) -> dict[str, Any]:
        return field_values(self, omit=("name",), omit_none=("backend",)) | {
            "pressure_domains": list(self.pressure_domains)}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> Profile:
        return cls(
            name=name,
            accelerator=data["accelerator"],
            gpu_count=data["gpu_count"],
            gpu_memory_gb=data["gpu_memory_gb"],
            gpu_utilization_pct=data["gpu_utilization_pct"],
            pressure_domains=tuple(data["pressure_domains"]),
            backend=data.get("backend"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Normalization:
    """One valid value that was moved into its policy range (R-CFG-3)."""

    key_path: str
    given: Any
    used: Any
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return {"key_path": self.key_path, "given": self.given, "used": self.used, "rule": self.rule}


DEFAULT_PROFILES = {
    "cpu_ordinary": Profile(
        name="cpu_ordinary", accelerator="cpu", pressure_domains=PRESSURE_DOMAINS
    ),
    "gpu_work": Profile(
        name="gpu_work",
        accelerator="gpu",
        gpu_count=1,
        gpu_memory_gb=20.0,
        gpu_utilization_pct=45.0,
        pressure_domains=PRESSURE_DOMAINS,
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """Commands (argv lists) the coordinator runs when a job ends or a generation closes
    (issue 17 item 4); they observe, never steer: nothing here reaches a decision."""

    on_job_end: tuple[tuple[str, ...], ...] = ()
    on_generation_close: tuple[tuple[str, ...], ...] = ()
    timeout_seconds: float = 60.0

    def to_dict(self) -> dict[str, Any]:
        return {"on_job_end": [list(argv) for argv in self.on_job_end],
                "on_generation_close": [list(argv) for argv in self.on_generation_close],
                "timeout_seconds": self.timeout_seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Hooks:
        return cls(on_job_end=tuple(map(tuple, data["on_job_end"])),
                   on_generation_close=tuple(map(tuple, data["on_generation_close"])),
                   timeout_seconds=data["timeout_seconds"])


@dataclass(frozen=True, slots=True, kw_only=True)
class PressureThreshold:
    """PSI ``some avg10`` percentages: above ``high`` a domain holds new work of the
    profiles that declare it; below ``low`` it counts as calm for raising concurrency."""

    high: float
    low: float

    def to_dict(self) -> dict[str, float]:
        return {"high": self.high, "low": self.low}


DEFAULT_PRESSURE_THRESHOLDS = {
    "cpu": PressureThreshold(high=80.0, low=40.0),
    "memory": PressureThreshold(high=20.0, low=5.0),
    "io": PressureThreshold(high=40.0, low=10.0),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """compute_budget.resource_scheduler after validation; defaults are seed 000's."""

    mode: str = "central"
    initial_concurrent_experiments: int = 2
    min_concurrent_experiments: int = 1
    max_concurrent_experiments: int | str = 8  # an int, or "auto" (sized from the host)
    supply_signal_enabled: bool = True
    supply_idle_samples: int = 3
    supply_lease_seconds: int = 600
    mature_supply_fraction: float = 0.25
    mature_supply_redundancy: float = 3.0
    mature_assessment_min_completion_probability: float = 0.25
    exploration_reserve: int = 1
    infrastructure_retries: int = 1
    max_concurrent_per_peer: int | None = None  # R-SUB-5: a peer's running jobs; None: no cap
    default_profile: str = "gpu_work"
    profiles: dict[str, Profile] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    mature_quorum_fraction: float = 0.0  # synthesis_trigger.mature_quorum_fraction
    pressure_thresholds: dict[str, PressureThreshold] = field(
        default_factory=lambda: dict(DEFAULT_PRESSURE_THRESHOLDS))
    calm_samples: int = 3  # consecutive calm samples with queued work before one step up
    experiment_memory_gb: float = 4.0  # per-experiment host memory estimate for "auto"
    queues: tuple[Queue, ...] | None = None  # None: the work classes (queue_set)
    projects: tuple[Project, ...] | None = None  # None: one, owning every queue
    project_picker: str = "flat"
    queue_picker: str = "strict_priority"
    job_picker: str = "fcfs"
    preempt_policy: str = "lowest_priority_first"  # R-POL-3: victim order, for queues naming none
    placement: str = "spread"  # the order feasible GPUs are tried in (placement.Packing)
    # shortest_expected_first: seconds of expected run time one second of waiting is worth
    shortest_first_aging: float = 1.0
    shortest_first_by: str = "run_time"  # or gpu_seconds: run time x GPUs
    # shortest_expected_first: the wait after which a job goes first and, blocked, gets an
    # EASY backfill reservation; None: never
    shortest_first_starvation_seconds: float | None = None
    # shortest_expected_first: a job also starves once it has waited this many times as
    # long as the median queued job of its priority (core/starvation.py); None: never
    shortest_first_starvation_factor: float | None = None
    # shortest_expected_first: queue priority as a head start of this many seconds of key
    # per step, the queues in one tier, instead of strict tiers; None: strict
    shortest_first_priority_seconds: float | None = None
    # multifactor (Slurm's multifactor priority): each factor in 0..1, times its weight
    multifactor_weight_age: float = 1000.0
    multifactor_weight_size: float = 1000.0
    multifactor_weight_fair_share: float = 1000.0
    multifactor_weight_priority: float = 10000.0
    multifactor_max_age_seconds: float = 604800.0  # the age factor is 1 from this wait on
    windows_utc_offset_minutes: int = 0  # the clock queue time windows are read on
    fair_share_half_life_seconds: float = 3600.0
    cancel_grace_seconds: float = 10.0  # R-CTL-1: TERM, then KILL after this long
    # R-SUB-4: how long a job may wait to start before it ends ``expired``; None: for ever
    admission_timeout_seconds: float | None = None
    # seed 000 "adaptive drain grace": how long a closing generation waits for its running
    # work (DRAIN_GRACE_FACTOR x its observed run times, within these) before it closes
    drain_grace_min_seconds: float = 300.0
    drain_grace_max_seconds: float = 21600.0
    dependency_failure: str = "cancel"  # or "hold": a job whose dependency can't be met
    budget: Budget = field(default_factory=Budget)  # advisory run budget (R-BUD-1)
    hooks: Hooks = field(default_factory=Hooks)  # completion hooks (issue 17)
    # R-SEC-3 (core/trust.py): uids an unprivileged coordinator runs commands for, as
    # itself; and uids that may act on any job, on generations and on the run
    trusted_uids: tuple[int, ...] = ()
    operators: tuple[int, ...] = ()
    # R-SEC-5 (core/tenancy.py): a uid's requests waiting in the spool, by count and by
    # bytes; beyond either a request is rejected (field ``quota``)
    # R-SUB-7: a changed request whose tag names a queued, running or completed job shares
    # it ("share", seed 000: the tag is the identity) or is rejected ("reject")
    same_tag_different_request: str = "share"
    spool_quota_requests: int = 10_000
    spool_quota_bytes: int = 128 * 1024 * 1024
    normalizations: tuple[Normalization, ...] = ()
    # R-DIST-1: where attempts run: a registered backend's name (backends/registry.py),
    # "local" (this host) or "slurm" (a cluster), and what it can do, which is all the core
    # reads of it; the ``slurm`` mapping as the task file gave it (backends/slurm/config.py)
    backend: str = "local"
    capabilities: Capabilities = ON_THIS_HOST
    # issue 28: the other backends the run uses (``backends:``, this host among them), by
    # name, with what each can do; profiles route their jobs to them (``Profile.backend``)
    backends: dict[str, Capabilities] = field(default_factory=dict)
    slurm: dict[str, Any] | None = None
    # ``queue_set`` and ``queue_of_class``, made once: every scheduling pass reads them
    _queue_set: tuple[Queue, ...] = field(init=False, repr=False, compare=False)
    _queue_of_class: dict[str, Queue] = field(init=False, repr=False, compare=False)

    def capabilities_of(self, profile: Profile | None) -> Capabilities:
        """What the backend that runs ``profile``'s jobs can do (``backend_of``; an unknown
        profile's, None: the run's own)."""
        routed = self.backend_of(profile)
        return self.capabilities if routed == self.backend else self.backends[routed]

    def backend_of(self, profile: Profile | None) -> str:
        """The backend ``profile``'s jobs run on: the one it names, else the run's."""
        return profile.backend if profile is not None and profile.backend else self.backend

    def runs_here(self, profile: str) -> bool:
        """Whether jobs of the profile named run on this host (an unknown one: as if)."""
        known = self.profiles.get(profile)
        return known is None or self.capabilities_of(known).on_this_host

    def backend_names(self) -> tuple[str, ...]:
        """Every backend the run uses, its own (``backend``) first."""
        return (self.backend, *self.backends)

    @property
    def node_cooldown_s(self) -> float:
        """R-BUD-2: an offline node's wait before its probe (``slurm.node_cooldown_s``,
        checked with the rest of the mapping by backends/slurm/config.py)."""
        return float((self.slurm or {}).get("node_cooldown_s", NODE_COOLDOWN_S))

    def __post_init__(self) -> None:
        queues = self.queues if self.queues is not None else default_queues(
            self.exploration_reserve)
        object.__setattr__(self, "_queue_set", queues)
        object.__setattr__(self, "_queue_of_class", queue_of_class(queues))
        if self.queues is not None:  # config.py says which key is wrong; this guards the core
            names = [q.name for q in self.queues]
            if len(set(names)) != len(names):
                raise ValueError(f"queues: queue names must differ, got {names}")
            classes = sorted(c for q in self.queues for c in q.work_classes)
            if classes != sorted(WORK_CLASSES):
                raise ValueError(f"queues: every work class in exactly one queue, got {classes}")
        for profile in self.profiles.values():  # config.py names the key; this guards the core
            if profile.backend is not None and profile.backend not in self.backend_names():
                raise ValueError(f"profiles: {profile.name} runs on {profile.backend!r}, "
                                 f"which the run does not use: {self.backend_names()}")
        if self.projects is not None:
            owned = sorted(name for p in self.projects for name in p.queues)
            if owned != sorted(q.name for q in self.queue_set()):
                raise ValueError(f"projects: every queue in exactly one project, got {owned}")

    def queue_set(self) -> tuple[Queue, ...]:
        """The queues in force: the configured ones, else the work classes (R-POL-1)."""
        return self._queue_set

    def queue_of_class(self) -> dict[str, Queue]:
        """Work class -> its queue in force (``queues.queue_of_class``); read-only."""
        return self._queue_of_class

    def project_set(self) -> tuple[Project, ...]:
        """The projects in force: the configured ones, else ``default`` owning every queue."""
        if self.projects is not None:
            return self.projects
        return (Project(name="default", queues=tuple(q.name for q in self.queue_set())),)

    def to_dict(self) -> dict[str, Any]:
        return field_values(self) | {
            "profiles": {name: p.to_dict() for name, p in sorted(self.profiles.items())},
            "pressure_thresholds": {d: t.to_dict() for d, t in self.pressure_thresholds.items()},
            "queues": None if self.queues is None else {q.name: q.to_dict() for q in self.queues},
            "projects": None if self.projects is None
            else {p.name: p.to_dict() for p in self.projects},
            "budget": self.budget.to_dict(),
            "hooks": self.hooks.to_dict(),
            "trusted_uids": list(self.trusted_uids),
            "operators": list(self.operators),
            "normalizations": [n.to_dict() for n in self.normalizations],
            "capabilities": self.capabilities.to_dict(),
            "backends": {name: can.to_dict() for name, can in self.backends.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Policy:
        values = dict(data)
        values["profiles"] = {
            name: Profile.from_dict(name, p) for name, p in data["profiles"].items()
        }
        values["normalizations"] = tuple(Normalization(**n) for n in data["normalizations"])
        if data.get("queues") is not None:  # a mapping keeps its order through JSON
            values["queues"] = tuple(Queue.from_dict(n, q) for n, q in data["queues"].items())
        if data.get("projects") is not None:
            values["projects"] = tuple(Project.from_dict(n, p)
                                       for n, p in data["projects"].items())
        if "pressure_thresholds" in data:  # journals written before these keys existed lack them
            values["pressure_thresholds"] = {
                d: PressureThreshold(**t) for d, t in data["pressure_thresholds"].items()}
        if "budget" in data:
            values["budget"] = Budget.from_dict(data["budget"])
        if "hooks" in data:
            values["hooks"] = Hooks.from_dict(data["hooks"])
        for key in ("trusted_uids", "operators"):
            values[key] = tuple(data.get(key, ()))
        # journaled before the key existed: such a run rejected changed requests, and a
        # replay decides as it did
        values.setdefault("same_tag_different_request", "reject")
        values["capabilities"] = (Capabilities.from_dict(data["capabilities"],
                                                         data.get("backend", "local"))
                                  if "capabilities" in data else
                                  BEFORE_CAPABILITIES[data.get("backend", "local")])
        values["backends"] = {name: Capabilities.from_dict(can, name)  # none before issue 28
                              for name, can in data.get("backends", {}).items()}
        return cls(**values)
