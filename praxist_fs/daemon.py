"""The coordinator: the loop, the only place that feeds the core. What peers wrote comes
in as events from the inboxes (``inboxes.py``); the files the journal implies go out
through the views (``views.py``); neither feeds the core nor calls the loop.

lock -> warm shims on their way -> replay the journal -> record this start -> repair
derived files -> re-adopt live attempts -> start the observer -> scan the spool ->
return the start's memory -> endpoint.json -> loop.
The loop waits on one selector (the inotify doorbell; a wake-up pipe rung by signals,
the compaction or a polling observer; shim status pipes, pidfds of re-adopted shims,
the shim server's answers, or a timeout), turns what it sees into events, and for
every batch:
the driver (``driver.py``: ``Scheduler.handle`` with the scheduling pass, for
requests and exits, and a warm shim bound to each new attempt -> journal append ->
one fsync -> carry out the effects, launches first). The run directory's
housekeeping (``housekeeping.py``) and the journal's compaction (``compaction.py``)
do file work the loop asks for. Nothing here decides what to run.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import logging
import os
import selectors
import signal
import socket
import time
from pathlib import Path
from typing import Any

from . import compaction
from .adapters import procs, quarantine, runs, spool
from .adapters.crashpoints import reach
from .adapters.capacity import read_host_capacity
from .adapters.fsio import create, temp_name, unlink, write_json
from .adapters.gpus import attribute_processes, open_inventory
from .adapters.hooks import HookRunner
from .adapters.hostclaims import HostRegistry, default_directory
from .adapters.jobindex import JobIndex
from .adapters.journal import Journal
from .adapters.layout import RunLayout
from .adapters.lock import OwnerLock, remove_endpoint, write_endpoint
from .adapters.pressure import PressureSampler
from .adapters.vault import Vault
from .adapters.wakepipe import drain
from .adapters.watcher import (
    INBOX_CHANGES, InotifyBell, filesystem_of, filesystem_type, needs_polling, start_doorbell,
    watch,
)
from .backends import registry as backends
from .backends.base import ExecutionBackend, RunContext
from .backends.environment import CommandEnvironment
from .backends.local import shim_of
from .core.effects import Effect, WriteJob
from .core.events import (
    ClaimsReleased, ClaimsSeen, CoordinatorStarted, Event, HostSampled, RunStopRequested,
)
from .core.metrics import AttemptTally
from .core.model import Job
from .core.policy import Policy
from .core.scheduler import Scheduler
from .core.states import JobState
from .driver import Driver
from .errors import NoRoomToStart
from .housekeeping import DONE_SWEEP_SECONDS, Housekeeper
from .inboxes import Inboxes
from .sinks import HookSink, SecretsSink, Sink, StatusSink
from .stopper import fenced_reason
from .turns import LoopTurns
from .views import Unsettled, Views

log = logging.getLogger("praxist_fs")

RESCAN_SECONDS = 2.0      # periodic spool scan: inotify may drop events (R-FS-4)
RECONCILE_SECONDS = 1.0   # re-adopted attempts and observer health
SAMPLE_SECONDS = 1.0      # host pressure, GPUs and capacity (PSI avg10 moves every 2 s)
QUIET_SECONDS = 5.0       # those three cadences while nothing waits, runs or may be woken
# a status.json write owed waits this long for a request or a shim's word to come first
# (if written in the last second): written at the turn after a job ended or before a
# shim's READY, it delayed the next request or the GO by its time (4.6 ms p50 at a load
# of 5): the submit-to-start p99 of jobs submitted one after another (R-PERF-3)
STATUS_LULL_SECONDS = 0.002
COMPACT_AFTER_RECORDS = 20_000  # journal records before a snapshot replaces them
DEGRADED_RETRY_SECONDS = (0.5, 10.0)  # a full disk is retried this often, doubling
SPACE_PROBE_BYTES = 256 * 1024  # room a retry must find before requests are read again
DISK_ERRORS = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded",
               errno.EIO: "I/O error (EIO)"}  # waited out, not fatal (OPERATIONS.md *Full disk*)


class Coordinator:
    def __init__(self, run_dir: str | os.PathLike, policy: Policy, *,
                 fake_gpus: str | None = None, host_registry: str | None = None,
                 psi_root: str = "/proc/pressure", drop_damaged_record: int | None = None,
                 metrics_textfile_dir: str | None = None) -> None:
        self.layout = RunLayout.at(run_dir)
        self.metrics_textfile_dir = metrics_textfile_dir  # for metrics.prom's copy
        # outputs after each commit (sinks.py): the vault and the task's hooks once the
        # journal is open, status.json and metrics.prom once the host is known; a caller
        # may add its own
        self.sinks: list[Sink] = []
        self.drop_damaged_record = drop_damaged_record  # an operator's decision, for one seq
        self.dropped_record = False  # it was taken: this start looks at every derived file
        self.problems: list[dict[str, Any]] = []   # every quarantine case: in status.json
        self.policy = policy
        self.fake_gpus = fake_gpus
        self.host_registry = host_registry
        self.psi_root = psi_root
        self.registry: HostRegistry | None = None
        self._published: dict[str, list[dict[str, Any]]] = {}
        self._watched: set[int] = set()
        self.selector = selectors.DefaultSelector()
        self.turns = LoopTurns()  # metrics.prom: how long each turn keeps the loop away
        self.backend: ExecutionBackend = backends.make(RunContext(
            self.layout, self.selector, self._job, policy, lambda: self.sched.nodes,
            frozenset(DISK_ERRORS), CommandEnvironment(self.layout)))
        # the journal and the views join it once the start has opened them
        self.driver = Driver(Scheduler(), self.backend,
                             waited_out=self._disk_error,
                             watch_generation=self._watch_generation,
                             sinks=self.sinks)
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
        self.housekeeper = Housekeeper(self.layout, float(
            os.environ.get("PRAXIST_DONE_SWEEP_SECONDS")
            or DONE_SWEEP_SECONDS))  # a tuning (and test) knob

    @property
    def sched(self) -> Scheduler:
        """The core, as the driver feeds it (a batch rolled back replaces it)."""
        return self.driver.sched

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
        """Replay, repair, re-adopt, then serve. The backend gets ready for launches first
        (the shim server's interpreter starts and forks its first supervisors while the
        journal replays), so that the first job after a start finds a shim waiting as
        later ones do. Not before the run's lock (``run``): a coordinator that loses the
        run to another starts nothing. Nor does it need the replay: new supervisors are
        this coordinator's own, never taken for the attempts it re-adopts (PROTOCOL.md
        section 6, *Supervisors*); a run found stopped keeps none (``prepare``)."""
        self.backend.prepare(stopped=self.layout.stop_sentinel.exists())
        runs.register(self.layout.root, "serve", self.host_registry)  # for stop --all
        runs.prune(self.host_registry)  # temporary runs come and go: forget the gone ones
        compaction.sweep_unfinished(self.layout)  # a compaction killed as it wrote
        restored = compaction.restore(self.layout)
        after, watermark, self.driver.sched = restored[:3]
        self.journal = self.driver.journal = Journal(self.layout.journal, after=after,
                                                     keep_damaged=self._keep_damaged)
        self.vault = Vault(self.layout)
        self.sinks.append(SecretsSink(self.vault))
        if self.policy.hooks.on_job_end or self.policy.hooks.on_generation_close:
            self.sinks.append(HookSink(HookRunner(
                self.layout.hook_logs, self.layout.root, self.policy.hooks.timeout_seconds),
                str(self.layout.root)))
        reach("start.after_journal_open")
        if self.journal.truncated_bytes:
            log.warning("journal: truncated a torn tail of %d bytes", self.journal.truncated_bytes)
        if self.journal.restored_newline:
            log.warning("journal: record %d was whole but for its newline: kept",
                        self.journal.restored_newline)
        unsettled = Unsettled()  # what the tail changed: the files a crash may have left behind
        tally = _tally(restored.tally, self.sched)

        def replayed(effects: list[Effect]) -> None:
            unsettled.note(effects)
            _count(tally, self.sched, effects)
        compaction.replay_shelving(self.layout, self.sched, self.journal.replay(), replayed,
                                   self.compact_after, tally)
        views_durable_ns = compaction.take_clean_stop(self.layout, self.journal.seq)
        if views_durable_ns is not None or watermark is None or self.dropped_record:
            unsettled = None  # a clean stop vouches for every file; no compaction (or a
            # damaged record dropped: its files are orphans to set aside now), for none
        else:  # a crash after a compaction: its watermark vouches for the rest
            unsettled.jobs.update(job.job_id for job in (*self.sched.queued(),
                                                         *self.sched.in_flight()))
        settled_ns = views_durable_ns if unsettled is None else watermark  # see repair
        self.problems = self.housekeeper.set_aside_orphans(
            self.sched, clean=views_durable_ns is not None, settled_ns=settled_ns)
        self.views = self.driver.views = Views(
            self.layout, self.vault,
            JobIndex(self.layout.job_index, journal_seq=self.journal.seq,
                     boot_id=procs.boot_id(), clean=views_durable_ns is not None,
                     settled_seq=after if unsettled is not None else None),
            tally)
        if views_durable_ns is not None or self.journal.seq == 0:  # the last coordinator
            self.views.unsynced.vouched()  # synced all it wrote, or there was none: none owed
        self.status = StatusSink(self.views, self.driver.commits, self._runtime,
                                 lambda: self.journal.seq, self.metrics_textfile_dir,
                                 busy=lambda: bool(self.selector.select(STATUS_LULL_SECONDS)),
                                 failed=self._disk_error,
                                 turns=(self.turns.wall, self.turns.cpu))
        self.inboxes = Inboxes(self.layout, self.vault, (self.policy.spool_quota_requests,
                                                         self.policy.spool_quota_bytes))
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.compactor = compaction.Compactor(self.layout, self.compact_after, self._wake_write,
                                              self.views.unsynced)
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
        self.sinks.append(self.status)  # it shows the host's inventory: from now on
        if any(p.uses_gpu and not self.policy.capabilities_of(p).places_gpus
               for p in self.policy.profiles.values()):  # the core places this host's GPUs
            directory = Path(self.host_registry) if self.host_registry else default_directory()
            self.registry = HostRegistry(directory, self.layout.root)
        self._sample()
        self._repair_views(settled_ns, unsettled)
        self.problems = quarantine.notes(self.layout)  # the repair may have set some aside
        reach("start.after_repair")
        own = [self.layout.rejected, self.layout.scheduler, self.layout.jobs("queued"),
               self.layout.jobs("running")]
        if settled_ns is None:  # else the history's are the sweep's (``Housekeeper``)
            own += [self.layout.replies, self.layout.jobs("done")]
        if removed := spool.sweep_stale(self.layout.spool_tmp, own, now):
            log.info("removed %d abandoned temporary files", removed)
        if self.layout.stop_sentinel.exists() and not self.sched.stopped:
            self._process([RunStopRequested(at=now, reason=fenced_reason(self.layout))])
        if self.sched.stopped:  # a start that changes nothing must say so
            log.warning("the run %s is stopped (%s): serving it frozen: it answers requests "
                        "but admits and launches nothing, for good; continue in a new run "
                        "directory", self.layout.root, self.sched.stopped)
        for job in self.sched.in_flight():
            self._process(self.backend.adopt(job, job.current))
        reach("start.after_adopt")
        self.vault.sweep({job.request.request_id
                          for job in (*self.sched.queued(), *self.sched.in_flight())})
        self.filesystem = filesystem_type(self.layout.root)
        self.polling = needs_polling(self.layout.root)
        self.status.tick(self.sched, force=True)
        self._start_observer()
        self._read_inboxes()  # what waited for this start is answered before the collection
        _return_memory()
        self.backend.prepare(stopped=bool(self.sched.stopped))  # the forks answered meanwhile
        # Last: once it exists, a request is served as fast as any later one. A peer that
        # waits for it to submit finds no start-up work in its request's way.
        write_endpoint(self.layout, since=now)

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
        for sink in self.sinks:  # the status sink's is there once the start served
            sink.close(self.sched)
        if hasattr(self, "inventory"):
            self.inventory.close()
        if hasattr(self, "journal"):
            if hasattr(self, "compactor"):
                self.compactor.wait(self.journal, self.sched)
            if clean and self.degraded is None:  # else views are owed: the start repairs
                try:
                    if self.journal.tail:
                        compaction.compact(self.layout, self.journal, self.sched,
                                           self.views.index, self.views.tally,
                                           self.views.unsynced)
                    self.views.index.close(self.journal.seq)
                    compaction.mark_clean_stop(self.layout, self.journal.seq,
                                               self.views.unsynced, self.views.index.files())
                except OSError as exc:
                    if not self._disk_error(exc, exc.filename or self.layout.journal):
                        raise
            self.journal.close()
            remove_endpoint(self.layout)

    # -- the loop -----------------------------------------------------------

    def _loop(self) -> None:
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
            for sink in self.sinks:
                sink.tick(self.sched)
            now = time.monotonic()
            quiet = self._quiet()
            if not quiet:  # work arrived while the cadence was slow
                next_scan = min(next_scan, now + RESCAN_SECONDS)
                next_reconcile = min(next_reconcile, now + RECONCILE_SECONDS)
                next_sample = min(next_sample, now + SAMPLE_SECONDS)
            deadline = min(next_scan, next_reconcile, next_sample,
                           self.status.status_deadline(self.sched, now),
                           self.backend.next_timer(),
                           self._retry_at if self.degraded else float("inf"),
                           now if self.views.indexing or self.compactor.finishing
                           else float("inf"))
            rang: set[Path] | None = set()  # the inboxes to list (None: every one)
            told: list[Event] = []  # every shim that spoke this turn: one batch, one commit
            self.turns.ended()
            ready = self.selector.select(max(0.0, deadline - now))
            self.turns.began()
            for key, _ in ready:
                kind, token = key.data
                if kind == "wake":
                    woke = self._drain_wake(token)
                    rang = None if woke is None or rang is None else rang | woke
                else:
                    told += self.backend.on_ready(token)
            self._process(told, launch=True)
            self._process(self.backend.on_timer(time.monotonic()), launch=True)
            now = time.monotonic()
            if now >= next_scan:
                rang = None  # the periodic look at every inbox: a hint may have been lost
            if rang is None or rang:
                self._read_inboxes(rang)
                if rang is None:
                    next_scan = now + (QUIET_SECONDS if quiet else RESCAN_SECONDS)
                if (left := self.inboxes.grace_left) is not None:  # read again as it stands
                    next_scan = min(next_scan, now + left)
            if now >= next_reconcile:
                self._reconcile()
                next_reconcile = now + (QUIET_SECONDS if quiet else RECONCILE_SECONDS)
            if now >= next_sample:
                self._sample()
                next_sample = now + (QUIET_SECONDS if quiet else SAMPLE_SECONDS)
            self.views.index_history(  # a slice, if rebuilding; cut short by news
                self.sched, self.journal.seq, lambda: bool(self.selector.select(0)))
            if self.degraded is None and self.compactor.turn(  # a step a turn
                    self.journal, self.sched, self.views.index, self.views.tally):
                _return_memory()  # the jobs the snapshot took leave memory (a turn alone)

    def _quiet(self) -> bool:
        """Nothing queued, running, leased or idle-registered: no decision waits on the host,
        so an idle coordinator looks at it (and rescans the spool) less often. inotify still
        wakes it at once for a new request."""
        sched = self.sched
        return not (sched.count(JobState.QUEUED) or sched.in_flight()
                    or sched.outstanding_leases() or sched.release_pending
                    or any(sched.idle_peers.values()))

    def _drain_wake(self, bell: InotifyBell | None = None) -> set[Path] | None:
        """The wake-up pipe (or the inotify doorbell) read empty: the inboxes to list, the
        doorbell's that rang, or every one (None) for the pipe (a signal, a full batch, a
        polling observer's ring, ...)."""
        if bell is None:
            drain(self._wake_read)
            return None
        return bell.drain()

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
            self._tidy_jobs()

    def _tidy_jobs(self) -> None:
        """jobs/running/ (and a slice of jobs/queued/, jobs/done/ and spool/replies/)
        swept for junk (``Housekeeper.tidy_jobs``); a new quarantine case is reported."""
        if self.housekeeper.tidy_jobs(self.sched, self.views, ("queued", "running")):
            self.problems = quarantine.notes(self.layout)
            self.status.status_outdated()  # status.json counts them at its next write

    def _no_room_to_start(self, exc: OSError) -> NoRoomToStart:
        """The error a start that hit a full disk ends with: the cause, and that nothing was
        lost (requests stay in incoming/, shims keep their commands and exit statuses)."""
        path = exc.filename or self.layout.root
        return NoRoomToStart(
            f"cannot start: {DISK_ERRORS[exc.errno]} on {filesystem_of(path)}: {path} "
            f"([Errno {exc.errno}] {exc.strerror}); nothing was consumed (requests wait in spool/incoming/, "
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
            self.degraded = f"{what} on {filesystem_of(path)}: {path}"
            log.error("degraded: %s ([Errno %d] %s); requests wait in incoming/, running "
                      "commands are still supervised, retrying until there is room",
                      self.degraded, exc.errno, exc.strerror)
            self._retry_delay = DEGRADED_RETRY_SECONDS[0]
            self._retry_at = time.monotonic() + self._retry_delay
            self.status.status_outdated()  # to say so, if it can
        return True

    def _roll_back(self) -> None:
        """A batch that could not be journaled never happened: none of its effects ran.
        The scheduler is rebuilt from the durable records as a start would (snapshot,
        then journal), the shims the batch bound are warm again (the driver told the
        backend), and what it saw (requests, exits, results) is seen again once there
        is room. A long tail is shelved as it is replayed, as at a start: a roll-back
        while compactions fail (the same full disk) would otherwise hold it all."""
        restored = compaction.restore(self.layout)
        tally = _tally(restored.tally, restored.sched)
        compaction.replay_shelving(self.layout, restored.sched,
                                   self.journal.durable(restored.journal_seq),
                                   lambda effects: _count(tally, restored.sched, effects),
                                   self.compact_after, tally)
        self.driver.sched = restored.sched
        self.views.tally = tally
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
        self.status.status_outdated()
        self.driver.settle()
        self._sample()
        self._process([self.backend.observe(job, job.current)
                       for job in self.sched.in_flight()], launch=True)
        self._ring()
        self._tidy_jobs()

    # -- events in ----------------------------------------------------------

    def _process(self, events: list[Event], launch: bool = False) -> None:
        """Hand a batch to the driver (``Driver.process``). With ``launch`` the scheduling
        pass runs inside the batch, but not for a run on the host registry: its pass runs
        under the registry's lock (``_launch``). Nothing while degraded: what was seen is
        seen again on recovery."""
        if self.degraded is None and not self.driver.process(
                events, launch=launch and self.registry is None):
            self._roll_back()

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
            pid, started, boot = shim_of(self.sched.jobs[envelope.owner].current.handle) \
                or (None, None, None)
            allocations.append({"job_id": envelope.owner, "uuid": envelope.uuid,
                                "utilization_pct": envelope.utilization_pct,
                                "memory_mib": envelope.memory_mib,
                                "exclusive": envelope.exclusive, "shim_pid": pid,
                                "shim_start": started, "boot_id": boot})
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
            gpus=attribute_processes(self.inventory.sample(), {**foreign_shims, **owners}),
            capacity=capacity, others=tuple(others))])

    def _read_inboxes(self, rang: set[Path] | None = None) -> None:
        """What peers wrote, inbox by inbox, fed to the core: in the inboxes that ``rang``
        (a hint: a request's rename lists spool/incoming/ alone, where it listed control/
        and every generation's inboxes too, beside its command's start), or in every one
        (None: the periodic look, a signal, a full batch, a polling observer). Not while
        degraded: requests wait in incoming/ untouched, and a result read now would count
        as seen."""
        layout = self.layout
        if self.degraded is None and (rang is None or layout.incoming in rang):
            requests, full = self.inboxes.requests()
            self._process(requests, launch=True)
            if full:
                self._ring()  # a full batch: more files are waiting
        if self.degraded is None and (rang is None or layout.control in rang):
            self._process(self.inboxes.controls())
        if self.degraded is None and (rang is None or rang - {layout.incoming, layout.control}):
            self._process(self.inboxes.generations(self.sched.generations))

    def _start_observer(self) -> None:
        self.observer = start_doorbell([self.layout.incoming, self.layout.control],
                                       self._ring, self.polling, INBOX_CHANGES)
        if isinstance(self.observer, InotifyBell):  # read by the loop itself
            self.selector.register(self.observer, selectors.EVENT_READ, ("wake", self.observer))
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

    # -- derived files --------------------------------------------------------

    def _keep_damaged(self, seq: int, offset: int, data: bytes) -> bool:
        """A damaged last journal record may go only on the operator's word for its seq
        (``--drop-damaged-record``), and only once its bytes are kept in quarantine."""
        if seq != self.drop_damaged_record:
            return False
        self.housekeeper.quarantine().keep(f"journal-seq-{seq}.bin", data, (
            f"journal record seq {seq} (from byte {offset}) was a complete line that failed "
            f"its checksum; dropped by --drop-damaged-record {seq}"))
        self.dropped_record = True
        return True

    def _repair_views(self, durable_ns: int | None, unsettled: Unsettled | None = None) -> None:
        """The derived files made to agree with the journal (``Views.repair``); a forged
        job file found on the way goes to this start's quarantine case."""
        self.views.repair(self.sched, durable_ns, self.journal.seq, self.housekeeper.keep,
                          unsettled)

    def _runtime(self, state: str) -> dict[str, Any]:
        """What status.json shows that only the coordinator knows (``StatusSink``)."""
        return {"state": state, "pid": os.getpid(), "run_dir": str(self.layout.root),
                "observer": "polling" if self.polling else "inotify",
                "filesystem": self.filesystem,
                "journal_seq": self.journal.seq, "problems": self.problems,
                "history_checked": self.housekeeper.history_checked,
                "job_index_rebuilding": self.views.indexing,
                "compacting": self.compactor.running is not None,
                "degraded": self.degraded,
                "quarantined": sum(len(case["items"]) for case in self.problems),
                "gpu_inventory": self.inventory.source}


def _tally(saved: dict | None, sched: Scheduler) -> AttemptTally:
    """The attempt tally as the snapshot saved it (of ``sched`` as restored, before the
    journal's tail: ``_count`` brings it up to date); counted afresh from every job when
    the snapshot has none (one written before tallies were saved)."""
    if saved is not None:
        try:
            tally = AttemptTally.from_dict(saved)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("snapshot: its attempt tally is unreadable (%r): counted afresh", exc)
        else:
            if not tally.settled_through:  # saved by an older version: it forgot none
                tally.forget_finished(sched.jobs.in_memory, sched.last_order)
            return tally
    return AttemptTally.of(sched.jobs.values())


def _count(tally: AttemptTally, sched: Scheduler, effects: list[Effect]) -> None:
    """A replayed record's changes to jobs, counted as the views count a written one."""
    for effect in effects:
        if isinstance(effect, WriteJob):
            tally.update(sched.jobs.peek(effect.job_id))


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
