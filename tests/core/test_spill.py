"""A long replay shelved a piece at a time (``core.spill``) is the replay held whole.

The journals come from the deterministic simulation (every kind of event, crashes,
restarts, jobs reopened after they finished). Every few records the finished jobs and
replies in memory are appended to a scratch file (here a bytearray) and shelved there:
the scheduler must decide exactly as one that built everything, a snapshot rendered from
it must be the one rendered from that scheduler, and no finished job or reply stays in
memory after a piece."""

from __future__ import annotations

import random

import pytest

from praxist_fs.core.events import from_record
from praxist_fs.core.shelf import Shelved, offset_and_length
from praxist_fs.core.snapshot import read, render, shelve_jobs, shelve_replies
from praxist_fs.core.spill import piece

from .simulation import replay, run_seed
from .test_snapshot import _file, _state, _through_json


def _spilled(journal: list[dict], every: int, sched=None):
    """The journal replayed as a start with a long tail does (compaction.replay_shelving),
    into a scratch file held in memory; on ``sched`` (a restored one) when given."""
    sched, scratch = sched or replay([]), bytearray()

    def read_at(where: int) -> bytes:
        offset, length = offset_and_length(where)
        return bytes(scratch[offset:offset + length])
    for count, record in enumerate(journal, 1):
        sched.handle(from_record(_through_json(record)))
        if count % every == 0:
            taken = piece(sched, len(scratch), read_at)
            scratch += taken.data
            shelve_jobs(sched, taken.jobs, read_at)
            shelve_replies(sched, taken.replies, read_at)
            assert not [job for job in sched.jobs.live() if job.state.terminal]
            assert not list(sched.replies.live())
    return sched


@pytest.mark.parametrize("seed", range(1, 7))
def test_a_replay_shelved_a_piece_at_a_time_decides_as_one_held_whole(seed):
    journal = run_seed(seed, 300).journal
    whole = replay(journal)
    for every in (1, 7, 41):
        spilled = _spilled(journal, every)
        assert _state(spilled) == _state(whole), f"seed {seed}, a piece every {every}"
        rendered = render(spilled, 99).data
        assert rendered == render(whole, 99).data  # the next compaction's snapshot
        assert _state(read(*_file(rendered)).sched) == _state(whole)


@pytest.mark.parametrize("seed", range(1, 5))
def test_a_tail_after_a_snapshot_shelved_a_piece_at_a_time_decides_as_one_held_whole(seed):
    """A start restored from a snapshot, its long tail shelved in pieces: the snapshot's
    shelved entries are copied to the scratch file at the first piece (an index reads
    one file), and the scheduler decides as the one that replayed everything."""
    journal = run_seed(seed, 300).journal
    whole, cut = replay(journal), len(journal) // 3
    restored = read(*_file(render(replay(journal[:cut]), cut).data)).sched
    spilled = _spilled(journal[cut:], 13, restored)
    assert _state(spilled) == _state(whole)
    assert render(spilled, 99).data == render(whole, 99).data


def test_the_shelf_of_pieces_holds_each_finished_job_once_and_its_latest_line():
    """A job reopened after a piece (a resubmission brings it back) and finished again is
    shelved with its new line; its old one is never read again."""
    journal = run_seed(3, 400).journal
    spilled, whole = _spilled(journal, 5), replay(journal)
    shelved = spilled.jobs.shelved_keys()
    assert len(shelved) == len(set(shelved))
    assert {key: spilled.jobs.peek(key) for key in shelved} == \
        {key: whole.jobs.peek(key) for key in shelved}


@pytest.mark.parametrize("count", [0, 1, 63, 64, 65, 1000])
def test_an_index_finds_each_of_its_keys_and_no_other(count):
    """``Shelved.find`` bisects its fences, then a block: every key at its position, and
    no key between two of them, before the first or after the last."""
    rng = random.Random(count)
    keys = sorted({f"job-{rng.randrange(10**6):06d}" for _ in range(count)})
    index = Shelved(keys, range(len(keys)), [1] * len(keys))
    assert [index.find(key) for key in keys] == list(range(len(keys)))
    absent = {f"job-{n:06d}{suffix}" for n in range(0, 10**6, 997) for suffix in ("", "x")}
    assert all(index.find(key) == -1 for key in absent - set(keys))
    assert index.find("") == index.find("zzz") == -1
