"""The job index, ``resource_scheduler/index/jobs.sqlite``: what ``praxist-fs jobs`` reads.

A derived view like the job files, for listing 100,000 jobs in milliseconds
instead of reading 100,000 files. The coordinator stages every job document it
writes to a job file and commits what it staged whenever it rewrites
status.json (at most every 0.2 s while jobs change, at least every 5 s; never
ahead of a waiting request or exit), in one transaction that also records the
journal seq the index then reflects: a commit costs 0.1-0.3 ms here, too much
for every batch of a trivial job. At start the index is kept when that
seq is the journal's and the machine has not restarted since (or the last
coordinator stopped cleanly, which syncs everything), or, after a crash on the
same boot, when it reflects at least the seq of the last compaction (whose
snapshot vouches for the files up to it): the jobs changed since are staged
again; otherwise it is rebuilt into a new file renamed into place when whole,
the old one removed first. The rebuild goes on while the coordinator serves
(100,000 finished jobs take seconds): the jobs in memory at once, the run's
history a slice at a time between batches (``Views.index_history``), what
changed meanwhile last; until it is whole there is no index, and readers read
the job files.

SQLite in rollback-journal mode (TRUNCATE: the journal file stays, empty,
between transactions instead of being created and removed each time, which
costs a millisecond a commit on ext4; not WAL, whose readers must be able to
write its shared-memory file) with ``synchronous=OFF``: nothing is fsynced,
since a machine restart is followed by a rebuild. A coordinator killed
mid-commit leaves a hot journal that the next one rolls back. Readers open the
file read-only (``mode=ro``) and never need write access to the run; the
coordinator never waits for them: a commit they block is rolled back and
retried with the next one.

Readers trust the index only when the coordinator that last served the run
(status.json) is the one that keeps it (``owner``); otherwise, and for a run
without one, they read the job files into an in-memory database of the same
shape and run the same query on it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import namedtuple
from pathlib import Path

from ..core.job_state import JobState
from .fsio import TEMP_PATTERN, temp_name
from .layout import JOB_DIRECTORIES, RunLayout

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any, Iterable


def _log():
    """The coordinator's logger; imported here, as only the coordinator logs: a CLI
    call that reads the index does not pay for logging."""
    import logging

    return logging.getLogger("praxist_fs")


SCHEMA = 1
HELD = "held"  # not a state of its own: a queued job with a hold (R-CTL-5), as jobs --state
ACTIVE_STATES = tuple(s.value for s in JobState if not s.terminal)  # always "since" any time
WRITER_CACHE_KIB = 512  # a commit touches a few pages: keep the coordinator's RSS small
READER_TIMEOUT_S = 2.0  # a commit holds its lock for a fraction of a millisecond
INDEX_LAG_S = 5.0  # a job file this much older than the index's last write is in it

_TABLES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    submitted_at REAL NOT NULL,
    last_at REAL NOT NULL,
    state TEXT NOT NULL,
    peer TEXT NOT NULL,
    tag TEXT NOT NULL,
    document TEXT NOT NULL
);
"""
_INDEXES = (
    "CREATE INDEX jobs_by_submission ON jobs (submitted_at, job_id)",
    "CREATE INDEX jobs_by_last ON jobs (last_at)",
    "CREATE INDEX jobs_by_state ON jobs (state)",
    "CREATE INDEX jobs_by_peer ON jobs (peer, submitted_at)",
    "CREATE INDEX jobs_by_tag ON jobs (tag)",
)
_UPSERT = "INSERT OR REPLACE INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)"
# the coordinator's commit of what it staged: a job it indexed before changes only its
# state, times and document (its id, submission, peer and tag are its request's), so the
# row is updated in place and the three indexes on what never changes are left alone,
# where INSERT OR REPLACE deletes and inserts the row in the table and all six
# (10,000 jobs, each queued, running, done: 19 against 25 us per job)
_RESTAGE = ("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE "
            "SET last_at = excluded.last_at, state = excluded.state, "
            "document = excluded.document")
_SET_META = "INSERT OR REPLACE INTO meta VALUES (?, ?)"
_SHOWS = "SELECT 1 FROM jobs WHERE job_id = ?"


def _columns(document: dict[str, Any], text: str) -> tuple:
    """A job document's row. ``last_at``: the latest time the document records (its
    submission, an attempt's start or end), for "active since"."""
    times = [document["submitted_at"]]
    for attempt in document.get("attempts") or ():
        times += [attempt.get("started_at"), attempt.get("ended_at")]
    return (document["job_id"], document["submitted_at"],
            max(t for t in times if isinstance(t, (int, float))), document["state"],
            document.get("peer") or "", document.get("tag") or "", text)


def _meta(db: sqlite3.Connection) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM meta")}


def _set_meta(db: sqlite3.Connection, **values: Any) -> None:
    db.executemany(_SET_META, [(key, json.dumps(value)) for key, value in values.items()])


class JobIndex:
    """The coordinator's side: stage documents as their job files are written, commit
    them with status.json, rebuild at start when the index cannot be trusted. It never
    raises: on an error it removes the file (readers then read the job files) and
    stops, until the next start rebuilds it."""

    def __init__(self, path: Path, *, journal_seq: int, boot_id: str, clean: bool,
                 settled_seq: int | None = None) -> None:
        """Open the index if it reflects ``journal_seq`` and survived since on this boot
        (or a ``clean`` stop synced it); else ``complete`` is False: rebuild it. On this
        boot an index a little behind is kept too, when it reflects at least
        ``settled_seq``: ``behind`` then says that the jobs the journal changed after that
        seq must be staged again (``Views.repair`` does)."""
        self.path = path
        self.db: sqlite3.Connection | None = None
        self.staged: dict[str, tuple[dict[str, Any], str]] = {}
        self.meta: dict[str, Any] = {}  # to record with the next commit
        self.seq = journal_seq
        self.behind = False
        # a job ended that no commit has shown: readers look in done/ only for the jobs
        # the index shows unended, so it is not listed until the next commit
        self.owes_an_end = False
        # jobs a commit of this process showed unended: their end needs no lookup (a trivial
        # job's end would otherwise ask SQLite, ~10 system calls of locks and stats); an
        # id leaves at its end, so this holds the run's unended jobs at most
        self._shown_unended: set[str] = set()
        self._building: sqlite3.Connection | None = None  # the rebuild's, in ``_tmp``
        self._tmp = path
        try:
            db = self._connect("rw")  # an existing file only
        except sqlite3.Error:
            return
        try:
            meta = _meta(db)
        except sqlite3.Error:
            meta = {}
        found, same_boot = meta.get("journal_seq"), meta.get("boot_id") == boot_id
        if meta.get("schema") == SCHEMA and found == journal_seq and (clean or same_boot):
            self.db = db
        elif meta.get("schema") == SCHEMA and same_boot and settled_seq is not None and \
                isinstance(found, int) and settled_seq <= found <= journal_seq:
            self.db, self.behind = db, True
        else:
            db.close()

    @property
    def complete(self) -> bool:
        return self.db is not None

    def _connect(self, mode: str) -> sqlite3.Connection:
        db = sqlite3.connect(f"{self.path.as_uri()}?mode={mode}", uri=True, timeout=0,
                             isolation_level=None)
        db.execute("PRAGMA journal_mode=TRUNCATE")
        db.execute("PRAGMA synchronous=OFF")
        db.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
        return db

    def stage(self, document: dict[str, Any], data: bytes) -> None:
        """A job file was written with ``data`` (its JSON): index it at the next commit.
        While it is rebuilt, until ``finish``; not while it awaits its rebuild or was
        given up."""
        if self.db is not None or self._building is not None:
            self.staged[document["job_id"]] = (document, data.decode())
        if self.db is not None and document.get("state") not in ACTIVE_STATES:
            shown = document["job_id"] in self._shown_unended
            self._shown_unended.discard(document["job_id"])
            if not self.owes_an_end and not shown:
                self.owes_an_end = not self._shows(document["job_id"])

    def _shows(self, job_id: str) -> bool:
        """Whether a commit has shown the job (a primary-key lookup: a few microseconds,
        once per job, at its end). On an error, as if it had not: a commit then comes
        sooner, never later."""
        assert self.db is not None
        try:
            return self.db.execute(_SHOWS, (job_id,)).fetchone() is not None
        except sqlite3.Error:
            return False

    def flush(self, journal_seq: int) -> None:
        """Commit what was staged, and that the index reflects ``journal_seq``: one
        transaction. A reader's lock makes it wait for the next commit, not block."""
        if self.db is None or (not self.staged and not self.meta and journal_seq == self.seq):
            return
        try:
            self.db.execute("BEGIN")
            self.db.executemany(_RESTAGE, [_columns(doc, text) for doc, text in
                                          self.staged.values()])
            _set_meta(self.db, **self.meta, journal_seq=journal_seq)
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                self._abandon(exc)
            elif self.db.in_transaction:
                self.db.execute("ROLLBACK")
            return
        except sqlite3.Error as exc:
            self._abandon(exc)
            return
        for job_id, (document, _) in self.staged.items():
            if document.get("state") in ACTIVE_STATES:
                self._shown_unended.add(job_id)
            else:
                self._shown_unended.discard(job_id)
        self.staged.clear()
        self.meta.clear()
        self.seq, self.behind, self.owes_an_end = journal_seq, False, False

    @property
    def rebuilding(self) -> bool:
        return self._building is not None

    def begin_rebuild(self, *, boot_id: str, owner: float) -> None:
        """Start a new index in a temp file, filled while the coordinator serves (``add``,
        a slice at a time) and renamed into place by ``finish``. The old file goes first:
        until the new one is in place readers read the job files, and a crash meanwhile
        leaves no index to trust (the next start rebuilds; its temp file is removed then).
        Whatever is staged meanwhile goes in last (``finish``): it is newer than any
        document ``add`` was given for the same job."""
        self.close()
        tmp = Path(temp_name(self.path))
        try:
            for stale in self.path.parent.glob(TEMP_PATTERN):  # a crashed rebuild's
                if stale.name.startswith(f".{self.path.name}."):
                    stale.unlink()
            self.path.unlink(missing_ok=True)
            # a hot journal left beside the old file would be rolled back into the new one
            Path(f"{self.path}-journal").unlink(missing_ok=True)
            db = sqlite3.connect(tmp, isolation_level=None)
            self._building, self._tmp = db, tmp
            db.execute("PRAGMA journal_mode=OFF")  # a crash leaves a temp file only
            db.execute("PRAGMA synchronous=OFF")
            db.execute(f"PRAGMA cache_size=-{WRITER_CACHE_KIB}")
            db.executescript(_TABLES)
            for statement in _INDEXES:  # before the rows: no long step at the end
                db.execute(statement)
            _set_meta(db, schema=SCHEMA, boot_id=boot_id, owner=owner)
        except (sqlite3.Error, OSError) as exc:
            self._abandon(exc)

    def add(self, documents: Iterable[tuple[dict[str, Any], str]]) -> None:
        """Put (document, JSON) pairs into the index being rebuilt: one transaction."""
        if self._building is None:
            return
        try:
            self._building.execute("BEGIN")
            self._building.executemany(_UPSERT, (_columns(doc, text) for doc, text in documents))
            self._building.execute("COMMIT")
        except sqlite3.Error as exc:
            self._abandon(exc)

    def finish(self, journal_seq: int) -> None:
        """The rebuilt index reflects ``journal_seq`` once what was staged since it began
        is in: rename it into place (the old one was removed)."""
        if (db := self._building) is None:
            return
        try:
            db.execute("BEGIN")
            db.executemany(_UPSERT, [_columns(doc, text) for doc, text in self.staged.values()])
            _set_meta(db, **self.meta, journal_seq=journal_seq)
            db.execute("COMMIT")
            db.close()
            self._building = None
            os.rename(self._tmp, self.path)
            self.db = self._connect("rw")
        except (sqlite3.Error, OSError) as exc:
            self._abandon(exc)
            return
        self.staged.clear()
        self.meta.clear()
        self.seq, self.behind = journal_seq, False
        _log().info("job index rebuilt")

    def serve(self, *, boot_id: str, owner: float) -> None:
        """This coordinator keeps the index current from now on: recorded with the next
        commit, which readers check against status.json."""
        self.meta.update(boot_id=boot_id, owner=owner)

    def files(self) -> list[str]:
        """The index's files, as a clean stop makes them durable by name: the database
        and SQLite's rollback journal beside it (TRUNCATE mode: there, and empty, between
        transactions); a rebuild's temp file is dropped at close, never vouched for."""
        return [str(self.path), f"{self.path}-journal"]

    def close(self, journal_seq: int | None = None) -> None:
        """With ``journal_seq`` (a clean stop), commit what is staged first. A rebuild
        not finished is dropped: no index is left (the next start rebuilds it)."""
        if journal_seq is not None:
            self.flush(journal_seq)
        if self._building is not None:  # a rebuild not finished: the next start's to do
            self._building.close()
            self._building = None
            self._tmp.unlink(missing_ok=True)
        if self.db is not None:
            self.db.close()
            self.db = None

    def _abandon(self, exc: Exception) -> None:
        _log().warning("job index %s: %s; removed, rebuilt at the next start (praxist-fs jobs "
                    "reads the job files meanwhile)", self.path, exc)
        self.close()
        self.staged.clear()
        self.meta.clear()
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


# JobQuery and Listing are named tuples, not dataclasses: ``dataclasses`` imports
# ``inspect``, about 10 ms of every ``praxist-fs jobs`` (R-PERF-3).
class JobQuery(namedtuple("JobQuery", "states peer tag_glob since limit",
                          defaults=((), None, None, None, None))):
    """Which jobs ``praxist-fs jobs`` lists: every filter given must hold. ``since``:
    jobs not yet ended, or that record a submission, start or end at or after it.
    ``states``: a tuple of state names (and ``held``); ``limit``: None for all."""

    __slots__ = ()

    def where(self) -> tuple[str, list[Any]]:
        clauses, params = [], []
        states = [state for state in self.states if state != HELD]
        if states or HELD in self.states:  # held: queued, with a hold on record
            chosen = ([f"state IN ({', '.join('?' * len(states))})"] if states else []) + (
                ["(state = 'queued' AND json_extract(document, '$.hold') IS NOT NULL)"]
                if HELD in self.states else [])
            clauses.append(f"({' OR '.join(chosen)})")
            params += states
        if self.peer is not None:
            clauses.append("peer = ?")
            params.append(self.peer)
        if self.tag_glob is not None:
            clauses.append("tag GLOB ?")
            params.append(self.tag_glob)
        if self.since is not None:
            clauses.append(f"(state IN ({', '.join('?' * len(ACTIVE_STATES))}) "
                           "OR last_at >= ?)")
            params += [*ACTIVE_STATES, self.since]
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


class Listing(namedtuple("Listing", "documents matched source note", defaults=(None,))):
    """What ``list_jobs`` found: ``documents`` newest submission first; ``matched``: how
    many match, beyond the limit too; ``source``: "index" or "job files"; ``note``: why
    the index was not used, when that is news."""

    __slots__ = ()


def list_jobs(layout: RunLayout, query: JobQuery, owner: float | None) -> Listing:
    """The jobs matching ``query``, from the index when it is kept by ``owner`` (the
    ``since`` of the coordinator status.json names; None: unknown), else from the files.

    The index is committed at status.json's cadence, so a job accepted, started or
    ended since its last commit is read from its job file, in place of its row: the
    files of queued/ and running/ written since a little before the index's own last
    write (``INDEX_LAG_S``; as many as jobs not ended), and the file in done/ of each
    job the index still shows not ended. A job that ended before any commit showed it
    is in neither: the coordinator commits after the batch that ended it
    (``JobIndex.owes_an_end``). A ``launch --detach`` that returned has its job
    listed at once; done/ (every finished job) is never scanned."""
    try:
        db = sqlite3.connect(f"{layout.job_index.as_uri()}?mode=ro", uri=True,
                             timeout=READER_TIMEOUT_S, isolation_level=None)
    except sqlite3.Error:  # no index: a run older than it, or one it was removed from
        return _from_job_files(layout, query)
    try:
        unended = [job_id for job_id, in db.execute(  # ended since, perhaps: done/ says
            f"SELECT job_id FROM jobs WHERE state IN ({', '.join('?' * len(ACTIVE_STATES))})",
            ACTIVE_STATES)]
        recent = _recent_job_files(layout, since=os.stat(layout.job_index).st_mtime
                                   - INDEX_LAG_S, done=unended)
        db.execute("ATTACH DATABASE ':memory:' AS recent")  # not within a transaction
        db.executescript(_TABLES.replace("CREATE TABLE ", "CREATE TABLE recent."))
        db.executemany(_UPSERT.replace(" INTO jobs ", " INTO recent.jobs "), recent)
        db.execute("BEGIN")  # one read transaction: meta and rows agree
        meta = _meta(db)
        if meta.get("schema") != SCHEMA or (owner is not None and meta.get("owner") != owner):
            note = (f"the job index was not kept by the coordinator that last served the "
                    f"run (schema {meta.get('schema')}, owner {meta.get('owner')})")
        else:
            return Listing(*_run(db, query, recent=bool(recent)), source="index")
    except (sqlite3.Error, OSError) as exc:
        note = f"the job index is unreadable ({exc})"
    finally:
        db.close()
    return _from_job_files(layout, query, f"{note}; read the job files instead")


def _from_job_files(layout: RunLayout, query: JobQuery, note: str | None = None) -> Listing:
    db = sqlite3.connect(":memory:", isolation_level=None)
    try:
        db.executescript(_TABLES)
        for statement in _INDEXES:
            db.execute(statement)
        db.executemany(_UPSERT, _recent_job_files(layout, since=None))
        return Listing(*_run(db, query), source="job files", note=note)
    finally:
        db.close()


def _run(db: sqlite3.Connection, query: JobQuery,
         recent: bool = False) -> tuple[list[dict[str, Any]], int]:
    """The query on ``main.jobs``, or, with ``recent``, on it with the rows of
    ``recent.jobs`` in place of its own: each side in index order, merged."""
    where, params = query.where()
    sources = [("main.jobs", where)]
    if recent:
        newer = "job_id NOT IN (SELECT job_id FROM recent.jobs)"
        sources = [("main.jobs", f"{where} AND {newer}" if where else f"WHERE {newer}"),
                   ("recent.jobs", where)]
    limit = -1 if query.limit is None else query.limit
    rows = []
    for table, clause in sources:
        rows += db.execute(f"SELECT submitted_at, job_id, document FROM {table} {clause} "
                           "ORDER BY submitted_at DESC, job_id DESC LIMIT ?",
                           [*params, limit]).fetchall()
    rows = sorted(rows, reverse=True)[:None if query.limit is None else query.limit]
    matched = len(rows)
    if query.limit is not None and matched >= query.limit:
        matched = sum(db.execute(f"SELECT count(*) FROM {table} {clause}", params).fetchone()[0]
                      for table, clause in sources)
    return [json.loads(document) for _, _, document in rows], matched


def _recent_job_files(layout: RunLayout, since: float | None,
                      done: list[str] | None = None) -> list[tuple]:
    """The rows of the job files of queued/ and running/ written at or after ``since``,
    and of done/ those of the jobs ``done`` names; with ``since`` None, every job file.
    Read in the order jobs move (queued, running, done), so that a job caught moving
    forward, found in two directories or read in neither, counts once and as its later
    copy says. Every job file is written by a rename into its directory, so a directory
    unchanged since ``since`` has none and is not looked into."""
    rows: dict[str, tuple] = {}
    for directory in JOB_DIRECTORIES:
        path = layout.jobs(directory)
        try:
            if since is None:
                names = os.listdir(path)
            elif directory == "done":
                names = [f"{job_id}.json" for job_id in done or ()]
            elif os.stat(path).st_mtime < since:
                continue
            else:
                names = [entry.name for entry in os.scandir(path)
                         if _written_since(entry, since)]
        except FileNotFoundError:
            continue
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            try:
                with open(path / name) as handle:
                    text = handle.read()
                row = _columns(json.loads(text), text)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # gone meanwhile (moved on), or not a job document
            rows[row[0]] = row
    return list(rows.values())


def _written_since(entry: os.DirEntry, since: float) -> bool:
    try:
        return entry.stat().st_mtime >= since
    except OSError:
        return False  # moved on meanwhile: read where it went
