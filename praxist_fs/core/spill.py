"""A long replay's finished jobs and replies, shelved a piece at a time as it goes.

A start with a long journal and no snapshot to cover it (a run whose compactions all
failed, or bench's acceptance run of 100,000 finished jobs written as 400,001 records)
built every job and reply as an object before its first compaction could take them out
of memory: 439 MB settled at 100,000 finished jobs. Between pieces of such a replay the
finished jobs and the replies built since the last piece are written out as the lines a
snapshot holds them in (``piece``), appended to a scratch file, and shelved there, just
as a compaction shelves them in its snapshot: a lookup brings one back, and the next
compaction copies them into its snapshot from that file. No snapshot is written: the
journal stays the truth, and the scratch file has no name (nothing is left after a crash).

Pure: the lines and the merged indexes; the adapter appends and reads (compaction.py).
"""

from __future__ import annotations

from array import array
from itertools import accumulate
from collections.abc import Callable
from typing import NamedTuple

from .scheduler import Scheduler
from .shelf import Shelf, Shelved, encoded
from .snapshot import _MARKS, _job, _line, _reply


class Piece(NamedTuple):
    """The lines to append at ``at`` (``piece``), and the shelves' indexes once they are."""
    data: bytes
    jobs: Shelved
    replies: Shelved


def piece(sched: Scheduler, at: int, own: Callable[[int], bytes]) -> Piece:
    """The finished jobs and the replies in memory as lines laid one after the other from
    byte ``at`` of the scratch file, which ``own`` reads, and the jobs' and the replies'
    indexes of what their shelves hold then: what they held there before (but the
    entries brought back or deleted since) and these. A shelf that reads another file
    (the snapshot a start restored) has its lines copied over too, once, at the first
    piece: an index reads one file."""
    jobs = _entries(sched.jobs, [(encoded(job.job_id), _line(_job(job)), _MARKS[job.state])
                                 for job in sched.jobs.live() if job.state.terminal], own)
    replies = _entries(sched.replies, [(encoded(reply.request_id), _line(_reply(reply)), 0)
                                       for reply in sched.replies.live()], own)
    data = b"".join(line for _, line, _ in (*jobs, *replies))
    jobs_index, at = _indexed(sched.jobs, jobs, at, own)
    replies_index, _ = _indexed(sched.replies, replies, at, own)
    return Piece(data, jobs_index, replies_index)


Entry = tuple[bytes, bytes, int]  # an entry's encoded key, line and mark


def _entries(shelf: Shelf, live: list[Entry], own: Callable[[int], bytes]) -> list[Entry]:
    """``live`` in key order, with every entry still shelved when ``shelf`` reads another
    file than ``own``."""
    if shelf.reader is not own:
        live += [(encoded(key), line, mark) for key, line, mark in shelf.shelved_lines()]
    live.sort()
    return live


def _indexed(shelf: Shelf, added: list[Entry], at: int, own: Callable[[int], bytes]
             ) -> tuple[Shelved, int]:
    """The index of ``shelf`` once ``added`` (in key order, lines laid from ``at``) is
    shelved in ``own``'s file, and where the lines end."""
    lengths = array("Q", [len(line) for _, line, _ in added])
    offsets = array("Q", accumulate(lengths, initial=at))
    end = offsets.pop()
    keys, marks = [key for key, _, _ in added], bytes(mark for _, _, mark in added)
    if shelf.reader is own:
        return shelf.merged_index(keys, offsets, lengths, marks), end
    return Shelved.of_encoded(keys, offsets, lengths, marks), end
