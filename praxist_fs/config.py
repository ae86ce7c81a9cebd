"""Load the task file into a frozen ``Policy`` (SPEC R-CFG-1..5).

The scheduler must never run on a policy the user did not write, so in
``mode: central`` every unknown key, misspelled boolean or malformed number
inside the sections we own (``compute_budget.resource_scheduler`` and
``synthesis_trigger``) is a ``PolicyError`` naming the key path, the value and
what was expected. Valid numbers outside a bounded range are moved into range
instead, and each move is recorded in ``Policy.normalizations`` (which ends up
in ``policy.json``). ``mode: legacy`` (also: no mode at all, R-DUR-3) ignores
unknown keys but checks the values it reads the same way. In either mode, a key
close to ``compute_budget`` (top level) or ``resource_scheduler`` (in it) while
that one is missing is a ``PolicyError`` with a "did you mean": the other keys
there are the task's own, but this typo would drop our section without a word.

The rules live in tables (``_SCHEDULER_KEYS``, ``_THRESHOLD_KEYS``, ``_PROFILE_KEYS``,
``_QUEUE_KEYS``) of key -> (checker, normalizer); defaults come from ``Policy()``
itself so there is one source of truth. See docs/CONFIG.md. The checkers and
normalizers are in config_checks.py (picker names among them, R-POL-1), the strict
YAML reading in config_yaml.py.
"""

from __future__ import annotations

import difflib
import os
from functools import partial
from typing import Any

from praxist_fs.backends.registry import BACKENDS
from praxist_fs.backends.run_backends import backend_name, resolve_backends
from praxist_fs.config_checks import (
    PICKER_ENTRY_POINTS, Key, check_bool, check_choice, check_int, check_int_or_auto,
    check_name, check_names, check_number, check_picker, check_positive,
    check_positive_or_null, check_pressure_domains, check_profile_name, check_uids,
    check_windows, clamp, discover_pickers, unless_null,
)
from praxist_fs.config_yaml import FILE_PATH, join_path, parse_task_text
from praxist_fs.core.budget import Budget
from praxist_fs.core.placement import PLACEMENTS
from praxist_fs.core.policy import (
    PRESSURE_DOMAINS,
    WORK_CLASSES,
    Hooks,
    Normalization,
    Policy,
    PressureThreshold,
    Profile,
)
from praxist_fs.core.queues import PREEMPT_MODES, Project, Queue, default_queues
from praxist_fs.core.request import MAX_ADMISSION_TIMEOUT_S, MAX_REQUEST_BYTES
from praxist_fs.core.states import PreemptMode
from praxist_fs.errors import PolicyError

__all__ = ["DEFAULT_TASK_YAML", "PICKER_ENTRY_POINTS", "discover_pickers", "load_policy",
           "parse_task_text", "policy_from_mapping"]

# Seed 000's Task Contract, verbatim: what ``load_policy(None)`` resolves.
DEFAULT_TASK_YAML = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    min_concurrent_experiments: 1
    max_concurrent_experiments: 8
    supply_signal_enabled: true
    supply_idle_samples: 3
    supply_lease_seconds: 600
    mature_supply_fraction: 0.25
    mature_supply_redundancy: 3.0
    mature_assessment_min_completion_probability: 0.25
    exploration_reserve: 1
    infrastructure_retries: 1
    default_profile: gpu_work
    profiles:
      cpu_ordinary:
        accelerator: cpu
        pressure_domains: [cpu, memory, io]
      gpu_work:
        accelerator: gpu
        gpu_count: 1
        gpu_memory_gb: 20
        gpu_utilization_pct: 45
        pressure_domains: [cpu, memory, io]
"""

SCHEDULER_PATH = "compute_budget.resource_scheduler"
SYNTHESIS_PATH = "synthesis_trigger"
MAX_GPU_COUNT = 64
MAX_CALM_SAMPLES = 100
MAX_EXPERIMENT_MEMORY_GB = 1024.0
MIN_HALF_LIFE_S, MAX_HALF_LIFE_S = 60.0, 30 * 86400.0
MAX_CANCEL_GRACE_S = 3600.0
MIN_UTC_OFFSET_MIN, MAX_UTC_OFFSET_MIN = -12 * 60, 14 * 60
MAX_PROJECT_SHARE = 1e6
MAX_DRAIN_GRACE_S = 7 * 86400.0
MAX_HOOK_TIMEOUT_S = 3600.0
MAX_SPOOL_QUOTA_REQUESTS = 10_000_000  # a uid's requests waiting in the spool (R-SEC-5)
MAX_SPOOL_QUOTA_BYTES = 1 << 40        # ... and their bytes: a TiB
MAX_AGING = 1000.0               # shortest_first_aging: waiting worth 1000x run time at most
MIN_STARVATION_S, MAX_STARVATION_S = 60.0, 365 * 86400.0  # shortest_first_starvation_seconds
MIN_STARVATION_FACTOR, MAX_STARVATION_FACTOR = 0.1, 100.0  # shortest_first_starvation_factor
MAX_FACTOR_WEIGHT = 1e6          # multifactor_weight_*
MIN_MAX_AGE_S, MAX_MAX_AGE_S = 60.0, 365 * 86400.0
NEAR_MISS = 0.8  # difflib ratio from which a foreign key is taken for a typo of ours


# Order matters: a normalizer may name only keys above it, and normalizations
# are recorded in this order.
_SCHEDULER_KEYS: dict[str, Key] = {
    "min_concurrent_experiments": Key(check_int, clamp(1)),
    "max_concurrent_experiments": Key(check_int_or_auto, clamp("min_concurrent_experiments")),
    "initial_concurrent_experiments": Key(
        check_int, clamp("min_concurrent_experiments", "max_concurrent_experiments")
    ),
    "supply_signal_enabled": Key(check_bool),
    "supply_idle_samples": Key(check_int, clamp(1)),
    "supply_lease_seconds": Key(check_int, clamp(180, 3600)),
    "mature_supply_fraction": Key(check_number, clamp(0, 1)),
    "mature_supply_redundancy": Key(check_number, clamp(0)),
    "mature_assessment_min_completion_probability": Key(check_number, clamp(0, 1)),
    "exploration_reserve": Key(check_int, clamp(0, "max_concurrent_experiments")),
    "infrastructure_retries": Key(check_int, clamp(0, 10)),
    "max_concurrent_per_peer": Key(check_int, clamp(1)),
    "calm_samples": Key(check_int, clamp(1, MAX_CALM_SAMPLES)),
    "experiment_memory_gb": Key(check_positive, clamp(None, MAX_EXPERIMENT_MEMORY_GB)),
    "fair_share_half_life_seconds": Key(check_positive, clamp(MIN_HALF_LIFE_S, MAX_HALF_LIFE_S)),
    "cancel_grace_seconds": Key(check_number, clamp(0, MAX_CANCEL_GRACE_S)),
    "admission_timeout_seconds": Key(check_positive_or_null,
                                     unless_null(clamp(1, MAX_ADMISSION_TIMEOUT_S))),
    "drain_grace_min_seconds": Key(check_number, clamp(0, MAX_DRAIN_GRACE_S)),
    "drain_grace_max_seconds": Key(check_number, clamp("drain_grace_min_seconds",
                                                       MAX_DRAIN_GRACE_S)),
    "dependency_failure": Key(check_choice("cancel", "hold")),
    "default_profile": Key(check_profile_name),
    "project_picker": Key(check_picker("project")),
    "queue_picker": Key(check_picker("queue")),
    "job_picker": Key(check_picker("job")),
    "preempt_policy": Key(check_picker("preempt")),
    "placement": Key(check_choice(*PLACEMENTS)),
    "shortest_first_aging": Key(check_number, clamp(0, MAX_AGING)),
    "shortest_first_by": Key(check_choice("run_time", "gpu_seconds")),
    "shortest_first_starvation_seconds": Key(check_positive_or_null, unless_null(
        clamp(MIN_STARVATION_S, MAX_STARVATION_S))),
    "shortest_first_starvation_factor": Key(check_positive_or_null, unless_null(
        clamp(MIN_STARVATION_FACTOR, MAX_STARVATION_FACTOR))),
    "shortest_first_priority_seconds": Key(check_positive_or_null, unless_null(
        clamp(1, MAX_STARVATION_S))),
    "multifactor_weight_age": Key(check_number, clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_size": Key(check_number, clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_fair_share": Key(check_number, clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_priority": Key(check_number, clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_max_age_seconds": Key(check_positive, clamp(MIN_MAX_AGE_S, MAX_MAX_AGE_S)),
    "windows_utc_offset_minutes": Key(check_int, clamp(MIN_UTC_OFFSET_MIN, MAX_UTC_OFFSET_MIN)),
    "trusted_uids": Key(check_uids),
    "operators": Key(check_uids),
    "same_tag_different_request": Key(check_choice("share", "reject")),
    "spool_quota_requests": Key(check_int, clamp(1, MAX_SPOOL_QUOTA_REQUESTS)),
    "spool_quota_bytes": Key(check_int, clamp(MAX_REQUEST_BYTES, MAX_SPOOL_QUOTA_BYTES)),
    "backend": Key(backend_name),  # as registered now
}
_SCHEDULER_SECTIONS = ("mode", "pressure_thresholds", "profiles", "queues", "projects",
                       "budget", "hooks", "backends")  # read apart, and each backend's own
                                                       # (backends/run_backends.py)

# One domain of pressure_thresholds; both keys are required. ``low`` is bounded
# by the already normalized ``high`` (calm must not be above "too high").
_THRESHOLD_KEYS: dict[str, Key] = {
    "high": Key(check_number, clamp(0, 100)),
    "low": Key(check_number, clamp(0, "high")),
}

_SYNTHESIS_KEYS: dict[str, Key] = {
    "mature_quorum_fraction": Key(check_number, clamp(0, 1)),
}

# The run budget (R-BUD-1), advisory; ``rates`` (profile -> cost per unit-hour) is read
# apart, since its keys are the task's profile names.
_BUDGET_KEYS: dict[str, Key] = {
    "gpu_hours": Key(check_positive),
    "cost": Key(check_positive),
    "at_fraction": Key(check_positive, clamp(0, 1)),
}

# Completion hooks (issue 17); the two command lists are read apart (``_argv_lists``).
_HOOK_KEYS: dict[str, Key] = {
    "timeout_seconds": Key(check_positive, clamp(1, MAX_HOOK_TIMEOUT_S)),
}
_HOOK_EVENTS = ("on_job_end", "on_generation_close")

_GPU_FIELDS = ("gpu_count", "gpu_memory_gb", "gpu_utilization_pct")
_PROFILE_KEYS: dict[str, Key] = {
    "accelerator": Key(check_choice("cpu", "gpu")),
    "gpu_count": Key(check_int, clamp(1, MAX_GPU_COUNT)),
    "gpu_memory_gb": Key(check_positive),
    "gpu_utilization_pct": Key(check_number, clamp(1, 100)),
    "pressure_domains": Key(check_pressure_domains),
    "backend": Key(backend_name),  # one the run uses: backends/run_backends.py
}


def _work_classes(path: str, value: Any) -> tuple[str, ...]:
    classes = check_names(path, value, "work classes " + ", ".join(WORK_CLASSES))
    for index, work_class in enumerate(classes):
        check_choice(*WORK_CLASSES)(join_path(path, index), work_class)
    return classes


_queue_names = partial(check_names, what="queue names")

# One queue (R-POL-1); ``limits`` and ``leave_slots`` are small mappings of their own.
# Names in ``leave_slots.for`` and ``preemptible_queues`` are checked once all queues
# are known (``_check_queues``).
_QUEUE_KEYS: dict[str, Key] = {
    "priority": Key(check_int),
    "work_classes": Key(_work_classes),
    "picker": Key(check_picker("job")),
    "preemptible_queues": Key(_queue_names),
    "preempt": Key(check_choice(*PREEMPT_MODES)),
    "preemptible": Key(check_bool),
    "preempt_policy": Key(check_picker("preempt")),
    "windows": Key(check_windows),
}
_QUEUE_SECTIONS = {
    "limits": {"max_running": Key(check_int, clamp(0))},
    "leave_slots": {"slots": Key(check_int, clamp(0, "max_concurrent_experiments")),
                    "for": Key(_queue_names)},
}
_QUEUE_DEFAULTS = {"priority": 0, "picker": None, "preemptible_queues": (),
                   "preempt": PreemptMode.SUSPEND, "preemptible": False, "preempt_policy": None,
                   "windows": (), "max_running": None, "slots": 0, "for": ()}

# One project (seed 002): the queues it owns, its weight for fair share, its job picker.
_PROJECT_KEYS: dict[str, Key] = {
    "queues": Key(_queue_names),
    "share": Key(check_positive, clamp(None, MAX_PROJECT_SHARE)),
    "picker": Key(check_picker("job")),
}
_PROJECT_DEFAULTS = {"queues": (), "share": 1.0, "picker": None}


def _check_queues(queues: list[Queue], paths: list[str], path: str) -> None:
    """Every work class in exactly one queue; the queues named by others exist."""
    names = [q.name for q in queues]
    owner: dict[str, str] = {}
    for queue, where in zip(queues, paths):
        if not queue.work_classes:
            raise PolicyError(join_path(where, "work_classes"), [], "at least one work class "
                              "(a queue named after a work class takes it by default)")
        for index, work_class in enumerate(queue.work_classes):
            if work_class in owner:
                raise PolicyError(join_path(join_path(where, "work_classes"), index), work_class,
                                  f"a work class no other queue takes (queue "
                                  f"{owner[work_class]} takes it)")
            owner[work_class] = queue.name
        for key, listed in (("leave_slots.for", queue.leave_slots_for),
                            ("preemptible_queues", queue.preemptible_queues)):
            for index, other in enumerate(listed):
                if other not in names or other == queue.name:
                    others = [n for n in names if n != queue.name]
                    raise PolicyError(join_path(join_path(where, key), index), other, (
                        "another queue: " + ", ".join(others)) if others else
                        "another queue (there is only this one)")
    missing = [c for c in WORK_CLASSES if c not in owner]
    if missing:
        raise PolicyError(path, names, "every work class in some queue's work_classes ("
                          + ", ".join(missing) + " in none)")


# --- resolution ---------------------------------------------------------------


class _Resolver:
    """Carries strictness and the normalizations found, in encounter order."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.notes: list[Normalization] = []

    def reject_unknown(self, mapping: dict, known: tuple[str, ...], path: str) -> None:
        if not self.strict:
            return
        for key, value in mapping.items():
            if key not in known:
                near = difflib.get_close_matches(str(key), known, n=1)
                hint = f"did you mean {near[0]!r}?" if near else "known: " + ", ".join(known)
                raise PolicyError(join_path(path, str(key)), value, f"a known key ({hint})")

    def read(self, mapping: dict, table: dict[str, Key], path: str, defaults: dict,
             bounds: dict[str, Any] | None = None) -> dict:
        """Check, default and normalize every key of ``table`` from ``mapping``;
        ``bounds``: already resolved keys of an enclosing section a bound may name."""
        resolved: dict[str, Any] = {}
        for name, key in table.items():
            if name not in mapping:
                resolved[name] = defaults[name]
                continue
            value = key.check(join_path(path, name), mapping[name])
            if key.normalize is not None:
                used, rule = key.normalize(value, {**(bounds or {}), **resolved})
                if used != value:
                    self.notes.append(Normalization(
                        key_path=join_path(path, name), given=value, used=used, rule=rule))
                    value = used
            resolved[name] = value
        return resolved

    def pressure_thresholds(self, raw: Any, path: str) -> dict[str, PressureThreshold]:
        """domain -> {high, low}; omitted domains keep their defaults."""
        expected = "a mapping of " + ", ".join(PRESSURE_DOMAINS) + " -> {high: number, low: number}"
        if not isinstance(raw, dict):
            raise PolicyError(path, raw, expected)
        thresholds = dict(Policy().pressure_thresholds)
        self.reject_unknown(raw, PRESSURE_DOMAINS, path)
        for domain in PRESSURE_DOMAINS:  # canonical order, like pressure_domains
            if domain not in raw:
                continue
            where = join_path(path, domain)
            body = raw[domain]
            if not isinstance(body, dict):
                raise PolicyError(where, body, "a mapping {high: number, low: number}")
            self.reject_unknown(body, tuple(_THRESHOLD_KEYS), where)
            for name in _THRESHOLD_KEYS:
                if name not in body:
                    raise PolicyError(join_path(where, name), None,
                                      "a number (high and low are both required)")
            thresholds[domain] = PressureThreshold(
                **self.read(body, _THRESHOLD_KEYS, where, {}))
        return thresholds

    def profile(self, name: str, body: Any, path: str) -> Profile:
        if not isinstance(body, dict):
            raise PolicyError(path, body, "a mapping with accelerator: cpu or gpu")
        self.reject_unknown(body, tuple(_PROFILE_KEYS), path)
        accelerator = _PROFILE_KEYS["accelerator"].check(
            join_path(path, "accelerator"), body.get("accelerator"))
        if accelerator == "cpu":
            for field in _GPU_FIELDS:
                if field in body:
                    raise PolicyError(join_path(path, field), body[field],
                                      "no GPU fields on a cpu profile (use accelerator: gpu)")
        defaults = {"accelerator": accelerator, "gpu_count": 1 if accelerator == "gpu" else 0,
                    "gpu_memory_gb": None, "gpu_utilization_pct": None, "pressure_domains": (),
                    "backend": None}
        return Profile(name=name, **self.read(body, _PROFILE_KEYS, path, defaults))

    def queues(self, raw: Any, path: str, bounds: dict[str, Any]) -> tuple[Queue, ...]:
        """``queues:`` as a mapping name -> queue, or a list of queues that carry ``name``."""
        if isinstance(raw, list):
            items = []
            for index, body in enumerate(raw):
                where = join_path(path, index)
                if not isinstance(body, dict) or "name" not in body:
                    raise PolicyError(where, body, "a queue mapping with a name")
                check_name(join_path(where, "name"), body["name"], "a queue name")
                items.append((where, body["name"], {k: v for k, v in body.items() if k != "name"}))
        elif isinstance(raw, dict):
            items = [(join_path(path, str(name)),
                      check_name(join_path(path, str(name)), name, "a queue name"), body)
                     for name, body in raw.items()]
        else:
            items = []
        if not items:
            raise PolicyError(path, raw, "a non-empty mapping of queue name -> queue "
                              "(or a list of queues with a name)")
        queues: list[Queue] = []
        for where, name, body in items:
            if any(q.name == name for q in queues):
                raise PolicyError(where, name, "each queue name once")
            queues.append(self.queue(name, body, where, bounds))
        _check_queues(queues, [where for where, _, _ in items], path)
        return tuple(queues)

    def queue(self, name: str, body: Any, path: str, bounds: dict[str, Any]) -> Queue:
        if not isinstance(body, dict):
            raise PolicyError(path, body, "a queue mapping of "
                              + ", ".join((*_QUEUE_KEYS, *_QUEUE_SECTIONS)))
        self.reject_unknown(body, (*_QUEUE_KEYS, *_QUEUE_SECTIONS), path)
        defaults = {**_QUEUE_DEFAULTS, "work_classes": (name,) if name in WORK_CLASSES else ()}
        values = self.read(body, _QUEUE_KEYS, path, defaults)
        for section, table in _QUEUE_SECTIONS.items():
            where = join_path(path, section)
            raw = body.get(section, {})
            if not isinstance(raw, dict):
                raise PolicyError(where, raw, "a mapping of " + ", ".join(table))
            self.reject_unknown(raw, tuple(table), where)
            values.update(self.read(raw, table, where, defaults, bounds))
        return Queue(name=name, priority=values["priority"], work_classes=values["work_classes"],
                     picker=values["picker"], max_running=values["max_running"],
                     leave_slots=values["slots"], leave_slots_for=values["for"],
                     preemptible_queues=values["preemptible_queues"],
                     preempt=PreemptMode(values["preempt"]),
                     preemptible=values["preemptible"], preempt_policy=values["preempt_policy"],
                     windows=values["windows"])

    def projects(self, raw: Any, path: str, queues: tuple[Queue, ...]) -> tuple[Project, ...]:
        """``projects:`` as a mapping name -> project; every queue in exactly one."""
        names = [q.name for q in queues]
        if not isinstance(raw, dict) or not raw:
            raise PolicyError(path, raw, "a non-empty mapping of project name -> {queues: "
                              "[...], share: N, picker: P}")
        projects: list[Project] = []
        owner: dict[str, str] = {}
        for name, body in raw.items():
            where = join_path(path, str(name))
            check_name(where, name, "a project name")
            if not isinstance(body, dict):
                raise PolicyError(where, body, "a project mapping of " + ", ".join(_PROJECT_KEYS))
            self.reject_unknown(body, tuple(_PROJECT_KEYS), where)
            values = self.read(body, _PROJECT_KEYS, where, _PROJECT_DEFAULTS)
            if not values["queues"]:
                raise PolicyError(join_path(where, "queues"), body.get("queues"),
                                  "at least one queue: " + ", ".join(names))
            for index, queue in enumerate(values["queues"]):
                at = join_path(join_path(where, "queues"), index)
                if queue not in names:
                    raise PolicyError(at, queue, "a queue: " + ", ".join(names))
                if queue in owner:
                    raise PolicyError(at, queue, f"a queue no other project owns (project "
                                      f"{owner[queue]} owns it)")
                owner[queue] = name
            projects.append(Project(name=name, **values))
        missing = [n for n in names if n not in owner]
        if missing:
            raise PolicyError(path, sorted(raw), "every queue in some project's queues ("
                              + ", ".join(missing) + " in none)")
        return tuple(projects)

    def budget(self, raw: dict, path: str, profiles: dict[str, Profile]) -> Budget:
        self.reject_unknown(raw, (*_BUDGET_KEYS, "rates"), path)
        values = self.read(raw, _BUDGET_KEYS, path, Budget().to_dict())
        where = join_path(path, "rates")
        rates = {}
        for name, rate in _section(raw, "rates", where).items():
            if name not in profiles:
                raise PolicyError(join_path(where, str(name)), rate, "a profile of the task: "
                                  + ", ".join(sorted(profiles)))
            rates[name] = check_number(join_path(where, name), rate)
            if rates[name] < 0:
                raise PolicyError(join_path(where, name), rate, "a number >= 0 (cost per GPU-hour, "
                                  "or per hour for a cpu profile)")
        if values["cost"] is not None and not rates:
            raise PolicyError(join_path(path, "cost"), values["cost"], "a cost limit with rates "
                              "beside it (rates: {profile: cost per GPU-hour, or per hour for "
                              "a cpu profile}); without rates nothing has a cost")
        return Budget(rates=rates, **values)

    def hooks(self, raw: dict, path: str) -> Hooks:
        self.reject_unknown(raw, (*_HOOK_EVENTS, *_HOOK_KEYS), path)
        values = self.read(raw, _HOOK_KEYS, path, Hooks().to_dict())
        return Hooks(**values, **{event: _argv_lists(join_path(path, event), raw[event])
                                  for event in _HOOK_EVENTS if raw.get(event) is not None})

    def profiles(self, raw: Any, path: str) -> dict[str, Profile]:
        if not isinstance(raw, dict):
            raise PolicyError(path, raw, "a mapping of profile name -> profile")
        out = {}
        for name in sorted(raw, key=str):
            where = join_path(path, str(name))
            out[check_profile_name(where, name)] = self.profile(name, raw[name], where)
        return out


def _argv_lists(path: str, value: Any) -> tuple[tuple[str, ...], ...]:
    """Commands as argv lists, each run without a shell: [[prog, arg, ...], ...]."""
    expected = "a list of commands, each a non-empty list of strings (argv, no shell)"
    if not isinstance(value, list):
        raise PolicyError(path, value, expected)
    commands = []
    for i, argv in enumerate(value):
        if not isinstance(argv, list) or not argv:
            raise PolicyError(join_path(path, i), argv, "a non-empty list of strings (argv, e.g. "
                              "[curl, -sS, --data-binary, '@-', https://host/hook])")
        for j, word in enumerate(argv):
            if not isinstance(word, str) or not word or "\0" in word:
                raise PolicyError(join_path(join_path(path, i), j), word, "a non-empty string")
        commands.append(tuple(argv))
    return tuple(commands)


def _near_miss(parent: dict, key: str, path: str) -> None:
    """A misspelt ``key`` of a section that is not all ours: its other keys belong to the
    task and are ignored, so only a key close to ours, while ours is missing, is taken
    for a typo (which would otherwise drop our whole section without a word)."""
    if key in parent:
        return
    for name in parent:
        if difflib.get_close_matches(str(name).lower(), [key], n=1, cutoff=NEAR_MISS):
            raise PolicyError(join_path(path, str(name)), parent[name],
                              f"{key}, which is missing (did you mean {key!r}?)")


def _section(parent: dict, key: str, path: str) -> dict:
    """A section we read: absent or empty (null) is {}, anything else must be a mapping."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PolicyError(path, value, "a mapping")
    return value


def policy_from_mapping(task: Any) -> Policy:
    """Resolve an already parsed task mapping into a ``Policy``.

    Pass mappings parsed by ``parse_task_text``: a plain ``yaml.safe_load``
    has already turned ``yes`` into True and merged duplicate keys.
    """
    if not isinstance(task, dict):
        raise PolicyError(FILE_PATH, task, "a YAML mapping at the top level")
    _near_miss(task, "compute_budget", "")
    compute_budget = _section(task, "compute_budget", "compute_budget")
    _near_miss(compute_budget, "resource_scheduler", "compute_budget")
    scheduler = _section(compute_budget, "resource_scheduler", SCHEDULER_PATH)
    synthesis = _section(task, "synthesis_trigger", SYNTHESIS_PATH)
    # R-DUR-3: a task without mode: central keeps legacy launching.
    mode = check_choice("central", "legacy")(join_path(SCHEDULER_PATH, "mode"),
                                             scheduler.get("mode", "legacy"))
    resolver = _Resolver(strict=mode == "central")
    sections = (r.section.key for r in BACKENDS.values() if r.section is not None)
    resolver.reject_unknown(scheduler, (*_SCHEDULER_SECTIONS, *sections, *_SCHEDULER_KEYS),
                            SCHEDULER_PATH)
    resolver.reject_unknown(synthesis, tuple(_SYNTHESIS_KEYS), SYNTHESIS_PATH)

    defaults = Policy()
    values = resolver.read(scheduler, _SCHEDULER_KEYS, SCHEDULER_PATH, _as_dict(defaults))
    thresholds = (resolver.pressure_thresholds(scheduler["pressure_thresholds"],
                                               join_path(SCHEDULER_PATH, "pressure_thresholds"))
                  if "pressure_thresholds" in scheduler else dict(defaults.pressure_thresholds))
    profiles_path = join_path(SCHEDULER_PATH, "profiles")
    profiles = (resolver.profiles(scheduler["profiles"], profiles_path)
                if "profiles" in scheduler else dict(defaults.profiles))
    if values["default_profile"] not in profiles:
        raise PolicyError(join_path(SCHEDULER_PATH, "default_profile"), values["default_profile"],
                          "one of the defined profiles: " + ", ".join(sorted(profiles)))
    queues = None
    if "queues" in scheduler:
        if "exploration_reserve" in scheduler:
            raise PolicyError(join_path(SCHEDULER_PATH, "exploration_reserve"),
                              scheduler["exploration_reserve"],
                              "no exploration_reserve beside queues: give the queue that "
                              "should leave slots free a leave_slots: {slots: N, for: [...]}")
        queues = resolver.queues(scheduler["queues"], join_path(SCHEDULER_PATH, "queues"), values)
    projects = None
    if "projects" in scheduler:
        projects = resolver.projects(scheduler["projects"], join_path(SCHEDULER_PATH, "projects"),
                                     queues or default_queues(values["exploration_reserve"]))
    budget_path = join_path(SCHEDULER_PATH, "budget")
    budget = resolver.budget(_section(scheduler, "budget", budget_path), budget_path, profiles)
    hooks_path = join_path(SCHEDULER_PATH, "hooks")
    hooks = resolver.hooks(_section(scheduler, "hooks", hooks_path), hooks_path)
    synth = resolver.read(synthesis, _SYNTHESIS_KEYS, SYNTHESIS_PATH, _as_dict(defaults))
    backend = resolve_backends(scheduler, values["backend"],
                               values["max_concurrent_experiments"], queues, profiles,
                               SCHEDULER_PATH)
    return Policy(mode=mode, profiles=profiles, pressure_thresholds=thresholds, queues=queues,
                  projects=projects, budget=budget, hooks=hooks, **backend,
                  normalizations=tuple(resolver.notes),
                  **values, **synth)


def _as_dict(policy: Policy) -> dict[str, Any]:
    return {name: getattr(policy, name) for name in Policy.__dataclass_fields__}


def load_policy(path: str | os.PathLike[str] | None) -> Policy:
    """Read and resolve a task file; ``None`` is seed 000's contract (mode central)."""
    if path is None:
        return policy_from_mapping(parse_task_text(DEFAULT_TASK_YAML, "<embedded default>"))
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise PolicyError(FILE_PATH, source, f"a readable task file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PolicyError(FILE_PATH, source, "a UTF-8 text file") from None
    return policy_from_mapping(parse_task_text(text, source))
