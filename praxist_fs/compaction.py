"""The journal's snapshot and the clean-stop mark: what lets a start read less.

A compaction writes the state the journal has built as one durable snapshot and
empties the journal, so a start reads the snapshot and a short tail, not the whole
history (``compact``, ``restore``). A clean stop marks the moment every derived file
was durable (``mark_clean_stop``), so the next start need not read them all back
(``take_clean_stop``). Functions of data: none feeds the core or calls the loop.
"""

from __future__ import annotations

import logging
import time

from .adapters.crashpoints import reach
from .adapters.fsio import fsync_dir, read_json, sync_all, unlink, write_atomic, write_json
from .adapters.jobindex import JobIndex
from .adapters.journal import Journal
from .adapters.layout import RunLayout
from .core.scheduler import Scheduler
from .core.snapshot import SnapshotError, dump, read
from .errors import JournalCorrupt

log = logging.getLogger("praxist_fs")


def restore(layout: RunLayout) -> tuple[int, int | None, Scheduler]:
    """The scheduler as the last compaction left it, the journal seq it covers (a new
    scheduler at 0 when there is no snapshot), and its watermark: when every derived
    file up to that seq was durable (None from a snapshot written before watermarks)."""
    try:
        handle = open(layout.snapshot, "rb")
    except FileNotFoundError:
        return 0, None, Scheduler()
    with handle:
        try:
            seq, views_durable_ns, sched = read(handle)
        except SnapshotError as exc:
            raise JournalCorrupt(
                f"{layout.snapshot}: {exc}; refusing to start. If journal.log still "
                "begins at seq 1, moving the snapshot aside replays the whole history"
            ) from None
    if not isinstance(seq, int) or seq < 0:
        raise JournalCorrupt(f"{layout.snapshot}: journal_seq {seq!r} is not a count")
    return seq, views_durable_ns, sched


def compact(layout: RunLayout, journal: Journal, sched: Scheduler, index: JobIndex) -> None:
    """Write the state the journal has built as one durable snapshot, then empty the
    journal: a start then reads the snapshot and a short tail, not the whole history.
    Runs between loop turns, when every handled event is committed and its effects
    carried out (not degraded: every view was written): the job index is committed and
    everything made durable, and the snapshot records when (its watermark), so a start
    after a crash reads back only the files of what the tail changed."""
    journal.commit()
    index.flush(journal.seq)
    sync_all()
    data = b"".join(dump(sched, journal.seq, views_durable_ns=time.time_ns()))
    reach("snapshot.before_write")
    write_atomic(layout.snapshot, data, durable=True, mode=0o600)
    reach("snapshot.after_write")
    journal.compact()
    reach("snapshot.after_truncate")
    log.info("journal compacted into a snapshot at seq %d", journal.seq)


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
