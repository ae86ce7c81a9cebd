"""A run's state as its next start would rebuild it (snapshot, then journal), read by
tools beside a live coordinator (``report``, ``simulate --from-run``): nothing is opened
for writing, and the journal is read up to its first line that is not an intact record."""

from __future__ import annotations

import errno

from ..core.replay import replay
from ..core.scheduler import Scheduler
from ..core.snapshot import load
from .journal import read_intact
from .layout import RunLayout


def read_run(layout: RunLayout) -> tuple[Scheduler, float | None]:
    """The rebuilt scheduler and the last journaled instant (None: no record after the
    snapshot). FileNotFoundError when the run has neither; a damaged or newer journal
    raises what replaying it raises (OSError, SnapshotError, ValueError, ...)."""
    if not layout.journal.exists() and not layout.snapshot.exists():
        raise FileNotFoundError(errno.ENOENT, "no journal", str(layout.journal))
    sched, after = Scheduler(), 0
    if layout.snapshot.exists():
        with open(layout.snapshot, "rb") as handle:
            after, sched = load(handle)
    return sched, replay(sched, read_intact(layout.journal, after)
                         if layout.journal.exists() else ())
