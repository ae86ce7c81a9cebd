"""The sliced sweep (jobs/queued/, the backlog; jobs/done/ and spool/replies/, every job
and reply the run had) holds the loop only so long a reconcile: a slice ends once its
time is up, not at a fixed count (R-PERF-3: no loop stall over 50 ms at 100,000 finished jobs; 5,000 entries
a slice took 0.1-0.7 s on a loaded machine)."""

from __future__ import annotations

import os

from praxist_fs import housekeeping
from praxist_fs.adapters import quarantine
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
        keeper._sweep_slices(sched, None)  # what each reconcile runs
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
        keeper._sweep_slices(sched, None)
        counts.append((len(os.listdir(layout.jobs("done"))), len(os.listdir(layout.replies))))
    removed = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(counts, counts[1:])]
    assert removed == [(CHUNK, 0), (0, CHUNK), (CHUNK, 0), (0, CHUNK), (50, 50)]


def test_the_backlog_in_jobs_queued_is_swept_a_slice_at_a_time(tmp_path):
    """jobs/queued/ grows with the backlog (800-1,500 files held a reconcile 80-120 ms at a
    load of 13): it shares the reconcile's slice with the history, a chunk at a time, and a
    new pass begins as soon as one ends rather than a minute later."""
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    left_by_crash(layout, 1_050, "queued")
    keeper, sched = Housekeeper(layout, clock=Clock(5 * SLICE_SECONDS)), Scheduler()
    removed, left = [], 1_050
    while left and len(removed) < 20:
        keeper.tidy_jobs(sched, None, ("queued", "running"))  # what each reconcile runs
        now = len(os.listdir(layout.jobs("queued")))
        removed.append(left - now)
        left = now
    assert removed == [CHUNK] * 10 + [50]
    left_by_crash(layout, 3, "queued")  # the next pass is due at the next reconcile
    keeper.tidy_jobs(sched, None, ("queued", "running"))
    assert os.listdir(layout.jobs("queued")) == []


def test_a_file_gone_from_jobs_queued_between_two_slices_is_not_set_aside(tmp_path,
                                                                         monkeypatch):
    """A sliced pass judges entries listed a reconcile or more before: a job file that left
    jobs/queued/ meanwhile (its job launched: the move every launch makes) is no junk. Only
    what is still there is set aside, and no case notes a file it does not hold."""
    monkeypatch.setattr(housekeeping, "CHUNK", 10)
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    for n in range(30):  # files of jobs the journal never had: junk while they stand
        (layout.jobs("queued") / f"ghost-{n:02d}.json").write_text('{"state": "queued"}')
    keeper, sched = Housekeeper(layout, clock=Clock(5 * SLICE_SECONDS)), Scheduler()
    assert keeper.tidy_jobs(sched, None, ("queued", "running"))
    noted = [item for case in quarantine.notes(layout) for item in case["items"]]
    assert len(noted) == 10
    for path in layout.jobs("queued").iterdir():  # moved on before the next slices
        path.unlink()
    for _ in range(3):
        assert not keeper.tidy_jobs(sched, None, ("queued", "running"))
    assert [item for case in quarantine.notes(layout) for item in case["items"]] == noted




def history_passes(tmp_path, monkeypatch, reconciles: int, at=None):
    """Reconciles of a housekeeper whose history passes are due at each one (``done_sweep``
    0): for each, whether it listed jobs/done/ and spool/replies/ (``os.scandir``). A
    crash's leftover temp file is put in jobs/done/ after the ``at``-th."""
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    keeper, sched = Housekeeper(layout, done_sweep=0.0), Scheduler()
    history = (str(layout.jobs("done")), str(layout.replies))
    listed, scandir = [], os.scandir

    def counted(path="."):
        listed.append(str(path))
        return scandir(path)
    monkeypatch.setattr(os, "scandir", counted)
    passes = []
    for n in range(reconciles):
        listed.clear()
        keeper._sweep_slices(sched, None)
        passes.append(tuple(int(directory in listed) for directory in history))
        if n == at:
            leftover = layout.jobs("done") / ".fx-00000.json.1.0.tmp"
            leftover.write_bytes(b"{}")
            os.utime(leftover, ns=(1_000_000_000, 1_000_000_000))
    return passes, layout


def test_an_idle_runs_history_is_listed_again_only_once_something_in_it_changed(
        tmp_path, monkeypatch):
    """An idle coordinator listed and statted its whole history (jobs/done/ and
    spool/replies/: every job and reply the run had) once a minute: 0.1 s of CPU a
    minute each at 10,000 finished jobs, 0.6-0.8 s at 100,000, most of what an idle
    coordinator spent. A pass now runs only when inotify saw something change there
    since the last one began; what a pass is for (here a crash's leftover temp file,
    removed) is still done at the next one."""
    monkeypatch.delenv("PRAXIST_FORCE_POLLING", raising=False)
    passes, layout = history_passes(tmp_path, monkeypatch, 9, at=3)
    assert passes == [(1, 1), (0, 0), (0, 0), (0, 0),
                      (1, 0),  # the leftover came
                      (1, 0),  # the last pass removed it: a change too
                      (0, 0), (0, 0), (0, 0)]
    assert os.listdir(layout.jobs("done")) == [], "the leftover was removed"


def test_on_a_network_file_system_every_history_pass_runs(tmp_path, monkeypatch):
    """inotify misses other hosts' writes there: no pass is skipped."""
    monkeypatch.setenv("PRAXIST_FORCE_POLLING", "1")
    passes, _ = history_passes(tmp_path, monkeypatch, 4)
    assert passes == [(1, 1)] * 4


def test_the_starts_first_look_at_the_history_is_said_over_once_both_passes_ended(
        tmp_path, monkeypatch):
    """status.json's ``coordinator.history_checked``: until the start's first pass over
    jobs/done/ and spool/replies/ ends, an idle coordinator's CPU is mostly that pass
    (make bench's idle row measured it, not an idle coordinator). It turns true once
    both passes ended, a slice at a time, and stays true while later passes run."""
    monkeypatch.delenv("PRAXIST_FORCE_POLLING", raising=False)
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    for directory in ("done", "replies"):
        left_by_crash(layout, 150, directory)
    keeper = Housekeeper(layout, done_sweep=0.0, clock=Clock(5 * SLICE_SECONDS))
    sched, checked = Scheduler(), []
    for _ in range(4):  # a chunk a reconcile, the two in turn; the last two in the fourth
        checked.append(keeper.history_checked)
        keeper._sweep_slices(sched, None)
    assert checked == [False, False, False, True]
    left_by_crash(layout, 150, "done")  # a later pass, a chunk at a time
    keeper._sweep_slices(sched, None)
    assert keeper._listing["done"] is not None and keeper.history_checked
    while keeper._listing["done"] is not None:
        keeper._sweep_slices(sched, None)
