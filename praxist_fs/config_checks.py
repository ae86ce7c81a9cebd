"""The task file's value checkers and normalizers: the cells of config.py's key tables.

A checker takes (key_path, raw value) and returns the value, or raises a ``PolicyError``
naming the key path, the value and what was expected; a normalizer moves a valid number
into its range and says by which rule (recorded in ``Policy.normalizations``). Apart
from the tables that use them (config.py), so that a section's table reads as a list of
keys. Picker names (R-POL-1) are checked against ``praxist_fs.core.pickers.PICKERS``;
a name that is not a builtin makes ``discover_pickers`` look, once, for pickers that
installed packages publish under the ``praxist_fs.pickers`` entry points: the one piece
of the scheduling framework that touches the environment, so it is here and not in
the core.
"""

from __future__ import annotations

import math
import pwd
import re
from dataclasses import dataclass
from typing import Any, Callable

from praxist_fs.config_yaml import join_path
from praxist_fs.core.pickers import PICKERS, register_picker
from praxist_fs.core.policy import PRESSURE_DOMAINS
from praxist_fs.core.queues import DAY_MINUTES, DAYS, Window
from praxist_fs.errors import PolicyError

_CLOCK_RANGE = re.compile(r"([01][0-9]|2[0-4]):([0-5][0-9])-([01][0-9]|2[0-4]):([0-5][0-9])")
PICKER_ENTRY_POINTS = "praxist_fs.pickers"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

# --- value checkers: (key_path, raw) -> value, or PolicyError -----------------

Checker = Callable[[str, Any], Any]


def check_int(path: str, value: Any) -> int:
    # bool is an int subclass; and 2.0 is rejected too, so a count is never a float.
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, value, "an integer")
    return value


def check_int_or_auto(path: str, value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(path, value, 'an integer or "auto"')
    return value


def check_number(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PolicyError(path, value, "a finite number")
    return float(value)


def check_positive(path: str, value: Any) -> float:
    number = check_number(path, value)
    if number <= 0:
        raise PolicyError(path, value, "a number > 0")
    return number


def check_positive_or_null(path: str, value: Any) -> float | None:
    if value is None:
        return None
    number = check_number(path, value)
    if number <= 0:
        raise PolicyError(path, value, "a number > 0, or null (none)")
    return number


def check_bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(path, value, "true or false")
    return value


def check_choice(*options: str) -> Checker:
    def check(path: str, value: Any) -> str:
        if not isinstance(value, str) or value not in options:
            raise PolicyError(path, value, "one of " + ", ".join(options))
        return value

    return check


def check_name(path: str, value: Any, what: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise PolicyError(path, value, f"{what} matching [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}")
    return value


def check_profile_name(path: str, value: Any) -> str:
    return check_name(path, value, "a profile name")


def check_names(path: str, value: Any, what: str) -> tuple[str, ...]:
    """A list of distinct names (queue names, work classes), in the order given."""
    if not isinstance(value, list):
        raise PolicyError(path, value, f"a list of {what}")
    seen: list[str] = []
    for index, name in enumerate(value):
        if not isinstance(name, str) or name in seen:
            raise PolicyError(join_path(path, index), name, f"each of the {what} once, as a name")
        seen.append(name)
    return tuple(seen)


def check_uids(path: str, value: Any) -> tuple[int, ...]:
    """A list of distinct users (R-SEC-3), each a uid or a user name of this host's user
    database, resolved here: the policy (and the journal) keep uids."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of uids or user names")
    uids: list[int] = []
    for index, user in enumerate(value):
        where = join_path(path, index)
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


def check_picker(kind: str) -> Checker:
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


def check_windows(path: str, value: Any) -> tuple[Window, ...]:
    """Time windows (seed 002): a list of {days: [mon..sun], hours: "HH:MM-HH:MM"}, each
    key optional (every day; all day); hours past midnight run into the next day."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of windows {days: [mon, ...], hours: "
                          '"HH:MM-HH:MM"}')
    windows = []
    for index, body in enumerate(value):
        where = join_path(path, index)
        if not isinstance(body, dict) or not body or not set(body) <= {"days", "hours"}:
            raise PolicyError(where, body, 'a window {days: [mon, ...], hours: "HH:MM-HH:MM"} '
                              "with one or both keys")
        days = tuple(range(7))
        if "days" in body:
            names = check_names(join_path(where, "days"), body["days"], "days " + ", ".join(DAYS))
            if not names:
                raise PolicyError(join_path(where, "days"), [], "at least one day")
            for position, day in enumerate(names):
                check_choice(*DAYS)(join_path(join_path(where, "days"), position), day)
            days = tuple(sorted(DAYS.index(day) for day in names))
        start, end = 0, DAY_MINUTES
        if "hours" in body:
            hours = body["hours"]
            match = _CLOCK_RANGE.fullmatch(hours) if isinstance(hours, str) else None
            if match:
                h1, m1, h2, m2 = map(int, match.groups())
                start, end = h1 * 60 + m1, h2 * 60 + m2
            if not match or start >= DAY_MINUTES or end > DAY_MINUTES or start == end:
                raise PolicyError(join_path(where, "hours"), hours, 'a quoted "HH:MM-HH:MM" of two '
                                  "different times from 00:00 to 24:00 (an end before the start "
                                  'runs past midnight: "22:00-06:00")')
        windows.append(Window(days=days, start=start, end=end))
    return tuple(windows)


def check_pressure_domains(path: str, value: Any) -> tuple[str, ...]:
    """A list of distinct domains; kept in canonical (cpu, memory, io) order."""
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of " + ", ".join(PRESSURE_DOMAINS))
    seen: list[str] = []
    for index, domain in enumerate(value):
        check_choice(*PRESSURE_DOMAINS)(join_path(path, index), domain)
        if domain in seen:
            raise PolicyError(join_path(path, index), domain, "each pressure domain once")
        seen.append(domain)
    return tuple(d for d in PRESSURE_DOMAINS if d in seen)


# --- normalizers: (value, resolved so far) -> (used, rule) ---------------------

Normalizer = Callable[[Any, dict[str, Any]], tuple[Any, str]]
Bound = float | int | str | None  # a number, the name of an earlier key, or no bound


def clamp(low: Bound = None, high: Bound = None) -> Normalizer:
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


def unless_null(normalize: Normalizer) -> Normalizer:
    """``normalize`` for a key whose null means "none" and is kept as it is."""
    return lambda value, resolved: (None, "") if value is None else normalize(value, resolved)


@dataclass(frozen=True)
class Key:
    check: Checker
    normalize: Normalizer | None = None
