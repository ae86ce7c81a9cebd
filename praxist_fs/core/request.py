"""Request bytes -> ``Request``, or ``BadRequest(field, problem)``.

Everything in the spool is hostile: bytes are decoded strictly as UTF-8 (no
BOM, no UTF-16), JSON is parsed with duplicate keys and NaN/Infinity refused,
every field is type- and size-checked, and names that may ever reach a path
(tag, peer, request_id) must match a small ASCII allowlist. The field names
are the public contract of R-SUB-1: add, never rename.
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from ..errors import BadRequest
from .bounds import (  # the request's limits live there, for the CLI; they are the model's
    EXPLAINED_BYTES, MAX_REQUEST_BYTES, NAME_EXPECTED, NAME_PATTERN, NAME_RE, PRIORITY_RANGE,
    SELECTABLE_STATES, WORK_CLASSES, oversize_problem,
)
from .budget import LIMITS
from .records import field_values
from .slurm_options import OptionProblem, job_options

MAX_ARGV_ITEMS = 4096
MAX_ENV_ITEMS = 1024
MAX_STRING = 32 * 1024
MAX_COST = 1e15  # bounded, so that a huge integer still converts to a float

REQUEST_FILE_RE = re.compile(rf"({NAME_PATTERN})\.json")
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}")

FIELDS = (
    "peer", "tag", "profile", "work_class", "eta_s", "argv", "command", "cwd",
    "env", "retry_terminal", "lease", "request_id", "generation", "max_cost",
    "after", "hold", "priority", "admission_timeout_s", "slurm",
)
MAX_ADMISSION_TIMEOUT_S = 30 * 86400  # also the task file's admission_timeout_seconds cap
DEPENDENCY_KINDS = ("ok", "any", "notok")  # Slurm's afterok, afterany, afternotok
MAX_DEPENDENCIES = 64
# what every request's parse would otherwise build again, on the way from its rename to
# its launch: the known fields as a set, the message an ``after`` that is not a list gets
_KNOWN = frozenset(FIELDS)
_AFTER_EXPECTED = ('expected a list of job ids or tags, or of {"job": ID_OR_TAG, "when": '
                   + "|".join(f'"{k}"' for k in DEPENDENCY_KINDS) + "} objects")


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A validated submission (R-SUB-1). ``profile`` None means default_profile."""

    request_id: str
    peer: str
    tag: str
    profile: str | None = None
    work_class: str = "ordinary"
    eta_s: float | None = None
    argv: tuple[str, ...] | None = None
    command: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    retry_terminal: bool = False
    lease: str | None = None
    generation: int | None = None
    max_cost: float | None = None  # a hard ceiling on the ETA-based cost estimate (R-BUD-1)
    # R-CTL-5: (job id or tag, kind) pairs this job waits for; kind is a DEPENDENCY_KINDS
    after: tuple[tuple[str, str], ...] = ()
    hold: bool = False  # queued held: it starts only once released
    priority: int = 0   # PRIORITY_RANGE; higher first inside its queue
    # R-SUB-4: seconds it may wait to start before it ends ``expired``; None: the task's
    admission_timeout_s: float | None = None
    # R-DIST-2: per-job Slurm options (core/slurm_options.py); None: the task's defaults
    slurm: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Share the strings most requests repeat (peer, profile, cwd, argv, env): a
        coordinator holds every finished job's request, and each decoded copy would
        cost its own memory."""
        for name in ("peer", "profile", "work_class", "cwd"):
            if isinstance(value := getattr(self, name), str):
                object.__setattr__(self, name, sys.intern(value))
        if self.argv is not None:
            object.__setattr__(self, "argv", tuple(map(_shared, self.argv)))
        object.__setattr__(self, "env", {_shared(k): _shared(v) for k, v in self.env.items()})

    def to_dict(self) -> dict[str, Any]:
        return field_values(self, omit_none=("slurm",)) | {
            "argv": list(self.argv) if self.argv is not None else None,
            "env": dict(self.env),
            "after": [{"job": job, "when": when} for job, when in self.after],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Request:
        values = dict(data)
        if values.get("argv") is not None:
            values["argv"] = tuple(values["argv"])
        values["after"] = tuple((d["job"], d["when"]) for d in values.get("after", ()))
        return cls(**values)


def _shared(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def request_id_from_filename(name: str) -> str | None:
    """The default request id (the file name without .json), if the name is safe."""
    match = REQUEST_FILE_RE.fullmatch(name)
    return match.group(1) if match else None


def parse_request(name: str, data: bytes) -> Request:
    """Validate one request file's bytes; raises ``BadRequest`` naming the field."""
    if len(data) > MAX_REQUEST_BYTES:
        raise BadRequest("<file>", oversize_problem(data))
    if not data.strip():
        raise BadRequest("<file>", "empty file; expected a JSON object")
    if data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        raise BadRequest("<file>", "byte order mark; expected plain UTF-8 JSON")
    try:
        text = data.decode("utf-8", "strict")
    except UnicodeDecodeError as exc:
        raise BadRequest("<file>", f"invalid UTF-8 at byte {exc.start}") from None
    raw = _loads(text)
    if not isinstance(raw, dict):
        raise BadRequest("<file>", f"top level is {_kind(raw)}; expected a JSON object")
    if raw.duplicates:
        raise BadRequest(_key(raw.duplicates[0]), "duplicate key")
    if unknown := sorted(raw.keys() - _KNOWN):
        raise BadRequest(_key(unknown[0]), "unknown field; expected one of " + ", ".join(FIELDS))
    return _build(name, {key: value for key, value in raw.items() if value is not None})


class _Object(dict):
    """A JSON object that remembers its duplicate keys, so the error can name their path."""

    duplicates: tuple[str, ...] = ()


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = _Object()
    for key, value in pairs:
        if key in result:
            result.duplicates += (key,)
        result[key] = value
    return result


def _no_constants(token: str) -> Any:
    raise BadRequest("<file>", f"{token} is not valid JSON; expected a finite number")


# json.loads with arguments of its own makes a decoder (and its scanner) at every call:
# one per request read, on the way from a request's rename to its launch. Made once; a
# byte order mark, which json.loads alone would refuse, is refused before (parse_request).
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constants)


def _loads(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except BadRequest:
        raise
    except RecursionError:
        raise BadRequest("<file>", "nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int literals over the digit limit
        raise BadRequest("<file>", f"invalid JSON: {exc}") from None


def _build(name: str, raw: dict[str, Any]) -> Request:
    """``raw`` holds the fields present and not null (null means absent, for every field)."""
    for key in ("peer", "tag"):
        if key not in raw:
            raise BadRequest(key, "missing; it is required")
    if ("argv" in raw) == ("command" in raw):
        raise BadRequest("argv", "give exactly one of argv (list of strings) or command (string)")
    request_id = raw.get("request_id")
    if request_id is None:
        request_id = request_id_from_filename(name)
        if request_id is None:
            raise BadRequest("request_id", f"file name {name!r} is not a safe id; {NAME_EXPECTED}")
    return Request(
        request_id=_name("request_id", request_id),
        peer=_name("peer", raw["peer"]),
        tag=_name("tag", raw["tag"]),
        profile=_optional(raw, "profile", _name),
        work_class=_work_class(raw.get("work_class", "ordinary")),
        eta_s=_optional(raw, "eta_s", _eta),
        argv=_optional(raw, "argv", _argv),
        command=_optional(raw, "command", _string),
        cwd=_optional(raw, "cwd", _cwd),
        env=_env(raw.get("env", {})),
        retry_terminal=_bool("retry_terminal", raw.get("retry_terminal", False)),
        lease=_optional(raw, "lease", _name),
        generation=_optional(raw, "generation", _generation),
        max_cost=_optional(raw, "max_cost", _max_cost),
        after=_after(raw.get("after", [])),
        hold=_bool("hold", raw.get("hold", False)),
        priority=_priority("priority", raw.get("priority", 0)),
        admission_timeout_s=_optional(raw, "admission_timeout_s", _admission_timeout),
        slurm=_optional(raw, "slurm", _slurm),
    )


def _key(key: str) -> str:
    """A peer's JSON key as a printable field name: never empty, always encodable."""
    printable = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return printable[:64] if printable.strip() else repr(key)


def _optional(raw: dict[str, Any], key: str, check: Any) -> Any:
    value = raw.get(key)
    return None if value is None else check(key, value)


def _kind(value: Any) -> str:
    return {dict: "an object", _Object: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value), "a value")


def _string(key: str, value: Any, limit: int = MAX_STRING) -> str:
    if type(value) is not str:
        raise BadRequest(key, f"is {_kind(value)}; expected a string")
    if not value:
        raise BadRequest(key, "is empty; expected a non-empty string")
    if len(value) > limit:
        raise BadRequest(key, f"longer than {limit} characters")
    if "\x00" in value:
        raise BadRequest(key, "contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(key, "contains a lone surrogate; expected valid Unicode") from None
    return value


def _name(key: str, value: Any) -> str:
    value = _string(key, value, limit=128)
    if not NAME_RE.fullmatch(value):
        raise BadRequest(key, f"{value!r} is not allowed; expected {NAME_EXPECTED}")
    return value


def _bool(key: str, value: Any) -> bool:
    if type(value) is not bool:
        raise BadRequest(key, f"is {_kind(value)}; expected true or false")
    return value


def _work_class(value: Any) -> str:
    if value not in WORK_CLASSES or type(value) is not str:
        raise BadRequest("work_class", f"{value!r}; expected one of {', '.join(WORK_CLASSES)}")
    return value


def _eta(key: str, value: Any) -> float:
    if type(value) not in (int, float) or not 0 < value <= 365 * 86400:
        raise BadRequest(key, f"{value!r}; expected seconds as a number in (0, 31536000]")
    return float(value)


def _admission_timeout(key: str, value: Any) -> float:
    if type(value) not in (int, float) or not 0 < value <= MAX_ADMISSION_TIMEOUT_S:
        raise BadRequest(key, f"{value!r}; expected seconds as a number in "
                         f"(0, {MAX_ADMISSION_TIMEOUT_S}] (null: the task's "
                         "admission_timeout_seconds)")
    return float(value)


def _max_cost(key: str, value: Any) -> float:
    if type(value) not in (int, float) or not 0 < value <= MAX_COST:
        raise BadRequest(key, f"{value!r}; expected a number in (0, {MAX_COST:g}], in the "
                         "units of the task's budget rates")
    return float(value)


def _priority(key: str, value: Any) -> int:
    low, high = PRIORITY_RANGE
    if type(value) is not int or not low <= value <= high:
        raise BadRequest(key, f"{value!r}; expected an integer from {low} to {high}")
    return value


def _after(value: Any) -> tuple[tuple[str, str], ...]:
    """A list of job ids or tags (meaning: completed successfully), or of
    ``{"job": X, "when": "ok"|"any"|"notok"}`` objects."""
    if type(value) is not list:
        raise BadRequest("after", f"is {_kind(value)}; {_AFTER_EXPECTED}")
    if len(value) > MAX_DEPENDENCIES:
        raise BadRequest("after", f"has more than {MAX_DEPENDENCIES} dependencies")
    found = []
    for i, item in enumerate(value):
        key = f"after[{i}]"
        if type(item) is str:
            found.append((_name(key, item), "ok"))
            continue
        if not isinstance(item, dict) or set(item) - {"job", "when"} or "job" not in item:
            raise BadRequest(key, f"{item!r}; {_AFTER_EXPECTED}")
        when = item.get("when", "ok")
        if when not in DEPENDENCY_KINDS or type(when) is not str:
            raise BadRequest(f"{key}.when", f"{when!r}; expected one of "
                             + ", ".join(DEPENDENCY_KINDS))
        found.append((_name(f"{key}.job", item["job"]), when))
    return tuple(dict.fromkeys(found))


def _slurm(key: str, value: Any) -> dict[str, Any]:
    try:
        return job_options(value, key)
    except OptionProblem as exc:
        raise BadRequest(exc.path, exc.problem) from None


def _generation(key: str, value: Any) -> int:
    if type(value) is not int or value < 0:
        raise BadRequest(key, f"{value!r}; expected a non-negative integer")
    return value


def _argv(key: str, value: Any) -> tuple[str, ...]:
    if type(value) is not list or not value:
        raise BadRequest(key, f"is {_kind(value)}; expected a non-empty list of strings")
    if len(value) > MAX_ARGV_ITEMS:
        raise BadRequest(key, f"has more than {MAX_ARGV_ITEMS} items")
    return tuple(_string(f"{key}[{i}]", item) for i, item in enumerate(value))


def _cwd(key: str, value: Any) -> str:
    value = _string(key, value, limit=4096)
    if not value.startswith("/"):
        raise BadRequest(key, f"{value!r}; expected an absolute path")
    return value


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise BadRequest("env", f"is {_kind(value)}; expected an object of strings")
    if getattr(value, "duplicates", ()):
        raise BadRequest(f"env.{_key(value.duplicates[0])}", "duplicate key")
    if len(value) > MAX_ENV_ITEMS:
        raise BadRequest("env", f"has more than {MAX_ENV_ITEMS} variables")
    env = {}
    for name, item in value.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise BadRequest(f"env.{_key(name)}", "is not a valid variable name")
        if type(item) is not str:
            raise BadRequest(f"env.{name}", f"is {_kind(item)}; expected a string")
        if "\x00" in item:
            raise BadRequest(f"env.{name}", "contains a NUL character")
        env[name] = _string(f"env.{name}", item) if item else item
    return env


CONTROL_ACTIONS = ("generation_open", "generation_assess", "generation_close", "run_stop",
                   "cancel", "hold", "release", "update", "budget_raise")
JOB_ACTIONS = ("cancel", "hold", "release", "update")  # R-CTL-1, R-CTL-5: on selected jobs
CONTROL_FIELDS = ("request_id", "action", "generation", "cohort", "deadline",
                  "jobs", "peer", "states", "reason", "grace", "priority", "by", "owner",
                  *LIMITS)
MAX_SELECTED = 4096
MAX_GRACE_SECONDS = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRequest:
    """An operator's request in control/: generation open, assess, close; run stop; and
    the job actions (cancel, hold, release, update), which select jobs by id or tag
    (``jobs``), narrowed or, without ``jobs``, chosen by ``peer`` and ``states``."""

    request_id: str
    action: str
    generation: int | None = None  # every generation action names one
    cohort: tuple[str, ...] = ()
    deadline: float | None = None  # unix seconds, from an ISO-8601 time with a zone
    jobs: tuple[str, ...] = ()      # job ids or tags
    peer: str | None = None         # only the jobs of this peer
    states: tuple[str, ...] = ()    # only jobs in these SELECTABLE_STATES
    reason: str | None = None       # why, for the job's record
    grace: float | None = None      # cancel: seconds between TERM and KILL
    priority: int | None = None     # update: the new priority
    by: str | None = None           # a label for who asks: "held by", "cancelled by"; the
                                    # uid that asked is the file's owner, recorded beside it
    owner: int | None = None        # whose tags ``jobs`` and ``peer`` mean (an operator's
                                    # choice; default: the file owner's, R-SEC-5)
    gpu_hours: float | None = None  # budget_raise: the new ceilings (seed 003), raise-only
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "action": self.action,
                "generation": self.generation, "cohort": list(self.cohort),
                "deadline": self.deadline, "jobs": list(self.jobs), "peer": self.peer,
                "states": list(self.states), "reason": self.reason, "grace": self.grace,
                "priority": self.priority, "by": self.by, "owner": self.owner,
                "gpu_hours": self.gpu_hours, "cost": self.cost}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ControlRequest:
        return cls(**{**data, "cohort": tuple(data["cohort"]),
                      "jobs": tuple(data.get("jobs", ())),
                      "states": tuple(data.get("states", ()))})


def parse_control(name: str, data: bytes) -> ControlRequest:
    """Validate a control file like a request: strict JSON, known fields, safe names."""
    raw = _object(data)
    unknown = sorted(set(raw) - set(CONTROL_FIELDS))
    if unknown:
        raise BadRequest(_key(unknown[0]),
                         "unknown field; expected one of " + ", ".join(CONTROL_FIELDS))
    raw = {key: value for key, value in raw.items() if value is not None}
    action = raw.get("action")
    if action not in CONTROL_ACTIONS:
        raise BadRequest("action", f"{action!r}; expected one of {', '.join(CONTROL_ACTIONS)}")
    generation = raw.get("generation")
    if (action.startswith("generation_") or generation is not None) and (
            type(generation) is not int or generation < 1):
        raise BadRequest("generation", f"{generation!r}; expected an integer >= 1")
    cohort = raw.get("cohort", [])
    if type(cohort) is not list:
        raise BadRequest("cohort", f"is {_kind(cohort)}; expected a list of peer names")
    request_id = raw.get("request_id") or request_id_from_filename(name)
    if request_id is None:
        raise BadRequest("request_id", f"file name {name!r} is not a safe id; {NAME_EXPECTED}")
    return ControlRequest(
        request_id=_name("request_id", request_id), action=action, generation=generation,
        cohort=tuple(sorted(set(_name(f"cohort[{i}]", p) for i, p in enumerate(cohort)))),
        deadline=_deadline(raw["deadline"]) if "deadline" in raw else None,
        **(_job_selection(action, raw) if action in JOB_ACTIONS else {}),
        **_ceilings(action, raw))


def _ceilings(action: str, raw: dict[str, Any]) -> dict[str, float]:
    """budget_raise's new limits: at least one of gpu_hours and cost, each > 0."""
    given = {key: raw[key] for key in LIMITS if key in raw}
    if action != "budget_raise":
        if given:
            raise BadRequest(next(iter(given)), f"only budget_raise takes a ceiling, not {action}")
        return {}
    if not given:
        raise BadRequest("cost", "missing; budget_raise needs a new ceiling: cost and/or "
                         "gpu_hours")
    for key, value in given.items():
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            raise BadRequest(key, f"{value!r}; expected a number > 0 (the new ceiling)")
    return {key: float(value) for key, value in given.items()}


def _job_selection(action: str, raw: dict[str, Any]) -> dict[str, Any]:
    jobs = raw.get("jobs", [])
    if type(jobs) is not list or len(jobs) > MAX_SELECTED:
        raise BadRequest("jobs", f"is {_kind(jobs)}; expected a list of at most "
                         f"{MAX_SELECTED} job ids or tags")
    states = raw.get("states", [])
    if type(states) is not list or any(s not in SELECTABLE_STATES for s in states):
        raise BadRequest("states", f"{states!r}; expected a list of "
                         + ", ".join(SELECTABLE_STATES))
    peer = _optional(raw, "peer", _name)
    if not jobs and peer is None and not states:
        raise BadRequest("jobs", f"{action} selects nothing; name jobs (ids or tags), "
                         "or select by peer and/or states")
    priority = raw.get("priority")
    if action == "update":
        if priority is None:
            raise BadRequest("priority", "missing; update needs the new priority")
        _priority("priority", priority)
    elif priority is not None:
        raise BadRequest("priority", f"only update takes a priority, not {action}")
    owner = raw.get("owner")
    if owner is not None and (type(owner) is not int or owner < 0):
        raise BadRequest("owner", f"{owner!r}; expected a uid (an integer >= 0) whose tags "
                         "'jobs' names")
    grace = raw.get("grace")
    if grace is not None and (type(grace) not in (int, float)
                              or not 0 <= grace <= MAX_GRACE_SECONDS):
        raise BadRequest("grace", f"{grace!r}; expected seconds from 0 to {MAX_GRACE_SECONDS:g}")
    return {"jobs": tuple(dict.fromkeys(_name(f"jobs[{i}]", j) for i, j in enumerate(jobs))),
            "peer": peer, "states": tuple(dict.fromkeys(states)),
            "reason": _optional(raw, "reason", partial(_string, limit=1024)),
            "grace": None if grace is None else float(grace), "priority": priority,
            "by": _optional(raw, "by", _name), "owner": owner}


def _deadline(value: Any) -> float:
    if type(value) is not str:
        raise BadRequest("deadline", f"is {_kind(value)}; expected an ISO-8601 time with a zone")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest("deadline", f"{value!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        raise BadRequest("deadline", f"{value!r} has no time zone; add one, e.g. +00:00")
    return moment.timestamp()


def parse_result(name: str, data: bytes) -> tuple[str, str, bool]:
    """A published result: (result_id from the file name, peer, mature). Other fields are
    the evaluator's own and are not read here."""
    result_id = request_id_from_filename(name)
    if result_id is None:
        raise BadRequest("<file>", f"result file name {name!r} is not a safe id; {NAME_EXPECTED}")
    raw = _object(data)
    if type(raw.get("mature")) is not bool:
        raise BadRequest("mature", f"{raw.get('mature')!r}; expected true or false")
    return result_id, _name("peer", raw.get("peer")), raw["mature"]


def parse_decline(name: str, data: bytes) -> tuple[str, str]:
    """A decline file ``<peer>.decline.json``: (peer, lease_id); the peer must match the name."""
    raw = _object(data)
    peer, lease_id = _name("peer", raw.get("peer")), _name("lease_id", raw.get("lease_id"))
    if name != f"{peer}.decline.json":
        raise BadRequest("peer", f"{peer!r} does not match the file name {name!r}")
    return peer, lease_id


def _object(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_REQUEST_BYTES:
        raise BadRequest("<file>", f"larger than {MAX_REQUEST_BYTES} bytes")
    try:
        raw = _loads(data.decode("utf-8", "strict"))
    except UnicodeDecodeError as exc:
        raise BadRequest("<file>", f"invalid UTF-8 at byte {exc.start}") from None
    if not isinstance(raw, dict):
        raise BadRequest("<file>", f"top level is {_kind(raw)}; expected a JSON object")
    if raw.duplicates:
        raise BadRequest(_key(raw.duplicates[0]), "duplicate key")
    return raw
