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
itself so there is one source of truth. See docs/CONFIG.md.

Picker names (R-POL-1) are checked against ``praxist_fs.core.pickers.PICKERS``;
a name that is not a builtin makes this module look, once, for pickers that
installed packages publish under the ``praxist_fs.pickers`` entry points: the
one piece of the scheduling framework that touches the environment, so it is
here and not in the core.
"""

from __future__ import annotations

import difflib
import math
import os
import pwd
import re
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import yaml

from praxist_fs.backends.registry import BACKENDS
from praxist_fs.backends.run_backends import backend_name, resolve_backends
from praxist_fs.core.budget import Budget
from praxist_fs.core.pickers import PICKERS, register_picker
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
from praxist_fs.core.queues import (
    DAY_MINUTES, DAYS, PREEMPT_MODES, Project, Queue, Window, default_queues,
)
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
FILE_PATH = "<file>"  # key_path of errors about the file as a whole
MAX_GPU_COUNT = 64
MAX_CALM_SAMPLES = 100
MAX_EXPERIMENT_MEMORY_GB = 1024.0
MIN_HALF_LIFE_S, MAX_HALF_LIFE_S = 60.0, 30 * 86400.0
MAX_CANCEL_GRACE_S = 3600.0
MIN_UTC_OFFSET_MIN, MAX_UTC_OFFSET_MIN = -12 * 60, 14 * 60
MAX_PROJECT_SHARE = 1e6
_CLOCK_RANGE = re.compile(r"([01][0-9]|2[0-4]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])")
MAX_DRAIN_GRACE_S = 7 * 86400.0
MAX_HOOK_TIMEOUT_S = 3600.0
MAX_SPOOL_QUOTA_REQUESTS = 10_000_000  # a uid's requests waiting in the spool (R-SEC-5)
MAX_SPOOL_QUOTA_BYTES = 1 << 40        # ... and their bytes: a TiB
MAX_AGING = 1000.0               # shortest_first_aging: waiting worth 1000x run time at most
MIN_STARVATION_S, MAX_STARVATION_S = 60.0, 365 * 86400.0  # shortest_first_starvation_seconds
MIN_STARVATION_FACTOR, MAX_STARVATION_FACTOR = 0.1, 100.0  # shortest_first_starvation_factor
MAX_FACTOR_WEIGHT = 1e6          # multifactor_weight_*
MIN_MAX_AGE_S, MAX_MAX_AGE_S = 60.0, 365 * 86400.0
PICKER_ENTRY_POINTS = "praxist_fs.pickers"
NEAR_MISS = 0.8  # difflib ratio from which a foreign key is taken for a typo of ours
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_BOOL_TAG = "tag:yaml.org,2002:bool"


# --- YAML: only true/false are booleans, duplicate keys are errors ------------


class _Loader(yaml.SafeLoader):
    """SafeLoader whose booleans are YAML 1.2's, so ``yes``/``on`` stay strings.

    PyYAML follows YAML 1.1, where ``yes/no/on/off`` are booleans; a task that
    says ``supply_signal_enabled: off`` would silently load. With this resolver
    such a value is the string "off" and fails the boolean check by name.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _join(path: str, key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _check_duplicate_keys(node: yaml.Node, path: str, seen: set[int]) -> None:
    """Walk the composed node tree: a key twice in one mapping is ambiguous.

    Done on nodes rather than in the constructor so the error can name the
    key path; ``seen`` keeps aliases (and alias cycles) to one visit.
    """
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, Any], int] = {}
        for key_node, value_node in node.value:
            label = key_node.value if isinstance(key_node, yaml.ScalarNode) else "<complex key>"
            if isinstance(key_node, yaml.ScalarNode):
                ident = (key_node.tag, key_node.value)
                if ident in first_line:
                    raise PolicyError(
                        _join(path, label),
                        label,
                        f"each key once per mapping (also at line {first_line[ident]}, "
                        f"again at line {key_node.start_mark.line + 1})",
                    )
                first_line[ident] = key_node.start_mark.line + 1
            _check_duplicate_keys(value_node, _join(path, label), seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_duplicate_keys(item, _join(path, index), seen)


def parse_task_text(text: str, source: str = "<text>") -> Any:
    """Parse one YAML document with the strict loader; YAML errors -> PolicyError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(FILE_PATH, source, f"valid YAML ({problem}{where})") from None
    finally:
        loader.dispose()


# --- value checkers: (key_path, raw) -> value, or PolicyError -----------------

Checker = Callable[[str, Any], Any]


def _int(path: str, value: Any) -> int:
    # bool is an int subclass; and 2.0 is rejected too, so a count is never a float.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, value, "an integer")
    return value


def _int_or_auto(path: str, value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, value, 'an integer or "auto"')
    return value


def _number(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(path, value, "a finite number")
    return float(value)


def _positive(path: str, value: Any) -> float:
    number = _number(path, value)
    if number <= 0:
        raise PolicyError(path, value, "a number > 0")
    return number


def _positive_or_null(path: str, value: Any) -> float | None:
    if value is None:
        return None
    number = _number(path, value)
    if number <= 0:
        raise PolicyError(path, value, "a number > 0, or null (none)")
    return number


def _bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(path, value, "true or false")
    return value


def _choice(*options: str) -> Checker:
    def check(path: str, value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise PolicyError(path, value, "one of " + ", ".join(options))
        return value

    return check


def _name(path: str, value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise PolicyError(path, value, f"{what} matching [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
    return value


def _profile_name(path: str, value: Any) -> str:
    return _name(path, value, "a profile name")


def _names(path: str, value: Any, what: str) -> tuple[str, ...]:
    """A list of distinct names (queue names, work classes), in the order given."""
    if not isinstance(value, list):
        raise PolicyError(path, value, f"a list of {what}")
    seen: list[str] = []
    for index, name in enumerate(value):
        if not isinstance(name, str) or name in seen:
            raise PolicyError(_join(path, index), name, f"each of the {what} once, as a name")
        seen.append(name)
    return tuple(seen)


def _uids(path: str, value: Any) -> tuple[int, ...]:
    """A list of distinct users (R-SEC-3), each a uid or a user name of this host's user
    database, resolved here: the policy (and the journal) keep uids."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of uids or user names")
    uids: list[int] = []
    for index, user in enumerate(value):
        where = _join(path, index)
        if isinstance(user, str):
            try:
                uid = pwd.getpwnam(user).pw_uid
            except KeyError:
                raise PolicyError(where, user, "a user name of this host (or a uid)") from None
        elif isinstance(user, int) and not isinstance(user, bool) and 0 <= user < 2**32 - 1:
            uid = user
        else:
            raise PolicyError(where, user, "a uid (an integer >= 0) or a user name")
        if uid in uids:
            raise PolicyError(where, user, "each user once")
        uids.append(uid)
    return tuple(uids)


_discovered = False


def discover_pickers() -> None:
    """Register the pickers installed packages publish as ``praxist_fs.pickers`` entry
    points (name = picker name, object = a Picker subclass whose ``kind`` says its level).
    Once per process, and only when a task file names a picker that is not a builtin."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    import importlib.metadata  # ~5 MB of modules (email, zipfile, csv): only when needed

    for entry in importlib.metadata.entry_points(group=PICKER_ENTRY_POINTS):
        cls = entry.load()
        register_picker(getattr(cls, "kind", None), entry.name, cls)


def _picker(kind: str) -> Checker:
    def check(path: str, value: Any) -> str:
        if isinstance(value, str) and value not in PICKERS[kind]:
            try:
                discover_pickers()
            except Exception as exc:  # a broken plugin: say which, and why
                raise PolicyError(path, value, f"an installed {kind} picker (loading the "
                                  f"{PICKER_ENTRY_POINTS} entry points failed: {exc!r})") from None
        if not isinstance(value, str) or value not in PICKERS[kind]:
            raise PolicyError(path, value, f"a {kind} picker: one of "
                              + ", ".join(sorted(PICKERS[kind])))
        return value

    return check


def _windows(path: str, value: Any) -> tuple[Window, ...]:
    """Time windows (seed 002): a list of {days: [mon..sun], hours: "HH:MM-HH:MM"}, each
    key optional (every day; all day); hours past midnight run into the next day."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of windows {days: [mon, ...], hours: "
                          '"HH:MM-HH:MM"}')
    windows = []
    for index, body in enumerate(value):
        where = _join(path, index)
        if not isinstance(body, dict) or not body or not set(body) <= {"days", "hours"}:
            raise PolicyError(where, body, 'a window {days: [mon, ...], hours: "HH:MM-HH:MM"} '
                              "with one or both keys")
        days = tuple(range(7))
        if "days" in body:
            names = _names(_join(where, "days"), body["days"], "days " + ", ".join(DAYS))
            if not names:
                raise PolicyError(_join(where, "days"), [], "at least one day")
            for position, day in enumerate(names):
                _choice(*DAYS)(_join(_join(where, "days"), position), day)
            days = tuple(sorted(DAYS.index(day) for day in names))
        start, end = 0, DAY_MINUTES
        if "hours" in body:
            hours = body["hours"]
            match = _CLOCK_RANGE.fullmatch(hours) if isinstance(hours, str) else None
            if match:
                h1, m1, h2, m2 = map(int, match.groups())
                start, end = h1 * 60 + m1, h2 * 60 + m2
            if not match or start >= DAY_MINUTES or end > DAY_MINUTES or start == end:
                raise PolicyError(_join(where, "hours"), hours, 'a quoted "HH:MM-HH:MM" of two '
                                  "different times from 00:00 to 24:00 (an end before the start "
                                  'runs past midnight: "22:00-06:00")')
        windows.append(Window(days=days, start=start, end=end))
    return tuple(windows)


def _pressure_domains(path: str, value: Any) -> tuple[str, ...]:
    """A list of distinct domains; kept in canonical (cpu, memory, io) order."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of " + ", ".join(PRESSURE_DOMAINS))
    seen: list[str] = []
    for index, domain in enumerate(value):
        _choice(*PRESSURE_DOMAINS)(_join(path, index), domain)
        if domain in seen:
            raise PolicyError(_join(path, index), domain, "each pressure domain once")
        seen.append(domain)
    return tuple(d for d in PRESSURE_DOMAINS if d in seen)


# --- normalizers: (value, resolved so far) -> (used, rule) ---------------------

Normalizer = Callable[[Any, dict[str, Any]], tuple[Any, str]]
Bound = float | int | str | None  # a number, the name of an earlier key, or no bound


def _clamp(low: Bound = None, high: Bound = None) -> Normalizer:
    """Move a number into [low, high]; a str bound names an already resolved key.

    A bound that resolves to "auto" (max_concurrent_experiments) is skipped:
    the scheduler applies it once it has sized the host.
    """

    def normalize(value: Any, resolved: dict[str, Any]) -> tuple[Any, str]:
        if isinstance(value, str):  # "auto" has no range here
            return value, ""

        def side(bound: Bound) -> tuple[Any, str]:
            if isinstance(bound, str):
                got = resolved[bound]
                return (None, "") if got == "auto" else (got, f"{bound}={got}")
            return bound, str(bound)

        (lo, lo_text), (hi, hi_text) = side(low), side(high)
        used = value
        if lo is not None and used < lo:
            used = type(value)(lo)
        if hi is not None and used > hi:
            used = type(value)(hi)
        return used, f"clamped to {lo_text or '-inf'}..{hi_text or 'inf'}"

    return normalize


def _unless_null(normalize: Normalizer) -> Normalizer:
    """``normalize`` for a key whose null means "none" and is kept as it is."""
    return lambda value, resolved: (None, "") if value is None else normalize(value, resolved)


@dataclass(frozen=True)
class _Key:
    check: Checker
    normalize: Normalizer | None = None


# Order matters: a normalizer may name only keys above it, and normalizations
# are recorded in this order.
_SCHEDULER_KEYS: dict[str, _Key] = {
    "min_concurrent_experiments": _Key(_int, _clamp(1)),
    "max_concurrent_experiments": _Key(_int_or_auto, _clamp("min_concurrent_experiments")),
    "initial_concurrent_experiments": _Key(
        _int, _clamp("min_concurrent_experiments", "max_concurrent_experiments")
    ),
    "supply_signal_enabled": _Key(_bool),
    "supply_idle_samples": _Key(_int, _clamp(1)),
    "supply_lease_seconds": _Key(_int, _clamp(180, 3600)),
    "mature_supply_fraction": _Key(_number, _clamp(0, 1)),
    "mature_supply_redundancy": _Key(_number, _clamp(0)),
    "mature_assessment_min_completion_probability": _Key(_number, _clamp(0, 1)),
    "exploration_reserve": _Key(_int, _clamp(0, "max_concurrent_experiments")),
    "infrastructure_retries": _Key(_int, _clamp(0, 10)),
    "max_concurrent_per_peer": _Key(_int, _clamp(1)),
    "calm_samples": _Key(_int, _clamp(1, MAX_CALM_SAMPLES)),
    "experiment_memory_gb": _Key(_positive, _clamp(None, MAX_EXPERIMENT_MEMORY_GB)),
    "fair_share_half_life_seconds": _Key(_positive, _clamp(MIN_HALF_LIFE_S, MAX_HALF_LIFE_S)),
    "cancel_grace_seconds": _Key(_number, _clamp(0, MAX_CANCEL_GRACE_S)),
    "admission_timeout_seconds": _Key(_positive_or_null,
                                      _unless_null(_clamp(1, MAX_ADMISSION_TIMEOUT_S))),
    "drain_grace_min_seconds": _Key(_number, _clamp(0, MAX_DRAIN_GRACE_S)),
    "drain_grace_max_seconds": _Key(_number, _clamp("drain_grace_min_seconds",
                                                    MAX_DRAIN_GRACE_S)),
    "dependency_failure": _Key(_choice("cancel", "hold")),
    "default_profile": _Key(_profile_name),
    "project_picker": _Key(_picker("project")),
    "queue_picker": _Key(_picker("queue")),
    "job_picker": _Key(_picker("job")),
    "preempt_policy": _Key(_picker("preempt")),
    "placement": _Key(_choice(*PLACEMENTS)),
    "shortest_first_aging": _Key(_number, _clamp(0, MAX_AGING)),
    "shortest_first_by": _Key(_choice("run_time", "gpu_seconds")),
    "shortest_first_starvation_seconds": _Key(_positive_or_null, _unless_null(
        _clamp(MIN_STARVATION_S, MAX_STARVATION_S))),
    "shortest_first_starvation_factor": _Key(_positive_or_null, _unless_null(
        _clamp(MIN_STARVATION_FACTOR, MAX_STARVATION_FACTOR))),
    "multifactor_weight_age": _Key(_number, _clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_size": _Key(_number, _clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_fair_share": _Key(_number, _clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_weight_priority": _Key(_number, _clamp(0, MAX_FACTOR_WEIGHT)),
    "multifactor_max_age_seconds": _Key(_positive, _clamp(MIN_MAX_AGE_S, MAX_MAX_AGE_S)),
    "windows_utc_offset_minutes": _Key(_int, _clamp(MIN_UTC_OFFSET_MIN, MAX_UTC_OFFSET_MIN)),
    "trusted_uids": _Key(_uids),
    "operators": _Key(_uids),
    "same_tag_different_request": _Key(_choice("share", "reject")),
    "spool_quota_requests": _Key(_int, _clamp(1, MAX_SPOOL_QUOTA_REQUESTS)),
    "spool_quota_bytes": _Key(_int, _clamp(MAX_REQUEST_BYTES, MAX_SPOOL_QUOTA_BYTES)),
    "backend": _Key(backend_name),  # as registered now
}
_SCHEDULER_SECTIONS = ("mode", "pressure_thresholds", "profiles", "queues", "projects",
                       "budget", "hooks", "backends")  # read apart, and each backend's own
                                                       # (backends/run_backends.py)

# One domain of pressure_thresholds; both keys are required. ``low`` is bounded
# by the already normalized ``high`` (calm must not be above "too high").
_THRESHOLD_KEYS: dict[str, _Key] = {
    "high": _Key(_number, _clamp(0, 100)),
    "low": _Key(_number, _clamp(0, "high")),
}

_SYNTHESIS_KEYS: dict[str, _Key] = {
    "mature_quorum_fraction": _Key(_number, _clamp(0, 1)),
}

# The run budget (R-BUD-1), advisory; ``rates`` (profile -> cost per unit-hour) is read
# apart, since its keys are the task's profile names.
_BUDGET_KEYS: dict[str, _Key] = {
    "gpu_hours": _Key(_positive),
    "cost": _Key(_positive),
    "at_fraction": _Key(_positive, _clamp(0, 1)),
}

# Completion hooks (issue 17); the two command lists are read apart (``_argv_lists``).
_HOOK_KEYS: dict[str, _Key] = {
    "timeout_seconds": _Key(_positive, _clamp(1, MAX_HOOK_TIMEOUT_S)),
}
_HOOK_EVENTS = ("on_job_end", "on_generation_close")

_GPU_FIELDS = ("gpu_count", "gpu_memory_gb", "gpu_utilization_pct")
_PROFILE_KEYS: dict[str, _Key] = {
    "accelerator": _Key(_choice("cpu", "gpu")),
    "gpu_count": _Key(_int, _clamp(1, MAX_GPU_COUNT)),
    "gpu_memory_gb": _Key(_positive),
    "gpu_utilization_pct": _Key(_number, _clamp(1, 100)),
    "pressure_domains": _Key(_pressure_domains),
    "backend": _Key(backend_name),  # one the run uses: backends/run_backends.py
}


def _work_classes(path: str, value: Any) -> tuple[str, ...]:
    classes = _names(path, value, "work classes " + ", ".join(WORK_CLASSES))
    for index, work_class in enumerate(classes):
        _choice(*WORK_CLASSES)(_join(path, index), work_class)
    return classes


_queue_names = partial(_names, what="queue names")

# One queue (R-POL-1); ``limits`` and ``leave_slots`` are small mappings of their own.
# Names in ``leave_slots.for`` and ``preemptible_queues`` are checked once all queues
# are known (``_check_queues``).
_QUEUE_KEYS: dict[str, _Key] = {
    "priority": _Key(_int),
    "work_classes": _Key(_work_classes),
    "picker": _Key(_picker("job")),
    "preemptible_queues": _Key(_queue_names),
    "preempt": _Key(_choice(*PREEMPT_MODES)),
    "preemptible": _Key(_bool),
    "preempt_policy": _Key(_picker("preempt")),
    "windows": _Key(_windows),
}
_QUEUE_SECTIONS = {
    "limits": {"max_running": _Key(_int, _clamp(0))},
    "leave_slots": {"slots": _Key(_int, _clamp(0, "max_concurrent_experiments")),
                    "for": _Key(_queue_names)},
}
_QUEUE_DEFAULTS = {"priority": 0, "picker": None, "preemptible_queues": (),
                   "preempt": PreemptMode.SUSPEND, "preemptible": False, "preempt_policy": None,
                   "windows": (), "max_running": None, "slots": 0, "for": ()}

# One project (seed 002): the queues it owns, its weight for fair share, its job picker.
_PROJECT_KEYS: dict[str, _Key] = {
    "queues": _Key(_queue_names),
    "share": _Key(_positive, _clamp(None, MAX_PROJECT_SHARE)),
    "picker": _Key(_picker("job")),
}
_PROJECT_DEFAULTS = {"queues": (), "share": 1.0, "picker": None}


def _check_queues(queues: list[Queue], paths: list[str], path: str) -> None:
    """Every work class in exactly one queue; the queues named by others exist."""
    names = [q.name for q in queues]
    owner: dict[str, str] = {}
    for queue, where in zip(queues, paths):
        if not queue.work_classes:
            raise PolicyError(_join(where, "work_classes"), [], "at least one work class "
                              "(a queue named after a work class takes it by default)")
        for index, work_class in enumerate(queue.work_classes):
            if work_class in owner:
                raise PolicyError(_join(_join(where, "work_classes"), index), work_class,
                                  f"a work class no other queue takes (queue "
                                  f"{owner[work_class]} takes it)")
            owner[work_class] = queue.name
        for key, listed in (("leave_slots.for", queue.leave_slots_for),
                            ("preemptible_queues", queue.preemptible_queues)):
            for index, other in enumerate(listed):
                if other not in names or other == queue.name:
                    others = [n for n in names if n != queue.name]
                    raise PolicyError(_join(_join(where, key), index), other, (
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
                raise PolicyError(_join(path, str(key)), value, f"a known key ({hint})")

    def read(self, mapping: dict, table: dict[str, _Key], path: str, defaults: dict,
             bounds: dict[str, Any] | None = None) -> dict:
        """Check, default and normalize every key of ``table`` from ``mapping``;
        ``bounds``: already resolved keys of an enclosing section a bound may name."""
        resolved: dict[str, Any] = {}
        for name, key in table.items():
            if name not in mapping:
                resolved[name] = defaults[name]
                continue
            value = key.check(_join(path, name), mapping[name])
            if key.normalize is not None:
                used, rule = key.normalize(value, {**(bounds or {}), **resolved})
                if used != value:
                    self.notes.append(Normalization(
                        key_path=_join(path, name), given=value, used=used, rule=rule))
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
            where = _join(path, domain)
            body = raw[domain]
            if not isinstance(body, dict):
                raise PolicyError(where, body, "a mapping {high: number, low: number}")
            self.reject_unknown(body, tuple(_THRESHOLD_KEYS), where)
            for name in _THRESHOLD_KEYS:
                if name not in body:
                    raise PolicyError(_join(where, name), None,
                                      "a number (high and low are both required)")
            thresholds[domain] = PressureThreshold(
                **self.read(body, _THRESHOLD_KEYS, where, {}))
        return thresholds

    def profile(self, name: str, body: Any, path: str) -> Profile:
        if not isinstance(body, dict):
            raise PolicyError(path, body, "a mapping with accelerator: cpu or gpu")
        self.reject_unknown(body, tuple(_PROFILE_KEYS), path)
        accelerator = _PROFILE_KEYS["accelerator"].check(
            _join(path, "accelerator"), body.get("accelerator"))
        if accelerator == "cpu":
            for field in _GPU_FIELDS:
                if field in body:
                    raise PolicyError(_join(path, field), body[field],
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
                where = _join(path, index)
                if not isinstance(body, dict) or "name" not in body:
                    raise PolicyError(where, body, "a queue mapping with a name")
                _name(_join(where, "name"), body["name"], "a queue name")
                items.append((where, body["name"], {k: v for k, v in body.items() if k != "name"}))
        elif isinstance(raw, dict):
            items = [(_join(path, str(name)), _name(_join(path, str(name)), name, "a queue name"),
                      body) for name, body in raw.items()]
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
            where = _join(path, section)
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
            where = _join(path, str(name))
            _name(where, name, "a project name")
            if not isinstance(body, dict):
                raise PolicyError(where, body, "a project mapping of " + ", ".join(_PROJECT_KEYS))
            self.reject_unknown(body, tuple(_PROJECT_KEYS), where)
            values = self.read(body, _PROJECT_KEYS, where, _PROJECT_DEFAULTS)
            if not values["queues"]:
                raise PolicyError(_join(where, "queues"), body.get("queues"),
                                  "at least one queue: " + ", ".join(names))
            for index, queue in enumerate(values["queues"]):
                at = _join(_join(where, "queues"), index)
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
        where = _join(path, "rates")
        rates = {}
        for name, rate in _section(raw, "rates", where).items():
            if name not in profiles:
                raise PolicyError(_join(where, str(name)), rate, "a profile of the task: "
                                  + ", ".join(sorted(profiles)))
            rates[name] = _number(_join(where, name), rate)
            if rates[name] < 0:
                raise PolicyError(_join(where, name), rate, "a number >= 0 (cost per GPU-hour, "
                                  "or per hour for a cpu profile)")
        if values["cost"] is not None and not rates:
            raise PolicyError(_join(path, "cost"), values["cost"], "a cost limit with rates "
                              "beside it (rates: {profile: cost per GPU-hour, or per hour for "
                              "a cpu profile}); without rates nothing has a cost")
        return Budget(rates=rates, **values)

    def hooks(self, raw: dict, path: str) -> Hooks:
        self.reject_unknown(raw, (*_HOOK_EVENTS, *_HOOK_KEYS), path)
        values = self.read(raw, _HOOK_KEYS, path, Hooks().to_dict())
        return Hooks(**values, **{event: _argv_lists(_join(path, event), raw[event])
                                  for event in _HOOK_EVENTS if raw.get(event) is not None})

    def profiles(self, raw: Any, path: str) -> dict[str, Profile]:
        if not isinstance(raw, dict):
            raise PolicyError(path, raw, "a mapping of profile name -> profile")
        out = {}
        for name in sorted(raw, key=str):
            where = _join(path, str(name))
            out[_profile_name(where, name)] = self.profile(name, raw[name], where)
        return out


def _argv_lists(path: str, value: Any) -> tuple[tuple[str, ...], ...]:
    """Commands as argv lists, each run without a shell: [[prog, arg, ...], ...]."""
    expected = "a list of commands, each a non-empty list of strings (argv, no shell)"
    if not isinstance(value, list):
        raise PolicyError(path, value, expected)
    commands = []
    for i, argv in enumerate(value):
        if not isinstance(argv, list) or not argv:
            raise PolicyError(_join(path, i), argv, "a non-empty list of strings (argv, e.g. "
                              "[curl, -sS, --data-binary, '@-', https://host/hook])")
        for j, word in enumerate(argv):
            if not isinstance(word, str) or not word or "\0" in word:
                raise PolicyError(_join(_join(path, i), j), word, "a non-empty string")
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
            raise PolicyError(_join(path, str(name)), parent[name],
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
    mode = _choice("central", "legacy")(_join(SCHEDULER_PATH, "mode"),
                                        scheduler.get("mode", "legacy"))
    resolver = _Resolver(strict=mode == "central")
    sections = (r.section.key for r in BACKENDS.values() if r.section is not None)
    resolver.reject_unknown(scheduler, (*_SCHEDULER_SECTIONS, *sections, *_SCHEDULER_KEYS),
                            SCHEDULER_PATH)
    resolver.reject_unknown(synthesis, tuple(_SYNTHESIS_KEYS), SYNTHESIS_PATH)

    defaults = Policy()
    values = resolver.read(scheduler, _SCHEDULER_KEYS, SCHEDULER_PATH, _as_dict(defaults))
    thresholds = (resolver.pressure_thresholds(scheduler["pressure_thresholds"],
                                               _join(SCHEDULER_PATH, "pressure_thresholds"))
                  if "pressure_thresholds" in scheduler else dict(defaults.pressure_thresholds))
    profiles_path = _join(SCHEDULER_PATH, "profiles")
    profiles = (resolver.profiles(scheduler["profiles"], profiles_path)
                if "profiles" in scheduler else dict(defaults.profiles))
    if values["default_profile"] not in profiles:
        raise PolicyError(_join(SCHEDULER_PATH, "default_profile"), values["default_profile"],
                          "one of the defined profiles: " + ", ".join(sorted(profiles)))
    queues = None
    if "queues" in scheduler:
        if "exploration_reserve" in scheduler:
            raise PolicyError(_join(SCHEDULER_PATH, "exploration_reserve"),
                              scheduler["exploration_reserve"],
                              "no exploration_reserve beside queues: give the queue that "
                              "should leave slots free a leave_slots: {slots: N, for: [...]}")
        queues = resolver.queues(scheduler["queues"], _join(SCHEDULER_PATH, "queues"), values)
    projects = None
    if "projects" in scheduler:
        projects = resolver.projects(scheduler["projects"], _join(SCHEDULER_PATH, "projects"),
                                     queues or default_queues(values["exploration_reserve"]))
    budget_path = _join(SCHEDULER_PATH, "budget")
    budget = resolver.budget(_section(scheduler, "budget", budget_path), budget_path, profiles)
    hooks_path = _join(SCHEDULER_PATH, "hooks")
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
