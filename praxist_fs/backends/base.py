"""The execution-backend seam: where an admitted attempt runs (R-DIST-1).

The core decides what runs and journals it; a backend only carries that out and
says what became of it. The loop hands a backend the core's attempt effects (start
up to the barrier, GO, ABORT, suspend, resume, end, stop) and hands the core the
events a backend returns. **Only the loop feeds the core**: a backend never calls
into the loop, the journal or the scheduler; anything it learns (a status pipe,
a pidfd, a squeue answer, a timer) comes back as ``AttemptObserved`` events from
the method the loop called.

Three backends keep this contract (tests/backends/test_contract.py runs one suite
against each): ``local`` (a process group per attempt behind a shim on this host),
``slurm`` (one Slurm job per attempt, the run directory on a shared filesystem)
and ``memory`` (no processes: a virtual clock, for the simulator, the core's
simulation tests and bench). A run that uses several gets them behind one seam
(routed.py), each attempt carried out by the backend its profile routes to.

The core sees an attempt's identity as an opaque *handle*, a JSON object journaled with
the ``AttemptObserved`` that first reports it and given back to the backend with the
attempt (``observe``, ``adopt``, the ``lookup``). The backend reads its own fields out
of it; the core reads only documented keys: a process on this host is named by ``pid``,
``pid_start`` and ``boot_id`` (core/model.py's ``PROCESS_KEYS``: the job file shows the
first two, a public field, and the boot id says whether the host restarted since). The
local backend's handle is just that (local/backend.py's ``shim_handle``); Slurm's is
``{"backend": "slurm", "cluster", "job_id", "job_name"}`` and, once known, ``node`` and
``started_at``.
"""

from __future__ import annotations

import math
import selectors
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Protocol

from praxist_fs.core.capabilities import Capabilities
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, Job

if TYPE_CHECKING:
    from praxist_fs.adapters.layout import RunLayout
    from praxist_fs.core.nodes import NodeRegistry
    from praxist_fs.core.policy import Policy

AttemptKey = tuple[str, str]  # (job id, attempt id): one attempt, in every backend


@dataclass(frozen=True)
class RunContext:
    """What the loop gives a backend it makes (``made``), and all a backend may use of it.

    ``layout``: the run directory; ``selector``: the loop's, where the backend registers
    what it watches with the data ``("backend", token)``; ``lookup``: the core's job by id,
    read-only; ``policy``: the run's, its ``slurm`` (or other) mapping checked already;
    ``nodes``: the core's node registry (R-BUD-2), read-only; ``disk_errors``: errnos of a
    full disk, which ``start`` re-raises when it started nothing (the loop waits them out);
    ``environment``: a launch's command environment, secrets revealed (environment.py's
    ``CommandEnvironment``), to ask only when the backend uses it."""

    layout: RunLayout
    selector: selectors.BaseSelector
    lookup: Callable[[str], Job | None]
    policy: Policy
    nodes: Callable[[], NodeRegistry]
    disk_errors: frozenset[int]
    environment: Callable[[SpawnAttempt], dict[str, str]]


class ExecutionBackend(Protocol):
    """Start, release at the barrier, observe, signal, terminate and adopt attempts.

    Every method returns promptly (a backend that must wait, on a grace period or on a
    remote scheduler, does so behind ``next_timer``/``on_timer`` or its own thread,
    whose news comes back through ``on_ready``); every event it returns is for the loop
    to hand to the core, which journals what changes its state. A backend is given the
    loop's selector when it is made, registers what it watches there with the data
    ``("backend", token)``, and the loop hands ``token`` to ``on_ready``; it may read
    the core's jobs (a ``lookup`` by job id) but never changes them."""

    name: ClassVar[str]  # as the task file names it (``backend:``): backends/registry.py
    capabilities: ClassVar[Capabilities]  # what the core reads of it, through the Policy

    def bind(self, effects: list[Effect]) -> list[Event]:
        """Handles known before the commit that decides the launches in ``effects`` (the
        local backend's warm shims): journaled in that commit, with GO if they wait at
        the barrier already."""

    def roll_back(self) -> None:
        """The batch ``bind`` served was never journaled: forget what it bound."""

    def start(self, launch: SpawnAttempt) -> list[Event]:
        """Begin the attempt (journaled by the core already) up to its barrier: the events
        that report its handle, or that it could not be started (an exit with the
        reason in ``error``); or none yet, when they come later through ``on_ready``
        (Slurm submits off the loop). Nothing runs before ``go``. The command's
        environment is the ``RunContext``'s to build, when the backend uses it."""

    def settle(self) -> None:
        """After a batch is committed and its launches are on their way: the work kept
        off the launch path (attempt.json), and what may be done only once the batch's
        records are durable (the local backend tells a shim its end is journaled). An
        OSError leaves it for the next call."""

    def prepare(self, stopped: bool) -> None:
        """Between turns of the loop: get ready for the next launches (warm shims)."""

    def go(self, key: AttemptKey) -> None:
        """Release the barrier: run the command (GO is journaled already), its attempt
        directory durable first (exit.json must not vanish with it in a power cut)."""

    def abort(self, key: AttemptKey) -> None:
        """Release the barrier the other way: the command never runs."""

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        """What the backend knows of the attempt now (alive, READY, GO, its exit)."""

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        """After a restart: take up an attempt the journal says is in flight."""

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        """A periodic look at every attempt in flight, for what no notification said."""

    def suspend(self, key: AttemptKey, by: str) -> None:
        """Stop the attempt's processes (only with ``can_suspend``); ``by``: the job it
        makes room for, whose GO waits until every process is stopped (``go``)."""

    def resume(self, key: AttemptKey) -> None:
        """Continue a suspended attempt."""

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """Cancel or evict: ABORT if still at the barrier, else TERM now and KILL once
        ``grace`` seconds have passed without its end observed."""

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """Stop the run: end every attempt in ``keys`` (waiting for the stop's grace, as
        nothing is admitted any more) and return what became of them."""

    def on_ready(self, token: Any) -> list[Event]:
        """Something the backend registered in the loop's selector is ready."""

    def next_timer(self) -> float:
        """When ``on_timer`` next has work, on the backend's clock (``time.monotonic()``
        for the real ones, the virtual clock for ``memory``), or ``math.inf``."""

    def on_timer(self, now: float) -> list[Event]:
        """Carry on the signalling that waits on a grace period or a process."""

    def close(self) -> None:
        """The coordinator leaves: running attempts stay running, to be adopted."""


NO_TIMER = math.inf
