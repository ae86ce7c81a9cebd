"""A ``concurrent.futures.Executor`` whose calls are jobs of a run (R-API-1).

``JobExecutor(client).map(train, configs)`` runs a sweep through the run's queue, as
submitit does through Slurm: each call is pickled into a call file, submitted as a
job that runs ``python -m praxist_fs.callworker`` on it (praxist_fs/callworker.py),
and its future gets what the call returned, or the exception it raised, once the job
has ended. The jobs are the coordinator's, not this process's: they are scheduled,
retried, listed and cancelled as any other, and outlive the Python that submitted
them.

Identity is the protocol's: a call's tag is the job's. By default the tag is the
callable's name and a hash of the pickled call, so submitting an identical call
again, from this process or another, shares its job (a ``duplicate``) and gets the
same result without running it twice; a failed call stays failed unless the
executor has ``retry_terminal=True``. docs/PYTHON.md is the guide.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import pickle
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import callworker
from .api import INHERIT, Client, Job, NoCoordinator, Rejected, Reply, _Inherit
from .client import POLL_SECONDS, WAIT_POLL_MAX_SECONDS, job_document

__all__ = ["DifferentCall", "JobExecutor", "JobFailed", "JobFuture", "RemoteError",
           "default_folder"]

RemoteError = callworker.RemoteError
TAG_NAME_CHARS = re.compile(r"[^A-Za-z0-9._+=@,-]+")


class JobFailed(Exception):
    """The call's job ended without a result: it failed before the call could say why
    (killed, out of memory, the worker could not start), or it ended drained_unknown,
    expired or rejected. ``job`` is its last job file."""

    def __init__(self, job: Job, why: str) -> None:
        super().__init__(f"job {job.job_id} (tag {job.tag}) {why}")
        self.job = job


class DifferentCall(Exception):
    """The tag's job runs another call than this future's: the executor's ``tag`` gave
    two different calls one tag. Give each call a tag of its own."""


def default_folder(run_dir: str | os.PathLike[str]) -> Path:
    """Where an executor keeps its call and result files for a run unless told:
    ``$XDG_CACHE_HOME/praxist_fs/executor/<run name>-<hash of its path>``."""
    root = os.path.realpath(run_dir)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(os.fsencode(root)).hexdigest()[:12]
    return cache / "praxist_fs" / "executor" / f"{os.path.basename(root)}-{digest}"


class JobFuture(concurrent.futures.Future):
    """The future of one call: ``result()`` is what the call returned, or raises what it
    raised (with the remote traceback in its notes), ``JobFailed`` when its job ended
    without a result, ``Rejected`` when the coordinator refused the request. A job
    cancelled (by ``cancel()`` or anyone) makes it cancelled."""

    def __init__(self, executor: JobExecutor, request_id: str, tag: str, call: str) -> None:
        super().__init__()
        self._executor = executor
        self.request_id, self.tag, self.call_id = request_id, tag, call
        self.reply: Reply | None = None  # once the coordinator answered
        self._lost_since: float | None = None  # no reply, and no coordinator since then

    @property
    def job_id(self) -> str | None:
        """The job this call runs as, once the coordinator answered."""
        return None if self.reply is None else self.reply.job_id

    def job(self) -> Job | None:
        """The job's file as it is now, once the coordinator answered."""
        job_id = self.job_id
        return None if job_id is None else self._executor.client.find(job_id)

    def cancel(self) -> bool:
        """Cancel the call: its job too when this future's request created it and no
        other pending future of this executor shares it; a job it merely found (a
        duplicate) runs on for whoever else waits on it. False once the job has ended."""
        if self.done():
            return self.cancelled()
        return self._executor._cancel(self)


class JobExecutor(concurrent.futures.Executor):
    """Run Python calls as jobs of ``client``'s run. Every job gets the options given
    here (``profile``, ``work_class``, ``eta_s``, ``priority``, ``max_cost``,
    ``admission_timeout_s``, ``retry_terminal``, ``cwd``, ``env``: as
    ``Client.submit`` takes them).

    ``folder`` keeps the call files and results (default ``default_folder``); the
    job must be able to read and write it: it runs as your uid under a root
    coordinator or one of your own. ``python``: the interpreter that runs the calls,
    which must import praxist_fs (default ``sys.executable``). ``tag(*args,
    **kwargs)``: the tag of a call (default: the callable's name and a hash of the
    call); calls with equal tags share one job."""

    def __init__(self, client: Client, *, folder: str | os.PathLike[str] | None = None,
                 tag: Callable[..., str] | None = None, python: str | None = None,
                 cwd: str | os.PathLike[str] | None | _Inherit = INHERIT,
                 env: Mapping[str, str] | None | _Inherit = INHERIT,
                 profile: str | None = None, work_class: str | None = None,
                 eta_s: float | None = None, priority: int | None = None,
                 max_cost: float | None = None, admission_timeout_s: float | None = None,
                 retry_terminal: bool = False) -> None:
        self.client = client
        self.folder = Path(folder) if folder is not None else default_folder(client.run_dir)
        self.python = python or sys.executable
        self._tag = tag
        self._options: dict[str, Any] = {
            "cwd": os.getcwd() if cwd is INHERIT else cwd, "env": env, "profile": profile,
            "work_class": work_class, "eta_s": eta_s, "priority": priority,
            "max_cost": max_cost, "admission_timeout_s": admission_timeout_s,
            "retry_terminal": retry_terminal}
        self._pending: list[JobFuture] = []
        self._lock = threading.Condition()
        self._shutdown = False
        self._watcher: threading.Thread | None = None

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> JobFuture:
        """Submit ``fn(*args, **kwargs)`` as a job. Raises at once what keeps it from
        being submitted: a call that cannot be pickled by reference (``TypeError``),
        no live coordinator (``NoCoordinator``)."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
        identity, data = pack_call(fn, args, kwargs)
        tag = self._tag(*args, **kwargs) if self._tag is not None else \
            default_tag(fn, identity)
        call = self.folder / "calls" / f"{identity}.pickle"
        callworker.write_whole(call, data)
        request_id = self.client.send(
            callworker.worker_argv(self.python, call, self.folder / "results"), tag=tag,
            **self._options)
        future = JobFuture(self, request_id, tag, identity)
        with self._lock:
            self._pending.append(future)
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                 name="praxist-executor")
                self._watcher.start()
            self._lock.notify_all()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more submissions. ``cancel_futures``: cancel the calls not ended (as
        ``JobFuture.cancel``); ``wait``: return once every future is done. Jobs not
        cancelled run on either way: they are the coordinator's."""
        with self._lock:
            self._shutdown = True
            pending = list(self._pending)
        if cancel_futures:
            for future in pending:
                future.cancel()
        with self._lock:
            watcher = self._watcher
        if wait and watcher is not None:
            watcher.join()

    # -- the watcher: one thread reads replies and job files for every pending call, and
    # ends with the last

    def _watch(self) -> None:
        delay = POLL_SECONDS
        while True:
            with self._lock:
                self._pending = [f for f in self._pending if not f.done()]
                if not self._pending:  # the next submission starts another
                    self._watcher = None
                    return
                pending = list(self._pending)
            for future in pending:
                try:
                    self._look(future)
                except Exception as exc:  # noqa: BLE001 - it belongs to that future alone
                    _settle(future, exc)
            with self._lock:
                if self._lock.wait(delay):  # a new submission: look again soon
                    delay = POLL_SECONDS
                else:
                    delay = min(delay * 2, WAIT_POLL_MAX_SECONDS)

    def _look(self, future: JobFuture) -> None:
        """Settle ``future`` if its reply or its job says how the call ended."""
        if future.reply is None:
            try:
                future.reply = self.client.reply(future.request_id)
            except Rejected as exc:
                _settle(future, exc)
                return
            if future.reply is None:
                self._check_coordinator(future)
                return
        doc = job_document(self.client.layout, future.reply.job_id)
        if doc is None:
            return
        job = Job.from_document(doc)
        if (found := callworker.parse_argv(job.argv)) is None or \
                callworker.call_id(found[0]) != future.call_id:
            _settle(future, DifferentCall(
                f"tag {future.tag}'s job {job.job_id} runs {' '.join(job.argv or ())!r}, "
                f"not call {future.call_id}: give each call a tag of its own"))
        elif job.ended:
            self._settle_ended(future, job, found[1])

    def _check_coordinator(self, future: JobFuture) -> None:
        """No reply yet: fail the future once no coordinator has been alive for the
        client's ``wait_coordinator`` (the request stays in the spool), as
        ``Client.wait_reply`` would."""
        if self.client.coordinator_alive():
            future._lost_since = None
            return
        future._lost_since = future._lost_since or time.monotonic()
        if time.monotonic() - future._lost_since > self.client.wait_coordinator:
            _settle(future, NoCoordinator(
                f"the coordinator of {self.client.run_dir} went away before answering; "
                f"request {future.request_id} stays in the spool and is processed when "
                "one starts"))

    def _settle_ended(self, future: JobFuture, job: Job, results: Path) -> None:
        if job.state == "cancelled":
            concurrent.futures.Future.cancel(future)
            return
        last = job.attempts[-1] if job.attempts else None
        outcome = None if last is None else read_result(
            callworker.result_path(results, job.job_id, last.attempt_id), future.call_id)
        if outcome is not None and outcome["ok"] and job.ok:
            _settle(future, value=outcome["value"])
        elif outcome is not None and not outcome["ok"] and job.state == "failed":
            exc = outcome["value"]
            if outcome["traceback"] and hasattr(exc, "add_note"):
                exc.add_note(f"raised in job {job.job_id}, attempt {last.attempt_id}:\n"
                             + outcome["traceback"].rstrip())
            _settle(future, exc)
        else:
            log = self.client.layout.log(job.job_id, last.attempt_id) if last else None
            _settle(future, JobFailed(job, f"ended {job.state} ({job.reason}) without a "
                                      "result" + (f"; its log: {log}" if log else "")))

    def _cancel(self, future: JobFuture) -> bool:
        try:
            reply = future.reply or self.client.wait_reply(future.request_id)
        except (Rejected, NoCoordinator):
            return concurrent.futures.Future.cancel(future)
        future.reply = reply
        with self._lock:
            shared = any(f is not future and not f.done() and f.job_id == reply.job_id
                         for f in self._pending)
        if reply.created and not shared:
            answer = self.client.cancel([reply.job_id], reason="its future was cancelled")
            if all(entry.result == "unchanged" for entry in answer.jobs):
                return False  # it had ended: the watcher settles the future
        return concurrent.futures.Future.cancel(future)


def _settle(future: JobFuture, exception: BaseException | None = None, *,
            value: Any = None) -> None:
    """Give ``future`` its outcome, unless it was cancelled meanwhile."""
    if future.set_running_or_notify_cancel():
        if exception is None:
            future.set_result(value)
        else:
            future.set_exception(exception)


def pack_call(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[str, bytes]:
    """(the call's id, its call file): the call pickled by reference, with what the
    worker needs to find the callable (the submitter's ``sys.path``, and its main
    module when the call refers to it). The id hashes the pickled call (the callable by
    its qualified name, not its code) and, for the main module's own callables, the
    script's name: not ``sys.path`` nor any directory, so the same call from another
    place is the same call."""
    try:
        call = pickle.dumps((fn, args, kwargs), protocol=callworker.PICKLE_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(
            f"cannot run {fn!r} as a job: {exc}. A call is pickled by reference: the "
            "callable must be a module-level function or class (no lambda, no nested "
            "function), and its arguments picklable (docs/PYTHON.md)") from exc
    main = main_reference() if b"__main__" in call else None
    # A script's own functions are told apart by its name: not its directory, so the same
    # script in another checkout is the same call.
    script = main and (main["name"] or os.path.basename(main["path"]))
    identity = hashlib.sha256(call + repr(script).encode()).hexdigest()[:32]
    document = {"format": callworker.FORMAT, "call_id": identity, "call": call,
                "main": main, "sys_path": [os.path.abspath(p) for p in sys.path]}
    return identity, pickle.dumps(document, protocol=callworker.PICKLE_PROTOCOL)


def main_reference() -> dict[str, str | None]:
    """How the worker runs this process's main module again: by module name (``python
    -m``) or by file; a ``TypeError`` when it has neither (an interactive session)."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return {"name": spec.name, "path": None}
    path = getattr(main, "__file__", None)
    if not path:
        raise TypeError("a callable defined interactively (no script file) cannot run as "
                        "a job: define it in a module or a script (docs/PYTHON.md)")
    return {"name": None, "path": os.path.realpath(path)}


def default_tag(fn: Callable[..., Any], identity: str) -> str:
    """``<callable name>.<16 hex digits of the call's id>``, within the name alphabet."""
    name = TAG_NAME_CHARS.sub("_", getattr(fn, "__qualname__", type(fn).__name__))
    return f"{name.strip('._+=@,-')[:100] or 'call'}.{identity[:16]}"


def read_result(path: Path, identity: str) -> dict[str, Any] | None:
    """The result a call's attempt wrote, if it is there and of this call."""
    try:
        with open(path, "rb") as handle:
            document = pickle.load(handle)
    except FileNotFoundError:
        return None
    if not isinstance(document, dict) or document.get("format") != callworker.FORMAT \
            or document.get("call_id") != identity:
        return None
    return document
