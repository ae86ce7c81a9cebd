"""The Python API for peers (R-API-1): a client for one run directory.

Sweep drivers, agents and evaluators written in Python submit, find, wait for, read
and control jobs here instead of shelling out to the CLI or writing spool files by
hand. It speaks the file protocol of docs/PROTOCOL.md through the very functions the
CLI uses (praxist_fs/client.py), so a request it writes is the request ``praxist-fs
launch`` writes, and every check the CLI makes (the reply is this uid's, the request
fits, a stopped run admits nothing) is made here too. docs/PYTHON.md is its guide.

What this module exports in ``__all__`` is the stable surface: names are added,
never renamed or dropped. Documents are kept whole in ``.document`` on every result
type, so a field the protocol adds later is readable before it has an attribute.
praxist_fs/executor.py builds a ``concurrent.futures.Executor`` on top.
"""

from __future__ import annotations

import enum
import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from . import client
from .adapters.layout import RunLayout
from .adapters.lock import live_endpoint
from .client import TERMINAL, NoCoordinator, NotYours, TooLarge
from .core.request import NAME_EXPECTED, NAME_RE

__all__ = [
    "Attempt", "Client", "ControlReply", "ControlResult", "INHERIT", "Job", "NoCoordinator",
    "NotYours", "Rejected", "Reply", "TERMINAL", "TooLarge", "UnknownJob",
]


class _Inherit(enum.Enum):
    INHERIT = "inherit"


INHERIT = _Inherit.INHERIT
"""``cwd``/``env`` default: the caller's own, as ``praxist-fs launch`` submits them."""


class Rejected(Exception):
    """The coordinator refused a request (a submission's or a control request's reply says
    ``rejected``): ``reply`` is that reply; ``field`` names what was wrong, when known."""

    def __init__(self, reply: Reply | ControlReply) -> None:
        super().__init__(reply.reason)
        self.reply = reply
        self.field: str | None = reply.document.get("field")


class UnknownJob(LookupError):
    """No accepted job has that id, or (tags are each uid's) that tag of this uid."""


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job (PROTOCOL.md section 5, ``attempts``)."""

    attempt_id: str
    round: int
    started_at: float
    ended_at: float | None
    exit_code: int | None
    outcome: str | None
    signal: int | None
    gpus: tuple[str, ...]
    error: str | None
    failure: dict[str, Any] | None
    document: dict[str, Any]

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Attempt:
        return cls(doc["attempt_id"], doc.get("round", 1), doc["started_at"],
                   doc.get("ended_at"), doc.get("exit_code"), doc.get("outcome"),
                   doc.get("signal"), tuple(doc.get("gpus") or ()), doc.get("error"),
                   doc.get("failure"), doc)


@dataclass(frozen=True)
class Job:
    """A job file as it was read (PROTOCOL.md section 5): it is not updated later; read
    the job again (``Client.job``) for its state now."""

    job_id: str
    tag: str
    peer: str
    uid: int | None
    state: str
    reason: str
    exit_code: int | None
    profile: str | None
    work_class: str | None
    priority: int
    held: bool
    after: tuple[dict[str, str], ...]
    submitted_at: float | None
    argv: tuple[str, ...] | None
    command: str | None
    cwd: str | None
    attempts: tuple[Attempt, ...]
    document: dict[str, Any]

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Job:
        argv = doc.get("argv")
        return cls(doc["job_id"], doc["tag"], doc["peer"], doc.get("uid"), doc["state"],
                   doc.get("reason", ""), doc.get("exit_code"), doc.get("profile"),
                   doc.get("work_class"), doc.get("priority") or 0, bool(doc.get("hold")),
                   tuple(doc.get("after") or ()), doc.get("submitted_at"),
                   None if argv is None else tuple(argv), doc.get("command"), doc.get("cwd"),
                   tuple(Attempt.from_document(a) for a in doc.get("attempts") or ()), doc)

    @property
    def ended(self) -> bool:
        """Terminal: it changes no more (unless submitted again with ``retry_terminal``)."""
        return self.state in TERMINAL

    @property
    def ok(self) -> bool:
        return self.state == "completed"

    @property
    def exit_status(self) -> int:
        """What ``praxist-fs wait``/``logs -f`` exit with for it once ended: its exit code
        (0 completed), 70 drained_unknown, 75 expired, 1 when it ended without one."""
        return client.exit_status(self.document)


@dataclass(frozen=True)
class Reply:
    """The coordinator's answer to a submission (PROTOCOL.md section 4)."""

    request_id: str
    outcome: Literal["accepted", "duplicate", "terminal_duplicate", "retry_accepted",
                     "rejected"]
    job_id: str | None
    state: str | None
    reason: str
    document: dict[str, Any]

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Reply:
        return cls(doc["request_id"], doc["outcome"], doc.get("job_id"), doc.get("state"),
                   doc.get("reason", ""), doc)

    @property
    def created(self) -> bool:
        """This request queued the job (anew, or again after it failed): it did not merely
        find one."""
        return self.outcome in ("accepted", "retry_accepted")

    @property
    def differs(self) -> tuple[str, ...]:
        """What this request changes of the job it shares (``argv``, ``cwd``,
        ``env:NAME``, ...; R-SUB-7): empty unless a duplicate differs."""
        return tuple(self.document.get("differs", ()))


@dataclass(frozen=True)
class ControlResult:
    """What a control request did to one job: ``result`` is ``cancelled``,
    ``cancelling``, ``held``, ``released``, ``updated`` or ``unchanged``."""

    job_id: str
    tag: str
    result: str
    state: str
    reason: str


@dataclass(frozen=True)
class ControlReply:
    """The coordinator's answer to a job-control request (PROTOCOL.md section 13)."""

    request_id: str
    outcome: Literal["ok", "rejected"]
    reason: str
    jobs: tuple[ControlResult, ...]
    document: dict[str, Any]

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> ControlReply:
        return cls(doc["request_id"], doc["outcome"], doc.get("reason", ""),
                   tuple(ControlResult(j["job_id"], j["tag"], j["result"], j["state"],
                                       j["reason"]) for j in doc.get("jobs") or ()), doc)


JobRef = str | Job | Reply  # a job id or tag, or what names one


class Client:
    """A peer of one run directory. ``peer`` names who submits (default
    ``$PRAXIST_PEER_ID``, else ``$USER``); it is a label for status, logs and
    ``max_concurrent_per_peer``, never part of a job's identity. ``wait_coordinator``:
    seconds a submission waits for a live coordinator, and a reply for a coordinator to
    come back, as ``praxist-fs launch --wait-coordinator``.

    Lookups by tag find this uid's jobs (each uid's tags are its own); ``uid=`` names
    another uid's, to read. Nothing here starts or needs a thread: every call returns
    once its files say so."""

    def __init__(self, run_dir: str | os.PathLike[str], *, peer: str | None = None,
                 wait_coordinator: float = 10.0) -> None:
        peer = peer if peer is not None else client.default_by()
        if not NAME_RE.fullmatch(peer):
            raise ValueError(f"peer: {peer!r} is not allowed; expected {NAME_EXPECTED}")
        self.run_dir = Path(run_dir)
        self.layout = RunLayout.at(run_dir)
        self.peer = peer
        self.wait_coordinator = wait_coordinator

    def __repr__(self) -> str:
        return f"Client({str(self.run_dir)!r}, peer={self.peer!r})"

    # -- submitting ------------------------------------------------------------------

    def submit(self, argv: Iterable[str] | None = None, *, tag: str, **options: Any) -> Reply:
        """Submit a job and return the coordinator's reply (PROTOCOL.md sections 3-4):
        ``accepted``, ``duplicate`` (the tag's job exists: this names it),
        ``retry_accepted`` or ``terminal_duplicate`` (it ended failed, rejected or
        cancelled: ``retry_terminal=True`` runs it again). A ``rejected`` reply raises
        ``Rejected``.

        The command is ``argv`` (run directly) or ``command`` (a ``/bin/sh -c``
        string). ``cwd`` and ``env`` are the caller's by default, as ``launch`` sends
        them; ``cwd=None`` runs it in the run directory, ``env=None`` with no
        variables but the coordinator's ``PATH``. ``after`` jobs must complete first;
        ``after_any`` end in any way, ``after_notok`` end other than completed (each a
        job id, tag, ``Job`` or ``Reply``). ``hold=True`` queues it held until
        ``release``; ``priority`` (-100..100) orders it inside its queue. The keywords
        are ``send``'s (its signature gives their types and defaults): ``submit`` is
        ``send`` and then ``wait_reply``."""
        return self.wait_reply(self.send(argv, tag=tag, **options))

    def send(self, argv: Iterable[str] | None = None, *, tag: str,
             command: str | None = None,
             cwd: str | os.PathLike[str] | None | _Inherit = INHERIT,
             env: Mapping[str, str] | None | _Inherit = INHERIT,
             profile: str | None = None, work_class: str | None = None,
             eta_s: float | None = None, retry_terminal: bool = False,
             after: Iterable[JobRef | Mapping[str, str]] = (),
             after_any: Iterable[JobRef] = (), after_notok: Iterable[JobRef] = (),
             hold: bool = False, priority: int | None = None,
             max_cost: float | None = None, admission_timeout_s: float | None = None,
             lease: str | None = None, generation: int | None = None) -> str:
        """As ``submit``, but return the request id as soon as the request is in the
        spool; ``reply(request_id)`` reads the answer later. Raises ``NoCoordinator``
        when no coordinator serves the run within ``wait_coordinator`` seconds (or the
        run is stopped), ``TooLarge`` for a request the coordinator would refuse for
        its size (the environment, most often: pass a smaller ``env``)."""
        if (argv is None) == (command is None):
            raise ValueError("give the command as argv (a list) or command (a shell "
                             "string), not both and not neither")
        dependencies = [_dependency(ref) for ref in after] + [
            {"job": _job_name(ref), "when": when}
            for when, refs in (("any", after_any), ("notok", after_notok)) for ref in refs]
        request = client.job_submission(
            self.peer, tag, argv=None if argv is None else [os.fspath(a) for a in argv],
            command=command,
            cwd=os.getcwd() if cwd is INHERIT else None if cwd is None else
            os.path.abspath(cwd),
            env=client.submission_env(dict(os.environ)) if env is INHERIT else
            None if env is None else dict(env),
            profile=profile, work_class=work_class, eta_s=eta_s,
            retry_terminal=retry_terminal, lease=lease, max_cost=max_cost,
            priority=priority, hold=hold, admission_timeout_s=admission_timeout_s,
            generation=generation, after=dependencies)
        client.wait_for_coordinator(self.layout, self.wait_coordinator)
        client.submit(self.layout, request)
        return request["request_id"]

    def reply(self, request_id: str) -> Reply | None:
        """The reply to our request, or None while there is none yet. A ``rejected``
        one raises ``Rejected``; one that answers another uid's request raises
        ``NotYours`` (that uid used the id first)."""
        doc = client.read_reply(self.layout, request_id)
        return None if doc is None else _accepted_reply(Reply.from_document(doc))

    def wait_reply(self, request_id: str) -> Reply:
        """The reply to our request, once written; ``NoCoordinator`` once no coordinator
        has been alive for ``wait_coordinator`` seconds (the request stays in the spool
        and is answered when one starts)."""
        doc = client.wait_for_reply(self.layout, request_id, self.wait_coordinator)
        return _accepted_reply(Reply.from_document(doc))

    # -- finding and following jobs ---------------------------------------------------

    def find(self, job: JobRef, *, uid: int | None = None) -> Job | None:
        """The job named by its id or by a tag of ``uid``'s (default: ours), as its job
        file is now; None when no accepted job has that name."""
        found = client.find_job(self.layout, _job_name(job), uid)
        return None if found is None else Job.from_document(found[1])

    def job(self, job: JobRef, *, uid: int | None = None) -> Job:
        """As ``find``, but ``UnknownJob`` when no accepted job has that name."""
        found = self.find(job, uid=uid)
        if found is None:
            raise UnknownJob(f"no job with id or tag {_job_name(job)!r} in {self.run_dir} "
                             "(a request is a job once its reply says accepted)")
        return found

    def jobs(self, *, states: Iterable[str] = (), peer: str | None = None,
             tag: str | None = None, since: float | None = None,
             limit: int | None = None) -> list[Job]:
        """The run's jobs, newest submission first, as ``praxist-fs jobs`` lists them
        (from the job index, else the job files; no coordinator needed): only those in
        ``states``, of ``peer``, whose tag matches the glob ``tag``, active since the
        Unix time ``since``; at most ``limit``. Jobs changed since the index's last
        commit are listed as their job files say (a job just submitted is in it)."""
        from .adapters.jobindex import JobQuery, list_jobs  # sqlite3: only where listed

        status = self.status() or {}
        query = JobQuery(states=tuple(states), peer=peer, tag_glob=tag, since=since,
                         limit=limit)
        listing = list_jobs(self.layout, query, owner=status.get("coordinator", {}).get("since"))
        return [Job.from_document(doc) for doc in listing.documents]

    def wait(self, jobs: Iterable[JobRef], *, timeout: float | None = None,
             uid: int | None = None) -> list[Job]:
        """Block until every job has ended; their last job files, in the order named.
        ``TimeoutError`` after ``timeout`` seconds (naming those not ended),
        ``UnknownJob`` for a name that is no job. Ended is not succeeded: look at
        ``Job.ok`` or ``Job.state``."""
        ids = [self.job(job, uid=uid).job_id for job in jobs]
        ended, pending = client.wait_for_jobs(self.layout, ids, timeout)
        if pending:
            raise TimeoutError(f"not ended after {timeout:g}s: {', '.join(pending)}")
        return [Job.from_document(ended[job_id]) for job_id in ids]

    def wait_job(self, job: JobRef, *, timeout: float | None = None,
                 uid: int | None = None) -> Job:
        """``wait`` for one job."""
        return self.wait([job], timeout=timeout, uid=uid)[0]

    def logs(self, job: JobRef, *, attempt: str | None = None,
             uid: int | None = None) -> bytes:
        """What the job's attempts (or the one ``attempt``, ``a1``, ``a2``...) printed so
        far, oldest first, without headers."""
        job_id = self.job(job, uid=uid).job_id
        out = io.BytesIO()
        client.follow(self.layout, job_id, out, once=True,
                      select=lambda a: attempt in (None, a["attempt_id"]))
        return out.getvalue()

    def follow(self, job: JobRef, out: BinaryIO, *, uid: int | None = None) -> Job:
        """Stream the job's output into ``out`` (a binary file: ``sys.stdout.buffer``)
        through its retries until it has ended, as ``praxist-fs logs -f``; return its
        last job file."""
        job_id = self.job(job, uid=uid).job_id
        return Job.from_document(client.follow(self.layout, job_id, out))

    # -- job control -------------------------------------------------------------------

    def cancel(self, jobs: Iterable[JobRef] = (), *, peer: str | None = None,
               states: Iterable[str] = (), reason: str | None = None,
               grace: float | None = None, owner: int | None = None,
               timeout: float = 30.0) -> ControlReply:
        """Cancel jobs (queued ones at once, running ones by TERM then KILL after
        ``grace`` seconds), as ``praxist-fs cancel``: those named, or without names
        every job ``peer``/``states`` select. The reply says per job what happened."""
        return self._control("cancel", jobs, peer=peer, states=states, reason=reason,
                             grace=grace, owner=owner, timeout=timeout)

    def hold(self, jobs: Iterable[JobRef] = (), *, peer: str | None = None,
             states: Iterable[str] = (), owner: int | None = None,
             timeout: float = 30.0) -> ControlReply:
        """Keep queued jobs from starting until ``release``."""
        return self._control("hold", jobs, peer=peer, states=states, owner=owner,
                             timeout=timeout)

    def release(self, jobs: Iterable[JobRef] = (), *, peer: str | None = None,
                states: Iterable[str] = (), owner: int | None = None,
                timeout: float = 30.0) -> ControlReply:
        """Let held jobs start again."""
        return self._control("release", jobs, peer=peer, states=states, owner=owner,
                             timeout=timeout)

    def update(self, jobs: Iterable[JobRef] = (), *, priority: int,
               peer: str | None = None, states: Iterable[str] = (),
               owner: int | None = None, timeout: float = 30.0) -> ControlReply:
        """Change queued jobs' priority (-100..100)."""
        return self._control("update", jobs, peer=peer, states=states, priority=priority,
                             owner=owner, timeout=timeout)

    def _control(self, action: str, jobs: Iterable[JobRef], *, peer: str | None,
                 states: Iterable[str], timeout: float, **fields: Any) -> ControlReply:
        """One control request, as ``praxist-fs ACTION`` sends it; ``Rejected`` when the
        coordinator refuses it, ``TimeoutError`` without an answer in ``timeout``."""
        names, states = [_job_name(job) for job in jobs], list(states)
        if not (names or peer or states):
            raise ValueError(f"{action}: name jobs (ids or tags), or select them with "
                             "peer=/states=")
        request = client.control_request(action, names, self.peer, peer=peer,
                                         states=states, **fields)
        client.wait_for_coordinator(self.layout, 0.0)
        reply = ControlReply.from_document(client.send_control(
            self.layout, request, timeout, f"{action} ({request['request_id']})"))
        if reply.outcome == "rejected":
            raise Rejected(reply)
        return reply

    # -- the run -----------------------------------------------------------------------

    def status(self) -> dict[str, Any] | None:
        """status.json as the coordinator last wrote it (PROTOCOL.md section 7), or None
        before the first."""
        return client.status_document(self.layout)

    def coordinator_alive(self) -> bool:
        """A live coordinator on this host serves the run (endpoint.json names it)."""
        return live_endpoint(self.layout) is not None


def _accepted_reply(reply: Reply) -> Reply:
    if reply.outcome == "rejected":
        raise Rejected(reply)
    return reply


def _job_name(job: JobRef) -> str:
    if isinstance(job, Job):
        return job.job_id
    if isinstance(job, Reply):
        if job.job_id is None:
            raise ValueError(f"the reply to {job.request_id} names no job ({job.outcome})")
        return job.job_id
    return job


def _dependency(ref: JobRef | Mapping[str, str]) -> str | dict[str, str]:
    """An ``after`` entry as the protocol takes it: a job id or tag that must complete,
    or ``{"job": ..., "when": "ok"|"any"|"notok"}``."""
    return dict(ref) if isinstance(ref, Mapping) else _job_name(ref)
