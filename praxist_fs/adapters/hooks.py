"""Completion hooks (issue 17 item 4): the task's commands, run when a job ends or a
generation closes, off the event loop.

One worker thread starts each command in a session of its own (cwd: the run directory),
with the document on stdin (from an unlinked temporary file: a hook that never reads
stdin blocks nothing) and stdout + stderr appended to ``logs/hooks/<name>.log``, then
reaps it without waiting; a hook still running at ``timeout`` has its process group
killed. The loop only enqueues: a slow, failing or hanging hook changes nothing the
coordinator does. At most once: a hook is started after the commit that ends its job,
and one the coordinator did not get to (it stopped or crashed first) is not started
by the next one.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .fsio import open_log

log = logging.getLogger("praxist_fs")

POLL_SECONDS = 0.05   # how often the worker looks at running hooks
STOP_GRACE_SECONDS = 2.0  # at shutdown, running hooks get this long before their group is killed


@dataclass(frozen=True, slots=True)
class HookCall:
    name: str                     # the log file's stem: <event>-<job id or generation>-<n>
    argv: tuple[str, ...]
    document: dict[str, Any]      # on stdin, as JSON
    env: dict[str, str]           # PRAXIST_* variables, over the coordinator's environment


@dataclass(slots=True)
class _Running:
    call: HookCall
    proc: subprocess.Popen
    deadline: float


class HookRunner:
    def __init__(self, directory: Path, cwd: Path, timeout: float) -> None:
        self.directory, self.cwd, self.timeout = directory, cwd, timeout
        self._calls: queue.SimpleQueue[HookCall | None] = queue.SimpleQueue()
        self._running: list[_Running] = []
        self._thread = threading.Thread(target=self._work, name="praxist-hooks", daemon=True)
        self._thread.start()

    def submit(self, call: HookCall) -> None:
        """Never blocks: the worker starts it."""
        self._calls.put(call)

    def close(self) -> None:
        """At the coordinator's stop: what was submitted still starts; then running hooks
        get STOP_GRACE_SECONDS before their groups are killed (nothing outlives us
        unbounded by a timeout)."""
        self._calls.put(None)
        self._thread.join(timeout=STOP_GRACE_SECONDS + 5)

    def _work(self) -> None:
        stopping_at: float | None = None  # set by close(): the running hooks' last moment
        while stopping_at is None or self._running:
            try:
                call = self._calls.get(timeout=POLL_SECONDS if self._running else None)
            except queue.Empty:
                pass
            else:
                if call is None:
                    stopping_at = time.monotonic() + STOP_GRACE_SECONDS
                else:
                    self._start(call)
            self._reap(stopping_at)

    def _start(self, call: HookCall) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile() as stdin, \
                    open(open_log(self.directory / f"{call.name}.log"), "ab") as output:
                stdin.write(json.dumps(call.document, indent=2).encode() + b"\n")
                stdin.seek(0)
                proc = subprocess.Popen(call.argv, stdin=stdin, stdout=output, stderr=output,
                                        cwd=self.cwd, env={**os.environ, **call.env},
                                        start_new_session=True)
        except OSError as exc:
            log.warning("hook %s could not start: %s", call.name, exc)
            self._note(call, f"could not start: {exc}")
            return
        self._running.append(_Running(call, proc, time.monotonic() + self.timeout))

    def _reap(self, stopping_at: float | None) -> None:
        now = time.monotonic()
        for hook in list(self._running):
            code = hook.proc.poll()
            if code is None:
                if now < hook.deadline and (stopping_at is None or now < stopping_at):
                    continue
                why = (f"killed after its timeout of {self.timeout:g} s" if now >= hook.deadline
                       else "killed: the coordinator stopped")
                try:
                    os.killpg(hook.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                hook.proc.wait()
                log.warning("hook %s %s", hook.call.name, why)
                self._note(hook.call, why)
            elif code != 0:
                log.warning("hook %s exited %d", hook.call.name, code)
                self._note(hook.call, f"exited {code}")
            self._running.remove(hook)

    def _note(self, call: HookCall, what: str) -> None:
        """The coordinator's word on how the hook ended, after its own output."""
        try:
            with open(open_log(self.directory / f"{call.name}.log"), "a",
                      encoding="utf-8") as output:
                output.write(f"praxist-fs: hook {' '.join(call.argv)!r} {what}\n")
        except OSError:
            pass
