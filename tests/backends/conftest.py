"""Each execution backend, as the contract suite (test_contract.py) drives it.

A backend joins the suite with one entry in ``RIGS``: a factory that gives a ``Rig``
for a fresh world (a host, a cluster), the ``Capabilities`` it must declare, and the
fixture of its world if it needs one (a Slurm cluster). A rig
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
directory after ``close()``. A ``slurm`` entry: the same on the real single-node
Slurm of tests/slurm/setup.sh, its ``settle`` calling ``reconcile`` (one squeue per
tick) besides the timers, and ``CLUSTER`` capabilities;
``slurm-fake`` is that entry on the fake cluster of tests/slurm/fake/cluster (sbatch,
squeue, scancel and sacct on PATH that really run the batch script), so the contract
is checked for Slurm where no real one can be had.
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
import pytest

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends.base import AttemptKey, Capabilities, ExecutionBackend, RunContext
from praxist_fs.backends.local import LocalBackend
from praxist_fs.backends.slurm.backend import SlurmBackend
from praxist_fs.backends.routed import RoutedBackend
from praxist_fs.backends.memory import KILL_EXIT, TERM_EXIT, MemoryBackend, Run, VirtualHost
from praxist_fs.core.effects import SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event, NodeOutcome
from praxist_fs.core.model import Attempt, AttemptPhase, Job
from praxist_fs.core.nodes import NodeRegistry
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.request import Request
from tests.backends.toy import ToyBackend
from tests.conftest import REAL_SLURM_GROUP


@dataclass
class Seen:
    """The latest ``AttemptObserved`` of each attempt, as the loop would hand them on;
    ``journal``: what the core would record of each (a real backend reads it back)."""

    last: dict[AttemptKey, AttemptObserved] = field(default_factory=dict)
    exits: dict[AttemptKey, list[AttemptObserved]] = field(default_factory=dict)
    journal: Callable[[AttemptObserved], None] | None = None

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            if isinstance(event, NodeOutcome):
                continue  # R-BUD-2's news of a node, not of the attempt
            assert isinstance(event, AttemptObserved), f"not an attempt's news: {event}"
            if self.journal is not None:
                self.journal(event)
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

    def command(self, exit_code: int, seconds: float, *, ignores_term: bool = False,
                held: bool = False) -> Any:
        """What ``launch`` runs: exits ``exit_code`` after ``seconds`` of running; a
        ``held`` one counts those seconds only from ``release``."""

    def release(self, job_id: str) -> None:
        """Let ``job_id``'s held command go on to its end."""

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

    def command(self, exit_code: int, seconds: float, *, ignores_term: bool = False,
                held: bool = False) -> Run:
        """A virtual command waits for nothing: time passes only in ``settle``."""
        return Run(seconds, exit_code, KILL_EXIT if ignores_term else TERM_EXIT)

    def release(self, job_id: str) -> None:
        """Nothing to release: see ``command``."""

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


class RealRig:
    """A backend of real processes (local) or real Slurm jobs: commands are ``python -c``
    programs, time is the wall clock, and the rig plays the loop: the backend's selector,
    its timers, a reconcile twice a second, and the core's record of each attempt (its
    pid or handle, GO, its end) for the backend to read back through ``lookup``."""

    def __init__(self, root: Path, make: Callable[[RealRig], ExecutionBackend],
                 jobs: dict[str, Job] | None = None) -> None:
        self.root, self.make = root, make
        self.layout = RunLayout.at(root)
        self.layout.create()
        self.jobs = jobs if jobs is not None else {}
        self.selector = selectors.DefaultSelector()
        self.backend = make(self)
        self.seen = Seen(journal=self._journal)
        self.restarts: list[RealRig] = []
        self.closed = False

    def lookup(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def _journal(self, event: AttemptObserved) -> None:
        job = self.jobs.get(event.job_id)
        attempt = job.current if job is not None else None
        if attempt is None or attempt.attempt_id != event.attempt_id:
            return
        attempt.handle = attempt.handle or event.handle
        if event.exited or not event.alive:
            attempt.phase = AttemptPhase.ENDED

    def command(self, exit_code: int, seconds: float, *, ignores_term: bool = False,
                held: bool = False) -> Any:
        return exit_code, seconds, ignores_term, held

    def release(self, job_id: str) -> None:
        (self.root / f"{job_id}.released").touch()

    def launch(self, job_id: str, command: Any) -> SpawnAttempt:
        exit_code, seconds, ignores_term, held = command
        marker, gate = self.root / f"{job_id}.running", self.root / f"{job_id}.released"
        program = ("import os, signal, sys, time\n"
                   + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignores_term else "")
                   + f"open({str(marker)!r}, 'w').close()\n"
                   + (f"while not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
                      if held else "")
                   + f"time.sleep({seconds!r})\nsys.exit({exit_code})\n")
        launch = SpawnAttempt(job_id=job_id, attempt_id="a1", argv=(sys.executable, "-c", program),
                              command=None, cwd=str(self.root), profile="cpu",
                              metadata={"job_id": job_id, "attempt_id": "a1"})
        request = Request(request_id=job_id, peer="peer", tag=job_id, profile="cpu",
                          argv=launch.argv, command=None)
        job = Job(job_id=job_id, request=request, profile="cpu", fingerprint=job_id,
                  submitted_at=time.time(), order=len(self.jobs) + 1)
        job.attempts.append(Attempt(attempt_id="a1", number=1, round=1,
                                    started_at=time.time()))
        self.jobs[job_id] = job
        return launch

    def now(self) -> float:
        return time.time()

    def wait_running(self, key: AttemptKey) -> None:
        marker = self.root / f"{key[0]}.running"
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert time.monotonic() < deadline, f"{key}: the command did not start"
            self.settle(lambda: False, 0.05)

    def settle(self, until: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        next_reconcile = 0.0
        while not until():
            now = time.monotonic()
            if now >= deadline:
                return
            wait = max(0.0, min(0.05, self.backend.next_timer() - now, deadline - now))
            for key, _ in self.selector.select(wait):
                self.seen.add(self.backend.on_ready(key.data[1]))
            self.seen.add(self.backend.on_timer(time.monotonic()))
            if time.monotonic() >= next_reconcile:
                in_flight = [job for job in self.jobs.values()
                             if job.current.phase != AttemptPhase.ENDED]
                self.seen.add(self.backend.reconcile(in_flight))
                next_reconcile = time.monotonic() + 0.5

    def restarted(self) -> RealRig:
        restarted = RealRig(self.root, self.make, self.jobs)
        self.restarts.append(restarted)
        return restarted

    def close(self) -> None:
        """The backend closed (once), and nothing of the test left running."""
        for rig in self.restarts:
            rig.close()
        if not self.closed:
            self.closed = True
            self.backend.close()
        self.selector.close()
        backends = getattr(self.backend, "backends", {"": self.backend}).values()  # routed
        for slurm in (backend for backend in backends if isinstance(backend, SlurmBackend)):
            for slurm_id in slurm.client.jobs_of_run():
                slurm.client.cancel(slurm_id)
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if any(str(self.root) in part for part in proc.info["cmdline"] or ()):
                try:
                    os.killpg(proc.info["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for handle in (h for backend in backends for h in getattr(backend, "handles", {}).values()):
            handle.popen.wait(timeout=10)  # its shim, killed above
        for child in psutil.Process().children():
            try:
                ours = any(str(self.root) in part for part in child.cmdline())
            except psutil.ZombieProcess:
                ours = True  # killed above: reaped here
            except psutil.NoSuchProcess:
                continue
            if ours:
                child.wait(timeout=10)


def rig_environment(launch: SpawnAttempt) -> dict[str, str]:
    """The command environment the rigs' backends are made with (``RunContext.environment``):
    a PATH, and the launch's job id, which the contract suite looks for in a command."""
    return {"PATH": os.defpath, "PRAXIST_TEST_JOB": launch.job_id}


def local_rig(tmp_path: Path) -> RealRig:
    return RealRig(tmp_path / "run", lambda rig: LocalBackend(
        rig.layout, rig.selector, rig.lookup, frozenset(), rig_environment, stop_grace=1.0))


def toy_rig(tmp_path: Path) -> RealRig:
    """The toy backend of tests/backends/toy.py, made as the daemon makes a backend."""
    policy = Policy(backend="toy", capabilities=ToyBackend.capabilities)
    return RealRig(tmp_path / "run", lambda rig: ToyBackend.made(RunContext(
        rig.layout, rig.selector, rig.lookup, policy, NodeRegistry, frozenset(), rig_environment)))


def slurm_rig(tmp_path: Path) -> RealRig:
    """The Slurm backend on the cluster its entry's ``world`` set up: the real
    single-node Slurm or the fake one; the run directory is on the node's filesystem."""
    policy = Policy(backend="slurm", capabilities=SlurmBackend.capabilities,
                    max_concurrent_experiments=4, default_profile="cpu",
                    profiles={"cpu": Profile(name="cpu", accelerator="cpu")},
                    slurm={"default_resources": {"cpus": 1, "mem_mb": 256},
                           "poll_pending_s": 0.2, "poll_running_s": 1.0})
    return RealRig(tmp_path / "run", lambda rig: SlurmBackend(
        rig.layout, rig.selector, rig.lookup, policy, lambda: NodeRegistry(), rig_environment))


def _quick_local(context: RunContext) -> LocalBackend:
    return LocalBackend(context.layout, context.selector, context.lookup, frozenset(),
                        context.environment, stop_grace=1.0)


def routed_rig(tmp_path: Path, to: str) -> RealRig:
    """One run of two backends (issue 28, backends/routed.py): this host's and Slurm's
    (the cluster of the entry's world), the attempts' profile routed to ``to``; the
    other backend is made, watches its own, and must leave the attempts alone."""
    cpu = Profile(name="cpu", accelerator="cpu", backend=None if to == "local" else to)
    policy = Policy(backend="local", backends={"slurm": SlurmBackend.capabilities},
                    max_concurrent_experiments=4, default_profile="cpu", profiles={"cpu": cpu},
                    slurm={"default_resources": {"cpus": 1, "mem_mb": 256},
                           "poll_pending_s": 0.2, "poll_running_s": 1.0})
    return RealRig(tmp_path / "run", lambda rig: RoutedBackend(
        RunContext(rig.layout, rig.selector, rig.lookup, policy, NodeRegistry, frozenset(),
                   rig_environment),
        {"local": _quick_local, "slurm": SlurmBackend.made}))


@dataclass(frozen=True)
class Entry:
    make: Callable[[Path], Rig]  # tmp_path -> a rig, a fresh world
    capabilities: Capabilities  # what the backend must declare
    # the fixture of the world it runs in, set up before the rigs (and so torn down after
    # them): ``real_slurm`` (skipped with setup.sh's reason where there is none), or
    # ``fake_cluster`` (tests/slurm/fake/cluster: sbatch that really runs the job)
    world: str | None = None


ON_HOST = Capabilities(can_suspend=True, places_gpus=False, on_this_host=True)
CLUSTER = Capabilities(can_suspend=False, places_gpus=True, on_this_host=False,
                       queues_attempts=True, takes_slurm_options=True)
RIGS: dict[str, Entry] = {
    "memory": Entry(lambda tmp_path: MemoryRig(), ON_HOST),
    "local": Entry(local_rig, ON_HOST),
    "slurm": Entry(slurm_rig, CLUSTER, world="real_slurm"),
    "slurm-fake": Entry(slurm_rig, CLUSTER, world="fake_cluster"),
    "toy": Entry(toy_rig, ON_HOST),
    "routed-local": Entry(lambda tmp_path: routed_rig(tmp_path, "local"), ON_HOST,
                          world="fake_cluster"),
    "routed-slurm": Entry(lambda tmp_path: routed_rig(tmp_path, "slurm"), CLUSTER,
                          world="fake_cluster"),
}


def rig_param(name: str) -> Any:
    """A rig as the fixture's parameter: the real Slurm's in the one worker that has it."""
    return pytest.param(name, marks=[REAL_SLURM_GROUP] if RIGS[name].world == "real_slurm" else [])


@pytest.fixture(params=[rig_param(name) for name in sorted(RIGS)])
def backend_factory(request, tmp_path) -> Callable[[], tuple[Rig, Capabilities]]:
    """Each registered backend in turn: a callable giving its rig and declared abilities."""
    entry = RIGS[request.param]
    if entry.world is not None:
        request.getfixturevalue(entry.world)
    rigs: list[Rig] = []

    def make() -> tuple[Rig, Capabilities]:
        rigs.append(entry.make(tmp_path))
        return rigs[-1], entry.capabilities

    yield make
    for rig in rigs:
        getattr(rig, "close", rig.backend.close)()


def core_view(launch: SpawnAttempt, handle: AttemptObserved) -> tuple[Job, Attempt]:
    """The core's job and attempt as the journal has them once ``handle`` reported the
    attempt: what ``observe`` and ``adopt`` are given."""
    request = Request(request_id=launch.job_id, peer="peer", tag=launch.job_id,
                      profile=launch.profile, argv=launch.argv, command=launch.command)
    job = Job(job_id=launch.job_id, request=request, profile=launch.profile,
              fingerprint=launch.job_id, submitted_at=handle.at, order=1)
    attempt = Attempt(attempt_id=launch.attempt_id, number=1, round=1, started_at=handle.at,
                      gpus=launch.gpus, handle=handle.handle)
    job.attempts.append(attempt)
    return job, attempt
