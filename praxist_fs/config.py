"""Load the task file into a frozen ``Policy`` (SPEC R-CFG-1..5).

The scheduler must never run on a policy the user did not write, so in
``mode: central`` every unknown key, misspelled boolean or malformed number
inside the sections we own (``compute_budget.resource_scheduler`` and
``synthesis_trigger``) is a ``PolicyError`` naming the key path, the value and
what was expected. Valid numbers outside a bounded range are moved into range
instead, and each move is recorded in ``Policy.normalizations`` (which ends up
in ``policy.json``). ``mode: legacy`` (also: no mode at all, R-DUR-3) ignores
unknown keys but checks the values it reads the same way.

The rules live in tables (``_SCHEDULER_KEYS``, ``_THRESHOLD_KEYS``, ``_PROFILE_KEYS``) of
key -> (checker, normalizer); defaults come from ``Policy()`` itself so there
is one source of truth. See docs/CONFIG.md.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

import yaml

from praxist_fs.core.policy import (
    PRESSURE_DOMAINS,
    Normalization,
    Policy,
    PressureThreshold,
    Profile,
)
from praxist_fs.errors import PolicyError

__all__ = ["DEFAULT_TASK_YAML", "load_policy", "parse_task_text", "policy_from_mapping"]

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
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
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


def _profile_name(path: str, value: Any) -> str:
    if not isinstance(value, str) or not _PROFILE_NAME.fullmatch(value):
        raise PolicyError(path, value, "a profile name matching [A-Za-z0-9][A-Za-z0-9._-]{0,63}")
    return value


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
    "calm_samples": _Key(_int, _clamp(1, MAX_CALM_SAMPLES)),
    "experiment_memory_gb": _Key(_positive, _clamp(None, MAX_EXPERIMENT_MEMORY_GB)),
    "default_profile": _Key(_profile_name),
}
_SCHEDULER_SECTIONS = ("mode", "pressure_thresholds", "profiles")  # read outside the table

# One domain of pressure_thresholds; both keys are required. ``low`` is bounded
# by the already normalized ``high`` (calm must not be above "too high").
_THRESHOLD_KEYS: dict[str, _Key] = {
    "high": _Key(_number, _clamp(0, 100)),
    "low": _Key(_number, _clamp(0, "high")),
}

_SYNTHESIS_KEYS: dict[str, _Key] = {
    "mature_quorum_fraction": _Key(_number, _clamp(0, 1)),
}

_GPU_FIELDS = ("gpu_count", "gpu_memory_gb", "gpu_utilization_pct")
_PROFILE_KEYS: dict[str, _Key] = {
    "accelerator": _Key(_choice("cpu", "gpu")),
    "gpu_count": _Key(_int, _clamp(1, MAX_GPU_COUNT)),
    "gpu_memory_gb": _Key(_positive),
    "gpu_utilization_pct": _Key(_number, _clamp(1, 100)),
    "pressure_domains": _Key(_pressure_domains),
}


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

    def read(self, mapping: dict, table: dict[str, _Key], path: str, defaults: dict) -> dict:
        """Check, default and normalize every key of ``table`` from ``mapping``."""
        resolved: dict[str, Any] = {}
        for name, key in table.items():
            if name not in mapping:
                resolved[name] = defaults[name]
                continue
            value = key.check(_join(path, name), mapping[name])
            if key.normalize is not None:
                used, rule = key.normalize(value, resolved)
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
                    "gpu_memory_gb": None, "gpu_utilization_pct": None, "pressure_domains": ()}
        return Profile(name=name, **self.read(body, _PROFILE_KEYS, path, defaults))

    def profiles(self, raw: Any, path: str) -> dict[str, Profile]:
        if not isinstance(raw, dict):
            raise PolicyError(path, raw, "a mapping of profile name -> profile")
        out = {}
        for name in sorted(raw, key=str):
            where = _join(path, str(name))
            out[_profile_name(where, name)] = self.profile(name, raw[name], where)
        return out


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
    scheduler = _section(_section(task, "compute_budget", "compute_budget"),
                         "resource_scheduler", SCHEDULER_PATH)
    synthesis = _section(task, "synthesis_trigger", SYNTHESIS_PATH)
    # R-DUR-3: a task without mode: central keeps legacy launching.
    mode = _choice("central", "legacy")(_join(SCHEDULER_PATH, "mode"),
                                        scheduler.get("mode", "legacy"))
    resolver = _Resolver(strict=mode == "central")
    resolver.reject_unknown(scheduler, (*_SCHEDULER_SECTIONS, *_SCHEDULER_KEYS), SCHEDULER_PATH)
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
    synth = resolver.read(synthesis, _SYNTHESIS_KEYS, SYNTHESIS_PATH, _as_dict(defaults))
    return Policy(mode=mode, profiles=profiles, pressure_thresholds=thresholds,
                  normalizations=tuple(resolver.notes), **values, **synth)


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
