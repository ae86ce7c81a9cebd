"""The journal's snapshot and the clean-stop mark: what lets a start read less.

A compaction writes the state the journal has built as one durable snapshot and
empties the journal, so a start reads the snapshot and a short tail, not the whole
history (``compact``, ``restore``). A clean stop marks the moment every derived file
was durable (``mark_clean_stop``), so the next start need not read them all back
(``take_clean_stop``). Functions of data: none feeds the core or calls the loop.
"""

from __future__ import annotations

import logging
import os
import time
from typing import BinaryIO, Callable

from .adapters.crashpoints import reach
from .adapters.fsio import fsync_dir, read_json, sync_all, unlink, write_atomic, write_json
from .adapters.jobindex import JobIndex
from .adapters.journal import Journal
from .adapters.layout import RunLayout
from .core.scheduler import Scheduler
from .core.metrics import AttemptTally
from .core.shelf import offset_and_length
from .core.snapshot import Restored, SnapshotError, read, render, shelve
from .errors import JournalCorrupt

log = logging.getLogger("praxist_fs")


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
        restored = read(handle, _reader(handle))
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


def _reader(handle: BinaryIO) -> Callable[[int], bytes]:
    """Reads a line of ``handle``'s file by its place; it keeps the file open (a later
    snapshot renamed over it leaves this one readable until the shelf lets it go)."""
    def read_at(where: int) -> bytes:
        offset, length = offset_and_length(where)
        return os.pread(handle.fileno(), length, offset)
    return read_at


def compact(layout: RunLayout, journal: Journal, sched: Scheduler, index: JobIndex,
            tally: AttemptTally) -> None:
    """Write the state the journal has built as one durable snapshot, then empty the
    journal: a start then reads the snapshot and a short tail, not the whole history.
    Runs between loop turns, when every handled event is committed and its effects
    carried out (not degraded: every view was written): the job index is committed and
    everything made durable, and the snapshot records when (its watermark), so a start
    after a crash reads back only the files of what the tail changed. The jobs that
    finished since the last one, and the replies, then leave memory for it."""
    journal.commit()
    index.flush(journal.seq)
    sync_all()
    tally.forget_finished(sched.jobs.in_memory, sched._next_order)  # counted: on the shelf
    rendered = render(sched, journal.seq, views_durable_ns=time.time_ns(),
                      tally=tally.to_dict())
    reach("snapshot.before_write")
    write_atomic(layout.snapshot, rendered.data, durable=True, mode=0o600)
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
    shelve(sched, rendered, _reader(handle))


def mark_clean_stop(layout: RunLayout, journal_seq: int) -> None:
    """Every effect of every journaled event was carried out: make the derived files
    (written without fsync) durable, then say so, so that the next start need not
    read them all back."""
    sync_all()
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
