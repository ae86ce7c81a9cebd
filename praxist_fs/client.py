"""The peer side of the spool protocol, used by ``praxist-fs launch``, ``logs`` and ``wait``.

It does exactly what a shell script may do: write a request into spool/tmp,
rename it into spool/incoming, wait for spool/replies/<request_id>.json, then
follow the job file and the attempt logs. It never runs the command itself,
and finding or following a job submits nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from collections.abc import Callable, Iterable

from .adapters import journal, procs
from .adapters.fsio import dumps, read_json, write_atomic
from .adapters.layout import RunLayout
from .adapters.lock import live_endpoint
from .core import tenancy, trust

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any, BinaryIO

    Announce = Callable[[dict[str, Any], dict[str, Any] | None], None]  # follow's

TERMINAL = ("completed", "failed", "rejected", "cancelled", "drained_unknown", "expired")
EXIT_DRAINED_UNKNOWN = 70  # the attempt vanished without an exit record
EXIT_EXPIRED = 75  # EX_TEMPFAIL: no attempt ran before its admission timeout; submit again
POLL_SECONDS = 0.05        # how often a follower looks at the job file and the logs
WAIT_POLL_MAX_SECONDS = 0.5  # ``wait`` backs off to this: it may watch many jobs for hours
REPLY_AFTER_FILING_S = 2.0  # a filed rejection without a reply this long after has none
# A live coordinator answers a control request within a few ms: it is looked for every
# 2 ms for the first 50 ms, then less and less often. A first look only after 20 ms
# (until round 4) was a third of `generation open`'s 58 ms.
REPLY_POLL_SECONDS, REPLY_PROMPT_SECONDS = 0.002, 0.05
STATUS_CATCH_UP_S = 6.0  # status.json is rewritten at least every 5 s while serving
# Shell bookkeeping that differs between two shells running the same experiment;
# leaving it out keeps the request fingerprint stable. The scheduler sets the rest.
VOLATILE_ENV = {"PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "PS1", "PS2", "WINDOWID",
                "TERM_SESSION_ID", "SSH_AUTH_SOCK", "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY",
                "XDG_SESSION_ID", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                "TMUX", "TMUX_PANE", "STY", "WINDOW"}  # terminal multiplexers' own


class NoCoordinator(Exception):
    pass


class TooLarge(Exception):
    """A request the coordinator would refuse for its size: it is not submitted."""


class SetAside(Exception):
    """The coordinator refused a request it could not answer with a reply (its file had
    no usable request id, say): it is in spool/rejected/, and ``args[0]`` says why."""


class NotYours(Exception):
    """The reply under our request id answers another uid's request (R-SEC-5): that uid
    used the id first, and the coordinator set ours aside in spool/rejected/."""


def submission_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k not in VOLATILE_ENV and not k.startswith(("PRAXIST_EXPERIMENT", "PRAXIST_ASSIGNED"))}


def new_request_id(peer: str) -> str:
    """Unique, and with 48 random bits no other uid can guess it to take it first."""
    return f"{peer[:64]}-{time.time_ns()}-{os.getpid()}-{os.urandom(6).hex()}"


def job_submission(peer: str, tag: str, *, argv: list[str] | None = None,
                   command: str | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, profile: str | None = None,
                   work_class: str | None = None, eta_s: float | None = None,
                   retry_terminal: bool = False, lease: str | None = None,
                   max_cost: float | None = None, priority: int | None = None,
                   hold: bool = False, admission_timeout_s: float | None = None,
                   generation: int | None = None, after: Iterable[str | dict] = (),
                   slurm: dict[str, Any] | None = None,
                   request_id: str | None = None) -> dict[str, Any]:
    """The request a peer drops into the spool (PROTOCOL.md section 3), under a new
    request id unless one is given; fields left unset are left out, so the task's
    defaults apply. ``after``: job ids or tags, or ``{"job", "when"}`` objects;
    ``slurm``: the per-job Slurm options (PROTOCOL.md section 3).
    ``praxist-fs launch`` and the Python API (praxist_fs/api.py) both build it here."""
    request = {
        "request_id": request_id or new_request_id(peer), "peer": peer, "tag": tag,
        "profile": profile, "work_class": work_class, "eta_s": eta_s, "argv": argv,
        "command": command, "cwd": cwd, "env": env, "retry_terminal": retry_terminal,
        "lease": lease, "max_cost": max_cost, "priority": priority, "hold": hold or None,
        "admission_timeout_s": admission_timeout_s, "generation": generation,
        "after": list(after) or None, "slurm": slurm,
    }
    return {k: v for k, v in request.items() if v is not None}


def default_by() -> str:
    """Who asks, for a job's record, when a control request names no one."""
    return os.environ.get("PRAXIST_PEER_ID") or os.environ.get("USER") or "operator"


def control_request(action: str, jobs: list[str], by: str, **selection: Any) -> dict[str, Any]:
    """The job-control request (PROTOCOL.md section 13, *Job control*) that ``praxist-fs
    cancel|hold|release|update``, ``top`` and the Python API drop; unset fields are left
    out."""
    request = {"request_id": new_request_id(by), "action": action, "jobs": jobs, "by": by,
               **selection}
    return without_unset(request)


def without_unset(request: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request.items() if v not in (None, [])}


def coordinator_uid(layout: RunLayout) -> int:
    """The uid the run's coordinator runs as: the run directory's owner, which a
    coordinator serves only when it is its own (adapters/ownership.py)."""
    return os.stat(layout.root).st_uid


def request_mode(layout: RunLayout) -> int:
    """The mode a request file is written with: readable by its owner alone where the
    coordinator can read it so (it is root, or ourselves); by the run's group too for an
    unprivileged coordinator of another uid (trusted_uids), which is in that group. The
    spool is not listable by the group and the name unguessable, so no other peer reads
    a request's environment either way (R-SEC-5)."""
    return 0o600 if coordinator_uid(layout) in (trust.ROOT, os.geteuid()) else 0o640


def check_ours(reply: dict[str, Any], request_id: str, what: str) -> dict[str, Any]:
    """``reply``, once it is sure to answer this uid's request: raises ``NotYours`` when
    another uid's request holds the id (its file was there first)."""
    uid = reply.get("uid")
    if uid is not None and uid != os.geteuid():
        raise NotYours(
            f"the reply to {what} {request_id} answers a request of uid {uid}, not yours "
            f"(uid {os.geteuid()}): another uid used that request id first, and yours was "
            "set aside in spool/rejected/ (use the request ids the CLI makes)")
    return reply


def wait_for_coordinator(layout: RunLayout, timeout: float) -> dict[str, Any]:
    """The live coordinator's endpoint, waiting up to ``timeout`` for one to start; at
    once ``NoCoordinator`` for a stopped run, which no coordinator serves again."""
    deadline = time.monotonic() + timeout
    while True:
        endpoint = live_endpoint(layout)
        if endpoint is not None:
            return endpoint
        if (stopped := run_stopped(layout)) is not None:
            raise NoCoordinator(f"the run {layout.root} is stopped ({stopped}): it admits no "
                                "new work; use a new run directory")
        if time.monotonic() >= deadline:
            raise NoCoordinator(
                f"no live coordinator owns {layout.root} (endpoint.json missing or its owner "
                f"is dead); waited {timeout:g}s. Start one with: praxist-fs serve --run-dir "
                f"{layout.root}")
        time.sleep(0.1)


def run_stopped(layout: RunLayout) -> str | None:
    """Why the run was stopped for good (``praxist-fs stop``), or None: the STOP sentinel
    of a fenced run, or the last status.json of a coordinator that took a run_stop."""
    sentinel = read_json(layout.stop_sentinel)
    if isinstance(sentinel, dict):
        return "fenced by praxist-fs stop"
    status = status_document(layout) or {}
    return status.get("run_stopped")


def select_jobs(layout: RunLayout, peer: str | None, states: list[str]) -> list[str]:
    """The ids of the queued, running and suspended jobs that ``peer`` and ``states``
    select, as the coordinator would select them (from the job files)."""
    chosen = []
    for directory in ("queued", "running"):
        for path in sorted(layout.jobs(directory).glob("*.json")):
            doc = read_json(path)
            if not isinstance(doc, dict) or (peer is not None and doc.get("peer") != peer):
                continue
            if not states or doc.get("state") in states or (
                    "held" in states and doc.get("hold")):
                chosen.append(doc["job_id"])
    return chosen


def submit(layout: RunLayout, request: dict[str, Any]) -> None:
    """Write then rename, as R-FS-3 asks of every writer. Too large a request (the
    caller's environment, most often) is refused here, with the coordinator's reason."""
    from .core.bounds import MAX_REQUEST_BYTES, oversize_problem  # not status's to load

    name = f"{request['request_id']}.json"
    data = dumps(request)
    if len(data) > MAX_REQUEST_BYTES:
        raise TooLarge(f"the request is {oversize_problem(data)}")
    write_atomic(layout.spool_tmp / name, data, mode=request_mode(layout))
    os.rename(layout.spool_tmp / name, layout.incoming / name)


def send_control(layout: RunLayout, request: dict[str, Any], timeout: float,
                 what: str) -> dict[str, Any]:
    """Drop a control request into control/ (write, then rename, as a shell would) and
    return the coordinator's reply, whatever its outcome. After ``timeout`` seconds
    without one, ``TimeoutError``: the request is withdrawn if the coordinator has not
    taken it yet, and the message says which. ``what`` names the request for it."""
    name = f"{request['request_id']}.json"
    tmp = layout.control / "tmp"
    write_atomic(tmp / name, dumps(request), mode=request_mode(layout))
    os.rename(tmp / name, layout.control / name)
    reply_path = layout.control_replies / name
    sent_at = time.monotonic()
    deadline_at = sent_at + timeout
    delay = REPLY_POLL_SECONDS
    while True:
        reply = read_json(reply_path)
        if isinstance(reply, dict):
            return check_ours(reply, request["request_id"], "control request")
        now = time.monotonic()
        if now >= deadline_at:
            break
        time.sleep(min(delay, deadline_at - now))
        if now - sent_at >= REPLY_PROMPT_SECONDS:  # a slow reply: ~10 looks a second
            delay = min(delay * 2, 0.1)
    withdrawn = False
    try:
        os.unlink(layout.control / name)
        withdrawn = True
    except FileNotFoundError:
        pass
    alive = live_endpoint(layout) is not None
    raise TimeoutError(
        f"no reply to {what} within {timeout:g}s (request {request['request_id']}; the "
        f"coordinator is {'alive' if alive else 'no longer alive'}); "
        + ("the request was withdrawn unprocessed" if withdrawn else
           f"the coordinator took the request: its reply will appear in {reply_path}"))


def read_reply(layout: RunLayout, request_id: str) -> dict[str, Any] | None:
    """The reply to our request ``request_id`` once it is there (``NotYours`` when it
    answers another uid's request), else None."""
    reply = read_json(layout.reply(request_id))
    return check_ours(reply, request_id, "request") if isinstance(reply, dict) else None


def wait_for_reply(layout: RunLayout, request_id: str, coordinator_grace: float) -> dict[str, Any]:
    """Poll for the reply; give up only when no coordinator has been alive for the grace.
    Raises ``SetAside`` when the request was refused without one, ``NotYours`` when the
    reply there answers another uid's request."""
    set_aside = layout.rejected / f"{request_id}.json.error.json"
    delay, lost_since, filed_at = 0.002, None, None
    while True:
        if (reply := read_reply(layout, request_id)) is not None:
            return reply
        if filed_at is None and set_aside.exists():
            filed_at = time.monotonic()  # a rejection is filed just before its reply
        if filed_at is not None and time.monotonic() - filed_at > REPLY_AFTER_FILING_S and \
                isinstance(error := read_json(set_aside), dict):
            raise SetAside(f"{error.get('reason')} (the request was set aside in {set_aside})")
        if live_endpoint(layout) is None:
            lost_since = lost_since or time.monotonic()
            if time.monotonic() - lost_since > coordinator_grace:
                raise NoCoordinator(
                    f"the coordinator of {layout.root} went away before answering; request "
                    f"{request_id} stays in the spool and is processed when one starts")
        else:
            lost_since = None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def job_document(layout: RunLayout, job_id: str) -> dict[str, Any] | None:
    for directory in ("done", "running", "queued"):
        doc = read_json(layout.job_file(directory, job_id))
        if isinstance(doc, dict):
            return doc
    return None


def find_job(layout: RunLayout, job_or_tag: str, uid: int | None = None
             ) -> tuple[str, dict[str, Any]] | None:
    """The job named by its id, or by a tag of ``uid``'s (default: ours): each uid's tags
    name its own jobs (core/tenancy.py), so another uid's equal tag is never found. With
    its job file; None when neither names an accepted job."""
    from .core.bounds import NAME_RE  # not status's to load

    if NAME_RE.fullmatch(job_or_tag) and \
            (doc := job_document(layout, job_or_tag)) is not None:  # never a path out of jobs/
        return job_or_tag, doc
    from .core.identity import job_id_for  # a tag's: by id, and status, never load it

    uid = os.geteuid() if uid is None else uid
    coordinator = coordinator_uid(layout)
    for job_id in dict.fromkeys((job_id_for(job_or_tag, tenancy.namespace(uid, coordinator)),
                                 job_id_for(job_or_tag))):  # ... or from before that
        if NAME_RE.fullmatch(job_id) and (doc := job_document(layout, job_id)) is not None \
                and doc.get("tag") == job_or_tag and \
                trust.owner(doc.get("uid"), coordinator) == trust.owner(uid, coordinator):
            return job_id, doc
    return None


def selected_jobs(layout: RunLayout, tag_glob: str | None, active: bool,
                  uid: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The jobs of ``uid`` (default ours) whose tag matches ``tag_glob``, and/or, with
    ``active``, that have not ended: (job id, job file), oldest first."""
    from .adapters.jobindex import JobQuery, list_jobs  # sqlite3: only where it is needed

    uid = os.geteuid() if uid is None else uid
    coordinator = coordinator_uid(layout)
    states = ("queued", "running", "suspended") if active else ()
    owner = (status_document(layout) or {}).get("coordinator", {}).get("since")
    listing = list_jobs(layout, JobQuery(states=states, tag_glob=tag_glob), owner)
    found = {doc["job_id"]: doc for doc in reversed(listing.documents)}
    return [(job_id, doc) for job_id, doc in found.items()
            if trust.owner(doc.get("uid"), coordinator) == trust.owner(uid, coordinator)]


def exit_status(document: dict[str, Any]) -> int:
    """What a follower of an ended job exits with: the job's exit code (0 when completed),
    70 when its attempt vanished (drained_unknown), 75 when it expired before any attempt
    ran (the same request may simply be submitted again), 1 when it ended without any."""
    if document["state"] == "drained_unknown":
        return EXIT_DRAINED_UNKNOWN
    if document["state"] == "expired":
        return EXIT_EXPIRED
    code = document["exit_code"]
    return code if isinstance(code, int) else 1


def follow(layout: RunLayout, job_id: str, out: BinaryIO,
           select: Callable[[dict[str, Any]], bool] = lambda attempt: True,
           announce: Announce | None = None, once: bool = False,
           tick: Callable[[dict[str, Any] | None], None] | None = None) -> dict[str, Any]:
    """Stream the logs of the job's attempts that ``select`` keeps, oldest first, until the
    job is terminal (through retries: new attempts are picked up); return its last job
    file. ``once``: copy what is there now and return, terminal or not.

    ``announce(attempt, previous)`` is called before an attempt's output, when it first
    appears (even before it writes anything) and again should an earlier attempt write
    after a later one was announced; ``previous`` is the attempt shown before, or None.
    ``tick`` sees the job file (or None) on every look."""
    offsets: dict[str, int] = {}
    shown: str | None = None  # the attempt whose output is flowing
    announced: set[str] = set()
    while True:
        doc = job_document(layout, job_id)
        if tick is not None:
            tick(doc)
        if doc is not None:
            attempts = {attempt["attempt_id"]: attempt for attempt in doc["attempts"]}
            for key, attempt in attempts.items():
                if not select(attempt):
                    continue
                data = _read_new(layout.log(job_id, key), offsets, key)
                if key not in announced or (data and shown != key):
                    if announce is not None:
                        announce(attempt, attempts.get(shown))
                    announced.add(key)
                    shown = key
                if data:
                    out.write(data)
                    out.flush()
            if once or doc["state"] in TERMINAL:
                return doc
        time.sleep(POLL_SECONDS)


def _read_new(path: os.PathLike, offsets: dict[str, int], key: str) -> bytes:
    """What was appended to ``path`` since the last call for ``key``."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offsets.get(key, 0))
            data = handle.read()
    except FileNotFoundError:
        return b""
    offsets[key] = offsets.get(key, 0) + len(data)
    return data


def wait_for_jobs(layout: RunLayout, job_ids: Iterable[str], timeout: float | None
                  ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Poll the job files until every job is terminal or ``timeout`` seconds passed:
    (the last job file of each ended job, the ids of those still not ended)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending, ended = list(dict.fromkeys(job_ids)), {}
    delay = POLL_SECONDS
    while True:
        for job_id in list(pending):
            doc = job_document(layout, job_id)
            if doc is not None and doc["state"] in TERMINAL:
                ended[job_id] = doc
                pending.remove(job_id)
        if not pending or (deadline is not None and time.monotonic() >= deadline):
            return ended, pending
        pause = delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic()))
        time.sleep(pause)
        delay = min(delay * 2, WAIT_POLL_MAX_SECONDS)


def pending_reason(layout: RunLayout, doc: dict[str, Any]) -> str:
    """Why a queued job waits: status.json's live reason (with its numbers) while the
    job is in its queue preview, else the job file's."""
    for entry in (status_document(layout) or {}).get("queue", ()):
        if entry.get("job_id") == doc["job_id"]:
            return entry["reason"]
    return doc["reason"]


def status_document(layout: RunLayout) -> dict[str, Any] | None:
    doc = read_json(layout.status)
    return doc if isinstance(doc, dict) else None


def current_status(layout: RunLayout) -> dict[str, Any] | None:
    """status.json showing at least what the run's journal held when asked: the
    coordinator rewrites it at a cadence (at most every 0.2 s while jobs change), so one
    read right after a command's effect (``launch`` returned, ``generation open``
    answered) can still show the state before it. While a coordinator serves the run,
    the next rewrite is waited for, up to STATUS_CATCH_UP_S (a stuck coordinator's
    status is then shown as it is). Only the coordinator's uid can read the journal;
    other peers get status.json as it is."""
    doc = status_document(layout)
    if doc is None or live_endpoint(layout) is None:
        return doc
    asked = journal.last_seq(layout.journal)
    deadline = time.monotonic() + STATUS_CATCH_UP_S
    while asked is not None and time.monotonic() < deadline and \
            (doc.get("coordinator") or {}).get("journal_seq", 0) < asked:
        time.sleep(POLL_SECONDS)
        doc = status_document(layout) or doc
    return doc


class NotInAttempt(Exception):
    """Attempt variables are present but do not prove the caller is inside that attempt."""


def enclosing_attempt(layout: RunLayout, environ: dict[str, str]) -> Path | None:
    """The live attempt this process runs inside, for nested launch reuse (R-SUB-6).

    None when no attempt variables are set. Variables alone prove nothing (they are
    copied easily); the attempt must be this run's own directory, hold the READY/GO
    handshake, be led by a live shim whose session is the caller's, and be the
    current attempt of a running job in the coordinator's state."""
    claimed = environ.get("PRAXIST_EXPERIMENT_ATTEMPT_DIR")
    if not claimed:
        return None
    attempt_dir = Path(os.path.realpath(claimed))
    if attempt_dir.parent.parent != Path(os.path.realpath(layout.attempts)):
        raise NotInAttempt(f"{claimed} is not an attempt directory of run {layout.root}")
    ready = read_json(attempt_dir / "READY")
    if not isinstance(ready, dict) or not (attempt_dir / "GO").exists():
        raise NotInAttempt(f"{claimed} has no completed READY/GO handshake")
    if os.getsid(0) != ready.get("pid") or not procs.is_alive(
            ready.get("pid"), ready.get("start_time"), ready.get("boot_id")):
        raise NotInAttempt("this process does not run under that attempt's live shim")
    job = read_json(layout.job_file("running", attempt_dir.parent.name))
    attempts = job.get("attempts") if isinstance(job, dict) else None
    if not attempts or attempts[-1]["attempt_id"] != attempt_dir.name or \
            attempts[-1]["pid"] != ready["pid"]:
        raise NotInAttempt("the coordinator does not hold that attempt as running")
    return attempt_dir
