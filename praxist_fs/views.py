"""Every file derived from the journal: job files, replies, control replies, generation
files, the spool's consumed and rejected requests (status.json, metrics.prom and the
vault's secrets let go are sinks': ``sinks.py``).

One mapping from effect to path (``Views.path``) serves both carrying an effect out
(``execute``) and repairing the files at start (``repair``), so the two cannot disagree
about where a view lives. Views take data (the scheduler, the journal's seq, the
coordinator's own facts) and return nothing to feed back: only the loop feeds the core.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adapters import spool
from .adapters.crashpoints import reach
from .adapters.fsio import dumps, read_file, unlink, write_json
from .adapters.jobindex import JobIndex
from .adapters.layout import JOB_DIRECTORIES, RunLayout
from .adapters.spares import Spares
from .adapters.vault import Vault
from .adapters.unsynced import Unsynced
from .core.effects import (
    ConsumeDecline, ConsumeRequest, DisposeControl, Effect, RejectRequest,
    WriteControlReply, WriteGenerationFile, WriteJob, WriteReply,
)
from .core.metrics import AttemptTally
from .core.model import Job
from .core.scheduler import FINISHED, Scheduler
from .core.states import JobState

log = logging.getLogger("praxist_fs")

# Job files remembered as written (``Views.wrote``) until a sweep of jobs/ passes them;
# past this many (a burst between two sweeps of jobs/done/, or sweeps held up by a full
# disk) they are forgotten, and read back instead.
WRITTEN_MEMORY = 20_000
# A loop turn puts finished jobs into a job index being rebuilt, INDEX_CHUNK at a time,
# until INDEX_SLICE_SECONDS passed or INDEX_SLICE are in. A job costs 30-70 us as the disk
# and the page cache go: 1,000 a turn, with no time bound, held a request's answer back
# 86-137 ms (p50) while a start at 100,000 finished jobs rebuilt its index (make bench)
INDEX_SLICE, INDEX_CHUNK = 1_000, 100
INDEX_SLICE_SECONDS = 0.010

# (path, its bytes, why): where repair sets aside a forged job file before rewriting it
SetAside = Callable[[str, bytes, str], None]


def _unsettled_on_shelf(sched: Scheduler, unsettled: Unsettled | None
                        ) -> tuple[list[str], list[str]]:
    """Of the jobs and replies on the shelf, those a crash may have left behind: the ones
    the journal's tail changed that a long replay shelved as it went
    (``compaction.replay_shelving``); none after a clean stop, which vouches for all."""
    if unsettled is None:
        return [], []
    return ([key for key in unsettled.jobs if sched.jobs.mark(key) is not None],
            [key for key in unsettled.replies if sched.replies.mark(key) is not None])


@dataclass(slots=True)
class Unsettled:
    """The derived files a crash may have left behind the journal, by what they are of:
    the jobs (ids) and replies (request ids) that the records after the last compaction
    wrote (``note``, with each replayed record's effects), and the jobs not ended (their
    pending reasons are written with no record). The rest the compaction's watermark
    vouches for (``Views.repair``)."""

    jobs: set[str] = field(default_factory=set)
    replies: set[str] = field(default_factory=set)

    def note(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, WriteJob):
                self.jobs.add(effect.job_id)
            elif isinstance(effect, WriteReply):
                self.replies.add(effect.request_id)


class Views:
    """The derived files of one run, and what writing them keeps: the job index and the
    attempt tally metrics.prom counts."""

    def __init__(self, layout: RunLayout, vault: Vault, index: JobIndex,
                 tally: AttemptTally, clock: Callable[[], float] = time.perf_counter) -> None:
        """``clock``: what an index slice's time is measured with (a test's own)."""
        self.layout = layout
        self._clock = clock
        self.vault = vault
        self.index = index
        self.tally = tally  # metrics.prom's attempts: every job write updates it
        self._generations_made: set[int] = set()
        self._job_dirs = {d: str(layout.jobs(d)) for d in JOB_DIRECTORIES}
        # the directory of every request's consumption, as a string: a path built with
        # ``os.path.join`` per job, not a ``Path`` object per job (a reply's: the layout's)
        self._incoming = str(layout.incoming)
        self._written: dict[str, tuple[int, int, int]] = {}  # job file -> ``_made``
        # what the next compaction's watermark (or a clean stop) makes durable; all of it
        # until the start says its last coordinator left nothing unsynced (``daemon``)
        self.unsynced = Unsynced()
        # replaced job files, kept aside to be written into: no inode freed per move
        self.spares = Spares(vault.directory)
        # the job index's rebuild from the shelf: the last job id indexed, and the time
        # up to which the files of jobs/done/ are vouched for (``index_history``)
        self._history_indexed: tuple[str | None, int] | None = None

    # -- the mapping ----------------------------------------------------------

    def path(self, effect: Effect) -> str:
        """The file an effect writes or disposes of: the one place that says so. A string:
        a job's is made on every change to it, and for every job at a repair; a reply's
        and a request's once a job, joined as strings (a ``Path`` per job cost more)."""
        layout = self.layout
        if isinstance(effect, WriteJob):
            return self._job_file(effect.directory, effect.job_id)
        if isinstance(effect, WriteReply):
            return layout.reply_str(effect.request_id)
        if isinstance(effect, (ConsumeRequest, RejectRequest)):
            return os.path.join(self._incoming, effect.name)
        if isinstance(effect, WriteControlReply):
            found = layout.control_replies / f"{effect.request_id}.json"
        elif isinstance(effect, WriteGenerationFile):
            found = layout.generation_file(effect.generation, effect.kind, effect.name)
        elif isinstance(effect, DisposeControl):
            found = layout.control / effect.name
        elif isinstance(effect, ConsumeDecline):
            found = layout.idle(effect.generation) / effect.name
        else:
            raise TypeError(f"no view for effect {type(effect).__name__}")
        return str(found)

    def _job_file(self, directory: str, job_id: str) -> str:
        return os.path.join(self._job_dirs[directory], f"{job_id}.json")

    def execute(self, effect: Effect, sched: Scheduler) -> None:
        """Carry out one file effect of a committed batch (no fsync: repaired at start)."""
        path = self.path(effect)
        if isinstance(effect, WriteJob):
            self._write_job(effect, path, sched)
            self.unsynced.note(path)
        elif isinstance(effect, WriteReply):
            self.spares.write(path, dumps(effect.document))
            self.unsynced.note(path)
        elif isinstance(effect, (WriteControlReply, WriteGenerationFile)):
            if isinstance(effect, WriteGenerationFile):
                self.make_generation(effect.generation)
            write_json(path, effect.document, sync=False)
            self.unsynced.note(path)
        elif isinstance(effect, (RejectRequest, DisposeControl)) and effect.error is not None:
            rejected = self.layout.rejected if isinstance(effect, RejectRequest) \
                else self.layout.control_rejected
            inbox, name = os.path.split(path)
            spool.reject(Path(inbox), rejected, name, effect.error)
        elif isinstance(effect, ConsumeRequest) and not effect.holds_secret:
            self.spares.adopt(path)  # answered and journaled: consumed, its inode kept
        elif isinstance(effect, (ConsumeRequest, DisposeControl, ConsumeDecline)):
            unlink(path)  # answered and journaled: consumed
        else:  # a new effect given a path, not yet a way to carry it out
            raise TypeError(f"no view carries out {type(effect).__name__}")

    def _write_job(self, effect: WriteJob, path: str, sched: Scheduler) -> None:
        document = sched.written_document(effect)
        data = dumps(document)
        if len(self._written) >= WRITTEN_MEMORY:
            self._written.clear()
        self._written[path] = _made(self.spares.write(path, data))
        self.tally.update(sched.jobs.peek(effect.job_id))  # every change to a job comes here
        self.index.stage(document, data)
        if effect.replaces is not None:
            replaced = self._job_file(effect.replaces, effect.job_id)
            self.spares.retire(replaced)
            self._written.pop(replaced, None)

    def wrote(self, path: str, found: os.stat_result) -> bool:
        """Whether ``found``, a job file a sweep of jobs/ lists as ``path``, is the very
        file last written there and untouched since (inode, size, mtime): the sweep then
        need not read it back to compare it with the journal. Asked once: by the next
        sweep its mtime predates the last one, which vouches for it from then on. (A
        write in its place of as many bytes, within the same tick of a coarse file clock
        as ours, would pass: the sweep is for stray copies and hand edits, not a
        writer that can race the coordinator as its own user.)"""
        return self._written.pop(path, None) == _made(found)

    def _directory(self, directory: str) -> str:
        """A job state directory's path, or spool/replies/'s for ``"replies"``."""
        return str(self.layout.replies) if directory == "replies" else self._job_dirs[directory]

    def make_generation(self, number: int) -> None:
        """A generation's directories are made durable once per coordinator process."""
        if number not in self._generations_made:
            self.layout.create_generation(number)
            self._generations_made.add(number)

    # -- repair at start ------------------------------------------------------

    def repair(self, sched: Scheduler, durable_ns: int | None, journal_seq: int,
               set_aside: SetAside, unsettled: Unsettled | None = None) -> None:
        """Job files and replies are derived: rewrite any that disagree with the journal.

        After a crash every file is read back and compared. After a clean stop the files
        were all written and made durable by ``durable_ns``: one that is there and was not
        touched since is current, so a restart lists directories instead of reading (or
        even rendering) every file; a missing or since-modified one is compared and
        rewritten as usual, and a job file changed since that says other than the journal
        is set aside first (no coordinator wrote it). After a crash with ``unsettled``,
        ``durable_ns`` is the last compaction's watermark: it vouches the same way for
        every file but those of the jobs and requests ``unsettled`` names (what the
        journal changed after that compaction, and the jobs not ended), which are
        compared; a difference there is the crash's unfinished write, rewritten, not set
        aside. Copies of a job in the wrong state directory are gone: the coordinator's
        tidying ran first. The job index is rebuilt unless it could be kept: from every
        job's document, or with ``durable_ns`` from those in memory here and the shelf's
        a slice at a time while serving (``index_history``); one kept but ``behind`` is
        given every job document compared.

        With ``durable_ns`` the files of the jobs and replies on the shelf (all a compaction
        took out of memory: the run's history) are not even listed: the compaction made
        them durable, and one missing or changed since is for the reconcile's sliced
        sweep to find (``Housekeeper``); a start looks at the files of what is in memory
        only, one by one."""
        rebuild, restage = not self.index.complete, self.index.behind
        settled = durable_ns is not None  # the shelf's files vouched for
        listed = {} if settled else {d: _mtimes(self._directory(d))
                                     for d in (*JOB_DIRECTORIES, "replies")}

        def modified(directory: str, key: str) -> int:
            if not settled:
                return listed[directory].get(f"{key}.json", durable_ns + 1)
            try:
                return os.stat(os.path.join(self._directory(directory), f"{key}.json")
                               ).st_mtime_ns
            except FileNotFoundError:
                return durable_ns + 1

        def current(directory: str, key: str) -> bool:  # there, and untouched since
            return durable_ns is not None and \
                (unsettled is None or key not in (
                    unsettled.replies if directory == "replies" else unsettled.jobs)) and \
                modified(directory, key) <= durable_ns

        since, boot_id = sched.coordinator["since"], sched.coordinator["boot_id"]
        if rebuild:
            self.index.begin_rebuild(boot_id=boot_id, owner=since)
        for effect in sched.derived_views(
                lambda directory, key: current(directory, key) and
                not (rebuild and directory in JOB_DIRECTORIES),
                None if not settled else _unsettled_on_shelf(sched, unsettled)):
            document = sched.written_document(effect)
            data = dumps(document)
            if isinstance(effect, WriteJob):
                if rebuild or restage:
                    self.index.stage(document, data)
                if current(effect.directory, effect.job_id):
                    continue
            path = self.path(effect)
            if (found := read_bytes(path)) != data:
                if durable_ns is not None and unsettled is None and found is not None and \
                        isinstance(effect, WriteJob) and \
                        (why := forged(sched, sched.jobs.peek(effect.job_id), found)):
                    set_aside(path, found, why)
                self.execute(effect, sched)
        if not rebuild:
            self.index.serve(boot_id=boot_id, owner=since)
        elif settled:  # the shelf's jobs are indexed a slice at a time while serving
            self._history_indexed = (None, durable_ns)
        else:  # every job's document was staged
            self.index.finish(journal_seq)

    @property
    def indexing(self) -> bool:
        """The job index is being rebuilt: ``index_history`` has slices left to do."""
        return self._history_indexed is not None and self.index.rebuilding

    def index_history(self, sched: Scheduler, journal_seq: int,
                      wanted: Callable[[], bool] = lambda: False) -> None:
        """The next slice of the shelf's finished jobs into the job index being rebuilt,
        between batches (INDEX_SLICE_SECONDS, INDEX_SLICE at most, and no chunk more once
        ``wanted`` says the loop has news: a request waits for one chunk, not a slice);
        after the last, the index is complete (``finish``). A job's row is its file in
        jobs/done/ as read, when the start's ``durable_ns`` vouches for it (there,
        untouched since, and of that job and state: a read and a parse, ~30 us), else its
        document from the shelf (~150 us), or from memory for one a lookup brought back. A
        job changed meanwhile was staged when its file was written, and goes in last."""
        if not self.indexing:
            return
        after, durable_ns = self._history_indexed
        began, indexed = self._clock(), 0
        while True:  # a chunk a slice at least: however slow the disk, the rebuild ends
            found = sched.jobs.entries_after(after, INDEX_CHUNK)
            self.index.add(filter(None, (self._indexed(sched, job_id, mark, durable_ns)
                                         for job_id, mark in found)))
            indexed += len(found)
            whole = len(found) < INDEX_CHUNK  # the shelf's last
            if whole or indexed >= INDEX_SLICE or \
                    self._clock() - began >= INDEX_SLICE_SECONDS or wanted():
                break
            after = found[-1][0]
        reach("index.after_slice")
        if whole:
            self._history_indexed = None
            self.index.finish(journal_seq)
        else:
            self._history_indexed = (found[-1][0], durable_ns)

    def _indexed(self, sched: Scheduler, job_id: str, mark: int | None,
                 durable_ns: int) -> tuple[dict[str, Any], str] | None:
        """A history job's row: from its file if vouched for, else from the shelf; from
        memory if a lookup brought it back (unchanged, or staged too); None if gone."""
        if mark is None:
            job = sched.jobs.in_memory(job_id)
            if job is None:
                return None
        else:
            text = _untouched_text(self._job_file("done", job_id), durable_ns)
            try:
                document = json.loads(text) if text else None
            except ValueError:
                document = None
            if isinstance(document, dict) and document.get("job_id") == job_id and \
                    document.get("state") == FINISHED[mark].value:
                return document, text
            job = sched.jobs.peek(job_id)
        document = sched.job_document(job)
        return document, dumps(document).decode()


def _made(written: os.stat_result) -> tuple[int, int, int]:
    """What tells a file as written from one rewritten in its place (``Views.wrote``)."""
    return written.st_ino, written.st_size, written.st_mtime_ns


def forged(sched: Scheduler, job: Job, data: bytes) -> str | None:
    """Why a job file in its own place is set aside before it is rewritten: it says
    other than the journal (a queued job's pending reason aside: soft, written at the
    status cadence); None if it agrees."""
    try:
        said = json.loads(data)
    except ValueError:
        said = None
    want = json.loads(dumps(sched.job_document(job)))
    if job.state is JobState.QUEUED and isinstance(said, dict):
        said = {**said, "reason": want["reason"]}
    if said == want:
        return None
    return (f"job {job.job_id}'s file said other than the journal (state "
            f"{said.get('state') if isinstance(said, dict) else None}, not "
            f"{job.state.value}): these bytes are kept here, and the file rewritten "
            "from the journal")


def _untouched_text(path: str, durable_ns: int) -> str | None:
    """A file's text when it is there and untouched since ``durable_ns``, else None: an
    open, a stat and a read, no more (a reader object would double the cost)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if found.st_mtime_ns > durable_ns:
            return None
        return os.read(fd, found.st_size).decode()
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike) -> bytes | None:
    try:
        return read_file(path)
    except OSError:
        return None


def _mtimes(directory: str | os.PathLike) -> dict[str, int]:
    """name -> modification time (ns) of each entry of a directory."""
    found = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            try:
                found[entry.name] = entry.stat(follow_symlinks=False).st_mtime_ns
            except FileNotFoundError:
                pass
    return found


