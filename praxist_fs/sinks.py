"""The exporter seam: the run's outputs besides the files the journal implies, each a
``Sink`` the daemon holds in a list and the driver calls after every commit.

A sink is handed each committed batch (``Commit``: the events, the effects the core
decided of them, carried out, with the notices of ``core/notices.py``: jobs ended,
generations closed, hooks to run, secrets to let go; and the core, to read, never to feed), and a turn of
the loop for an output kept at a cadence of its own. The core decides; a sink only
writes or starts what it is told. Three ship with the coordinator: ``StatusSink``
(status.json and metrics.prom, at the status cadence), ``HookSink`` (the task's
completion hooks) and ``SecretsSink`` (the vault's secrets let go); a new output (a
file, a metric, a notification) is one more, appended to ``Coordinator.sinks`` or
handed to a ``Driver``: ``tests/test_sinks.py`` and ``tests/e2e/test_sink.py`` are each
a whole sink in one file. A sink never blocks the loop; an OSError it lets out is the
loop's (a full disk degrades the run, as anywhere in a turn).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .adapters.crashpoints import reach
from .adapters.fsio import write_atomic, write_json
from .adapters.hooks import HookCall, HookRunner
from .adapters.taskreports import progress, task_report
from .core.effects import Effect, RunHook, ScrubSecrets
from .core.events import Event
from .core.metrics import Histogram, render_metrics
from .core.scheduler import Scheduler
from .core.states import JobState
from .core.status import render_status

if TYPE_CHECKING:
    from .adapters.vault import Vault
    from .views import Views

log = logging.getLogger("praxist_fs")

STATUS_MIN_GAP = 0.2      # status.json is rewritten at most this often ...
STATUS_MAX_AGE = 5.0      # ... and at least this often while serving
STATUS_COST_SHARE = 0.05  # and at most this share of the loop's time goes to writing it
STATUS_BUSY_GAP = 1.0     # while requests or exits wait, they go first for up to this long


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed batch, its effects carried out: what a sink is handed."""

    events: list[Event]    # the batch handed to the driver
    effects: list[Effect]  # what the core decided of it (and of its launches), notices too
    sched: Scheduler       # the core as it stands after the batch: read it, never feed it


class Sink:
    """An output of the run. Each method is a no-op here: a sink overrides what it needs."""

    def committed(self, commit: Commit) -> None:
        """After each commit, once the batch's effects are carried out; called from the
        loop, so it returns at once (work that may take time goes to a thread)."""

    def tick(self, sched: Scheduler, force: bool = False) -> None:
        """Once a turn of the loop, committed or not: an output kept at its own cadence
        writes what is owed (``force``: now, as at a start)."""

    def close(self, sched: Scheduler) -> None:
        """At the coordinator's stop, after its last batch."""


class HookSink(Sink):
    """The task's completion hooks: starts the ``RunHook``s the core decided (which fire
    is ``core/notices.py``'s), adding the run directory, on the hook runner's thread."""

    def __init__(self, runner: HookRunner, run_dir: str) -> None:
        self.runner, self.run_dir = runner, run_dir

    def committed(self, commit: Commit) -> None:
        for effect in commit.effects:
            if isinstance(effect, RunHook):
                self.runner.submit(HookCall(
                    name=effect.name, argv=effect.argv, document=effect.document,
                    env={**effect.env, "PRAXIST_RUN_DIR": self.run_dir}))

    def close(self, sched: Scheduler) -> None:
        self.runner.close()


class SecretsSink(Sink):
    """Lets go of what the vault keeps of a request's secrets once the core says no
    launch will need them (``ScrubSecrets``: its job ended, or it queued nothing)."""

    def __init__(self, vault: Vault) -> None:
        self.vault = vault

    def committed(self, commit: Commit) -> None:
        for effect in commit.effects:
            if isinstance(effect, ScrubSecrets):
                self.vault.scrub(effect.request_id)


class StatusSink(Sink):
    """status.json and metrics.prom (PROTOCOL.md, OPERATIONS.md): rewritten when what they
    show changed, at most every STATUS_MIN_GAP (more where writing costs) and at least
    every STATUS_MAX_AGE; never ahead of work waiting (``busy``) if written lately. With
    them, at the same cadence, the pending reasons' job files and the job index. What
    only the coordinator knows comes from ``runtime`` (called with the state to show);
    a write that fails is offered to ``failed`` (a full disk degrades the run) or raised."""

    def __init__(self, views: Views, commits: Histogram,
                 runtime: Callable[[str], dict[str, Any]], journal_seq: Callable[[], int],
                 metrics_textfile_dir: str | None = None,
                 busy: Callable[[], bool] = lambda: False,
                 failed: Callable[[OSError, Path], bool] = lambda exc, path: False,
                 turns: tuple[Histogram, Histogram] | None = None) -> None:
        self.views, self.layout = views, views.layout
        self.commits = commits  # the driver's journal commit latency
        self.turns = turns  # the loop's turns, wall and CPU (turns.LoopTurns)
        self.runtime, self.journal_seq = runtime, journal_seq
        self.busy, self.failed = busy, failed
        # metrics.prom, and a copy for node_exporter's textfile collector if asked for
        self.metrics_files = [self.layout.metrics] + (
            [Path(metrics_textfile_dir) / metrics_file_name(self.layout.root)]
            if metrics_textfile_dir else [])
        self._metrics_error: str | None = None  # the textfile copy's last failure, logged
        self._status_version: tuple[int, int] = (-1, -1)
        self._status_at = 0.0
        self._status_gap = STATUS_MIN_GAP  # widened when status writes grow costly

    def committed(self, commit: Commit) -> None:
        """The job index at once, not at the cadence, when the batch ended a job that no
        commit had shown: until then no reader could find it (``list_jobs``)."""
        if self.views.index.owes_an_end:
            self.views.index.flush(self.journal_seq())

    def tick(self, sched: Scheduler, force: bool = False, state: str = "serving") -> None:
        """Write both files if owed (``status_due``), or now with ``force``."""
        now = time.time()
        if not force and (not self.status_due(sched, now) or
                          self.status_recent(now) and self.busy()):
            return
        if sched.stopped and state == "serving":
            state = f"stopped: {sched.stopped} (admits nothing)"
        started = time.monotonic()
        try:
            self.write_status(sched, now, self.runtime(state), self.journal_seq(),
                              serving=state != "stopped")
        except OSError as exc:  # tried again at the usual cadence, not at every turn
            if not self.failed(exc, self.layout.status):
                raise
        self.status_written(sched, now, time.monotonic() - started)

    def close(self, sched: Scheduler) -> None:
        self.tick(sched, force=True, state="stopped")

    def status_due(self, sched: Scheduler, now: float) -> bool:
        """Whether status.json is owed: it changed and was written over STATUS_MIN_GAP
        ago (more where it costs: ``status_written``), or it is STATUS_MAX_AGE old."""
        changed = _status_stamp(sched) != self._status_version
        return (changed and now - self._status_at >= self._status_gap) or \
            now - self._status_at >= STATUS_MAX_AGE

    def status_recent(self, now: float) -> bool:
        """Written within STATUS_BUSY_GAP: a status owed now may wait for waiting work."""
        return now - self._status_at < STATUS_BUSY_GAP

    def status_deadline(self, sched: Scheduler, now: float) -> float:
        """When (on ``now``'s clock, monotonic) status.json is next owed."""
        if _status_stamp(sched) != self._status_version:
            return now + max(0.0, self._status_at + self._status_gap - time.time())
        return now + STATUS_MAX_AGE

    def status_outdated(self) -> None:
        """Something status.json shows changed outside the core (problems, degraded)."""
        self._status_version = (-1, -1)

    def status_written(self, sched: Scheduler, now: float, took: float) -> None:
        """Tried at ``now``: a failure is tried again at the usual cadence, not every turn.
        A write that took ``took`` seconds (its pending reasons walk the whole queue: 0.1 s
        at 10,000 jobs) is not owed again before ``took / STATUS_COST_SHARE``, so that a
        long queue's status does not take the time its jobs' exits and launches need."""
        self._status_version, self._status_at = _status_stamp(sched), now
        self._status_gap = min(STATUS_MAX_AGE, max(STATUS_MIN_GAP, took / STATUS_COST_SHARE))

    def write_status(self, sched: Scheduler, now: float, runtime: dict[str, Any],
                     journal_seq: int, serving: bool) -> None:
        """status.json (the coordinator's ``runtime`` facts, with the running jobs' own
        reports), the pending reasons' job files and the job index at the same cadence,
        and metrics.prom."""
        reports = {}
        for job in sched.running():
            attempt_dir = self.layout.attempt_dir(job.job_id, job.current.attempt_id)
            reports[job.job_id] = {"progress": progress(attempt_dir / "progress.json"),
                                   "failure": task_report(attempt_dir / "failure.json")}
        for effect in sched.reason_updates():  # pending reasons, at status cadence
            self.views.execute(effect, sched)
        self.views.index.flush(journal_seq)  # the job index too: a commit costs ~0.2 ms
        reach("status.before_write")
        write_json(self.layout.status, render_status(sched, now, runtime, reports),
                   sync=False, indent=2)
        reach("status.after_write")
        self._write_metrics(sched, now, journal_seq, serving)

    def _write_metrics(self, sched: Scheduler, now: float, journal_seq: int,
                       serving: bool) -> None:
        """metrics.prom beside status.json; the textfile directory's copy is the
        operator's: a failure there is logged, once per error, never fatal."""
        data = render_metrics(sched, now, str(self.layout.root), journal_seq,
                              self.views.tally, self.commits, serving, self.turns).encode()
        write_atomic(self.metrics_files[0], data, sync=False)
        for path in self.metrics_files[1:]:
            try:
                write_atomic(path, data, sync=False)
                self._metrics_error = None
            except OSError as exc:
                error = f"{path}: {exc.strerror}"  # not the temp file's name: new each time
                if error != self._metrics_error:
                    log.warning("metrics textfile not written: %s", error)
                self._metrics_error = error


def metrics_file_name(run_dir: Path) -> str:
    """``<run dir name>-<hash of its path>.prom``: one file per run in a shared directory."""
    path = os.path.realpath(run_dir)
    return f"{os.path.basename(path)}-{hashlib.sha256(path.encode()).hexdigest()[:8]}.prom"


def _status_stamp(sched: Scheduler) -> tuple[int, int]:
    """What status.json shows changed: state, or a new host sample while there is work."""
    busy = sched.count(JobState.QUEUED) or sched.in_flight()
    return sched.version, sched.samples_seen if busy else 0
