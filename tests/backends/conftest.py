"""Each execution backend, as the contract suite (test_contract.py) drives it.

A backend joins the suite with one entry in ``RIGS``: a factory that gives a ``Rig``
for a fresh world (a host, a cluster), and the ``Capabilities`` it must declare. A rig
says how to make a command that exits with code N after T seconds, how to let time
pass until a condition holds (real backends: the loop's selector and timers, under a
``wait_for``-style timeout; memory: its virtual clock) and how a coordinator restarts
(a new backend instance on the same world). The tests use nothing else.

A ``local`` entry: ``command`` is an argv (``sys.executable -c`` that ignores SIGTERM
when asked, then touches a marker file in its cwd, sleeps T seconds and exits N) and
``launch`` a SpawnAttempt with that argv and a tmp_path cwd; ``wait_running`` waits
(``wait_for``) for the marker; the backend gets a selector it registers its status
pipes in, ``settle`` selects on it (timeout: the time to ``next_timer``, at most
50 ms) and hands ``on_ready(key.data)`` and ``on_timer(time.monotonic())`` events to
``seen`` until the condition holds or the timeout passes; ``now`` is ``time.time()``
(the clock of ``ended_at``); ``restarted`` builds a second backend on the same run
directory after ``close()``. A ``slurm`` entry: the same, with the fake
``sbatch``/``squeue``/``scancel`` of tests/slurm on PATH, its ``settle`` calling
``reconcile`` (one squeue per tick) besides the timers, and ``Capabilities(
can_suspend=False, places_gpus=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from praxist_fs.backends.base import AttemptKey, Capabilities, ExecutionBackend
from praxist_fs.backends.memory import KILL_EXIT, TERM_EXIT, MemoryBackend, Run, VirtualHost
from praxist_fs.core.effects import SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, Job
from praxist_fs.core.request import Request


@dataclass
class Seen:
    """The latest ``AttemptObserved`` of each attempt, as the loop would hand them on."""

    last: dict[AttemptKey, AttemptObserved] = field(default_factory=dict)
    exits: dict[AttemptKey, list[AttemptObserved]] = field(default_factory=dict)

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            assert isinstance(event, AttemptObserved), f"not an attempt's news: {event}"
            key = (event.job_id, event.attempt_id)
            self.last[key] = event
            if event.exited:
                self.exits.setdefault(key, []).append(event)

    def ended(self, key: AttemptKey) -> bool:
        """Its end was reported: an exit, or gone without one."""
        event = self.last.get(key)
        return event is not None and not event.alive


class Rig(Protocol):
    backend: ExecutionBackend
    seen: Seen

    def command(self, exit_code: int, seconds: float, *, ignores_term: bool = False) -> Any:
        """What ``launch`` runs: exits ``exit_code`` after ``seconds`` of running."""

    def launch(self, job_id: str, command: Any) -> SpawnAttempt:
        """The core's SpawnAttempt of the first attempt of ``job_id``, running ``command``."""

    def now(self) -> float:
        """The clock an event's ``at`` and ``ended_at`` are on."""

    def wait_running(self, key: AttemptKey) -> None:
        """After ``go``: wait until the command runs (its signal handlers in place)."""

    def settle(self, until: Callable[[], bool], timeout: float) -> None:
        """Let time pass, handing the backend's news to ``seen``, until ``until()`` holds
        or ``timeout`` seconds have passed."""

    def restarted(self) -> Rig:
        """A new backend instance on the same world: a coordinator after a restart."""


class MemoryRig:
    """The memory backend: commands are ``Run`` plans, time is its virtual clock."""

    def __init__(self, host: VirtualHost | None = None) -> None:
        self.plans: dict[str, Run] = {}
        self.host = host or VirtualHost(start=1000.0)
        self.backend = MemoryBackend(lambda launch: self.plans[launch.job_id], self.host)
        self.seen = Seen()

    def command(self, exit_code: int, seconds: float, *, ignores_term: bool = False) -> Run:
        return Run(seconds, exit_code, KILL_EXIT if ignores_term else TERM_EXIT)

    def launch(self, job_id: str, command: Run) -> SpawnAttempt:
        self.plans[job_id] = command
        return SpawnAttempt(job_id=job_id, attempt_id="a1", argv=("true",), command=None,
                            cwd=None, profile="cpu")

    def now(self) -> float:
        return self.host.now

    def wait_running(self, key: AttemptKey) -> None:
        """A released virtual command runs at once."""

    def settle(self, until: Callable[[], bool], timeout: float) -> None:
        deadline = self.host.now + timeout
        while not until() and self.host.now < deadline:
            self.seen.add(self.backend.on_timer(min(self.backend.next_timer(), deadline)))

    def restarted(self) -> MemoryRig:
        restarted = MemoryRig(self.host)
        restarted.plans = self.plans
        return restarted


@dataclass(frozen=True)
class Entry:
    make: Callable[[Any], Rig]  # tmp_path -> a rig on a fresh world
    capabilities: Capabilities  # what the backend must declare


RIGS: dict[str, Entry] = {
    "memory": Entry(lambda tmp_path: MemoryRig(), Capabilities(can_suspend=True,
                                                                places_gpus=False)),
}


@pytest.fixture(params=sorted(RIGS))
def backend_factory(request, tmp_path) -> Callable[[], tuple[Rig, Capabilities]]:
    """Each registered backend in turn: a callable giving its rig and declared abilities."""
    entry = RIGS[request.param]
    rigs: list[Rig] = []

    def make() -> tuple[Rig, Capabilities]:
        rigs.append(entry.make(tmp_path))
        return rigs[-1], entry.capabilities

    yield make
    for rig in rigs:
        rig.backend.close()


def core_view(launch: SpawnAttempt, handle: AttemptObserved) -> tuple[Job, Attempt]:
    """The core's job and attempt as the journal has them once ``handle`` reported the
    attempt: what ``observe`` and ``adopt`` are given."""
    request = Request(request_id=launch.job_id, peer="peer", tag=launch.job_id,
                      profile=launch.profile, argv=launch.argv, command=launch.command)
    job = Job(job_id=launch.job_id, request=request, profile=launch.profile,
              fingerprint=launch.job_id, submitted_at=handle.at, order=1)
    attempt = Attempt(attempt_id=launch.attempt_id, number=1, round=1, started_at=handle.at,
                      gpus=launch.gpus, pid=handle.pid, pid_start=handle.pid_start,
                      boot_id=handle.boot_id)
    job.attempts.append(attempt)
    return job, attempt
