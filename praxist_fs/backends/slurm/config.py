"""The task file's ``resource_scheduler.slurm`` mapping (R-DIST-1), checked as strictly
as the rest of the task file. Apart from the Slurm backend, so that reading a task file
(every ``serve``, ``simulate``, ``launch``) does not import the backend's machinery.
OPERATIONS.md *Running on Slurm* has each key's default and range."""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from praxist_fs.core.policy import NODE_COOLDOWN_S
from praxist_fs.core.slurm_options import JOB_KEYS, OPTION_NAME, OptionProblem, job_options
from praxist_fs.errors import PolicyError

SLURM_PATH = "compute_budget.resource_scheduler.slurm"
# sbatch options the backend sets itself: extra_args may not override them.
OWNED_OPTIONS = ("-J", "--job-name", "--comment", "-D", "--chdir", "-o", "--output",
                 "-e", "--error", "--open-mode", "--parsable", "--requeue", "--no-requeue",
                 "--gpus", "-G", "--gres", "--exclude", "-x", "-c", "--cpus-per-task",
                 "--mem", "-t", "--time", "-p", "--partition", "-A", "--account", "--qos",
                 "-q", "--array", "-a", "--wrap")
# what a job may set by its own key (core/slurm_options.py), or what would contradict one
KEYED_OPTIONS = ("--constraint", "-C", "--signal", "--mem-per-cpu", "--mem-per-gpu",
                 "--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node", "--gpus-per-node")
# the signals a job's command may be warned with before its time limit (Slurm's --signal)
WARNING_SIGNALS = ("USR1", "USR2", "URG", "HUP", "INT", "TERM")


@dataclass(frozen=True)
class ProfileResources:
    """What Slurm is asked for an experiment of one profile, besides its GPUs: CPUs,
    memory, and the profile's defaults of the other per-job options (``job``:
    core/slurm_options.py's keys), which a request's own ``slurm`` overrides."""

    cpus: int = 1
    mem_mb: int = 1024
    job: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SlurmConfig:
    """``resource_scheduler.slurm``: OPERATIONS.md *Running on Slurm* has each key's default
    and range."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    extra_args: tuple[str, ...] = ()
    allowed_options: tuple[str, ...] = ()  # sbatch options a request may pass (R-DIST-2)
    warning_signal: str = "USR2"  # to the command warning_seconds before its time limit
    warning_seconds: int = 90  # 0: no warning
    time_limit_minutes: int | None = None
    time_limit_factor: float | None = None
    resources: dict[str, ProfileResources] = field(default_factory=dict)
    default_resources: ProfileResources = ProfileResources()
    gpu_shards: int = 0
    poll_pending_s: float = 1.0
    poll_running_s: float = 10.0
    command_timeout_s: float = 30.0
    python: str = sys.executable
    # R-BUD-2: an offline node's wait before its probe (read by the core: Policy)
    node_cooldown_s: float = NODE_COOLDOWN_S
    # R-BUD-2: longest wait from Slurm running the job on a node to the shim's READY
    launch_timeout_s: float = 300.0
    # where the shims ring the coordinator's doorbell (slurm/doorbell.py): its host name's
    # address, unless this names another (a name or address the nodes can reach)
    notify_host: str | None = None
    # issue 28: list the partition's nodes (sinfo) at the start, and give each node that
    # ran none of the run's work one probe before its first job (jobs wait, held in
    # Slurm, until a node has passed one): one tiny job per new node
    probe_new_nodes: bool = False

    def for_profile(self, name: str | None) -> ProfileResources:
        return self.resources.get(name or "", self.default_resources)


def _flag(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PolicyError(path, value, "true or false")
    return value


_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _text_name(path: str, value: Any, what: str) -> str:
    if not isinstance(value, str) or not _SLURM_NAME.fullmatch(value):
        raise PolicyError(path, value, f"{what} matching [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
    return value


def _integer(path: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PolicyError(path, value, f"an integer in {low}..{high}")
    return value


def _number(path: str, value: Any, low: float, high: float) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not low <= value <= high):
        raise PolicyError(path, value, f"a number in {low:g}..{high:g}")
    return float(value)


def _extra_args(path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of sbatch options (strings)")
    for index, arg in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(arg, str) or not arg or "\0" in arg:
            raise PolicyError(where, arg, "a non-empty string")
        option = arg.split("=", 1)[0]
        if option in OWNED_OPTIONS:
            raise PolicyError(where, arg, "an sbatch option praxist_fs does not set itself "
                              "(it sets " + ", ".join(OWNED_OPTIONS) + ")")
    return tuple(value)


def _resources(path: str, value: Any, keys: tuple[str, ...] = ("cpus", "mem_mb")
               ) -> ProfileResources:
    if not isinstance(value, dict):
        raise PolicyError(path, value, "a mapping with " + ", ".join(keys))
    for key in value:
        if key not in keys:
            raise PolicyError(f"{path}.{key}", value[key], "only the keys " + ", ".join(keys))
    defaults = ProfileResources()
    try:
        job = job_options({k: v for k, v in value.items() if k in JOB_KEYS and k != "mem_mb"},
                          path)
    except OptionProblem as exc:
        raise PolicyError(exc.path, exc.value, exc.expected) from None
    return ProfileResources(
        cpus=_integer(f"{path}.cpus", value.get("cpus", defaults.cpus), 1, 4096),
        mem_mb=_integer(f"{path}.mem_mb", value.get("mem_mb", defaults.mem_mb), 1, 2**31),
        job=job)


def _allowed_options(path: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise PolicyError(path, value, "a list of sbatch option names (--name)")
    for index, name in enumerate(value):
        where = f"{path}[{index}]"
        if not isinstance(name, str) or not OPTION_NAME.fullmatch(name):
            raise PolicyError(where, name, "an sbatch option's long name, --name")
        if name in OWNED_OPTIONS or name in KEYED_OPTIONS:
            raise PolicyError(where, name, "an option praxist_fs does not set itself nor "
                              "takes by its own key (it sets " + ", ".join(
                                  OWNED_OPTIONS + KEYED_OPTIONS) + ")")
    return tuple(value)


_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.:-]{0,252}")


def _host(path: str, value: Any) -> str:
    if not isinstance(value, str) or not _HOST.fullmatch(value):
        raise PolicyError(path, value, "a host name or an IP address the nodes can reach")
    return value


def _choice(path: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise PolicyError(path, value, "one of " + ", ".join(choices))
    return value


def _python(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise PolicyError(path, value, "an absolute path to a Python interpreter on the nodes")
    return value


# what a profile's entry in ``resources`` may set: its CPUs, memory, per-job defaults
PROFILE_KEYS = ("cpus", "mem_mb", *(key for key in JOB_KEYS if key != "mem_mb"))

# key -> checker(path, value); the defaults are SlurmConfig's own.
_KEYS: dict[str, Callable[[str, Any], Any]] = {
    "partition": lambda p, v: _text_name(p, v, "a partition name"),
    "account": lambda p, v: _text_name(p, v, "an account name"),
    "qos": lambda p, v: _text_name(p, v, "a QOS name"),
    "extra_args": _extra_args,
    "allowed_options": _allowed_options,
    "warning_signal": lambda p, v: _choice(p, v, WARNING_SIGNALS),
    "warning_seconds": lambda p, v: _integer(p, v, 0, 86400),
    "time_limit_minutes": lambda p, v: _integer(p, v, 1, 525600),
    "time_limit_factor": lambda p, v: _number(p, v, 1.0, 100.0),
    "default_resources": _resources,
    "gpu_shards": lambda p, v: _integer(p, v, 0, 1024),
    "poll_pending_s": lambda p, v: _number(p, v, 0.2, 60.0),
    "poll_running_s": lambda p, v: _number(p, v, 1.0, 600.0),
    "command_timeout_s": lambda p, v: _number(p, v, 1.0, 600.0),
    "python": _python,
    "node_cooldown_s": lambda p, v: _number(p, v, 0.0, 86400.0),
    "launch_timeout_s": lambda p, v: _number(p, v, 1.0, 86400.0),
    "notify_host": _host,
    "probe_new_nodes": lambda p, v: _flag(p, v),
}


def parse_slurm_config(raw: Any, profiles: tuple[str, ...] | None = None,
                       path: str = SLURM_PATH) -> SlurmConfig:
    """The ``slurm`` mapping of the task file, checked as strictly as the rest of it: any
    unknown key or bad value is a PolicyError naming the key path and what was expected.
    ``profiles``: the task's profile names, which ``resources`` must name (if given)."""
    if raw is None:
        return SlurmConfig()
    if not isinstance(raw, dict):
        raise PolicyError(path, raw, "a mapping of Slurm settings")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        where = f"{path}.{key}"
        if key == "resources":
            values["resources"] = _profile_resources(where, value, profiles)
        elif key in _KEYS:
            values[key] = _KEYS[key](where, value)
        else:
            raise PolicyError(where, value, "one of the keys " + ", ".join(
                sorted([*_KEYS, "resources"])))
    return SlurmConfig(**values)


def _profile_resources(path: str, value: Any,
                       profiles: tuple[str, ...] | None) -> dict[str, ProfileResources]:
    if not isinstance(value, dict):
        raise PolicyError(path, value, "a mapping of profile name -> {cpus, mem_mb}")
    resources = {}
    for name, each in value.items():
        if profiles is not None and name not in profiles:
            raise PolicyError(f"{path}.{name}", name, "a profile of the task: one of "
                              + ", ".join(profiles))
        resources[str(name)] = _resources(f"{path}.{name}", each, PROFILE_KEYS)
    return resources
