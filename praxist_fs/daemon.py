"""The coordinator: the loop, the only place that feeds the core. What peers wrote comes
in as events from the inboxes (``inboxes.py``); the files the journal implies go out
through the views (``views.py``); neither feeds the core nor calls the loop.

lock -> replay the journal -> record this start -> repair derived files ->
re-adopt live attempts -> start the observer -> scan the spool -> loop.
The loop waits on one selector (wake-up pipe rung by watchdog and signals,
shim status pipes, pidfds of re-adopted shims, the shim server's answers, or a
timeout), turns what it sees into events, and for every batch:
``Scheduler.handle`` (with the scheduling pass, for requests and exits, and a
warm shim bound to each new attempt) -> journal append -> one fsync -> carry
out the effects, launches first. Nothing here decides what to run.
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import gc
import itertools
import logging
import os
import selectors
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from .adapters import launcher, procs, quarantine, runs, spool
from .adapters.crashpoints import reach
from .adapters.capacity import read_host_capacity
from .adapters.fsio import (
    TEMP_PATTERN, create, fsync_dir, read_json, sync_all, temp_name, unlink,
    write_atomic, write_json,
)
from .adapters.gpus import open_inventory
from .adapters.hooks import HookCall, HookRunner
from .adapters.hostclaims import HostRegistry, default_directory
from .adapters.jobindex import JobIndex
from .adapters.journal import Journal
from .adapters.layout import JOB_DIRECTORIES, RunLayout
from .adapters.lock import OwnerLock, remove_endpoint, write_endpoint
from .adapters.pressure import PressureSampler
from .adapters.vault import Vault
from .adapters.watcher import filesystem_type, needs_polling, start_observer, watch
from .backends.base import ExecutionBackend
from .backends.local import LocalBackend
from .backends.slurm import SlurmBackend
from .core.effects import (
    AbortAttempt, CancelAttempt, Effect, EvictAttempt, ResumeAttempt, SpawnAttempt,
    SuspendAttempt, TerminateAttempts, WriteGenerationFile, WriteGo, WriteJob,
)
from .core.events import (
    ClaimsReleased, ClaimsSeen, CoordinatorStarted, Event, GenerationPhase,
    HostSampled, RunStopRequested, from_record, to_record,
)
from .core.metrics import COMMIT_BUCKETS, AttemptTally, Histogram
from .core.model import Job
from .core.observations import GpuSample
from .core.policy import Policy
from .core.scheduler import Scheduler
from .core.snapshot import SnapshotError, dump, read
from .core.states import JobState
from .errors import JournalCorrupt, NoRoomToStart
from .inboxes import Inboxes
from .views import Unsettled, Views, forged, read_bytes

log = logging.getLogger("praxist_fs")

RESCAN_SECONDS = 2.0      # periodic spool scan: inotify may drop events (R-FS-4)
RECONCILE_SECONDS = 1.0   # re-adopted attempts and observer health
SAMPLE_SECONDS = 1.0      # host pressure, GPUs and capacity (PSI avg10 moves every 2 s)
QUIET_SECONDS = 5.0       # those three cadences while nothing waits, runs or may be woken
COMPACT_AFTER_RECORDS = 20_000  # journal records before a snapshot replaces them
EVICT_GRACE_SECONDS = 10.0  # between TERM and KILL when requeue preemption evicts an attempt
ORPHAN_SHIM_WAIT_SECONDS = 5.0  # for a shim to act on ABORT (it polls every 0.2 s)
DEGRADED_RETRY_SECONDS = (0.5, 10.0)  # a full disk is retried this often, doubling
SPACE_PROBE_BYTES = 256 * 1024  # room a retry must find before requests are read again
DISK_ERRORS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
               errno.EIO: "I/O error (EIO)"}  # waited out, not fatal (OPERATIONS.md *Full disk*)
DONE_SWEEP_SECONDS = 60.0  # jobs/done/ (every job the run had) is swept for junk this often
DONE_SLICE = 5_000  # ... this many entries a reconcile (~30 ms with 100,000 there)
MTIME_SLACK_NS = 1_000_000_000  # file times lag the clock (coarse kernel clock, NFS skew)


class Coordinator:
    def __init__(self, run_dir: str | os.PathLike, policy: Policy, *,
                 fake_gpus: str | None = None, host_registry: str | None = None,
                 psi_root: str = "/proc/pressure", drop_damaged_record: int | None = None,
                 metrics_textfile_dir: str | None = None) -> None:
        self.layout = RunLayout.at(run_dir)
        self.metrics_textfile_dir = metrics_textfile_dir  # for metrics.prom's copy
        self.commits = Histogram(COMMIT_BUCKETS)  # journal commit latency, this coordinator's
        self.hooks: HookRunner | None = None  # runs the task's completion hooks, if it has any
        self.drop_damaged_record = drop_damaged_record  # an operator's decision, for one seq
        self._case: quarantine.Case | None = None  # what this start sets aside
        self.problems: list[dict[str, Any]] = []   # every quarantine case: in status.json
        self.policy = policy
        self.fake_gpus = fake_gpus
        self.host_registry = host_registry
        self.psi_root = psi_root
        self.registry: HostRegistry | None = None
        self._published: dict[str, list[dict[str, Any]]] = {}
        self._watched: set[int] = set()
        self.sched = Scheduler()
        # (journal seq, views_durable_ns) of the snapshot restored, when it has a watermark
        self._watermark: tuple[int, int] | None = None
        self.selector = selectors.DefaultSelector()
        self.backend: ExecutionBackend = (
            SlurmBackend(self.layout, self.selector, self._job, policy, lambda: self.sched.nodes)
            if policy.backend == "slurm" else
            LocalBackend(self.layout, self.selector, self._job, frozenset(DISK_ERRORS)))
        self.stop_requested = False
        self.observer = None
        self.polling = False
        self.filesystem = "unknown"
        # a tuning (and test) knob: how long the journal may grow before it is compacted
        self.compact_after = max(1, int(os.environ.get("PRAXIST_COMPACT_AFTER")
                                        or COMPACT_AFTER_RECORDS))
        self.degraded: str | None = None  # why nothing is read or journaled (a full disk)
        self._retry_delay = DEGRADED_RETRY_SECONDS[0]
        self._retry_at = 0.0
        self._swept_ns: dict[str, int] = {}  # jobs/ directory -> when its last sweep began
        self.done_sweep = float(os.environ.get("PRAXIST_DONE_SWEEP_SECONDS")
                                or DONE_SWEEP_SECONDS)  # a tuning (and test) knob
        self._next_done_sweep = 0.0
        self._done_listing: Any = None  # the scandir of jobs/done/ a sweep is going through
        self._done_since: int | None = None  # when the sweep before it began

    def _job(self, job_id: str) -> Job | None:
        """A job as the core has it now (backends read it; the scheduler is replaced when
        a batch is rolled back)."""
        return self.sched.jobs.get(job_id)

    # -- life cycle ---------------------------------------------------------

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT. Raises OwnerBusy if another coordinator owns the run,
        NoRoomToStart if its disk is full as it starts (later, a full disk is waited out)."""
        try:
            self.layout.create()
        except OSError as exc:
            if exc.errno not in DISK_ERRORS:
                raise
            raise self._no_room_to_start(exc) from None
        owner = OwnerLock(self.layout)
        owner.acquire()
        clean = False
        try:
            try:
                self._start()
            except OSError as exc:
                if exc.errno not in DISK_ERRORS:
                    raise
                raise self._no_room_to_start(exc) from None
            while True:  # a full disk's error from anywhere in a turn: waited out there
                try:
                    self._loop()
                    break
                except OSError as exc:
                    if not self._disk_error(exc, exc.filename or self.layout.root):
                        raise
            clean = True
        finally:
            self._shutdown(clean)
            owner.release()
        return 0

    def _start(self) -> None:
        runs.register(self.layout.root, "serve", self.host_registry)  # for stop --all
        runs.prune(self.host_registry)  # temporary runs come and go: forget the gone ones
        self.journal = Journal(self.layout.journal, after=self._restore_snapshot(),
                               keep_damaged=self._keep_damaged)
        self.vault = Vault(self.layout)
        if self.policy.hooks.on_job_end or self.policy.hooks.on_generation_close:
            self.hooks = HookRunner(self.layout.hook_logs, self.layout.root,
                                    self.policy.hooks.timeout_seconds)
        reach("start.after_journal_open")
        if self.journal.truncated_bytes:
            log.warning("journal: truncated a torn tail of %d bytes", self.journal.truncated_bytes)
        if self.journal.restored_newline:
            log.warning("journal: record %d was whole but for its newline: kept",
                        self.journal.restored_newline)
        unsettled = Unsettled()  # what the tail changed: the files a crash may have left behind
        for record in self.journal.replay():
            unsettled.note(self.sched.handle(from_record(record)))
        views_durable_ns = self._take_clean_stop()
        if views_durable_ns is not None or self._watermark is None:
            unsettled = None  # a clean stop vouches for every file; no compaction, for none
        else:  # a crash after a compaction: its watermark vouches for the rest
            unsettled.jobs.update(job.job_id for job in (*self.sched.queued(),
                                                         *self.sched.in_flight()))
        self._set_aside_orphans(clean=views_durable_ns is not None)
        self.views = Views(
            self.layout, self.vault,
            JobIndex(self.layout.job_index, journal_seq=self.journal.seq,
                     boot_id=procs.boot_id(), clean=views_durable_ns is not None,
                     settled_seq=self._watermark[0] if unsettled is not None else None),
            AttemptTally.of(self.sched.jobs.values()), self.metrics_textfile_dir)
        self.inboxes = Inboxes(self.layout, self.vault)
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector.register(self._wake_read, selectors.EVENT_READ, ("wake", None))
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        now = time.time()
        pid, _, boot = procs.own_identity()
        self._process([CoordinatorStarted(at=now, policy=self.policy.to_dict(), pid=pid,
                                          host=socket.gethostname(), boot_id=boot,
                                          uid=os.geteuid())])
        write_json(self.layout.policy, self.policy.to_dict(), durable=True, indent=2)
        self.inventory = open_inventory(self.fake_gpus)
        self.pressure = PressureSampler(self.psi_root)
        if not self.policy.on_cluster and any(p.uses_gpu for p in self.policy.profiles.values()):
            directory = Path(self.host_registry) if self.host_registry else default_directory()
            self.registry = HostRegistry(directory, self.layout.root)
        self._sample()
        if unsettled is None:
            self._repair_views(views_durable_ns)
        else:
            self._repair_views(self._watermark[1], unsettled)
        self.problems = quarantine.notes(self.layout)  # the repair may have set some aside
        reach("start.after_repair")
        own = [self.layout.replies, self.layout.rejected, self.layout.scheduler,
               *(self.layout.jobs(d) for d in JOB_DIRECTORIES)]
        if removed := spool.sweep_stale(self.layout.spool_tmp, own, now):
            log.info("removed %d abandoned temporary files", removed)
        if self.layout.stop_sentinel.exists() and not self.sched.stopped:
            self._process([RunStopRequested(at=now, reason="stopped by praxist-fs stop")])
        for job in self.sched.in_flight():
            self._process(self.backend.adopt(job, job.current))
        reach("start.after_adopt")
        self.vault.sweep({job.request.request_id
                          for job in (*self.sched.queued(), *self.sched.in_flight())})
        self.filesystem = filesystem_type(self.layout.root)
        self.polling = needs_polling(self.layout.root)
        self._write_status(force=True)
        self.endpoint = write_endpoint(self.layout, since=now)
        self._start_observer()
        self._read_inboxes()

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.stop_requested = True
        try:
            os.write(self._wake_write, b"s")
        except OSError:
            pass

    def _shutdown(self, clean: bool) -> None:
        """Stop admitting and leave: running attempts stay with their shims (re-adopted later)."""
        if self.observer is not None:
            self.observer.stop()
            self.observer.join(timeout=5)
        self.backend.close()
        if self.hooks is not None:
            self.hooks.close()
        if hasattr(self, "inventory"):
            self.inventory.close()
        if hasattr(self, "journal"):
            if hasattr(self, "inventory"):  # else the start failed before it served
                self._write_status(force=True, state="stopped")
            if clean and self.degraded is None:  # else views are owed: the start repairs
                try:
                    if self.journal.tail:
                        self._compact()
                    self.views.index.close(self.journal.seq)
                    self._mark_clean_stop()
                except OSError as exc:
                    if not self._disk_error(exc, exc.filename or self.layout.journal):
                        raise
            self.journal.close()
            remove_endpoint(self.layout)

    # -- the loop -----------------------------------------------------------

    def _loop(self) -> None:
        _return_memory()  # once serving: the requests found at start are answered first
        next_scan = time.monotonic() + RESCAN_SECONDS
        next_reconcile = time.monotonic() + RECONCILE_SECONDS
        next_sample = time.monotonic() + SAMPLE_SECONDS
        while not self.stop_requested:
            # A run already stopped stays served (frozen: it answers, admits nothing); a
            # run_stop request to this coordinator ends it once its work is gone.
            if self.sched.stopped and self.sched.stop_calls and \
                    not self.sched.in_flight():
                log.info("run stopped (%s): nothing left running; exiting", self.sched.stopped)
                break
            if self.degraded is None:
                self._launch()
                self.backend.prepare(stopped=bool(self.sched.stopped))
                self._process(self.sched.due(time.time()))
                self._process(list(self.sched.next_grants(time.time())))
                self._publish_claims()
            else:
                self._retry_degraded()
            self._write_status()
            now = time.monotonic()
            quiet = self._quiet()
            if not quiet:  # work arrived while the cadence was slow
                next_scan = min(next_scan, now + RESCAN_SECONDS)
                next_reconcile = min(next_reconcile, now + RECONCILE_SECONDS)
                next_sample = min(next_sample, now + SAMPLE_SECONDS)
            deadline = min(next_scan, next_reconcile, next_sample,
                           self.views.status_deadline(self.sched, now),
                           self.backend.next_timer(),
                           self._retry_at if self.degraded else float("inf"))
            scan = False
            for key, _ in self.selector.select(max(0.0, deadline - now)):
                kind, token = key.data
                if kind == "wake":
                    scan |= self._drain_wake()
                else:
                    self._process(self.backend.on_ready(token), launch=True)
            self._process(self.backend.on_timer(time.monotonic()), launch=True)
            now = time.monotonic()
            if scan or now >= next_scan:
                self._read_inboxes()
                next_scan = now + (QUIET_SECONDS if quiet else RESCAN_SECONDS)
            if now >= next_reconcile:
                self._reconcile()
                next_reconcile = now + (QUIET_SECONDS if quiet else RECONCILE_SECONDS)
            if now >= next_sample:
                self._sample()
                next_sample = now + (QUIET_SECONDS if quiet else SAMPLE_SECONDS)
            if self.journal.tail >= self.compact_after and self.degraded is None:
                self._compact()
                _return_memory()  # rendering the snapshot leaves as much garbage as the state

    def _quiet(self) -> bool:
        """Nothing queued, running, leased or idle-registered: no decision waits on the host,
        so an idle coordinator looks at it (and rescans the spool) less often. inotify still
        wakes it at once for a new request."""
        sched = self.sched
        return not (sched.count(JobState.QUEUED) or sched.in_flight()
                    or sched.outstanding_leases() or sched.release_pending
                    or any(sched.idle_peers.values()))

    def _drain_wake(self) -> bool:
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def _ring(self) -> None:
        try:
            os.write(self._wake_write, b"w")
        except BlockingIOError:
            pass

    def _reconcile(self) -> None:
        if self.observer is not None and not self.observer.is_alive():
            log.warning("watchdog observer died; starting a new one and rescanning")
            self._start_observer()
            self._ring()
        self._process(self.backend.reconcile(self.sched.in_flight()))
        if self.degraded is None:  # setting junk aside writes: not on a full disk
            self._tidy_jobs(("queued", "running"))

    def _no_room_to_start(self, exc: OSError) -> NoRoomToStart:
        """The error a start that hit a full disk ends with: the cause, and that nothing was
        lost (requests stay in incoming/, shims keep their commands and exit statuses)."""
        path = exc.filename or self.layout.root
        return NoRoomToStart(
            f"cannot start: {DISK_ERRORS[exc.errno]} on {_file_system(path)}: {path} ([Errno {exc.errno}] "
            f"{exc.strerror}); nothing was consumed (requests wait in spool/incoming/, "
            "running commands keep running and their shims hold their exit status); make "
            "room and start it again")

    def _disk_error(self, exc: OSError, path: str | os.PathLike) -> bool:
        """Whether ``exc`` is a full disk, a quota or EIO: then the coordinator is degraded
        (until a retry finds room) instead of dead: it reads no request and journals
        nothing, and keeps its running attempts supervised. Said once, in the log."""
        what = DISK_ERRORS.get(exc.errno)
        if what is None:
            return False
        if self.degraded is None:
            self.degraded = f"{what} on {_file_system(path)}: {path}"
            log.error("degraded: %s ([Errno %d] %s); requests wait in incoming/, running "
                      "commands are still supervised, retrying until there is room",
                      self.degraded, exc.errno, exc.strerror)
            self._retry_delay = DEGRADED_RETRY_SECONDS[0]
            self._retry_at = time.monotonic() + self._retry_delay
            self.views.status_outdated()  # to say so, if it can
        return True

    def _roll_back(self) -> None:
        """A batch that could not be journaled never happened: none of its effects ran.
        The scheduler is rebuilt from the durable records as a start would (snapshot,
        then journal), the shims the batch bound are warm again, and what it saw
        (requests, exits, results) is seen again once there is room."""
        self.backend.roll_back()
        self.sched = Scheduler()
        after = self._restore_snapshot()
        for record in self.journal.durable(after):
            self.sched.handle(from_record(record))
        self.views.tally = AttemptTally.of(self.sched.jobs.values())
        self.inboxes.forget_results()

    def _retry_degraded(self) -> None:
        """With backoff: once a probe finds room, repair the views that could not be
        written, then look again at what waited (exits told on pipes or held by shims,
        requests, results) and serve as before."""
        if time.monotonic() < self._retry_at:
            return
        probe = temp_name(self.layout.scheduler / "space-probe")  # swept at start if left
        try:
            create(probe, bytes(SPACE_PROBE_BYTES))
            unlink(probe)
            self.journal.rewind()
            self._repair_views(None)
        except OSError as exc:
            if exc.errno not in DISK_ERRORS:
                raise
            self._retry_delay = min(self._retry_delay * 2, DEGRADED_RETRY_SECONDS[1])
            self._retry_at = time.monotonic() + self._retry_delay
            return
        log.warning("resumed: %s no longer (a retry found room); reading requests again",
                    self.degraded)
        self.degraded = None
        self.views.status_outdated()
        self._settle_attempts()
        self._sample()
        self._process([self.backend.observe(job, job.current)
                       for job in self.sched.in_flight()], launch=True)
        self._ring()
        self._tidy_jobs(("queued", "running"))

    # -- events in ----------------------------------------------------------

    def _process(self, events: list[Event], launch: bool = False) -> None:
        """handle -> journal the events that changed state -> one fsync -> effects.

        With ``launch`` (a batch that may fill or free slots: requests, exits) the
        scheduling pass runs inside the batch, so an acceptance or an exit and the launch
        decision it allows share one commit. Not for a run on the host registry: its
        pass runs under the registry's lock (``_launch``)."""
        while events:
            if self.degraded is not None:
                return  # nothing is journaled: what was seen is seen again on recovery
            effects: list[Effect] = []
            committed = self._handle(events, effects)
            if launch and self.registry is None:
                committed |= self._handle(self.sched.next_launches(time.time()), effects)
                launch = False
            committed |= self._handle(self.backend.bind(effects), effects)
            if committed:
                reach("journal.before_commit")
                try:
                    began = time.monotonic()
                    self.journal.commit()
                    self.commits.observe(time.monotonic() - began)
                except OSError as exc:
                    if not self._disk_error(exc, self.layout.journal):
                        raise
                    self._roll_back()
                    return
                reach("journal.after_commit")
            batch, events, effects = events, [], _last_job_writes(effects)
            for effect in sorted(effects, key=_launch_path_first):
                point = f"effect.{_effect_name(effect)}"
                reach(f"{point}.before")
                try:
                    events += self._execute(effect)
                except OSError as exc:  # a view: repaired on recovery; the batch goes on
                    if not self._disk_error(exc, exc.filename or self.layout.scheduler):
                        raise
                reach(f"{point}.after")
            self._settle_attempts()
            if committed and self.hooks is not None:
                self._run_hooks(batch, effects)

    def _run_hooks(self, events: list[Event], effects: list[Effect]) -> None:
        """The task's hooks for the jobs this batch ended (moved into jobs/done/) and the
        generations it closed: after the commit and the job files, so a hook reads what
        the run holds. Queued to the hook runner's thread; this returns at once."""
        hooks, run_dir = self.policy.hooks, str(self.layout.root)
        calls = []
        for effect in effects:
            if isinstance(effect, WriteJob) and effect.directory == "done" and effect.replaces:
                doc = effect.document
                exit_code = doc["exit_code"]
                calls += [("job_end", effect.job_id, hooks.on_job_end, doc, {
                    "PRAXIST_JOB_ID": effect.job_id, "PRAXIST_JOB_STATE": doc["state"],
                    "PRAXIST_EXIT_CODE": "" if exit_code is None else str(exit_code),
                    "PRAXIST_TAG": doc["tag"], "PRAXIST_PEER": doc["peer"],
                    "PRAXIST_GENERATION": "" if doc["generation"] is None
                    else str(doc["generation"])})]
        for event in events:
            if isinstance(event, GenerationPhase) and event.phase == "closed":
                gen = self.sched.generations[event.generation]
                calls += [("generation_close", str(gen.number), hooks.on_generation_close,
                           self.sched.generation_status(gen, soft=False),
                           {"PRAXIST_GENERATION": str(gen.number),
                            "PRAXIST_CLOSE_REASON": event.reason})]
        for kind, subject, commands, document, env in calls:
            for n, argv in enumerate(commands):
                self.hooks.submit(HookCall(
                    name=f"{kind}-{subject}-{n}", argv=argv, document=document,
                    env={"PRAXIST_HOOK": kind, "PRAXIST_RUN_DIR": run_dir, **env}))

    def _handle(self, events: list[Event], effects: list[Effect]) -> bool:
        """Hand events to the core, journal (uncommitted) those that changed its state."""
        journaled = False
        for event in events:
            before = self.sched.version
            effects += self.sched.handle(event)
            if self.sched.version != before:
                self.journal.append(to_record(event))
                journaled = True
        return journaled

    def _settle_attempts(self) -> None:
        """Once the batch's commands are on their way (their GO is journaled and sent):
        attempt.json for each attempt it started, off the launch path; and its directory
        made durable, since exit.json, fsynced by the shim into it, must not vanish with
        the directory after a power cut."""
        try:
            self.backend.settle()
        except OSError as exc:  # kept for the recovery's try
            if not self._disk_error(exc, exc.filename or self.layout.attempts):
                raise

    def _launch(self) -> None:
        """Scheduling passes until nothing more starts. GPU placement runs under the host
        registry lock, from reading the other runs' envelopes to publishing ours."""
        while True:
            if self.registry is not None and self.sched.count(JobState.QUEUED):
                with self.registry.locked():
                    others, _ = self.registry.others()
                    self.sched.handle(ClaimsSeen(at=time.time(), others=tuple(others)))
                    launches = self.sched.next_launches(time.time())
                    self._process(list(launches))
                    self._publish_claims(locked=True)
            else:
                launches = self.sched.next_launches(time.time())
                self._process(list(launches))
            if not launches:
                return

    def _publish_claims(self, locked: bool = False) -> None:
        """Keep this run's registry file equal to what it holds: the envelopes of its running
        jobs and the claims of its outstanding leases. A claim that cannot be removed leaves
        its lease release_pending until a later pass succeeds (R-SUP-5)."""
        if self.registry is None:
            return
        allocations = []
        for envelope in self.sched.held_envelopes():
            attempt = self.sched.jobs[envelope.owner].current
            allocations.append({"job_id": envelope.owner, "uuid": envelope.uuid,
                                "utilization_pct": envelope.utilization_pct,
                                "memory_mib": envelope.memory_mib,
                                "exclusive": envelope.exclusive, "shim_pid": attempt.pid,
                                "shim_start": attempt.pid_start, "boot_id": attempt.boot_id})
        claims = [{"lease_id": lease.lease_id, "expires_at": lease.expires_at, **lease.claim}
                  for gen in self.sched.generations.values() for lease in gen.outstanding()
                  if lease.claim]
        published = {"allocations": allocations, "claims": claims}
        if published == self._published:
            return
        reach("claims.before_publish")
        try:
            if locked:
                self.registry.publish(allocations, claims)
            else:
                with self.registry.locked():
                    self.registry.publish(allocations, claims)
        except OSError as exc:
            stuck = {c["lease_id"] for c in self._published.get("claims", [])} - \
                {c["lease_id"] for c in claims}
            if stuck != self.sched.release_pending:
                log.warning("host registry not writable (%s); claims stay pending", exc)
                self._process([ClaimsReleased(at=time.time(), pending=tuple(sorted(stuck)))])
            return
        self._published = published
        if self.sched.release_pending:
            self._process([ClaimsReleased(at=time.time(), pending=())])

    def _sample(self) -> None:
        """One look at the host for the core: pressure, GPUs (attributed), capacity."""
        others, foreign_shims = self.registry.others() if self.registry else ([], {})
        owners = {job.current.pid: job.job_id for job in self.sched.in_flight()
                  if job.current.pid is not None}
        capacity = None
        if self.sched.policy.max_concurrent_experiments == "auto":
            # suspended work holds no slot: its memory is not added back to the bound
            capacity = read_host_capacity(self.sched.policy.experiment_memory_gb * 1024, [
                job.current.pid for job in self.sched.running() if job.current.pid is not None])
        self._process([HostSampled(
            at=time.time(), pressure=self.pressure.sample(),
            gpus=_attribute(self.inventory.sample(), {**foreign_shims, **owners}),
            capacity=capacity, others=tuple(others))])

    def _read_inboxes(self) -> None:
        """What peers wrote, inbox by inbox, fed to the core. Not while degraded: requests
        wait in incoming/ untouched, and a result read now would count as seen."""
        if self.degraded is None:
            requests, full = self.inboxes.requests()
            self._process(requests, launch=True)
            if full:
                self._ring()  # a full batch: more files are waiting
        if self.degraded is None:
            self._process(self.inboxes.controls())
        if self.degraded is None:
            self._process(self.inboxes.generations(self.sched.generations))

    def _start_observer(self) -> None:
        self.observer = start_observer([self.layout.incoming, self.layout.control],
                                       self._ring, self.polling)
        self._watched: set[int] = set()
        for number in self.sched.generations:
            self._watch_generation(number)

    def _watch_generation(self, number: int) -> None:
        """A generation's peer inboxes (results, idle registrations) ring the doorbell too,
        from before its first file is written (a lease) for a peer to answer."""
        self.views.make_generation(number)
        if self.observer is None or number in self._watched:
            return
        for directory in (self.layout.results(number), self.layout.idle(number)):
            watch(self.observer, directory)
        self._watched.add(number)

    # -- effects out --------------------------------------------------------

    def _execute(self, effect: Effect) -> list[Event]:
        """Attempt effects go to the backend; every other effect is a file: a view."""
        if isinstance(effect, SpawnAttempt):
            return self.backend.start(effect, lambda: self.vault.reveal(
                effect.metadata["request_id"], launcher.attempt_environment(self.layout, effect)))
        elif isinstance(effect, WriteGo):
            self.backend.go((effect.job_id, effect.attempt_id))
        elif isinstance(effect, AbortAttempt):
            self.backend.abort((effect.job_id, effect.attempt_id))
        elif isinstance(effect, TerminateAttempts):
            return self.backend.terminate(list(effect.attempts))
        elif isinstance(effect, SuspendAttempt):
            by = self.sched.jobs[effect.job_id].current.preemptions[-1]["by"]
            self.backend.suspend((effect.job_id, effect.attempt_id), by)
        elif isinstance(effect, ResumeAttempt):
            self.backend.resume((effect.job_id, effect.attempt_id))
        elif isinstance(effect, (EvictAttempt, CancelAttempt)):
            grace = effect.grace if isinstance(effect, CancelAttempt) else EVICT_GRACE_SECONDS
            self.backend.end((effect.job_id, effect.attempt_id), grace, suspended=(
                self.sched.jobs[effect.job_id].state is JobState.SUSPENDED))
        else:
            if isinstance(effect, WriteGenerationFile):
                self._watch_generation(effect.generation)
            self.views.execute(effect, self.sched)
        return []

    # -- derived files --------------------------------------------------------

    def _restore_snapshot(self) -> int:
        """The scheduler as the last compaction left it, and the journal seq it covers
        (with the snapshot's watermark, if it has one, in ``_watermark``)."""
        try:
            handle = open(self.layout.snapshot, "rb")
        except FileNotFoundError:
            return 0
        with handle:
            try:
                seq, durable_ns, self.sched = read(handle)
            except SnapshotError as exc:
                raise JournalCorrupt(
                    f"{self.layout.snapshot}: {exc}; refusing to start. If journal.log still "
                    "begins at seq 1, moving the snapshot aside replays the whole history"
                ) from None
        if not isinstance(seq, int) or seq < 0:
            raise JournalCorrupt(f"{self.layout.snapshot}: journal_seq {seq!r} is not a count")
        self._watermark = None if durable_ns is None else (seq, durable_ns)
        return seq

    def _keep_damaged(self, seq: int, offset: int, data: bytes) -> bool:
        """A damaged last journal record may go only on the operator's word for its seq
        (``--drop-damaged-record``), and only once its bytes are kept in quarantine."""
        if seq != self.drop_damaged_record:
            return False
        self._quarantine().keep(f"journal-seq-{seq}.bin", data, (
            f"journal record seq {seq} (from byte {offset}) was a complete line that failed "
            f"its checksum; dropped by --drop-damaged-record {seq}"))
        return True

    def _set_aside_orphans(self, clean: bool) -> None:
        """Nothing may stand that the journal does not know: a derived file of a request,
        control, job, lease or attempt it has no record of proves a record it lost (a
        damaged one dropped, a journal cut by hand). Replies, control replies, job files
        and lease files are moved to quarantine and reported, not admitted again: the
        request's env, file digest, lease and cost ceiling were only in the lost record,
        and a resend of it is answered afresh, on the same job id. An attempt directory is
        a lost launch (``_release_orphan``). ``jobs/*/`` gets the reconcile's sweep
        (``_tidy_jobs``), which sets aside the job files of unknown jobs among other junk.
        Runs after replay, before anything is journaled."""
        layout, sched = self.layout, self.sched
        attempts = [layout.attempt_dir(job.job_id, f"a{len(job.attempts) + 1}")
                    for job in sched.queued()]
        attempts += [layout.attempts / job_id / attempt for job_id in _names(layout.attempts)
                     if job_id not in sched.jobs for attempt in _names(layout.attempts / job_id)]
        attempts = [path for path in attempts if path.is_dir()]
        for path in attempts:  # before anything is moved: a refusal leaves the run as it was
            if (path / "GO").exists() or (path / "exit.json").exists():
                raise JournalCorrupt(
                    f"{path}: an attempt the journal has no record of was given GO (its "
                    "command ran or runs); refusing to start: launching its job again could "
                    "run it twice (OPERATIONS.md *Crash*)")
        for path in attempts:
            self._release_orphan(path)
        for directory, known, what in (
                (layout.replies, sched.replies, "reply"),
                (layout.control_replies, sched.control_replies, "control reply")):
            for name in _names(directory):
                if name.endswith(".json") and name[:-5] not in known:
                    self._quarantine().move(directory / name, _unknown(what, directory / name))
        self._tidy_jobs(JOB_DIRECTORIES, start=True, clean=clean)
        for number, gen in sched.generations.items():  # a lease file shows its peer's latest
            for name in _names(layout.leases(number)):
                doc = read_json(layout.leases(number) / name)
                if name.endswith(".json") and isinstance(doc, dict) and \
                        doc.get("lease_id") not in gen.leases:
                    self._quarantine().move(layout.leases(number) / name, (
                        f"lease {doc.get('lease_id')} of generation {number} for peer "
                        f"{name[:-5]} ({doc.get('state')}): the journal has no record of it; "
                        "set aside: the peer waits for a lease again"))
        self.problems = quarantine.notes(layout)
        if earlier := len(self.problems) - (self._case is not None):
            log.warning("%d earlier quarantine case(s) in %s await an operator (status.json "
                        "coordinator.problems)", earlier, layout.quarantine)

    def _tidy_jobs(self, directories: tuple[str, ...], *, start: bool = False,
                   clean: bool = True) -> None:
        """``jobs/<d>/`` holds one thing per job in that state: ``<job_id>.json`` (R-FS-6).
        Everything else is set aside in quarantine with a note, never served or signalled:
        so a listing of ``jobs/running/`` shows only jobs that run (issue 14).

        Runs between batches only (at start after replay, then from ``_reconcile``), when
        every job's own move is done, so a copy in the wrong directory is no move in
        flight. At a start after a crash it may be the last coordinator's unfinished move,
        and hidden temp files its unfinished writes: those are removed, as leftovers of
        our own (``spool.sweep_stale`` takes the temp files). A file in its right place
        that changed since the directory's last sweep and says other than the journal is
        set aside too, then rewritten from it; at start ``_repair_views`` rewrites those.
        After the start, jobs/done/ (every job the run had) goes by ``_tidy_done``."""
        if not start:
            self._case = None  # each reconcile that finds something opens its own case
        moved = False
        for directory in directories:
            since = self._swept_ns.get(directory)
            self._swept_ns[directory] = time.time_ns()
            try:
                with os.scandir(self.layout.jobs(directory)) as listing:
                    entries = list(listing)
            except FileNotFoundError:  # removed by hand: the next start makes it again
                continue
            moved |= self._set_aside_junk(directory, entries, start, clean,
                                          None if start else since)
        if not start:
            moved |= self._tidy_done()
        elif "done" in directories:  # the next pass over jobs/done/ comes a while later
            self._next_done_sweep = time.monotonic() + self.done_sweep
        if moved and not start:
            self.problems = quarantine.notes(self.layout)
            self.views.status_outdated()  # status.json counts them at its next write

    def _tidy_done(self) -> bool:
        """jobs/done/, every ``done_sweep`` seconds, DONE_SLICE entries a reconcile (a stat
        each: 100,000 at once would hold the loop for half a second). An entry listed in
        an earlier slice is judged on the state of now: between batches still."""
        if self._done_listing is None:
            if time.monotonic() < self._next_done_sweep:
                return False
            self._done_since = self._swept_ns.get("done")
            self._swept_ns["done"] = time.time_ns()
            try:
                self._done_listing = os.scandir(self.layout.jobs("done"))
            except FileNotFoundError:
                self._next_done_sweep = time.monotonic() + self.done_sweep
                return False
        entries = list(itertools.islice(self._done_listing, DONE_SLICE))
        if len(entries) < DONE_SLICE:
            self._done_listing.close()
            self._done_listing = None
            self._next_done_sweep = time.monotonic() + self.done_sweep
        return self._set_aside_junk("done", entries, False, True, self._done_since)

    def _set_aside_junk(self, directory: str, entries: list[os.DirEntry], start: bool,
                        clean: bool, since_ns: int | None) -> bool:
        """Set aside the junk among ``entries`` of ``jobs/<directory>/`` (``_junk`` says
        which); a job's own file is rewritten from the journal. True if any was."""
        moved = False
        for entry in entries:
            job = self.sched.jobs.get(entry.name[:-5]) if entry.name.endswith(".json") else None
            why = self._junk(directory, entry, job, start, clean,
                             None if since_ns is None else since_ns - MTIME_SLACK_NS)
            if why is None:
                continue
            own = job is not None and job.state.directory == directory
            found = read_bytes(entry.path) \
                if own and entry.is_file(follow_symlinks=False) else None
            try:
                if found is not None:  # kept, then replaced in one rename: never missing
                    self._quarantine().keep(_relative(self.layout, entry.path), found, why)
                else:
                    self._quarantine().move(Path(entry.path), why)
            except FileNotFoundError:
                continue  # gone meanwhile: nothing to set aside
            moved = True
            if own and not start:
                self._execute(WriteJob(job_id=job.job_id, directory=directory,
                                       document=self.sched.job_document(job)))
        return moved

    def _junk(self, directory: str, entry: os.DirEntry, job: Job | None, start: bool,
              clean: bool, since_ns: int | None) -> str | None:
        """Why ``entry`` of ``jobs/<directory>/`` is set aside, or None if it stays."""
        if job is not None and job.state.directory == directory and \
                entry.is_file(follow_symlinks=False):  # the common case first: no syscall
            try:
                if since_ns is None or entry.stat(follow_symlinks=False).st_mtime_ns < since_ns:
                    return None  # untouched since the last sweep found it right
            except FileNotFoundError:
                return None
            data = read_bytes(entry.path)
            return None if data is None else forged(self.sched, job, data)  # None: it went
        where = f"jobs/{directory}/"
        kind = "symlink" if entry.is_symlink() else "directory" \
            if entry.is_dir(follow_symlinks=False) else "file" \
            if entry.is_file(follow_symlinks=False) else "special file"
        if fnmatch.fnmatchcase(entry.name, TEMP_PATTERN) and kind == "file":
            if start:
                return None  # a crashed write of ours: removed by spool.sweep_stale
            return (f"a hidden temporary file in {where} with no write in progress (the "
                    "coordinator, its only writer, finishes each before the next sweep)")
        if job is None:
            if kind == "file" and entry.name.endswith(".json"):
                return _unknown("job file", Path(entry.path))
            return f"a {kind} in {where}, which holds only <job_id>.json files of its jobs"
        if job.state.directory != directory:
            if start and not clean and kind == "file":
                unlink(entry.path)  # a move the last coordinator began and did not finish
                return None
            return (f"a {kind} named for job {job.job_id}, which is {job.state.value}: its "
                    f"file is jobs/{job.state.directory}/{entry.name}; a stale or forged "
                    "copy, never served or signalled")
        return (f"a {kind} where job {job.job_id}'s file belongs; set aside, and the "
                "file rewritten from the journal")

    def _release_orphan(self, attempt_dir: Path) -> None:
        """An attempt directory the journal has no launch for, with no GO: GO is journaled
        after the launch, so its command never started. ABORT it (a shim at the barrier,
        or one still starting, leaves without starting it), wait for its shim to go, and
        set the directory aside, so that the job's next launch (under the same attempt id)
        cannot wake the old shim. Its shim: READY's identity, or any process given the
        directory (one started for it that has not written READY yet)."""
        write_atomic(attempt_dir / "ABORT", b"", durable=True)
        deadline = time.monotonic() + ORPHAN_SHIM_WAIT_SECONDS
        while True:
            ready = read_json(attempt_dir / "READY")
            shims = procs.with_argument(str(attempt_dir))
            if isinstance(ready, dict) and procs.is_alive(
                    ready.get("pid"), ready.get("start_time"), ready.get("boot_id")):
                shims.append(ready["pid"])
            if not shims:
                break
            if time.monotonic() > deadline:
                raise JournalCorrupt(
                    f"{attempt_dir}: the shim (pid {shims[0]}) of an attempt the journal has "
                    "no record of did not leave after ABORT; refusing to start")
            time.sleep(0.05)
        self._quarantine().move(attempt_dir, (
            "an attempt whose launch record was lost; its command never started (no GO): "
            "aborted, and its job launches again"))

    def _quarantine(self) -> quarantine.Case:
        if self._case is None:
            self._case = quarantine.Case(self.layout, time.time())
        return self._case

    def _compact(self) -> None:
        """Write the state the journal has built as one durable snapshot, then empty the
        journal: a start then reads the snapshot and a short tail, not the whole history.
        Runs between loop turns, when every handled event is committed and its effects
        carried out (not degraded: every view was written): the job index is committed
        and everything made durable, and the snapshot records when (its watermark), so a
        start after a crash reads back only the files of what the tail changed."""
        self.journal.commit()
        self.views.index.flush(self.journal.seq)
        sync_all()
        data = b"".join(dump(self.sched, self.journal.seq, views_durable_ns=time.time_ns()))
        reach("snapshot.before_write")
        write_atomic(self.layout.snapshot, data, durable=True, mode=0o600)
        reach("snapshot.after_write")
        self.journal.compact()
        reach("snapshot.after_truncate")
        log.info("journal compacted into a snapshot at seq %d", self.journal.seq)

    def _mark_clean_stop(self) -> None:
        """Every effect of every journaled event was carried out: make the derived files
        (written without fsync) durable, then say so, so that the next start need not
        read them all back."""
        sync_all()
        write_json(self.layout.clean_stop, {"journal_seq": self.journal.seq,
                                           "views_durable_ns": time.time_ns()}, durable=True)

    def _take_clean_stop(self) -> int | None:
        """When the last coordinator stopped cleanly at exactly this journal, the time its
        derived files were all durable. The marker is removed (durably) before anything
        new is journaled, so it never vouches for a later state."""
        marker = read_json(self.layout.clean_stop)
        if marker is None:
            return None
        unlink(self.layout.clean_stop)
        fsync_dir(self.layout.clean_stop.parent)
        if not isinstance(marker, dict) or marker.get("journal_seq") != self.journal.seq:
            return None
        durable_ns = marker.get("views_durable_ns")
        return durable_ns if isinstance(durable_ns, int) else None

    def _repair_views(self, durable_ns: int | None, unsettled: Unsettled | None = None) -> None:
        """The derived files made to agree with the journal (``Views.repair``); a forged
        job file found on the way goes to this start's quarantine case."""
        self.views.repair(self.sched, durable_ns, self.journal.seq, lambda path, data, why:
                          self._quarantine().keep(_relative(self.layout, path), data, why),
                          unsettled)

    def _write_status(self, force: bool = False, state: str = "serving") -> None:
        """status.json and metrics.prom at their cadence (``Views.status_due``), with what
        only the coordinator knows; never ahead of a request or an exit waiting."""
        now = time.time()
        if not force and (not self.views.status_due(self.sched, now) or
                          self.views.status_recent(now) and self.selector.select(0)):
            return
        if self.sched.stopped and state == "serving":
            state = f"stopped: {self.sched.stopped} (admits nothing)"
        runtime = {"state": state, "pid": os.getpid(), "run_dir": str(self.layout.root),
                   "observer": "polling" if self.polling else "inotify",
                   "filesystem": self.filesystem,
                   "journal_seq": self.journal.seq, "problems": self.problems,
                   "degraded": self.degraded,
                   "quarantined": sum(len(case["items"]) for case in self.problems),
                   "gpu_inventory": self.inventory.source}
        try:
            self.views.write_status(self.sched, now, runtime, self.journal.seq, self.commits,
                                    serving=state != "stopped")
        except OSError as exc:  # tried again at the usual cadence, not at every turn
            if not self._disk_error(exc, self.layout.status):
                raise
        self.views.status_written(self.sched, now)


def _return_memory() -> None:
    """Start-up (replay, repair) and compaction leave freed memory behind, which would
    stay as RSS: collect it, give what the C heap can spare back (glibc's malloc_trim),
    and freeze what survives, so that later collections need not walk every job the run
    ever had."""
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the memory stays with the process
        pass
    gc.freeze()


def _file_system(path: str | os.PathLike) -> str:
    """'<device> (<type>) at <mount point>' of the file system that holds ``path``."""
    target, best = os.path.realpath(path), ("?", "?", "/")
    try:
        with open("/proc/self/mounts") as mounts:
            for line in mounts:
                source, point, kind = line.split()[:3]
                point = point.replace("\\040", " ")
                if (target == point or target.startswith(point.rstrip("/") + "/")) and \
                        len(point) >= len(best[2]):
                    best = (source, kind, point)
    except OSError:
        pass
    return f"{best[0]} ({best[1]}) at {best[2]}"


def _unknown(what: str, path: Path) -> str:
    """The note for a derived file of a request, control or job the journal does not know."""
    doc = read_json(path)
    said = doc.get("outcome") or doc.get("state") if isinstance(doc, dict) \
        else None  # what a reply answered, where a job file stood
    return (f"{what} {path.name[:-5]} ({said}): the journal has no record of it (its record "
            "was lost, or the coordinator never wrote it); set aside, not served: a resend "
            "of the request is answered afresh")


def _relative(layout: RunLayout, path: str | os.PathLike) -> str:
    """A path of the run as its quarantine case keeps it."""
    return os.path.relpath(path, layout.root)


def _names(directory: str | os.PathLike) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _attribute(sample: GpuSample, owners: dict[int, str]) -> GpuSample:
    """Map each GPU process to the praxist job whose shim leads its session, if any.

    A pid missing from our /proc is outside our PID namespace: unmappable."""
    devices = []
    for device in sample.devices:
        processes = []
        for process in device.processes:
            session = procs.session_id(process.pid)
            processes.append(replace(process, in_namespace=session is not None,
                                     owner=owners.get(session) if session is not None else None))
        devices.append(replace(device, processes=tuple(processes)))
    return replace(sample, devices=tuple(devices))


def _last_job_writes(effects: list[Effect]) -> list[Effect]:
    """One job-file write per job and batch, the last (what the file must say), moved from
    wherever the batch found it: an acceptance and its launch write one file, not three."""
    first: dict[str, WriteJob] = {}
    last: dict[str, WriteJob] = {}
    for effect in effects:
        if isinstance(effect, WriteJob):
            first.setdefault(effect.job_id, effect)
            last[effect.job_id] = effect
    kept: list[Effect] = []
    for effect in effects:
        if not isinstance(effect, WriteJob):
            kept.append(effect)
        elif effect is last[effect.job_id]:
            start = first[effect.job_id]
            found = start.replaces if start.replaces is not None else start.directory
            kept.append(replace(effect, replaces=found if found != effect.directory else None))
    return kept


def _launch_path_first(effect: Effect) -> int:
    """Sort key: shims are told their attempt and GO before the batch's files are written
    (replies, job files: nothing waits on them), so that commands start sooner. Signals
    to running work stay ahead of launches: a victim's suspension is under way before
    the GO of the job that takes its room, which waits for it (``_go``). The sort is
    stable: a spawn still precedes its GO."""
    if isinstance(effect, (SuspendAttempt, ResumeAttempt, EvictAttempt)):
        return 0
    return 1 if isinstance(effect, (SpawnAttempt, WriteGo)) else 2


def _effect_name(effect: Effect) -> str:
    """WriteJob, WriteReply, ...; generation files add their kind (WriteGenerationFile.lease)."""
    name = type(effect).__name__
    return f"{name}.{effect.kind}" if isinstance(effect, WriteGenerationFile) else name
