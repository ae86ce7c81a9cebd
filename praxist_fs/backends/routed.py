"""One run, several backends (issue 28 item 4): the seam kept, each attempt carried out
by the backend its job's profile routes to (``Policy.backend_of``).

The loop sees one ``ExecutionBackend``; this one holds the run's backends by name and
hands each call to the one that owns the attempt. Which one owns it is decided once,
when the attempt starts, and read back after a restart from what the journal holds of
it: a handle that names its backend (Slurm's ``{"backend": "slurm", ...}``), else the
local backend's identity (the shim's ``pid``), else its profile's route. So a task file
edited between two starts never sends a running attempt to another backend.

Each backend registers what it watches in the loop's selector through its own view of
it (``_Tagged``), which adds the backend's name to the token: ``on_ready`` then knows
whose it is without asking them all.
"""

from __future__ import annotations

import selectors
from dataclasses import replace
from typing import Any, Callable, ClassVar

from praxist_fs.backends.base import AttemptKey, ExecutionBackend, RunContext
from praxist_fs.backends.local import shim_of
from praxist_fs.core.capabilities import Capabilities
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, Job

LOCAL = "local"  # the local backend's name: its attempts are known by their shim's pid


class _Tagged:
    """The loop's selector as one backend sees it: what it registers with the data
    ``("backend", token)`` comes back to the loop as ``("backend", (name, token))``."""

    def __init__(self, selector: selectors.BaseSelector, name: str) -> None:
        self._selector = selector
        self._name = name

    def _tag(self, data: Any) -> Any:
        if isinstance(data, tuple) and len(data) == 2 and data[0] == "backend":
            return ("backend", (self._name, data[1]))
        return data

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.register(fileobj, events, self._tag(data))

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._selector.modify(fileobj, events, self._tag(data))

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._selector.unregister(fileobj)

    def get_map(self) -> Any:
        return self._selector.get_map()


class RoutedBackend:
    """The run's backends behind one seam, each attempt with the backend that runs it."""

    name: ClassVar[str] = "routed"  # never named by a task file: a run lists its backends
    capabilities: ClassVar[Capabilities]  # none of its own: Policy.capabilities_of(profile)

    def __init__(self, context: RunContext,
                 kinds: dict[str, Callable[[RunContext], ExecutionBackend]]) -> None:
        self.policy = context.policy
        self.lookup = context.lookup
        self.backends: dict[str, ExecutionBackend] = {
            name: made(replace(context, selector=_Tagged(context.selector, name)))
            for name, made in kinds.items()}
        self.routes: dict[AttemptKey, str] = {}  # each attempt's backend, once it started

    # -- which backend ------------------------------------------------------------

    def _of_profile(self, profile: str) -> str:
        return self.policy.backend_of(self.policy.profiles.get(profile))

    def _of_attempt(self, job: Job, attempt: Attempt) -> str:
        key = (job.job_id, attempt.attempt_id)
        if key not in self.routes:
            handle = attempt.handle or {}
            self.routes[key] = handle["backend"] if handle.get("backend") in self.backends \
                else LOCAL if shim_of(attempt.handle) is not None and LOCAL in self.backends \
                else self._of_profile(job.profile)
        return self.routes[key]

    def _of_key(self, key: AttemptKey) -> ExecutionBackend:
        if key not in self.routes:
            job = self.lookup(key[0])
            attempt = next((a for a in job.attempts if a.attempt_id == key[1]), None) \
                if job is not None else None
            if attempt is None:  # unknown to the core: the run's own backend's to answer
                return self.backends[self.policy.backend]
            self._of_attempt(job, attempt)
        return self.backends[self.routes[key]]

    def _split(self, jobs: list[Job]) -> dict[str, list[Job]]:
        parts: dict[str, list[Job]] = {name: [] for name in self.backends}
        for job in jobs:
            parts[self._of_attempt(job, job.current)].append(job)
        return parts

    # -- the seam -------------------------------------------------------------------

    def bind(self, effects: list[Effect]) -> list[Event]:
        spawns = [e for e in effects if isinstance(e, SpawnAttempt)]
        return [event for name, backend in self.backends.items()
                for event in backend.bind([e for e in spawns
                                           if self._of_profile(e.profile) == name])]

    def roll_back(self) -> None:
        for backend in self.backends.values():
            backend.roll_back()

    def start(self, launch: SpawnAttempt) -> list[Event]:
        name = self._of_profile(launch.profile)
        self.routes[(launch.job_id, launch.attempt_id)] = name
        return self.backends[name].start(launch)

    def settle(self) -> None:
        for backend in self.backends.values():
            backend.settle()

    def prepare(self, stopped: bool) -> None:
        for backend in self.backends.values():
            backend.prepare(stopped)

    def go(self, key: AttemptKey) -> None:
        self._of_key(key).go(key)

    def abort(self, key: AttemptKey) -> None:
        self._of_key(key).abort(key)

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        return self.backends[self._of_attempt(job, attempt)].observe(job, attempt)

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        return self.backends[self._of_attempt(job, attempt)].adopt(job, attempt)

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        return [event for name, jobs in self._split(in_flight).items()
                for event in self.backends[name].reconcile(jobs)]

    def suspend(self, key: AttemptKey, by: str) -> None:
        self._of_key(key).suspend(key, by)

    def resume(self, key: AttemptKey) -> None:
        self._of_key(key).resume(key)

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        self._of_key(key).end(key, grace, suspended)

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """Every backend ends its own (and whatever else it ends in a stop: Slurm's jobs of
        the run found by name), even with none of ``keys``."""
        mine: dict[int, list[AttemptKey]] = {id(b): [] for b in self.backends.values()}
        for key in keys:
            mine[id(self._of_key(key))].append(key)
        return [event for backend in self.backends.values()
                for event in backend.terminate(mine[id(backend)])]

    def on_ready(self, token: Any) -> list[Event]:
        name, inner = token
        return self.backends[name].on_ready(inner)

    def next_timer(self) -> float:
        return min(backend.next_timer() for backend in self.backends.values())

    def on_timer(self, now: float) -> list[Event]:
        return [event for backend in self.backends.values() for event in backend.on_timer(now)]

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()
