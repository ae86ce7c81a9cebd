"""The history sweep (jobs/done/ and spool/replies/, every job and reply the run had)
holds the loop only so long a reconcile: a slice is sized to the time its entries took,
not a fixed count (R-PERF-3: no loop stall over 50 ms at 100,000 finished jobs; 5,000
entries a slice took 0.1-0.7 s on a loaded machine)."""

from __future__ import annotations

import os

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.housekeeping import (
    DONE_SLICE, FIRST_SLICE, LEAST_SLICE, SLICE_SECONDS, Housekeeper,
)


class Clock:
    """A clock that moves ``step`` seconds at each reading: each slice takes ``step``."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def left_by_crash(layout: RunLayout, count: int) -> None:
    """``count`` temp files in jobs/done/ from before the coordinator started: what a
    crash's unfinished writes leave, which the sweep removes (no quarantine to write)."""
    done = layout.jobs("done")
    for n in range(count):
        (done / f".fx-{n:05d}.json.1.{n}.tmp").write_bytes(b"{}")
    past = 1_000_000_000
    for entry in os.scandir(done):
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


def test_a_slow_slice_makes_the_next_one_smaller(tmp_path):
    """Each slice seems to take five times the budget: after the first, the sweep takes
    the fewest entries a slice, and still reaches every one."""
    removed = removed_by_each_reconcile(tmp_path, 5 * SLICE_SECONDS, 1_050)
    assert removed[0] == FIRST_SLICE
    assert set(removed[1:-1]) == {LEAST_SLICE}
    assert sum(removed) == 1_050


def test_a_fast_slice_makes_the_next_one_at_most_twice_as_large(tmp_path):
    removed = removed_by_each_reconcile(tmp_path, SLICE_SECONDS / 1_000, 13_000)
    assert removed == [FIRST_SLICE, 2 * FIRST_SLICE, 4 * FIRST_SLICE, 8 * FIRST_SLICE,
                       DONE_SLICE, 500]
