"""Housekeeping of the run directory: nothing stands there that the journal does not know.

At start, after the replay, the derived files and attempt directories of records the
journal lost are set aside (``set_aside_orphans``); while serving, ``jobs/*/`` is swept
for junk between batches (``tidy_jobs``), what grows with the backlog or the history a
slice at a time. What is set aside goes to a quarantine case
with a note, never served or signalled. Like the views and the inboxes, a
``Housekeeper`` takes data (the core's state, the views to rewrite a job file with)
and does file work: it never feeds the core nor calls the loop.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .adapters import procs, quarantine
from .adapters.fsio import TEMP_PATTERN, dumps, read_json, unlink, write_atomic
from .adapters.inotify_bell import TOUCHED, InotifyBell
from .adapters.layout import JOB_DIRECTORIES, RunLayout
from .adapters.watcher import needs_polling
from .core.effects import WriteJob, WriteReply
from .core.states import JobState
from .core.scheduler import FINISHED, Scheduler
from .errors import JournalCorrupt
from .views import Views, forged, read_bytes

log = logging.getLogger("praxist_fs")

ORPHAN_SHIM_WAIT_SECONDS = 5.0  # for a shim to act on ABORT (it polls every 0.2 s)
DONE_SWEEP_SECONDS = 60.0  # jobs/done/ (every job the run had) is swept for junk this often
# ... a slice of the sliced directories a reconcile: CHUNK entries at a time until
# SLICE_SECONDS passed since the reconcile's tidying began, DONE_SLICE at most. The loop
# waits for it, and an entry costs 6-40 us (a stat, a lookup in a shelf of 100,000) as the
# machine is loaded: 5,000 a slice once held the loop for 0.1-0.7 s, a slice of each
# history directory (10 ms each) 40-70 ms at a load of 9 on two cores, and jobs/queued/
# swept whole with a backlog of 800-1,500 jobs 80-120 ms at a load of 13
SLICE_SECONDS = 0.010
CHUNK, DONE_SLICE = 100, 5_000
HISTORY = ("done", "replies")  # what a run's history fills
# swept a slice at a time while serving: the backlog's directory, then the history's;
# jobs/queued/'s next pass is due as soon as one ends, the history's every done_sweep
SLICED = ("queued", *HISTORY)
MTIME_SLACK_NS = 1_000_000_000  # file times lag the clock (coarse kernel clock, NFS skew)


class Housekeeper:
    """One coordinator's housekeeping: its quarantine case and where each ``jobs/``
    sweep stands. ``done_sweep``: seconds between two passes over jobs/done/."""

    def __init__(self, layout: RunLayout, done_sweep: float = DONE_SWEEP_SECONDS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        """``clock``: what a slice's time is measured with (a test's own)."""
        self.layout = layout
        self.done_sweep, self._clock = done_sweep, clock
        self.case: quarantine.Case | None = None  # what this start (or reconcile) sets aside
        # jobs/ directory (or "replies") -> when its last sweep began
        self._swept_ns: dict[str, int] = {}
        # of jobs/queued/, jobs/done/ and spool/replies/ (the backlog and the whole
        # history), swept a slice at a time:
        self._next_sweep = dict.fromkeys(SLICED, 0.0)
        self._listing: dict[str, Any] = dict.fromkeys(SLICED)  # the scandir a sweep is in
        self._since: dict[str, int | None] = dict.fromkeys(SLICED)  # the sweep before it
        self._accounted = dict.fromkeys(HISTORY, 0)  # files of the journal's a pass found
        self._expected = dict.fromkeys(HISTORY, 0)  # ... and how many it had as it began
        self._passed: set[str] = set()  # of SLICED: those whose first pass is over
        self._first = SLICED[0]  # where the next slice begins: after the one cut short
        # of HISTORY: what tells a pass that nothing changed (None: every pass runs)
        self._watches: dict[str, InotifyBell | None] = {}
        self._started_ns = time.time_ns()  # a temp file older than this is a crash's

    @property
    def history_checked(self) -> bool:
        """Whether this start's first pass over the run's history (jobs/done/ and
        spool/replies/, sliced over reconciles) is over. It cannot be skipped: it finds
        what was changed while no coordinator ran. Until it ends it is most of an idle
        coordinator's CPU (at 10,000 finished jobs ~0.3 % of a core, 0.03 % after), so
        status.json shows it (``coordinator.history_checked``): a measure of an idle
        coordinator can begin after it, and one of a start's first minutes can say so."""
        return self._passed.issuperset(HISTORY)

    def quarantine(self) -> quarantine.Case:
        """This start's (or reconcile's) case, opened at the first thing it sets aside."""
        if self.case is None:
            self.case = quarantine.Case(self.layout, time.time())
        return self.case

    def keep(self, path: str | os.PathLike, data: bytes, why: str) -> None:
        """Keep ``data``, found at ``path`` of the run, in the case (the file is rewritten)."""
        self.quarantine().keep(os.path.relpath(path, self.layout.root), data, why)

    def set_aside_orphans(self, sched: Scheduler, clean: bool,
                          settled_ns: int | None = None) -> list[dict[str, Any]]:
        """Nothing may stand that the journal does not know: a derived file of a request,
        control, job, lease or attempt it has no record of proves a record it lost (a
        damaged one dropped, a journal cut by hand). Replies, control replies, job files
        and lease files are moved to quarantine and reported, not admitted again: the
        request's env, file digest, lease and cost ceiling were only in the lost record,
        and a resend of it is answered afresh, on the same job id. An attempt directory is
        a lost launch (``_release_orphan``). ``jobs/*/`` gets the reconcile's sweep
        (``tidy_jobs``), which sets aside the job files of unknown jobs among other junk.
        With ``settled_ns`` (when the files of the shelved jobs and replies were vouched
        for: the last compaction's watermark, or a clean stop) jobs/done/ and
        spool/replies/ (the run's history) are left to the reconcile's sliced sweep
        (``_sweep_slices``), which begins at once. Runs after replay, before anything
        is journaled. Returns every quarantine case (``quarantine.notes``), for
        status.json."""
        layout = self.layout
        attempts = [layout.attempt_dir(job.job_id, f"a{len(job.attempts) + 1}")
                    for job in sched.queued()]
        attempts += [layout.attempts / job_id / attempt
                     for job_id in _unknown(_names(layout.attempts), sched.jobs)
                     for attempt in _names(layout.attempts / job_id)]
        attempts = [path for path in attempts if path.is_dir()]
        for path in attempts:  # before anything is moved: a refusal leaves the run as it was
            if (path / "GO").exists() or (path / "exit.json").exists():
                raise JournalCorrupt(
                    f"{path}: an attempt the journal has no record of was given GO (its "
                    "command ran or runs); refusing to start: launching its job again could "
                    "run it twice (OPERATIONS.md *Crash*)")
        for path in attempts:
            self._release_orphan(path)
        for directory, known, what in (
                *([(layout.replies, sched.replies, "reply")] if settled_ns is None else []),
                (layout.control_replies, sched.control_replies, "control reply")):
            for name in _unknown(_names(directory), map("{}.json".format, known)):
                if name.endswith(".json"):
                    path = directory / name
                    self.quarantine().move(path, _unknown_file(what, path))
        if settled_ns is None:
            self.tidy_jobs(sched, None, JOB_DIRECTORIES, start=True, clean=clean)
        else:
            self.tidy_jobs(sched, None, ("queued", "running"), start=True, clean=clean)
            self._swept_ns["done"] = settled_ns
        self._swept_ns["replies"] = settled_ns or time.time_ns()  # the views' repair: since
        for number, gen in sched.generations.items():  # a lease file shows its peer's latest
            for name in _names(layout.leases(number)):
                doc = read_json(layout.leases(number) / name)
                if name.endswith(".json") and isinstance(doc, dict) and \
                        doc.get("lease_id") not in gen.leases:
                    self.quarantine().move(layout.leases(number) / name, (
                        f"lease {doc.get('lease_id')} of generation {number} for peer "
                        f"{name[:-5]} ({doc.get('state')}): the journal has no record of it; "
                        "set aside: the peer waits for a lease again"))
        problems = quarantine.notes(layout)
        if earlier := len(problems) - (self.case is not None):
            log.warning("%d earlier quarantine case(s) in %s await an operator (status.json "
                        "coordinator.problems)", earlier, layout.quarantine)
        return problems

    def tidy_jobs(self, sched: Scheduler, views: Views | None, directories: tuple[str, ...],
                  *, start: bool = False, clean: bool = True) -> bool:
        """``jobs/<d>/`` holds one thing per job in that state: ``<job_id>.json`` (R-FS-6).
        Everything else is set aside in quarantine with a note, never served or signalled:
        so a listing of ``jobs/running/`` shows only jobs that run (issue 14). True if
        anything was set aside while serving (the loop then reports the new case).

        Runs between batches only (at start after replay, then from the reconcile), when
        every job's own move is done, so a copy in the wrong directory is no move in
        flight. At a start after a crash it may be the last coordinator's unfinished move,
        and hidden temp files its unfinished writes: those are removed, as leftovers of
        our own (``spool.sweep_stale`` takes the temp files). A file in its right place
        that changed since the directory's last sweep and says other than the journal is
        set aside too, then rewritten from it through ``views``; at start the views'
        repair rewrites those. After the start, jobs/queued/ (the backlog, which may hold
        thousands) and jobs/done/ (every job the run had) go by ``_sweep_slices``, with
        spool/replies/: of ``directories`` only the others are swept whole."""
        if not start:
            self.case = None  # each reconcile that finds something opens its own case
        began, moved = self._clock(), False
        for directory in directories:
            if not start and directory in SLICED:
                continue
            since = self._swept_ns.get(directory)
            self._swept_ns[directory] = time.time_ns()
            try:
                with os.scandir(self.layout.jobs(directory)) as listing:
                    entries = list(listing)
            except FileNotFoundError:  # removed by hand: the next start makes it again
                continue
            moved |= self._set_aside_junk(sched, views, directory, entries, start, clean,
                                          None if start else since)[0]
        if not start:
            moved |= self._sweep_slices(sched, views, began)
        elif "done" in directories:  # the next pass over jobs/done/ comes a while later
            self._next_sweep["done"] = time.monotonic() + self.done_sweep
            self._passed.add("done")
        return moved and not start

    def _sweep_slices(self, sched: Scheduler, views: Views, began: float | None = None) -> bool:
        """jobs/queued/ (a pass as soon as the last one ended), jobs/done/ and
        spool/replies/ (every ``done_sweep`` seconds): a slice of the three a reconcile
        (100,000 at once would hold the loop for a second, a backlog of 1,500 for 0.1 s):
        chunks (``_slice``), one directory's then the next's, until SLICE_SECONDS passed
        since ``began`` (the reconcile's tidying; None: now), however loaded the machine,
        and at least one chunk; the next slice begins with the directory after the one
        whose chunk used the time up, so none waits on another's pass. Besides
        the junk of jobs/queued/ and jobs/done/ (``_set_aside_junk``): a reply changed since the last
        sweep (or since the start vouched for them all) that says other than the
        journal is rewritten, one of a request the journal does not know is set aside,
        a temp file a crash left behind is removed; and a pass that found fewer files
        than the journal accounts for writes the missing ones. An entry listed in an
        earlier slice is judged on the state of now: between batches still."""
        moved, swept = False, 0
        began = self._clock() if began is None else began
        first = SLICED.index(self._first)
        for directory in SLICED[first:] + SLICED[:first]:
            while True:
                entries, ended = self._slice(sched, directory)
                since = self._since[directory]
                if directory == "replies":
                    found, own = self._sweep_replies(
                        sched, views, entries, None if since is None else since - MTIME_SLACK_NS)
                else:
                    found, own = self._set_aside_junk(sched, views, directory, entries, False,
                                                      True, since)
                moved |= found
                swept += len(entries)
                if directory in HISTORY:
                    self._accounted[directory] += own
                    if ended:
                        self._write_missing(sched, views, directory)
                if ended or not entries:
                    break  # this directory's pass is over, or not due: on to the next
                if swept >= DONE_SLICE or self._clock() - began >= SLICE_SECONDS:
                    self._first = SLICED[(SLICED.index(directory) + 1) % len(SLICED)]
                    return moved
        return moved

    def _slice(self, sched: Scheduler, directory: str) -> tuple[list[os.DirEntry], bool]:
        """The next CHUNK entries of a sweep of ``directory`` (one of SLICED), and
        whether the pass ends with them; none between two passes."""
        if self._listing[directory] is None:
            if time.monotonic() < self._next_sweep[directory]:
                return [], False
            if directory in HISTORY and self._unchanged(directory):
                self._next_sweep[directory] = time.monotonic() + self.done_sweep
                return [], False
            self._since[directory] = self._swept_ns.get(directory)
            self._swept_ns[directory] = time.time_ns()
            if directory in HISTORY:
                self._accounted[directory] = 0
                self._expected[directory] = _accounted_for(sched, directory)
            try:
                self._listing[directory] = os.scandir(self._sliced(directory))
            except FileNotFoundError:  # removed by hand: the next start makes it again
                self._next_sweep[directory] = time.monotonic() + self.done_sweep
                self._passed.add(directory)
                return [], False
        entries = list(itertools.islice(self._listing[directory], CHUNK))
        if len(entries) < CHUNK:
            self._listing[directory].close()
            self._listing[directory] = None
            self._passed.add(directory)
            self._next_sweep[directory] = time.monotonic() + (
                self.done_sweep if directory in HISTORY else 0.0)
        return entries, self._listing[directory] is None

    def _unchanged(self, directory: str) -> bool:
        """Nothing in ``directory`` (one of HISTORY) was created, removed, renamed, written
        or touched since its last pass began, as inotify saw: this pass is skipped. An
        idle run's history (every job it had) was listed and statted every minute: 0.1 s
        of CPU a minute per directory at 10,000 finished jobs, 0.6-0.8 s at 100,000,
        most of an idle coordinator's CPU. The first pass runs, and every pass on a
        network file system (inotify misses other hosts' writes) or where no watch can
        be had. A pass that runs watches its directory again first (one replaced by
        hand is a new inode), so what changes while it lists makes the next one run."""
        path = self._sliced(directory)
        if directory not in self._watches:  # its first pass
            try:
                self._watches[directory] = None if needs_polling(path) else InotifyBell()
            except OSError:  # no inotify instance left for this user
                self._watches[directory] = None
        elif (bell := self._watches[directory]) is not None and not bell.rang():
            return True
        if (bell := self._watches[directory]) is not None:
            try:
                bell.watch(path, TOUCHED)
            except OSError:  # no directory (the pass says so), or no watch left for this user
                bell.stop()
                self._watches[directory] = None
        return False

    def _sliced(self, directory: str) -> Path:
        return self.layout.replies if directory == "replies" else self.layout.jobs(directory)

    def _sweep_replies(self, sched: Scheduler, views: Views, entries: list[os.DirEntry],
                       since_ns: int | None) -> tuple[bool, int]:
        """(whether a reply was set aside, how many are of requests the journal knows)."""
        moved, known = False, 0
        for entry in entries:
            if self._crash_leftover(entry) or not entry.name.endswith(".json"):
                continue
            request_id = entry.name[:-5]
            if request_id not in sched.replies:
                try:
                    self.quarantine().move(Path(entry.path),
                                           _unknown_file("reply", Path(entry.path)))
                except FileNotFoundError:
                    continue
                moved = True
                continue
            known += 1
            try:
                if since_ns is None or entry.stat(follow_symlinks=False).st_mtime_ns < since_ns:
                    continue
            except FileNotFoundError:
                continue
            document = sched.replies.peek(request_id).to_dict()
            if read_bytes(entry.path) != dumps(document):
                views.execute(WriteReply(request_id=request_id, document=document), sched)
        return moved, known

    def _crash_leftover(self, entry: os.DirEntry) -> bool:
        """A temp file of ours written before this coordinator started: the unfinished
        write of one that crashed, removed (the start leaves the history's to the sweep)."""
        if not fnmatch.fnmatchcase(entry.name, TEMP_PATTERN):
            return False
        try:
            if entry.stat(follow_symlinks=False).st_mtime_ns >= self._started_ns or \
                    not entry.is_file(follow_symlinks=False):
                return False
        except FileNotFoundError:
            return True
        unlink(entry.path)
        return True

    def _write_missing(self, sched: Scheduler, views: Views, directory: str) -> None:
        """At the end of a pass over ``directory`` (one of HISTORY): when it found fewer
        files than the journal accounted for as the pass began (a file removed by hand
        since the last compaction made it durable), list it again and write the missing
        ones. Against the count of now, the files of jobs that ended during the pass
        (which a listing may or may not show) made nearly every pass of a busy run list
        it all again: 0.3-0.6 s of the loop at 100,000. (A file removed while as many
        new ones were listed waits for the next pass.)"""
        if self._accounted[directory] >= self._expected[directory]:
            return
        if directory == "done":
            shelf = sched.jobs
            in_memory = [job.job_id for job in sched.jobs.live() if job.state.terminal]
        else:
            shelf = sched.replies
            in_memory = [reply.request_id for reply in sched.replies.live()]
        names = set(_names(self._sliced(directory)))
        missing = {name[:-5] for name in set(shelf.shelved_keys(".json")).difference(names)}
        missing.update(key for key in in_memory if f"{key}.json" not in names)
        for key in sorted(missing):
            if directory == "done":
                views.execute(WriteJob(job_id=key, directory="done",
                                       document=sched.job_document(shelf.peek(key))), sched)
            else:
                views.execute(WriteReply(request_id=key, document=shelf.peek(key).to_dict()),
                              sched)

    def _set_aside_junk(self, sched: Scheduler, views: Views | None, directory: str,
                        entries: list[os.DirEntry], start: bool, clean: bool,
                        since_ns: int | None) -> tuple[bool, int]:
        """Set aside the junk among ``entries`` of ``jobs/<directory>/`` (``_junk`` says
        which); a job's own file is rewritten from the journal. (Whether any was, how
        many of the entries are a job's own file.)"""
        moved, own_files = False, 0
        for entry in entries:
            if not start and self._crash_leftover(entry):
                continue
            job_id = entry.name[:-5] if entry.name.endswith(".json") else None
            state = sched.state_of(job_id) if job_id is not None else None
            own = state is not None and state.directory == directory
            own_files += own and entry.is_file(follow_symlinks=False)
            why = _junk(sched, views, directory, entry, job_id if state else None, state,
                        start, clean, None if since_ns is None else since_ns - MTIME_SLACK_NS)
            if why is None or not _still_listed(entry):
                continue
            found = read_bytes(entry.path) \
                if own and entry.is_file(follow_symlinks=False) else None
            try:
                if found is not None:  # kept, then replaced in one rename: never missing
                    self.keep(entry.path, found, why)
                else:
                    self.quarantine().move(Path(entry.path), why)
            except FileNotFoundError:
                continue  # gone meanwhile: nothing to set aside
            moved = True
            if own and not start:
                views.execute(WriteJob(job_id=job_id, directory=directory,
                                       document=sched.job_document(sched.jobs.peek(job_id))),
                              sched)
        return moved, own_files

    def _release_orphan(self, attempt_dir: Path) -> None:
        """An attempt directory the journal has no launch for, with no GO: GO is journaled
        after the launch, so its command never started. ABORT it (a shim at the barrier,
        or one still starting, leaves without starting it), wait for its shim to go, and
        set the directory aside, so that the job's next launch (under the same attempt id)
        cannot wake the old shim. Its shim: READY's identity, or any process given the
        directory (one started for it that has not written READY yet)."""
        write_atomic(attempt_dir / "ABORT", b"", durable=True)
        deadline = time.monotonic() + ORPHAN_SHIM_WAIT_SECONDS
        while True:
            ready = read_json(attempt_dir / "READY")
            shims = procs.with_argument(str(attempt_dir))
            if isinstance(ready, dict) and procs.is_alive(
                    ready.get("pid"), ready.get("start_time"), ready.get("boot_id")):
                shims.append(ready["pid"])
            if not shims:
                break
            if time.monotonic() > deadline:
                raise JournalCorrupt(
                    f"{attempt_dir}: the shim (pid {shims[0]}) of an attempt the journal has "
                    "no record of did not leave after ABORT; refusing to start")
            time.sleep(0.05)
        self.quarantine().move(attempt_dir, (
            "an attempt whose launch record was lost; its command never started (no GO): "
            "aborted, and its job launches again"))


def _accounted_for(sched: Scheduler, directory: str) -> int:
    """How many files the journal accounts for in ``directory`` (one of HISTORY)."""
    if directory == "done":
        return sum(sched.count(state) for state in FINISHED)
    return len(sched.replies)


def _junk(sched: Scheduler, views: Views | None, directory: str, entry: os.DirEntry,
          job_id: str | None, state: JobState | None, start: bool, clean: bool,
          since_ns: int | None) -> str | None:
    """Why ``entry`` of ``jobs/<directory>/`` is set aside, or None if it stays: ``job_id``
    names the job it is of, in ``state`` (None: of no job). The job itself is built only
    to compare a file changed since the last sweep (a finished one is on the shelf) that
    is not the one ``views`` wrote there."""
    if state is not None and state.directory == directory and \
            entry.is_file(follow_symlinks=False):  # the common case first: no syscall
        try:
            found = entry.stat(follow_symlinks=False) if since_ns is not None else None
        except FileNotFoundError:
            return None
        if found is None or found.st_mtime_ns < since_ns:
            return None  # untouched since the last sweep found it right
        if views is not None and views.wrote(entry.path, found):
            return None  # as written, not since rewritten in place
        data = read_bytes(entry.path)
        return None if data is None else forged(sched, sched.jobs.peek(job_id), data)
    where = f"jobs/{directory}/"
    kind = "symlink" if entry.is_symlink() else "directory" \
        if entry.is_dir(follow_symlinks=False) else "file" \
        if entry.is_file(follow_symlinks=False) else "special file"
    if fnmatch.fnmatchcase(entry.name, TEMP_PATTERN) and kind == "file":
        if start:
            return None  # a crashed write of ours: removed by spool.sweep_stale
        return (f"a hidden temporary file in {where} with no write in progress (the "
                "coordinator, its only writer, finishes each before the next sweep)")
    if state is None:
        if kind == "file" and entry.name.endswith(".json"):
            return _unknown_file("job file", Path(entry.path))
        return f"a {kind} in {where}, which holds only <job_id>.json files of its jobs"
    if state.directory != directory:
        if start and not clean and kind == "file":
            unlink(entry.path)  # a move the last coordinator began and did not finish
            return None
        return (f"a {kind} named for job {job_id}, which is {state.value}: its "
                f"file is jobs/{state.directory}/{entry.name}; a stale or forged "
                "copy, never served or signalled")
    return (f"a {kind} where job {job_id}'s file belongs; set aside, and the "
            "file rewritten from the journal")


def _still_listed(entry: os.DirEntry) -> bool:
    """Whether ``entry`` still names the file it was listed as. A sliced sweep judges an
    entry listed a reconcile or more ago (a listing is read ahead in blocks): a job file
    moved since (queued/ to running/, every launch) is gone, one rewritten since is a new
    file; neither is junk, and the next pass judges what is there."""
    try:
        return os.lstat(entry.path).st_ino == entry.inode()
    except FileNotFoundError:
        return False


def _unknown(names: Iterable[str], known: Iterable[str]) -> set[str]:
    """``names`` that ``known`` lacks: one pass over each (a lookup per name in a shelf
    of 100,000 costs more than listing it)."""
    return set(names).difference(known)


def _unknown_file(what: str, path: Path) -> str:
    """The note for a derived file of a request, control or job the journal does not know."""
    doc = read_json(path)
    said = doc.get("outcome") or doc.get("state") if isinstance(doc, dict) \
        else None  # what a reply answered, where a job file stood
    return (f"{what} {path.name[:-5]} ({said}): the journal has no record of it (its record "
            "was lost, or the coordinator never wrote it); set aside, not served: a resend "
            "of the request is answered afresh")


def _names(directory: str | os.PathLike) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
