"""The job index rebuilt from a long history holds the loop only so long a turn: a slice
ends once its time is up, not at a fixed count (R-PERF-3: no loop stall over 50 ms at
100,000 finished jobs; 1,000 jobs a slice held a request's answer back 86-137 ms while a
start at 100,000 finished rebuilt its index), and the slices still index every job."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from praxist_fs import compaction
from praxist_fs.adapters.jobindex import JobIndex, JobQuery, list_jobs
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.vault import Vault
from praxist_fs.core.metrics import AttemptTally
from praxist_fs.views import INDEX_CHUNK, INDEX_SLICE, INDEX_SLICE_SECONDS, Views

from .test_housekeeping import Clock
from .test_report import compacted_run

HISTORY = 2_550  # finished jobs: 25 chunks and a half, 2 slices and a half


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """A run whose snapshot holds HISTORY finished jobs, compacted, and no index (as after
    a reboot, or a run made before the index): built once, copied per test."""
    return compacted_run(tmp_path_factory.mktemp("history"), HISTORY)


def slices_to_index(history: Path, tmp_path: Path, step: float,
                    wanted: bool = False) -> tuple[int, RunLayout]:
    """Restore the run as a start does, rebuild its index a slice at a time as the loop
    does, each chunk of jobs seeming to take ``step`` seconds, the loop having news at
    every chunk or never (``wanted``): how many slices it took."""
    subprocess.run(["cp", "-a", str(history), str(tmp_path / "run")], check=True)
    layout = RunLayout.at(tmp_path / "run")
    restored = compaction.restore(layout)
    sched, seq = restored.sched, restored.journal_seq
    index = JobIndex(layout.job_index, journal_seq=seq, boot_id="boot", clean=False)
    views = Views(layout, Vault(layout), index, AttemptTally(), clock=Clock(step))
    views.repair(sched, time.time_ns(), seq,
                 lambda path, data, why: pytest.fail(f"set aside {path}: {why}"))
    slices = 0
    try:
        while views.indexing:
            views.index_history(sched, seq, lambda: wanted)
            slices += 1
    finally:
        sched.jobs.reader.handle.close()  # the snapshot a coordinator keeps open
        index.close()
    return slices, layout


def indexed_tags(layout: RunLayout) -> set[str]:
    listing = list_jobs(layout, JobQuery(), owner=None)
    assert listing.source == "index"
    return {document["tag"] for document in listing.documents}


def test_a_slow_slice_of_the_index_rebuild_ends_once_its_time_is_up(history, tmp_path):
    """Each chunk seems to take five times a slice's time: each turn indexes one chunk,
    and the rebuild still reaches every job."""
    slices, layout = slices_to_index(history, tmp_path, 5 * INDEX_SLICE_SECONDS)
    assert slices == -(-HISTORY // INDEX_CHUNK)
    assert len(indexed_tags(layout)) == HISTORY


def test_a_fast_slice_of_the_index_rebuild_ends_at_its_most_jobs(history, tmp_path):
    slices, layout = slices_to_index(history, tmp_path, INDEX_SLICE_SECONDS / 1_000)
    assert slices == -(-HISTORY // INDEX_SLICE)
    assert len(indexed_tags(layout)) == HISTORY


def test_a_slice_of_the_index_rebuild_ends_after_a_chunk_once_the_loop_has_news(
        history, tmp_path):
    """A request arriving waits for the chunk being indexed, not the slice's rest."""
    slices, layout = slices_to_index(history, tmp_path, INDEX_SLICE_SECONDS / 1_000,
                                     wanted=True)
    assert slices == -(-HISTORY // INDEX_CHUNK)
    assert len(indexed_tags(layout)) == HISTORY
