"""A journal's records back into a core: the one loop that rebuilds a scheduler, for a
start and a roll-back (the daemon), the tools that read a run beside it (``history``),
and bench. The records come from wherever the caller read them (after a snapshot, up to
the durable end, up to the first damaged line); the core takes each as the event it was,
and the state they leave is the state that journaled them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .effects import Effect
from .events import from_record
from .scheduler import Scheduler


def replay(sched: Scheduler, records: Iterable[dict[str, Any]],
           applied: Callable[[list[Effect]], None] | None = None) -> float | None:
    """Hand ``records``, in order, to ``sched``. ``applied`` is shown each record's
    effects (none is carried out: a start repairs the files from the state, and notes
    which ones the records touched). Returns the last record's instant; None: none."""
    last = None
    for record in records:
        event = from_record(record)
        effects = sched.handle(event)
        if applied is not None:
            applied(effects)
        last = event.at
    return last
