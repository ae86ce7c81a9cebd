"""Journal compaction: a snapshot plus the journal's tail is the whole journal.

The journals come from the deterministic simulation (every kind of event,
crashes and restarts included). For cut points along each journal, the state
replayed up to the cut is captured, sent through JSON, restored, and the rest
of the journal is replayed on top: the result must equal replaying everything.
"""

from __future__ import annotations

import io
import json
import random
from array import array
from pathlib import Path

import pytest

from praxist_fs.core.events import from_record
from praxist_fs.core.scheduler import FINISHED, Scheduler
from praxist_fs.core.shelf import (
    LineKeyed, PackedKeys, Shelf, Shelved, encoded, offset_and_length, place,
)
from praxist_fs.core.snapshot import (
    READS, SnapshotError, capture, load, read, render, restore, shelve, shelve_jobs,
    shelve_replies, watch,
)
from praxist_fs.core.snapshot_header import read_header, read_header_pieces

from .simulation import replay, run_seed


def _through_json(doc):
    return json.loads(json.dumps(doc))


def _state(sched: Scheduler) -> tuple:
    """Everything a later decision can depend on, order of the running jobs included (the
    order the jobs and replies are listed in is none: a shelved one is listed first)."""
    doc = _through_json(capture(sched))
    doc["jobs"].sort(key=lambda job: job["job_id"])
    doc["replies"].sort(key=lambda reply: reply["request_id"])
    for state in FINISHED:  # nor the order of the finished jobs (a shelf's is its ids')
        doc["by_state"].get(state.value, []).sort()
    return (sched.snapshot(), doc,
            [job.job_id for job in sched.running()], [job.job_id for job in sched.queued()])


@pytest.mark.parametrize("seed", range(1, 9))
def test_a_snapshot_and_the_tail_replay_to_the_same_state(seed):
    journal = run_seed(seed, 250).journal
    whole = _state(replay(journal))
    rng = random.Random(seed)
    cuts = sorted({0, len(journal), *(rng.randint(0, len(journal)) for _ in range(6))})
    for cut in cuts:
        restored = restore(_through_json(capture(replay(journal[:cut]))))
        for record in journal[cut:]:
            restored.handle(from_record(_through_json(record)))
        assert _state(restored) == whole, f"seed {seed}: cut at record {cut}"


def test_the_snapshot_file_reads_back_line_by_line():
    sched = replay(run_seed(4, 300).journal)
    lines = render(sched, 1234).data.splitlines(keepends=True)
    assert len(lines) == 1 + len(sched.jobs) + len(sched.replies)
    seq, restored = load(iter(lines))
    assert seq == 1234 and _state(restored) == _state(sched)
    with pytest.raises(SnapshotError, match="damaged"):
        load(iter(lines[:-1]))  # a reply short
    with pytest.raises(SnapshotError, match="lines after the last reply"):
        load(iter([*lines, lines[-1]]))


def _lines(rendered):
    return rendered.data.splitlines(keepends=True)


def _file(data: bytes):
    """A snapshot file held in memory: its lines, and its ``read_at``."""
    def read_at(where: int) -> bytes:
        offset, length = offset_and_length(where)
        return data[offset:offset + length]
    return io.BytesIO(data), read_at


@pytest.mark.parametrize("seed", range(1, 5))
def test_a_start_builds_only_the_jobs_not_ended_and_decides_as_if_it_built_all(seed):
    journal = run_seed(seed, 250).journal
    whole = _state(replay(journal))
    cut = len(journal) // 2
    sched = replay(journal[:cut])
    restored = read(*_file(render(sched, cut).data)).sched
    assert sorted(job.job_id for job in restored.jobs.live()) == sorted(
        job.job_id for job in sched.jobs.values() if not job.state.terminal)
    assert not list(restored.replies.live()) and _state(restored) == _state(sched)
    for record in journal[cut:]:
        restored.handle(from_record(_through_json(record)))
    assert _state(restored) == whole


@pytest.mark.parametrize("seed", range(1, 5))
def test_a_compaction_sends_the_finished_jobs_and_replies_to_its_snapshot(seed):
    """As ``compaction.compact`` does: the scheduler goes on in place, lighter."""
    journal = run_seed(seed, 250).journal
    whole = _state(replay(journal))
    sched = replay([])
    for cut, record in enumerate(journal):
        sched.handle(from_record(_through_json(record)))
        if cut % 97 == 0:  # a shelf replaced by the next one, with jobs reopened between
            rendered = render(sched, cut)
            shelve(sched, rendered, _file(rendered.data)[1])
            assert all(not job.state.terminal for job in sched.jobs.live())
            assert not list(sched.replies.live())
            assert render(sched, cut).data == rendered.data  # copied off the shelf as it was
    assert _state(sched) == whole


def test_the_watermark_of_the_derived_files_reads_back_and_older_snapshots_lack_it():
    sched = replay(run_seed(5, 200).journal)
    seq, durable_ns, restored, _ = read(_lines(render(sched, 77,
                                                      views_durable_ns=1_700_000_000_123)))
    assert (seq, durable_ns) == (77, 1_700_000_000_123) and _state(restored) == _state(sched)
    assert read(_lines(render(sched, 77)))[1] is None  # as a snapshot of an older version reads


def test_a_restored_scheduler_captures_to_the_same_document():
    sched = replay(run_seed(3, 300).journal)
    doc = _through_json(capture(sched))
    assert _through_json(capture(restore(doc))) == doc


def test_an_attempt_past_go_in_an_older_snapshot_is_restored_running():
    """Snapshots written before the running phase kept such an attempt at the barrier."""
    journal = run_seed(5, 300).journal  # half way, two attempts are past GO
    sched = replay(journal[:len(journal) // 2])
    doc = _through_json(capture(sched))
    past_go = [a for job in doc["jobs"] for a in job["attempts"] if a["phase"] == "running"]
    assert past_go
    for attempt in past_go:
        attempt["phase"] = "barrier"
    assert _state(restore(doc)) == _state(sched)


def test_a_snapshot_from_a_newer_version_is_refused_by_name():
    doc = _through_json(capture(Scheduler()))
    with pytest.raises(SnapshotError, match="format 99; this version reads "
                       + ", ".join(map(str, READS))):
        restore({**doc, "format": 99})


def test_a_damaged_snapshot_is_refused_not_half_restored():
    doc = _through_json(capture(replay(run_seed(5, 200).journal)))
    assert doc["jobs"], "the seed should have made jobs"
    broken = {**doc, "by_state": {}}  # jobs that no state lists
    with pytest.raises(SnapshotError, match="per-state index"):
        restore(broken)
    with pytest.raises(SnapshotError, match="damaged"):
        restore({key: value for key, value in doc.items() if key != "replies"})


def test_lease_counters_missing_from_an_older_snapshot_start_at_zero():
    """Snapshots written before declined_ignored and revoked_ignored were counted lack them."""
    doc = _through_json(capture(replay(run_seed(1, 300).journal)))
    assert doc["generations"], "the seed should have opened a generation"
    for gen in doc["generations"]:
        for counts in gen["stats"].values():
            del counts["declined_ignored"], counts["revoked_ignored"]
    for gen in restore(doc).generations.values():
        stats = gen.stats_document()
        assert (stats["declined_ignored"], stats["revoked_ignored"]) == (0, 0)


@pytest.mark.parametrize("seed", (1, 3))
def test_an_older_snapshot_without_the_shelf_indexes_restores_the_same_scheduler(seed):
    """Snapshots before the shelf lack the jobs with a preemption on record and each
    generation's jobs: read from the jobs themselves, they say the same."""
    sched = replay(run_seed(seed, 300).journal)
    doc = _through_json(capture(sched))
    assert doc["generation_jobs"], "the seed should have put jobs in a generation"
    older = {key: value for key, value in doc.items()
             if key not in ("generation_jobs", "preempted_jobs")}
    assert _state(restore(older)) == _state(sched)


FORMAT_1 = Path(__file__).resolve().parents[2] / "fixtures" / "snapshots"


@pytest.mark.parametrize("shelved", (True, False))
def test_a_snapshot_written_before_the_shelf_index_restores_and_goes_on_deciding(shelved):
    """format1-seed3.jsonl is what the version before format 2 wrote (commit 2cd64b5, a
    replay of seed 3 cut half way, kept with the whole journal): read as a start reads it
    (its finished jobs and replies shelved) or whole, then given the rest of the journal,
    it is the scheduler that replayed every record."""
    data = (FORMAT_1 / "format1-seed3.jsonl").read_bytes()
    journal = [json.loads(line) for line in
               (FORMAT_1 / "format1-seed3-journal.jsonl").read_text().splitlines()]
    assert json.loads(data.split(b"\n", 1)[0])["format"] == 1
    restored = read(*_file(data)) if shelved else read(data.splitlines(keepends=True))
    cut = restored.journal_seq
    assert _state(restored.sched) == _state(replay(journal[:cut]))
    if shelved:
        assert all(not job.state.terminal for job in restored.sched.jobs.live())
    sched = restored.sched
    for record in journal[cut:]:
        sched.handle(from_record(_through_json(record)))
    assert _state(sched) == _state(replay(journal))
    rendered = render(sched, len(journal))  # and its next compaction writes format 2
    assert _state(read(*_file(rendered.data)).sched) == _state(sched)


@pytest.mark.parametrize("halves", [False, True], ids=["at-once", "a-half-at-a-time"])
@pytest.mark.parametrize("seed", range(1, 9))
def test_a_snapshot_shelved_while_the_scheduler_went_on_is_the_same_state(seed, halves):
    """As ``compaction.Compactor`` does: the snapshot is rendered from the state of one
    moment (a forked child's copy) and shelved some records later, while the scheduler
    went on (jobs reopened, retried, replies replaced): what changed since stays in
    memory, the rest leaves it, and the state is the same as if nothing was shelved.
    ``halves``: as ``compaction.Background.step`` does, the finished jobs are shelved
    at one turn of the loop and the replies records later (each half of a 100,000-job
    shelving held the loop for 30-45 ms), the scheduler going on between them too."""
    journal = run_seed(seed, 250).journal
    whole = _state(replay(journal))
    sched, pending = replay([]), None
    for cut, record in enumerate(journal):
        sched.handle(from_record(_through_json(record)))
        if pending is not None and halves and cut % 61 == 20:
            rendered, captured, read_at = pending
            shelve_jobs(sched, rendered.jobs, read_at, captured[0])
        if pending is not None and cut % 61 == 40:
            rendered, captured, read_at = pending
            if halves:
                shelve_replies(sched, rendered.replies, read_at, captured[1])
            else:
                shelve(sched, rendered, read_at, captured)
            pending = None
        if cut % 61 == 0:  # the fork: rendered now, shelved (a half) 20 and 40 records later
            captured = watch(sched)
            rendered = render(sched, cut)
            pending = rendered, captured, _file(rendered.data)[1]
    assert _state(sched) == whole


def test_a_shelf_index_finds_each_key_with_its_place_and_mark_and_no_other():
    keys = ["b", "a", "é-tag", "a-1", "z" * 70, ""]
    index = Shelved.of((key, n << 32 | n, n % 3) for n, key in enumerate(keys))
    assert index.keys() == sorted(keys, key=encoded)
    for n, key in enumerate(keys):
        position = index.find(key)
        assert (index.place(position), index.mark(position)) == (n << 32 | n, n % 3)
    assert [index.find(key) for key in ("c", "a-", "zz", "é")] == [-1] * 4


def _read_keys_in_file(data: bytes, piece: int = 64):
    """``read`` as a tool beside a run reads a snapshot file (adapters/history.py): its
    header in pieces, the shelf's keys left in the file (``LineKeyed``)."""
    first = data.index(b"\n") + 1
    _, read_at = _file(data)
    return read(iter(data[first:].splitlines(keepends=True)), read_at,
                lambda: (data[at:min(at + piece, first)] for at in range(0, first, piece)),
                keys_in_file=True)


@pytest.mark.parametrize("seed", range(1, 5))
def test_a_tool_that_leaves_the_keys_in_the_file_finds_and_decides_as_a_start(seed):
    """issue 31 item 3 (report, simulate --from-run: memory flat in history): a snapshot
    read with its shelf's keys left in the file holds no key, finds every finished job
    and reply a start finds (and none it does not), walks the same jobs, and replays the
    journal's tail (whose duplicate checks look up shelved replies) to the same state."""
    journal = run_seed(seed, 250).journal
    whole = _state(replay(journal))
    cut = len(journal) // 2
    data = render(replay(journal[:cut]), cut).data
    start, tool = read(*_file(data)).sched, _read_keys_in_file(data).sched
    for shelf in ("jobs", "replies"):
        ours, theirs = getattr(tool, shelf), getattr(start, shelf)
        assert isinstance(ours._index, LineKeyed) and not ours._index._keys
        keys = theirs.shelved_keys()
        assert len(keys) >= 3 and ours.shelved_keys() == keys
        assert [ours.peek(key) for key in keys] == [theirs.peek(key) for key in keys]
        assert [ours.mark(key) for key in keys] == [theirs.mark(key) for key in keys]
        others = [key + "-" for key in keys] + ["", "\uffff", keys[0][:-1]]
        assert not any(ours.peek(key) for key in others if key not in keys)
    assert [job.job_id for job in tool.jobs.values()] == \
        [job.job_id for job in start.jobs.values()]
    assert _state(tool) == _state(start)
    for record in journal[cut:]:
        tool.handle(from_record(_through_json(record)))
    assert _state(tool) == whole


def test_a_line_keyed_index_reads_a_long_key_whole_and_walks_in_runs():
    """A key longer than the head of its line that a lookup reads is read from the whole
    line; a walk reads runs of lines no longer than asked (but one line each)."""
    keys = sorted(["a", "b" * 300, "c\u00e9", "d"], key=encoded)
    lines = [json.dumps({"job_id": key, "n": n}, ensure_ascii=False).encode() + b"\n"
             for n, key in enumerate(keys)]
    data = b"header\n" + b"".join(lines)
    offsets = [7]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    index = LineKeyed(7, array("I", offsets[1:]), bytes([0, 1, 2, 3]), _file(data)[1],
                      "job_id")
    assert index.keys() == keys
    assert [index.find(key) for key in keys] == [0, 1, 2, 3]
    assert [index.find(key) for key in ("b", "b" * 301, "e", "")] == [-1] * 4
    assert [index.mark(index.find(key)) for key in keys] == [0, 1, 2, 3]
    assert index.place(1) == place(offsets[1], len(lines[1]))
    runs = list(index.runs(len(lines[0]) + len(lines[2]) + 1))
    assert runs == [(0, 1), (1, 2), (2, 4)]


def test_a_walk_of_the_shelf_in_slices_sees_each_entry_not_deleted_once():
    """``Shelf.entries_after``, as the job index's rebuild walks the run's history: an
    entry brought back or deleted is seen without a mark, and a new snapshot between two
    slices does not restart the walk (what it shelves anew was in memory when the walk
    began, or was seen)."""
    keys = [f"job-{n:03d}" for n in range(10)] + ["é-tag"]
    shelf = Shelf()
    shelf.shelve(Shelved.of((key, n, n % 3) for n, key in enumerate(keys)),
                 lambda where: b"", lambda line: line)
    seen = shelf.entries_after(None, 4)
    assert seen == [(key, n % 3) for n, key in enumerate(keys[:4])]
    shelf["job-005"] = b"changed"  # no longer shelved, but there
    del shelf["job-006"]
    shelf["job-100"] = b"finished meanwhile"
    seen += shelf.entries_after(seen[-1][0], 3)
    assert seen[4:] == [("job-004", 1), ("job-005", None), ("job-006", None)]
    # a compaction: every entry but the deleted one, and the one finished meanwhile
    now = ["job-000", "job-005", "job-007", "job-008", "job-009", "job-100", "é-tag"]
    shelf.shelve(Shelved.of((key, n, 1) for n, key in enumerate(now)),
                 lambda where: b"", lambda line: line)
    while found := shelf.entries_after(seen[-1][0], 2):
        seen += found
    assert seen[7:] == [("job-007", 1), ("job-008", 1), ("job-009", 1), ("job-100", 1),
                        ("é-tag", 1)]
    assert shelf.entries_after("é-tag", 2) == []


def test_a_walk_of_every_job_reads_the_shelf_a_run_of_lines_at_a_time():
    """issue 31 item 3 (`report` and `simulate --from-run` walk every job of a run's
    history): a walk of a restored scheduler's jobs reads its shelved lines 4 MB at a
    time, not one read (and one lookup in the index) per finished job, and gives the
    jobs a lookup of each gives, shelved ones first, in key order."""
    sched = replay(run_seed(4, 300).journal)
    handle, read_at = _file(render(sched, 1).data)
    reads = []

    def counted(where: int) -> bytes:
        reads.append(where)
        return read_at(where)

    restored = read(handle, counted).sched
    shelved = [job_id for job_id, _ in restored.jobs.shelved()]
    reads.clear()
    walked = list(restored.jobs.values())
    assert len(shelved) >= 10 and len(reads) == 1
    assert [job.job_id for job in walked] == [*shelved, *(j.job_id for j in restored.jobs.live())]
    assert walked == [restored.jobs.peek(job.job_id) for job in walked]


def _header_line(job_ids: list[str], reply_ids: list[str]) -> bytes:
    """A header as ``render`` writes one, with these shelved ids (lengths made up)."""
    def section(ids):
        return {"ids": ids, "lengths": [100 + n for n in range(len(ids))],
                "states": "0" * len(ids)}
    header = {"format": 3, "journal_seq": 7, "live_jobs": 0,
              "shelf": {"finished": ["completed", "failed"], "jobs": section(job_ids),
                        "replies": section(reply_ids)}, "views_durable_ns": 5, "tally": {"a": 1}}
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("job_ids", [
    [], ["a-1"], ["b-2", "a-1", "ü-3", ""], [f"job-{n:05d}" for n in range(300)],
    ['quo"te-1', "plain-2"], ["back\\slash-1"], ["new\nline-1"], ['x","y-1'],
])
def test_a_header_read_in_pieces_reads_as_read_whole(job_ids, piece):
    """A snapshot's header given in pieces of any size, cut anywhere (inside an id, a
    length, a marker), reads as the whole line reads (``read_header``; as JSON where an
    id holds an escape), and says how long the line was: a start or a report never
    holds the header whole (5.4 MB at 100,000 finished jobs)."""
    line = _header_line(sorted(job_ids, key=encoded), ["r-1", "r-2"])
    passes = []

    def pieces():
        passes.append(1)
        return (line[at:at + piece] for at in range(0, len(line), piece))
    header, length = read_header_pieces(pieces)
    whole = read_header(line)
    assert length == len(line)
    assert {k: v for k, v in header.items() if k != "shelf"} == \
        {k: v for k, v in whole.items() if k != "shelf"}
    for name in ("jobs", "replies"):
        ours, theirs = header["shelf"][name], whole["shelf"][name]
        assert type(ours["ids"]) is type(theirs["ids"])
        if isinstance(ours["ids"], PackedKeys):
            assert (ours["ids"].data, ours["ids"].count) == \
                (theirs["ids"].data, theirs["ids"].count)
        else:
            assert ours["ids"] == theirs["ids"]
        assert list(ours["lengths"]) == list(theirs["lengths"])
        assert ours["states"] == theirs["states"]
    escaped = any(c in key for key in job_ids for c in '"\\\n')
    assert len(passes) == (2 if escaped else 1)  # read again, whole, only to parse as JSON


@pytest.mark.parametrize("piece", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("job_ids", [
    [], ["a-1"], ["b-2", "a-1", "ü-3", ""], [f"job-{n:05d}" for n in range(300)],
    ['quo"te-1', "plain-2"], ["back\\slash-1"], ['x","y-1'],
])
def test_a_header_read_without_its_keys_counts_them(job_ids, piece):
    """``read_header_pieces(keys=False)`` (a tool that leaves the keys in the file) reads
    what a read with keys reads, but each section's ids are only counted; a header with
    an escaped id is read as JSON whole, as with keys."""
    line = _header_line(sorted(job_ids, key=encoded), ["r-1", "r-2"])

    def pieces():
        return (line[at:at + piece] for at in range(0, len(line), piece))
    counted, length = read_header_pieces(pieces, keys=False)
    whole, _ = read_header_pieces(pieces)
    assert length == len(line)
    for name in ("jobs", "replies"):
        ours, theirs = counted["shelf"][name], whole["shelf"][name]
        if isinstance(theirs["ids"], PackedKeys):
            assert (ours["ids"].data, len(ours["ids"])) == (b"", len(theirs["ids"]))
        else:
            assert ours["ids"] == theirs["ids"]
        assert list(ours["lengths"]) == list(theirs["lengths"])


@pytest.mark.parametrize("job_ids", [
    [], ["a-1"], ["b-2", "a-1", "ü-3", ""],
    ['quo"te-1', "plain-2"], ["back\\slash-1"], ["new\nline-1"], ['x","y-1'],
])
def test_a_header_reads_as_json_reads_it_its_plain_ids_packed(job_ids):
    """issue 31 item 3: a snapshot's header is read without a string and an int object per
    shelved entry where no id holds an escape (``read_header``), and the index built from
    it is the one JSON's lists build; a header with an id that holds a quote, a
    backslash or a newline is read by JSON whole, as before."""
    line = _header_line(sorted(job_ids, key=encoded), ["r-1", "r-2"])
    header, plain = read_header(line), json.loads(line)
    assert {k: v for k, v in header.items() if k != "shelf"} == \
        {k: v for k, v in plain.items() if k != "shelf"}
    for name in ("jobs", "replies"):
        ours, theirs = header["shelf"][name], plain["shelf"][name]
        packed = isinstance(ours["ids"], PackedKeys)
        assert packed == (not any(c in key for key in job_ids for c in '"\\\n'))
        assert list(ours["lengths"]) == theirs["lengths"] and ours["states"] == theirs["states"]
        built = (Shelved.packed(ours["ids"], ours["lengths"], ours["lengths"], b"") if packed
                 else Shelved(ours["ids"], ours["lengths"], ours["lengths"]))
        expected = Shelved(theirs["ids"], theirs["lengths"], theirs["lengths"])
        assert built.keys() == expected.keys() and len(built) == len(expected)
        for key in [*theirs["ids"], "absent"]:
            assert built.find(key) == expected.find(key)
            if key != "absent":
                assert built.place(built.find(key)) == expected.place(expected.find(key))
