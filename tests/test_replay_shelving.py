"""A start's long journal tail is replayed a piece at a time, its history shelved in an
unnamed scratch file as it goes (``compaction.replay_shelving``): the memory a start
holds is one piece's jobs, not the run's history (issue 31: an uncompacted run of 100,000
finished jobs settled at 439 MB)."""

from __future__ import annotations

import os
from types import SimpleNamespace

from praxist_fs import compaction
from praxist_fs.adapters.journal import Journal
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.metrics import AttemptTally
from praxist_fs.core.replay import replay
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.daemon import Coordinator
from tests.core.simulation import run_seed
from tests.disks import small_tmpfs
from tests.core.test_snapshot import _state


def _finished_in_memory(sched: Scheduler) -> int:
    return sum(job.state.terminal for job in sched.jobs.live())


def test_a_long_tail_leaves_no_more_finished_jobs_in_memory_than_a_piece_built(tmp_path):
    journal = run_seed(2, 600).journal
    whole, held = Scheduler(), []
    replay(whole, journal)
    layout = RunLayout.at(tmp_path / "run")
    layout.journal_dir.mkdir(parents=True)
    sched, every = Scheduler(), 10

    def applied(effects) -> None:  # the most finished jobs held at once, record by record
        held.append(_finished_in_memory(sched) + len(list(sched.replies.live())))
    compaction.replay_shelving(layout, sched, iter(journal), applied, every, AttemptTally())
    assert _state(sched) == _state(whole)
    finished = sum(job.state.terminal for job in whole.jobs.values())
    assert finished + len(whole.replies) > 4 * every  # so that pieces were taken
    assert max(held) <= 2 * every  # a record ends a job or answers a request, at most both
    assert _finished_in_memory(sched) < finished
    assert os.listdir(layout.journal_dir) == []  # the scratch file has no name
    sched.jobs.reader.handle.close()


def test_a_tail_shorter_than_a_piece_is_replayed_as_it_always_was(tmp_path):
    journal = run_seed(2, 100).journal
    layout = RunLayout.at(tmp_path / "run")
    layout.journal_dir.mkdir(parents=True)
    sched = Scheduler()
    compaction.replay_shelving(layout, sched, iter(journal), lambda effects: None,
                               len(journal) + 1, AttemptTally())
    assert sched.jobs.reader is None and _finished_in_memory(sched) > 0


def test_a_roll_back_over_a_long_tail_shelves_it_as_a_start_does(tmp_path):
    """A batch that could not be journaled (a full disk, which fails the compactions
    too, so the tail grows) rolls the core back to the durable records, rebuilt as a
    start rebuilds them: the tail a piece at a time, its history shelved. The daemon's
    own ``_roll_back`` on a real journal; of the coordinator only what it reads and sets
    (what it tells the inboxes is another test's)."""
    journal_records = run_seed(2, 600).journal
    whole = Scheduler()
    replay(whole, journal_records)
    layout = RunLayout.at(tmp_path / "run")
    layout.journal_dir.mkdir(parents=True)
    journal = Journal(layout.journal)
    for record in journal_records:
        journal.append(record)
    journal.commit()
    every = 2
    coordinator = SimpleNamespace(layout=layout, journal=journal, compact_after=every,
                                  driver=SimpleNamespace(sched=None),
                                  views=SimpleNamespace(tally=None),
                                  inboxes=SimpleNamespace(forget_results=lambda: None))
    Coordinator._roll_back(coordinator)
    rebuilt = coordinator.driver.sched
    assert _state(rebuilt) == _state(whole)
    finished = sum(job.state.terminal for job in whole.jobs.values())
    assert finished > 4 * every  # so that pieces were taken
    assert _finished_in_memory(rebuilt) <= 2 * every  # the rest on the shelf
    assert rebuilt.jobs.reader is not None
    rebuilt.jobs.reader.handle.close()
    journal.close()


def test_a_disk_too_full_for_the_scratch_file_leaves_the_tail_in_memory(tmp_path, caplog):
    """A roll-back comes when the disk is full: the scratch file cannot be written, and the
    replay goes on with the rest of the tail in memory, as it always was, not fails."""
    journal = run_seed(2, 600).journal
    whole = Scheduler()
    replay(whole, journal)
    with small_tmpfs(tmp_path / "disk") as disk:
        layout = RunLayout.at(disk.root / "run")
        layout.journal_dir.mkdir(parents=True)
        disk.fill()
        sched = Scheduler()
        compaction.replay_shelving(layout, sched, iter(journal), lambda effects: None, 2,
                                   AttemptTally())
        assert _state(sched) == _state(whole)
        assert "replayed in memory" in caplog.text
        if sched.jobs.reader is not None:
            sched.jobs.reader.handle.close()
