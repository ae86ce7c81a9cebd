"""The history sweep (jobs/done/ and spool/replies/, every job and reply the run had)
holds the loop only so long a reconcile: a slice ends once its time is up, not at a
fixed count (R-PERF-3: no loop stall over 50 ms at 100,000 finished jobs; 5,000 entries
a slice took 0.1-0.7 s on a loaded machine)."""

from __future__ import annotations

import os

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.housekeeping import CHUNK, DONE_SLICE, SLICE_SECONDS, Housekeeper


class Clock:
    """A clock that moves ``step`` seconds at each reading: each chunk takes ``step``."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def left_by_crash(layout: RunLayout, count: int, directory: str = "done") -> None:
    """``count`` temp files in jobs/done/ (or spool/replies/) from before the coordinator
    started: what a crash's unfinished writes leave, which the sweep removes (no
    quarantine to write)."""
    where = layout.replies if directory == "replies" else layout.jobs(directory)
    for n in range(count):
        (where / f".fx-{n:05d}.json.1.{n}.tmp").write_bytes(b"{}")
    past = 1_000_000_000
    for entry in os.scandir(where):
        os.utime(entry.path, ns=(past, past))


def removed_by_each_reconcile(tmp_path, step: float, total: int) -> list[int]:
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    left_by_crash(layout, total)
    keeper, sched = Housekeeper(layout, clock=Clock(step)), Scheduler()
    removed, left = [], total
    while left:
        keeper._sweep_history(sched, None)  # what each reconcile runs
        now = len(os.listdir(layout.jobs("done")))
        removed.append(left - now)
        left = now
    return removed


def test_a_slice_ends_once_its_time_is_up(tmp_path):
    """Each chunk of entries seems to take five times a slice's time: each reconcile
    sweeps one chunk, and the sweep still reaches every entry."""
    removed = removed_by_each_reconcile(tmp_path, 5 * SLICE_SECONDS, 1_050)
    assert removed == [CHUNK] * 10 + [50]


def test_a_fast_slice_ends_at_its_most_entries(tmp_path):
    removed = removed_by_each_reconcile(tmp_path, SLICE_SECONDS / 1_000, 13_000)
    assert removed == [DONE_SLICE, DONE_SLICE, 3_000]


def test_the_two_history_directories_share_one_slice_and_take_turns(tmp_path):
    """A reconcile's slice is one budget for jobs/done/ and spool/replies/ together (a
    slice of each, one after the other, held the loop twice as long): each chunk seeming
    to take five times the slice's time, each reconcile sweeps one chunk, of the two
    directories in turn, and both passes reach every entry."""
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    for directory in ("done", "replies"):
        left_by_crash(layout, 250, directory)
    keeper, sched = Housekeeper(layout, clock=Clock(5 * SLICE_SECONDS)), Scheduler()
    counts = [(250, 250)]
    while counts[-1] != (0, 0) and len(counts) < 20:
        keeper._sweep_history(sched, None)
        counts.append((len(os.listdir(layout.jobs("done"))), len(os.listdir(layout.replies))))
    removed = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(counts, counts[1:])]
    assert removed == [(CHUNK, 0), (0, CHUNK), (CHUNK, 0), (0, CHUNK), (50, 50)]
