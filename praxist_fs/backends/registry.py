"""The execution backends a task file may name, by name: one line each (R-DIST-1).

A backend is one module whose class keeps the seam (base.py's ``ExecutionBackend``, and
``Kind`` below: a ``name``, its ``Capabilities`` and ``made(context)``) and one
``register`` line here. The registry is the only place that knows the backends: config.py
accepts their names as ``backend:`` and checks a backend's own mapping of the task file
(``section``), ``serve`` asks it what Slurm (or another scheduler) refuses before the
coordinator starts (``preflight``), and the daemon makes the run's backend through it
(``make``; all of them, behind one routing seam, for a run that lists several). The
core never sees the registry: config.py copies the chosen backends' ``Capabilities``
into the Policy, and they reach the core in the journal with it.

The ``memory`` backend is not here: the simulator and the tests make it themselves, and
no task file names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from praxist_fs.backends.local import LocalBackend
from praxist_fs.backends.routed import RoutedBackend
from praxist_fs.backends.slurm.backend import SlurmBackend, refused_by_slurm
from praxist_fs.backends.slurm.config import parse_slurm_config
from praxist_fs.core.capabilities import Capabilities

if TYPE_CHECKING:
    from praxist_fs.backends.base import ExecutionBackend, RunContext
    from praxist_fs.core.policy import Policy


class Kind(Protocol):
    """A backend's class, as the registry knows it."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    @classmethod
    def made(cls, context: RunContext) -> ExecutionBackend:
        """The backend of a coordinator starting on ``context``'s run."""


@dataclass(frozen=True)
class Section:
    """A backend's own mapping of the task file, ``resource_scheduler.<key>``: allowed only
    with that backend, and checked by ``check(raw, profile names, key path)``, which raises
    PolicyError naming the key at fault."""

    key: str
    check: Callable[[Any, tuple[str, ...], str], object]


@dataclass(frozen=True)
class Registered:
    kind: type[Kind]
    section: Section | None = None
    # what the backend's scheduler refuses of the task, asked once before the coordinator
    # starts (``serve``): one line per refusal, naming the key; [] when it refuses nothing
    preflight: Callable[[Policy, Path], list[str]] | None = None

    @property
    def capabilities(self) -> Capabilities:
        return self.kind.capabilities


BACKENDS: dict[str, Registered] = {}


def register(kind: type[Kind], *, section: Section | None = None,
             preflight: Callable[[Policy, Path], list[str]] | None = None) -> None:
    """Make ``kind`` a backend a task file may name, as ``kind.name``."""
    if kind.name in BACKENDS:
        raise ValueError(f"backend {kind.name!r} is registered already")
    BACKENDS[kind.name] = Registered(kind, section, preflight)


def make(context: RunContext) -> ExecutionBackend:
    """The backend the run's policy names (config.py accepted only registered names); a
    run that lists several gets them all, each attempt routed to its own (routed.py)."""
    policy = context.policy
    if not policy.backends:
        return BACKENDS[policy.backend].kind.made(context)
    return RoutedBackend(context, {name: BACKENDS[name].kind.made
                                   for name in policy.backend_names()})


def preflight(policy: Policy, run_dir: Path) -> list[str]:
    """What the schedulers of the run's backends refuse of its task, before ``serve``."""
    return [refusal for name in policy.backend_names()
            if (check := BACKENDS[name].preflight) is not None
            for refusal in check(policy, run_dir)]


register(LocalBackend)
register(SlurmBackend, section=Section("slurm", parse_slurm_config), preflight=refused_by_slurm)
