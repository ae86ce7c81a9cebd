"""Which backends a run uses and what each may be asked (R-DIST-1, issue 28 item 4).

A task file names its run's backend (``backend:``, ``local`` by default), and may list
others beside it (``backends: [slurm]``: this host is always one of a run that lists
any, so a run on a cluster keeps its small work here). A profile routes its jobs to one
of them (``profiles.<name>.backend``); a profile that names none runs on ``backend``.
Each backend's own mapping (``slurm:``) belongs to a run that uses it, and what a backend
cannot do is refused by name: ``max_concurrent_experiments: auto`` sizes from this host,
so the run's own backend must run there; suspend-style preemption needs every backend
of the run to stop attempts in place, since any job may be a victim.

Apart from config.py (which stays under its size) and from the backends' machinery: it
reads only the registry's names, sections and capabilities.
"""

from __future__ import annotations

from typing import Any

from praxist_fs.backends.local import LocalBackend
from praxist_fs.backends.registry import BACKENDS
from praxist_fs.core.policy import Profile
from praxist_fs.core.queues import Queue
from praxist_fs.core.states import PreemptMode
from praxist_fs.errors import PolicyError

THIS_HOST = LocalBackend.name  # implicit in every run that lists backends


def backend_name(path: str, value: Any) -> str:
    """A registered backend's name (as ``backend:`` and a profile's ``backend:`` take)."""
    if not isinstance(value, str) or value not in BACKENDS:
        raise PolicyError(path, value, "one of " + ", ".join(BACKENDS))
    return value


def listed_backends(raw: Any, chosen: str, path: str) -> tuple[str, ...]:
    """``backends:``: the run's other backends, this host's added; () when absent."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise PolicyError(path, raw, "a non-empty list of backend names (this host, local, "
                          "is one of the run's without being listed), e.g. [slurm]")
    names: list[str] = []
    for index, name in enumerate(raw):
        backend_name(f"{path}[{index}]", name)
        if name in names:
            raise PolicyError(f"{path}[{index}]", name, "each backend listed once")
        names.append(name)
    return tuple(name for name in dict.fromkeys((THIS_HOST, *names)) if name != chosen)


def resolve_backends(scheduler: dict, chosen: str, max_concurrent: int | str,
                     queues: tuple[Queue, ...] | None, profiles: dict[str, Profile],
                     path: str) -> dict[str, Any]:
    """The Policy's backend fields: ``capabilities`` (the run's own backend's),
    ``backends`` (the others the run lists, with theirs) and each used backend's own
    mapping as checked by the backend's ``section``; what the run cannot do refused."""
    others = listed_backends(scheduler.get("backends"), chosen, f"{path}.backends")
    used = (chosen, *others)
    for name, profile in profiles.items():
        if profile.backend is not None and profile.backend not in used:
            listed = f"backend: {chosen}" + (f", backends: [{', '.join(others)}]"
                                             if others else "")
            raise PolicyError(f"{path}.profiles.{name}.backend", profile.backend,
                              f"a backend the run uses ({listed}): " + ", ".join(used))
    found: dict[str, Any] = {"capabilities": BACKENDS[chosen].capabilities,
                             "backends": {name: BACKENDS[name].capabilities for name in others}}
    for name, registered in BACKENDS.items():
        if registered.section is None:
            continue
        key = registered.section.key
        where, raw = f"{path}.{key}", scheduler.get(key)
        if name not in used:
            if raw is not None:
                raise PolicyError(where, raw, f"no {key} mapping unless backend: {name} (or "
                                  f"backends: [{name}])")
            continue
        registered.section.check(raw, tuple(profiles), where)
        found[key] = dict(raw or {})
    if max_concurrent == "auto" and not found["capabilities"].on_this_host:
        raise PolicyError(f"{path}.max_concurrent_experiments", "auto",
                          f"a number with backend: {chosen} (auto sizes from this host's "
                          "memory)")
    unable = [name for name in used if not BACKENDS[name].capabilities.can_suspend]
    for queue in (queues or ()) if unable else ():
        may_preempt = queue.preemptible_queues or any(
            other.preemptible and other.priority < queue.priority for other in queues)
        if may_preempt and queue.preempt == PreemptMode.SUSPEND:
            raise PolicyError(f"{path}.queues.{queue.name}.preempt", "suspend",
                              f"requeue with backend: {unable[0]} in the run (suspend-style"
                              f" preemption is unavailable: praxist_fs does not stop "
                              f"{unable[0]}'s attempts)")
    return found
