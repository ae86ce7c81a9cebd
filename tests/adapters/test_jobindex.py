"""The job index on real files: what is kept at start, commits readers cannot block,
queries, and the job files read instead when the index cannot be trusted."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from praxist_fs.adapters.fsio import dumps
from praxist_fs.adapters.jobindex import JobIndex, JobQuery, list_jobs

BOOT = "boot-1"
OWNER = 1000.5


def job(n: int, state: str = "completed", peer: str = "alice", submitted: float = 0.0,
        ended: float | None = None, **extra) -> dict:
    """A job document as the coordinator writes it (the fields the index reads, and more)."""
    submitted = submitted or 1000.0 + n
    attempts = [] if state == "queued" else [
        {"attempt_id": "a1", "started_at": submitted + 1, "exit_code": None,
         "ended_at": None if state == "running" else (ended or submitted + 2)}]
    return {"job_id": f"tag-{n}-0000000{n}", "tag": f"tag-{n}", "peer": peer, "state": state,
            "exit_code": None, "reason": state, "attempts": attempts, "submitted_at": submitted,
            **extra}


def pairs(*documents: dict) -> list[tuple[dict, str]]:
    return [(doc, dumps(doc).decode()) for doc in documents]


def rebuilt(index: JobIndex, *documents: dict, seq: int = 5) -> JobIndex:
    index.begin_rebuild(boot_id=BOOT, owner=OWNER)
    index.add(pairs(*documents))
    index.finish(seq)
    return index


def built(layout, *documents: dict, seq: int = 5) -> JobIndex:
    return rebuilt(JobIndex(layout.job_index, journal_seq=seq, boot_id=BOOT, clean=False),
                   *documents, seq=seq)


def ids(layout, owner=OWNER, **query) -> list[str]:
    listing = list_jobs(layout, JobQuery(**query), owner)
    assert listing.source == "index"
    return [doc["job_id"].split("-")[1] for doc in listing.documents]


def write_job_file(layout, doc: dict, directory: str) -> None:
    layout.job_file(directory, doc["job_id"]).write_bytes(dumps(doc))


def test_queries_list_newest_submission_first_and_filter(layout):
    built(layout, job(1, peer="bob"), job(2, "failed"), job(3, "running"),
          job(4, "queued", peer="bob"), job(5, submitted=900.0, ended=2000.0))
    assert ids(layout) == ["4", "3", "2", "1", "5"]
    assert ids(layout, states=("queued", "running")) == ["4", "3"]
    assert ids(layout, peer="bob") == ["4", "1"]
    assert ids(layout, tag_glob="tag-[24]") == ["4", "2"]
    assert ids(layout, tag_glob="TAG-*") == []  # case-sensitive
    # since: not ended yet, or submitted, started or ended since then
    assert ids(layout, since=1004.5) == ["4", "3", "5"]
    assert ids(layout, since=1004.0) == ["4", "3", "2", "5"]  # job 2 ended at 1004
    assert ids(layout, since=1003.0) == ["4", "3", "2", "1", "5"]
    listing = list_jobs(layout, JobQuery(limit=2, peer="alice"), OWNER)
    assert [d["job_id"] for d in listing.documents] == ["tag-3-00000003", "tag-2-00000002"]
    assert listing.matched == 3


def test_commits_replace_documents_and_pass_unknown_fields_through(layout):
    index = built(layout, job(1, "queued"))
    later = job(1, "completed", priority=7, hold=False)
    index.stage(later, dumps(later))
    index.stage(job(2, "queued"), dumps(job(2, "queued")))
    index.flush(6)
    listing = list_jobs(layout, JobQuery(), OWNER)
    assert [(d["job_id"], d["state"]) for d in listing.documents] == [
        ("tag-2-00000002", "queued"), ("tag-1-00000001", "completed")]
    assert listing.documents[1]["priority"] == 7 and listing.documents[1]["hold"] is False


def test_kept_at_start_only_at_the_journal_seq_on_the_same_boot_or_after_a_clean_stop(layout):
    index = built(layout, job(1))
    index.flush(9)  # the journal moved on: the index says it reflects seq 9
    index.close()
    path = layout.job_index
    assert JobIndex(path, journal_seq=9, boot_id=BOOT, clean=False).complete
    assert not JobIndex(path, journal_seq=10, boot_id=BOOT, clean=False).complete
    assert not JobIndex(path, journal_seq=9, boot_id="boot-2", clean=False).complete  # a reboot
    assert JobIndex(path, journal_seq=9, boot_id="boot-2", clean=True).complete


def test_after_a_crash_on_the_same_boot_an_index_behind_is_kept_back_to_the_compaction(layout):
    index = built(layout, job(1))
    index.flush(9)  # its last commit before the crash, the journal went on to seq 12
    index.close()
    path = layout.job_index
    assert not JobIndex(path, journal_seq=12, boot_id=BOOT, clean=False).complete
    assert not JobIndex(path, journal_seq=12, boot_id=BOOT, clean=False,
                        settled_seq=10).complete  # older than the last compaction
    assert not JobIndex(path, journal_seq=12, boot_id="boot-2", clean=False,
                        settled_seq=8).complete  # a reboot: its commits were never synced
    kept = JobIndex(path, journal_seq=12, boot_id=BOOT, clean=False, settled_seq=8)
    assert kept.complete and kept.behind  # the jobs changed after seq 8 are staged again
    kept.stage(job(2), dumps(job(2)))
    kept.flush(12)
    assert not kept.behind and ids(layout) == ["2", "1"]


@pytest.mark.parametrize("damage", ["missing", "garbage", "old schema"])
def test_a_missing_damaged_or_foreign_file_is_not_kept_and_is_rebuilt(layout, damage):
    built(layout, job(1)).close()
    path = layout.job_index
    if damage == "missing":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"not a database" * 100)
    else:
        with sqlite3.connect(path) as db:
            db.execute("UPDATE meta SET value = '0' WHERE key = 'schema'")
        db.close()
    index = JobIndex(path, journal_seq=5, boot_id=BOOT, clean=True)
    assert not index.complete
    rebuilt(index, job(1), job(2))
    assert index.complete and ids(layout) == ["2", "1"]


def test_a_reader_never_blocks_a_commit_which_is_retried_with_the_next(layout):
    index = built(layout, job(1))
    reader = sqlite3.connect(f"{layout.job_index.as_uri()}?mode=ro", uri=True,
                             isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM jobs").fetchone()  # holds a shared lock
    index.stage(job(2), dumps(job(2)))
    index.flush(6)
    assert index.complete and "tag-2-00000002" in index.staged  # kept for the next commit
    reader.close()
    index.flush(6)
    assert not index.staged and ids(layout) == ["2", "1"]


def test_an_index_damaged_under_the_writer_is_removed_and_readers_use_the_files(layout):
    index = built(layout, job(1))
    write_job_file(layout, job(1), "done")
    layout.job_index.write_bytes(b"\0garbage" * 1000)
    index.stage(job(2), dumps(job(2)))
    index.flush(6)
    assert not index.complete and not layout.job_index.exists()
    listing = list_jobs(layout, JobQuery(), OWNER)
    assert listing.source == "job files" and listing.note is None
    assert [d["job_id"] for d in listing.documents] == ["tag-1-00000001"]


def test_readers_use_the_job_files_when_another_coordinator_served_the_run(layout):
    built(layout, job(1, "running")).close()
    write_job_file(layout, job(1, "completed", priority=3), "done")
    write_job_file(layout, job(2, "queued"), "queued")
    stale = list_jobs(layout, JobQuery(), owner=OWNER + 1)
    assert stale.source == "job files" and "not kept by the coordinator" in stale.note
    assert [(d["job_id"], d["state"]) for d in stale.documents] == [
        ("tag-2-00000002", "queued"), ("tag-1-00000001", "completed")]
    assert stale.documents[1]["priority"] == 3
    assert list_jobs(layout, JobQuery(), owner=None).source == "index"  # no status.json


def test_the_job_files_count_a_job_caught_in_two_directories_once_as_the_later(layout):
    write_job_file(layout, job(1, "running"), "running")
    write_job_file(layout, job(1, "completed"), "done")  # moved; the old copy not yet removed
    write_job_file(layout, job(2, "queued"), "queued")
    (layout.jobs("queued") / ".tag-3.json.123.0.tmp").write_text("{")
    (layout.jobs("queued") / "junk.json").write_text(json.dumps({"no": "job"}))
    listing = list_jobs(layout, JobQuery(states=("completed", "running")), owner=None)
    assert listing.source == "job files"
    assert [(d["job_id"], d["state"]) for d in listing.documents] == [
        ("tag-1-00000001", "completed")]


def test_a_rebuild_in_slices_shows_no_index_until_it_is_whole_and_staged_documents_win(layout):
    built(layout, job(1, "running")).close()
    write_job_file(layout, job(1, "completed"), "done")
    write_job_file(layout, job(2, "completed"), "done")
    index = JobIndex(layout.job_index, journal_seq=7, boot_id="boot-2", clean=False)
    assert not index.complete  # a reboot
    index.begin_rebuild(boot_id="boot-2", owner=OWNER + 1)
    assert index.rebuilding and not layout.job_index.exists()  # readers read the files
    index.add(pairs(job(1, "completed"), job(2, "completed")))
    later = job(2, "failed")  # a job changed while the rebuild went on ...
    index.stage(later, dumps(later))
    index.add(pairs(job(3, "completed")))
    index.flush(8)  # ... is not committed anywhere before the rebuild is whole
    listing = list_jobs(layout, JobQuery(), OWNER + 1)
    assert listing.source == "job files" and listing.note is None
    index.finish(8)
    assert index.complete and not index.rebuilding and not index.staged
    for path in layout.jobs("done").iterdir():  # files long older than the index: in it
        os.utime(path, (1000.0, 1000.0))
    assert [(d["job_id"][4], d["state"]) for d in list_jobs(
        layout, JobQuery(), OWNER + 1).documents] == [("3", "completed"), ("2", "failed"),
                                                      ("1", "completed")]
    index.close()
    assert JobIndex(layout.job_index, journal_seq=8, boot_id="boot-2", clean=False).complete


def test_a_rebuild_dropped_by_a_stop_or_a_crash_leaves_no_index_and_no_temp_file(layout):
    built(layout, job(1)).close()
    index = JobIndex(layout.job_index, journal_seq=9, boot_id=BOOT, clean=False)
    index.begin_rebuild(boot_id=BOOT, owner=OWNER)
    index.add(pairs(job(1), job(2)))
    index.close(9)  # a clean stop mid-rebuild
    assert sorted(p.name for p in layout.job_index.parent.iterdir()) == []
    crashed = JobIndex(layout.job_index, journal_seq=9, boot_id=BOOT, clean=True)
    crashed.begin_rebuild(boot_id=BOOT, owner=OWNER)
    crashed.add(pairs(job(1)))  # then kill -9: a temp file is all there is
    leftover = [p.name for p in layout.job_index.parent.iterdir()]
    assert len(leftover) == 1 and leftover[0].startswith(".jobs.sqlite.")
    again = JobIndex(layout.job_index, journal_seq=10, boot_id=BOOT, clean=True)
    assert not again.complete
    rebuilt(again, job(1), job(2), seq=10)
    assert sorted(p.name for p in layout.job_index.parent.iterdir()) == ["jobs.sqlite"]
    assert ids(layout) == ["2", "1"]


def test_a_job_file_written_since_the_index_was_last_committed_is_listed_as_it_is(layout):
    """The index is committed at status.json's cadence; `launch --detach` returns once its
    job file is written. A job accepted since (in no commit yet) is listed, and a job the
    index shows running that has ended since is listed as its job file in done/ says."""
    built(layout, job(1, "running"), job(2, "queued"))
    write_job_file(layout, job(3, "queued"), "queued")
    write_job_file(layout, job(1, "completed"), "done")
    write_job_file(layout, job(2, "queued"), "queued")  # unchanged: listed once
    listing = list_jobs(layout, JobQuery(), OWNER)
    assert listing.source == "index"
    assert [(d["job_id"][:5], d["state"]) for d in listing.documents] == [
        ("tag-3", "queued"), ("tag-2", "queued"), ("tag-1", "completed")]
    active = list_jobs(layout, JobQuery(states=("queued", "running"), limit=1), OWNER)
    assert [d["job_id"][:5] for d in active.documents] == ["tag-3"] and active.matched == 2


def test_the_end_of_a_job_a_commit_showed_unended_costs_no_lookup_and_one_never_shown_is_owed(
        layout):
    """A trivial job's end used to ask SQLite whether a commit had shown the job (locks,
    stats, a read: ~10 system calls on every job's end); the coordinator now knows it for the
    jobs its own commits showed unended. A job that ended before any commit showed it is
    still owed at once (readers look in done/ only for the jobs the index shows unended)."""
    index = built(layout)
    index.stage(job(1, "queued"), dumps(job(1, "queued")))
    index.flush(6)
    asked: list[str] = []
    index.db.set_trace_callback(asked.append)
    index.stage(job(1, "completed"), dumps(job(1, "completed")))
    assert asked == [] and not index.owes_an_end
    index.stage(job(2, "completed"), dumps(job(2, "completed")))
    assert any(statement.startswith("SELECT") for statement in asked) and index.owes_an_end
    index.flush(7)
    assert ids(layout) == ["2", "1"] and not index.owes_an_end
    assert [d["state"] for d in list_jobs(layout, JobQuery(), OWNER).documents] == [
        "completed", "completed"]
