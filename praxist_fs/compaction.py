"""The journal's snapshot and the clean-stop mark: what lets a start read less.

A compaction writes the state the journal has built as one durable snapshot and
empties the journal, so a start reads the snapshot and a short tail, not the whole
history (``compact``, ``restore``). While the coordinator serves, a forked child
writes it (``Compactor``): the snapshot of 100,000 finished jobs is ~135 MB and a
second and a half of CPU to render, which the loop never waits for; it pays only
for the fork and, once the child is done, for replacing the journal by the records
appended meanwhile and taking the finished jobs out of memory. A clean stop marks the
moment every derived file was durable (``mark_clean_stop``), so the next start need
not read them all back (``take_clean_stop``). Functions of data: none feeds the core
or calls the loop.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import pickle
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any, BinaryIO, NoReturn

from .adapters import crashpoints
from .adapters.crashpoints import CRASH_EXIT_CODE, reach
from .adapters.fsio import (
    TEMP_PATTERN, close_aside, fsync_dir, read_json, sync_all, unlink, write_atomic,
    write_json,
)
from .adapters.history import LineReader, header_pieces, line_reader
from .adapters.jobindex import JobIndex
from .adapters.journal import Journal
from .adapters.layout import RunLayout
from .adapters.unsynced import Unsynced, make_durable
from .core import spill
from .core.effects import Effect
from .core.metrics import AttemptTally
from .core.replay import replay
from .core.scheduler import Scheduler
from .core.snapshot import (
    Captured, Restored, SnapshotError, read, render, shelve, shelve_jobs, shelve_replies, watch,
)
from .errors import JournalCorrupt

log = logging.getLogger("praxist_fs")
RETRY_SECONDS = 30.0  # after a compaction that failed (a full disk, say), the next is tried
# the child renders for 1.5 s of CPU at 100,000 finished jobs, 10-30 s on a loaded 2-core
# machine, where each reply it delays waits for a core: it yields the CPU to the loop
CHILD_NICENESS = 19
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when the thread that forked it ends


def restore(layout: RunLayout) -> Restored:
    """The scheduler as the last compaction left it (a new one at seq 0 when there is no
    snapshot), with the journal seq it covers, its watermark (when every derived file up
    to that seq was durable; None from a snapshot written before watermarks) and its
    attempt tally. Its finished jobs and replies stay in the snapshot until asked for
    (``Shelf``): the file is kept open for that."""
    try:
        handle = open(layout.snapshot, "rb")
    except FileNotFoundError:
        return Restored(0, None, Scheduler(), None)
    try:
        restored = read(handle, line_reader(handle), header_pieces(handle))
    except SnapshotError as exc:
        handle.close()
        raise JournalCorrupt(
            f"{layout.snapshot}: {exc}; refusing to start. If journal.log still "
            "begins at seq 1, moving the snapshot aside replays the whole history"
        ) from None
    if not isinstance(restored.journal_seq, int) or restored.journal_seq < 0:
        handle.close()
        raise JournalCorrupt(f"{layout.snapshot}: journal_seq {restored.journal_seq!r} is "
                             "not a count")
    return restored


def sweep_unfinished(layout: RunLayout) -> None:
    """Remove the snapshot and journal a compaction was writing when it was killed (their
    temporary names, ``fsio.temp_name``): never read, as large as the snapshot. The
    journal's directory is the coordinator's alone, so every temporary name there is one
    of those. Only a starting coordinator calls this, holding the run's lock, and a
    compaction's child dies with the coordinator that forked it, so no writer of them is
    left (a roll-back's restore must not: its own compaction's child may be writing)."""
    for stale in layout.journal_dir.glob(TEMP_PATTERN):
        unlink(stale)
        log.info("%s: removed what a compaction killed as it wrote left", stale)


def compact(layout: RunLayout, journal: Journal, sched: Scheduler, index: JobIndex,
            tally: AttemptTally, unsynced: Unsynced) -> None:
    """Write the state the journal has built as one durable snapshot, then empty the
    journal: a start then reads the snapshot and a short tail, not the whole history.
    Runs between loop turns, when every handled event is committed and its effects
    carried out (not degraded: every view was written): the job index is committed and
    everything made durable, and the snapshot records when (its watermark), so a start
    after a crash reads back only the files of what the tail changed. The jobs that
    finished since the last one, and the replies, then leave memory for it."""
    journal.commit()
    index.flush(journal.seq)
    taken = unsynced.take()
    try:
        _make_durable(taken)
    except BaseException:
        unsynced.give_back(taken)
        raise
    tally.forget_finished(sched.jobs.in_memory, sched.last_order)  # counted: on the shelf
    rendered = render(sched, journal.seq, views_durable_ns=time.time_ns(),
                      tally=tally.to_dict())
    reach("snapshot.before_write")
    write_atomic(layout.snapshot, rendered.data, durable=True, mode=0o600, sliced=True)
    reach("snapshot.after_write")
    journal.compact()
    reach("snapshot.after_truncate")
    log.info("journal compacted into a snapshot at seq %d", journal.seq)
    try:
        handle = open(layout.snapshot, "rb")
    except OSError as exc:  # the shelf reads the last snapshot still: only memory waits
        log.warning("%s: %s; finished jobs stay in memory until the next compaction",
                    layout.snapshot, exc)
        return
    shelve(sched, rendered, line_reader(handle))


def replay_shelving(layout: RunLayout, sched: Scheduler, records: Iterable[dict[str, Any]],
                    applied: Callable[[list[Effect]], None], every: int,
                    tally: AttemptTally) -> None:
    """``core.replay`` of a start's journal tail, a piece of ``every`` records at a time
    (the compaction's cadence: what a served run holds between two compactions): after
    each piece but a last shorter one, the finished jobs and the replies it built leave
    memory for an unnamed scratch file in the journal's directory (``core.spill``), as a
    compaction takes them for its snapshot; the next compaction copies them from there.
    A replay of 400,001 records (100,000 finished jobs) otherwise holds them all: 439 MB.
    A tail shorter than ``every`` is replayed as it always was. A disk too full for the
    scratch file (a roll-back's: its commit failed for want of room) leaves the rest of
    the tail in memory, as it was always replayed, rather than fail the replay."""
    remaining, scratch = iter(records), None
    while True:
        count = 0

        def counted() -> Iterator[dict[str, Any]]:
            nonlocal count
            for count, record in enumerate(islice(remaining, every), 1):
                yield record
        replay(sched, counted(), applied)
        if count < every:
            return
        try:
            scratch = scratch or _Spill(layout)
            scratch.take(sched, tally)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            log.warning("%s: %s; the rest of the journal's tail is replayed in memory",
                        layout.journal_dir, exc.strerror)
            if scratch is not None and not scratch.size:  # no shelf reads it
                scratch.handle.close()
            replay(sched, remaining, applied)
            return


class _Spill:
    """``replay_shelving``'s scratch file: no name (O_TMPFILE), so nothing of it outlives
    the process; it is read while a shelf reads it (``LineReader``), and closed with the
    shelf that lets it go last (``Background.step``)."""

    def __init__(self, layout: RunLayout) -> None:
        self.handle = tempfile.TemporaryFile(dir=layout.journal_dir, buffering=0)
        self.reader = LineReader(self.handle)
        self.size = 0

    def take(self, sched: Scheduler, tally: AttemptTally) -> None:
        """The finished jobs and the replies in memory go to the file and leave memory."""
        tally.forget_finished(sched.jobs.in_memory, sched.last_order)  # counted: shelved
        taken = spill.piece(sched, self.size, self.reader)
        view = memoryview(taken.data)
        while view:
            view = view[os.write(self.handle.fileno(), view):]
        self.size += len(taken.data)
        shelve_jobs(sched, taken.jobs, self.reader)
        shelve_replies(sched, taken.replies, self.reader)


def mark_clean_stop(layout: RunLayout, journal_seq: int, unsynced: Unsynced,
                    index_files: Iterable[str]) -> None:
    """Every effect of every journaled event was carried out: make the derived files
    (written without fsync) durable, then say so, so that the next start need not
    read them all back. Those are the ones ``unsynced`` names (a compaction's watermark
    vouches for the same) and the job index's (``JobIndex.files``), by name, as the
    compaction child does: ``sync(2)`` would also wait for every other file of the
    machine written meanwhile. When their names are not known (a start after a crash,
    before its first compaction), ``sync(2)``."""
    taken = unsynced.take()
    if taken is not None:
        for path in index_files:
            directory, name = os.path.split(path)
            taken.setdefault(directory, set()).add(name)
    _make_durable(taken)
    write_json(layout.clean_stop, {"journal_seq": journal_seq,
                                   "views_durable_ns": time.time_ns()}, durable=True)


def take_clean_stop(layout: RunLayout, journal_seq: int) -> int | None:
    """When the last coordinator stopped cleanly at exactly this journal, the time its
    derived files were all durable. The marker is removed (durably) before anything
    new is journaled, so it never vouches for a later state."""
    marker = read_json(layout.clean_stop)
    if marker is None:
        return None
    unlink(layout.clean_stop)
    fsync_dir(layout.clean_stop.parent)
    if not isinstance(marker, dict) or marker.get("journal_seq") != journal_seq:
        return None
    durable_ns = marker.get("views_durable_ns")
    return durable_ns if isinstance(durable_ns, int) else None


def _make_durable(taken: dict[str, set[str]] | None) -> None:
    """What a watermark vouches for reaches the disk: the derived files ``Unsynced.take``
    named, or (None: not known by name) everything, ``sync(2)``."""
    if taken is None:
        sync_all()
    else:
        make_durable(taken)


class Compactor:
    """Compacts the journal in the background once it holds ``every`` records: a forked
    child renders and writes the snapshot from its copy of the state (copy-on-write: the
    state of the moment it was forked, exactly, while the loop goes on changing its own),
    and the loop finishes the compaction at later turns, a step a turn (``turn``).
    ``unsynced``: the derived files written since the last watermark (``Views``), which
    the child makes durable before its snapshot vouches for them."""

    def __init__(self, layout: RunLayout, every: int, wake_fd: int,
                 unsynced: Unsynced) -> None:
        self.layout, self.every, self.wake_fd = layout, every, wake_fd
        self.unsynced = unsynced
        self.running: Background | None = None
        self.not_before = 0.0  # after a failed one
        self.collect_due = False  # one finished: the next turn collects its garbage

    @property
    def finishing(self) -> bool:
        """A step of finishing one waits for the next turn: the loop should not sleep."""
        return self.collect_due or (self.running is not None and self.running.stepping)

    def turn(self, journal: Journal, sched: Scheduler, index: JobIndex,
             tally: AttemptTally) -> bool:
        """Between loop turns: take the next step of finishing the compaction whose child
        has ended (``Background.step``), or begin one when the journal's tail is due.
        True on the turn after one finished, which does nothing else: the garbage it
        left is the loop's to collect then, in a turn of its own."""
        if self.collect_due:
            self.collect_due = False
            return True
        if self.running is not None:
            if self.running.ended():
                self._step(journal, sched)
            return False
        if journal.tail >= self.every and time.monotonic() >= self.not_before:
            try:
                self.running = Background.begin(self.layout, journal, sched, index, tally,
                                                self.wake_fd, self.unsynced)
            except OSError as exc:  # no process or no temp file to spare: the loop goes on
                _stop_watching(sched)
                log.warning("the journal's compaction could not start (%s); it is tried "
                            "again in %d s", exc, RETRY_SECONDS)
                self.not_before = time.monotonic() + RETRY_SECONDS
        return False

    def wait(self, journal: Journal, sched: Scheduler) -> None:
        """At a stop: the compaction under way is finished first (its child waited for,
        its steps taken at once)."""
        if self.running is not None:
            self.running.wait()
        while self.running is not None:
            self._step(journal, sched)

    def _step(self, journal: Journal, sched: Scheduler) -> None:
        running = self.running
        written = running.step(self.layout, journal, sched)
        if written is None:
            return  # more steps to come
        self.running = None
        if written:
            self.collect_due = True
        else:
            self.unsynced.give_back(running.taken)  # not made durable: the next one's
            self.not_before = time.monotonic() + RETRY_SECONDS


class Background:
    """One compaction written by a forked child (``begin``): the journal seq and byte its
    snapshot covers, and what it took from memory (``Captured``)."""

    def __init__(self, pid: int, result: BinaryIO, sched: Scheduler, seq: int, end: int,
                 captured: Captured, due: tuple[bool, bool],
                 taken: dict[str, set[str]] | None) -> None:
        self.pid, self.result, self.sched = pid, result, sched
        self.seq, self.end, self.captured, self.due = seq, end, captured, due
        self.taken = taken  # the derived files its child makes durable (``Unsynced.take``)
        self.status: int | None = None
        self.outcome: tuple | None = None  # the child's, once read (``step``)
        self.journal_replaced = False
        self.read_at: LineReader | None = None  # its snapshot's, once the jobs are shelved

    @property
    def stepping(self) -> bool:
        """Its first step is taken: the rest follow a turn each."""
        return self.outcome is not None

    @classmethod
    def begin(cls, layout: RunLayout, journal: Journal, sched: Scheduler, index: JobIndex,
              tally: AttemptTally, wake_fd: int, unsynced: Unsynced) -> Background:
        """As ``compact`` begins (between loop turns, every handled event committed and
        its effects carried out), then fork: the child writes the snapshot of the state
        of this moment. Its watermark is this moment too: every derived file of the
        records it covers was written by now, and the child syncs those written since
        the last watermark (``unsynced``) before its snapshot says so (a file written
        later is newer than the watermark: read back after a crash)."""
        journal.commit()
        index.flush(journal.seq)
        tally.forget_finished(sched.jobs.in_memory, sched.last_order)  # counted: on the shelf
        seq, end = journal.committed
        header = {"views_durable_ns": time.time_ns(), "tally": tally.to_dict()}
        due = (crashpoints.due("snapshot.before_write"), crashpoints.due("snapshot.after_write"))
        result = tempfile.TemporaryFile(prefix="praxist-compaction-")
        captured = watch(sched)
        parent = os.getpid()
        taken = unsynced.take()
        try:
            pid = os.fork()
        except OSError:
            unsynced.give_back(taken)
            result.close()
            raise
        if pid == 0:
            _child(layout, sched, seq, header, due, result, parent, wake_fd, taken)
        return cls(pid, result, sched, seq, end, captured, due, taken)

    def ended(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is not None

    def wait(self) -> None:
        if self.status is None:
            self.status = os.waitpid(self.pid, 0)[1]

    def step(self, layout: RunLayout, journal: Journal, sched: Scheduler) -> bool | None:
        """The child has ended: finish, one step a loop turn (in one, the whole held the
        loop for 90-190 ms at 100,000 finished jobs, loaded). The child's outcome read;
        the journal keeps only the records after the snapshot; the finished jobs it
        holds leave memory; then its replies do. The files these steps let go (the
        outcome's, the old journal, the last snapshot) are closed aside
        (``fsio.close_aside``). All but those looked up to change since the fork leave:
        the loop goes on between steps, and what it looks up stays watched until its
        shelf is replaced; until then the shelf reads the last snapshot, still open.
        None while steps remain; then whether the snapshot was written (False: logged)."""
        if self.outcome is None:
            return self._read_outcome(sched)
        if not self.journal_replaced:
            self._replace_journal(journal)
            return True if sched is not self.sched else None  # rolled back: restored anew
        if sched is not self.sched:  # a batch rolled back since: a new state, restored anew
            return True
        _, jobs, replies = self.outcome
        if self.read_at is None:
            try:
                handle = open(layout.snapshot, "rb")
            except OSError as exc:
                log.warning("%s: %s; finished jobs stay in memory until the next compaction",
                            layout.snapshot, exc)
                _stop_watching(sched)
                return True
            self.read_at = line_reader(handle)
            shelve_jobs(sched, jobs, self.read_at, self.captured[0])
            return None
        last = sched.replies.reader
        shelve_replies(sched, replies, self.read_at, self.captured[1])
        if isinstance(last, LineReader) and last is not sched.jobs.reader:
            close_aside(last.handle)  # ~135 MB at 100,000 finished jobs
        return True

    def _read_outcome(self, sched: Scheduler) -> bool | None:
        """The first step: what the child said (False: it failed, logged)."""
        code = os.waitstatus_to_exitcode(self.status)
        if code == CRASH_EXIT_CODE and any(self.due):
            crashpoints.crash()  # the child crashed at a crash point: so does the coordinator
        try:
            self.result.seek(0)
            outcome = pickle.load(self.result)
        except Exception:  # noqa: BLE001 - a child killed before it said anything
            outcome = ("failed", f"its process ended with status {code}")
        finally:  # a temporary file of ~9 MB at 100,000 finished jobs: freed aside
            close_aside(self.result)
        if outcome[0] != "written":
            log.warning("the journal's compaction failed (%s); it is tried again in %d s",
                        outcome[1], RETRY_SECONDS)
            _stop_watching(sched)
            return False
        self.outcome = outcome
        return None

    def _replace_journal(self, journal: Journal) -> None:
        """The second step: the snapshot is written, so the journal keeps only the
        records after it."""
        self.journal_replaced = True
        try:
            journal.keep_after(self.seq, self.end)
        except OSError as exc:  # the old journal stays: its first records are skipped
            log.warning("%s: %s; the journal keeps the records its snapshot covers until "
                        "the next compaction", exc.filename or journal.path, exc)
        else:
            reach("snapshot.after_truncate")
            log.info("journal compacted into a snapshot at seq %d", self.seq)


def _stop_watching(sched: Scheduler) -> None:
    """No snapshot of the watched moment will be shelved: nothing to keep watching for."""
    sched.jobs.watch(False)
    sched.replies.watch(False)


def _child(layout: RunLayout, sched: Scheduler, seq: int, header: dict,
           due: tuple[bool, bool], result: BinaryIO, parent: int, wake_fd: int,
           taken: dict[str, set[str]] | None) -> NoReturn:
    """The forked child: make the derived files its watermark vouches for durable (those
    ``taken``: never the whole machine's writeback, which a reply's journal fsync would
    wait behind), render, write the snapshot durably (a slice at a time: its
    writeback never queues ~135 MB before the loop's journal fsync), say where its lines
    lie (``result``), wake the loop and leave at once (``os._exit``: nothing of the
    parent's is closed, flushed or collected here; no log line, whose lock another
    thread of the parent may have held at the fork)."""
    code = 1
    try:
        gc.disable()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        _die_with(parent)
        os.setpriority(os.PRIO_PROCESS, 0, CHILD_NICENESS)
        _make_durable(taken)
        rendered = render(sched, seq, **header)
        if due[0]:
            crashpoints.crash()
        write_atomic(layout.snapshot, rendered.data, durable=True, mode=0o600, sliced=True)
        if due[1]:
            crashpoints.crash()
        outcome = ("written", rendered.jobs, rendered.replies)
        code = 0
    except BaseException as exc:  # noqa: BLE001 - said to the parent, which logs it
        outcome = ("failed", f"{type(exc).__name__}: {exc}")
    try:
        pickle.dump(outcome, result, protocol=pickle.HIGHEST_PROTOCOL)
        result.flush()
        os.write(wake_fd, b"c")
    except BaseException:  # noqa: BLE001 - the parent finds the exit status alone
        code = code or 1
    os._exit(code)


def _die_with(parent: int) -> None:
    """A child must not outlive its coordinator: a later one's snapshot must never be
    replaced by this older one (PR_SET_PDEATHSIG; and the parent may be gone already)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)
