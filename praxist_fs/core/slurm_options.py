"""Per-job Slurm options (R-DIST-2): a request's ``slurm`` object, and a profile's Slurm
defaults in the task file (``slurm.resources.<profile>``), checked alike and as strictly
as the rest of what a peer writes: an unknown key or a bad value names its path.

``time_limit_minutes`` (``-t``), ``partition`` (``-p``), ``account`` (``-A``), ``qos``
(``--qos``), ``constraint`` (``--constraint``), ``mem_mb`` (``--mem``),
``warning_seconds`` (how long before the time limit the job's command gets the task
file's warning signal; 0: none), ``options``: further sbatch options, each
``--name`` or ``--name=value``, whose names the task file must allow
(``slurm.allowed_options``), and for a job of several processes (R-DIST-3) ``nodes``
(``--nodes``), ``tasks_per_node`` (``--ntasks-per-node``: the command runs once per
task) and ``gpus_per_node`` (``--gpus-per-node``). Pure: the Slurm backend turns them into sbatch's
arguments (backends/slurm/client.py), the core only checks a request against the task.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .policy import Policy

JOB_KEYS = ("time_limit_minutes", "partition", "account", "qos", "constraint", "mem_mb",
            "warning_seconds", "options", "nodes", "tasks_per_node", "gpus_per_node")
MAX_NODES = 4096
MAX_TASKS_PER_NODE = 1024
MAX_TIME_LIMIT_MINUTES = 525600  # a year
MAX_MEM_MB = 2**31
MAX_WARNING_SECONDS = 86400
MAX_OPTIONS = 32
MAX_OPTION_CHARS = 1024
SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
NAME_EXPECTED = "a name matching [A-Za-z0-9][A-Za-z0-9._-]{0,127}"
# Slurm's feature expressions: features, & | , * [ ] ( ) and counts; no spaces, no quotes
CONSTRAINT = re.compile(r"[A-Za-z0-9_.:&|,*\[\]()!-]{1,1024}")
OPTION_NAME = re.compile(r"--[a-z][a-z0-9-]*")


class OptionProblem(ValueError):
    """A per-job option that is not what is expected: ``path`` names it, ``value`` is
    what was given, ``expected`` what would do."""

    def __init__(self, path: str, value: Any, expected: str) -> None:
        self.path, self.value, self.expected = path, value, expected
        self.problem = f"{value!r}; expected {expected}"
        super().__init__(f"{path}: {self.problem}")


def job_options(value: Any, path: str, keys: tuple[str, ...] = JOB_KEYS) -> dict[str, Any]:
    """``value`` checked: an object of ``keys``, each as expected; the same object, its
    ``options`` a list. Raises OptionProblem naming the first key that is not."""
    if not isinstance(value, dict):
        raise OptionProblem(path, value, "an object of Slurm options (" + ", ".join(keys)
                            + ")")
    checked: dict[str, Any] = {}
    for key, item in value.items():
        where = f"{path}.{key}"
        if key not in keys:
            raise OptionProblem(where, item, "one of the keys " + ", ".join(keys))
        if item is None:
            continue  # null means absent, as for every request field
        checked[key] = _CHECKS[key](where, item)
    return checked


def option_name(option: str) -> str:
    """``--gres=gpu:2`` -> ``--gres``."""
    return option.split("=", 1)[0]


def refusal(options: dict[str, Any], policy: Policy,
            profile: str | None = None) -> tuple[str, str] | None:
    """Why a request's Slurm options cannot be taken by this task, as (field, problem):
    no backend of the run takes them (``Capabilities.takes_slurm_options``), or not the
    one its ``profile`` routes to in a run of several, or an sbatch option is not one
    the task file allows."""
    backend, allowed = policy.backend, (policy.slurm or {}).get("allowed_options", [])
    if not any(can.takes_slurm_options for can in (policy.capabilities,
                                                   *policy.backends.values())):
        return "slurm", (f"the run's backend is {backend}, which submits no Slurm job; "
                         "slurm options need backend: slurm")
    known = policy.profiles.get(profile or "")
    if not policy.capabilities_of(known).takes_slurm_options:
        return "slurm", (f"profile {profile} runs on {policy.backend_of(known)}, which "
                         "submits no Slurm job; slurm options need a profile with "
                         "backend: slurm")
    for index, option in enumerate(options.get("options", ())):
        if option_name(option) not in allowed:
            return f"slurm.options[{index}]", (
                f"{option_name(option)} is not allowed by the task file (slurm."
                "allowed_options: " + (", ".join(allowed) or "none") + ")")
    return None


def _integer(path: str, value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise OptionProblem(path, value, f"an integer from {low} to {high}")
    return value


def _name(path: str, value: Any) -> str:
    if type(value) is not str or not SLURM_NAME.fullmatch(value):
        raise OptionProblem(path, value, NAME_EXPECTED)
    return value


def _constraint(path: str, value: Any) -> str:
    if type(value) is not str or not CONSTRAINT.fullmatch(value):
        raise OptionProblem(path, value, "a Slurm feature expression (letters, digits and "
                            "_ . : & | , * [ ] ( ) ! -, no spaces), e.g. a100&ib")
    return value


def _options(path: str, value: Any) -> list[str]:
    expected = "a list of sbatch options, each --name or --name=value"
    if type(value) is not list or len(value) > MAX_OPTIONS:
        raise OptionProblem(path, value, f"{expected} (at most {MAX_OPTIONS})")
    for index, option in enumerate(value):
        if type(option) is not str or not OPTION_NAME.fullmatch(option_name(option)) or \
                len(option) > MAX_OPTION_CHARS or not option.isprintable():
            raise OptionProblem(f"{path}[{index}]", option, "--name or --name=value, "
                                f"printable, at most {MAX_OPTION_CHARS} characters")
    return list(value)


_CHECKS = {
    "time_limit_minutes": lambda p, v: _integer(p, v, 1, MAX_TIME_LIMIT_MINUTES),
    "partition": _name,
    "account": _name,
    "qos": _name,
    "constraint": _constraint,
    "mem_mb": lambda p, v: _integer(p, v, 1, MAX_MEM_MB),
    "warning_seconds": lambda p, v: _integer(p, v, 0, MAX_WARNING_SECONDS),
    "options": _options,
    "nodes": lambda p, v: _integer(p, v, 1, MAX_NODES),
    "tasks_per_node": lambda p, v: _integer(p, v, 1, MAX_TASKS_PER_NODE),
    "gpus_per_node": lambda p, v: _integer(p, v, 0, 64),
}
