"""A toy execution backend in one file: what a backend author writes, and no more.

Issue 30: "a backend is one module and one registry line". This module keeps the seam
(praxist_fs/backends/base.py) with plain processes and nothing of praxist_fs's own shim:
the barrier is held in memory (``start`` starts nothing; ``go`` starts the command), the
command runs in a session of its own under a few lines of Python (``RUNNER``) that
record its exit in the attempt directory, and everything is learnt by looking
(``on_timer`` every 50 ms), so it registers nothing in the loop's selector. It is
registered in the tests only (``register(ToyBackend)``, tests/backends/test_toy.py)
and runs the contract suite as the ``toy`` entry of tests/backends/conftest.py RIGS.

What it does not do, as a real backend would: hold its barrier across a restart (an
attempt still at the barrier when the coordinator left is reported ended, never run),
run commands as another uid, write logs where ``praxist-fs logs`` reads them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import psutil

from praxist_fs.backends.base import AttemptKey, RunContext
from praxist_fs.core.capabilities import Capabilities
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event
from praxist_fs.core.model import Attempt, Job

STOP_GRACE_SECONDS = 1.0
LOOK_SECONDS = 0.05  # how often a running attempt is looked at

# The command's parent, detached from the coordinator (so that it outlives it, and is
# nobody's zombie): it says its pid, runs the command in a session of its own and records
# how it ended (TERM caught, not SIG_IGN, so that the command keeps TERM's default action).
RUNNER = """\
import json, os, signal, subprocess, sys, time
if os.fork():
    os._exit(0)
os.setsid()
signal.signal(signal.SIGTERM, lambda *_: None)
def record(name, value):
    with open(os.path.join(sys.argv[1], name + ".tmp"), "w") as out:
        json.dump(value, out)
    os.rename(os.path.join(sys.argv[1], name + ".tmp"), os.path.join(sys.argv[1], name))
record("runner.json", {"pid": os.getpid()})
code = subprocess.call(sys.argv[2:])
record("exit.json", {"exit_code": code if code >= 0 else 128 - code,
                     "signal": -code if code < 0 else None, "ended_at": time.time()})
"""
RUNNER_WAIT_SECONDS = 5.0  # for the runner to say its pid


@dataclass
class ToyAttempt:
    launch: SpawnAttempt | None  # None: adopted after a restart
    directory: Path
    go: bool = False
    ended: bool = False
    pid: int | None = None
    created: float | None = None  # the runner's start time: a pid is not reused under it
    suspended: bool = False
    kill_at: float | None = None  # (monotonic) KILL then, unless it ended


class ToyBackend:
    """Attempts as plain process groups on this host, looked at every 50 ms."""

    name: ClassVar[str] = "toy"
    capabilities: ClassVar[Capabilities] = Capabilities(
        can_suspend=True, places_gpus=False, on_this_host=True)

    def __init__(self, root: Path, environment: Callable[[SpawnAttempt], dict[str, str]]) -> None:
        self.root = root
        self.environment = environment  # a launch's command environment, asked for at GO
        self.attempts: dict[AttemptKey, ToyAttempt] = {}
        self.news: list[Event] = []  # what the next ``on_timer`` reports

    @classmethod
    def made(cls, context: RunContext) -> ToyBackend:
        return cls(context.layout.root / "toy", context.environment)

    # -- to the barrier, and through it ----------------------------------------

    def start(self, launch: SpawnAttempt) -> list[Event]:
        key = (launch.job_id, launch.attempt_id)
        directory = self.root / f"{launch.job_id}.{launch.attempt_id}"
        directory.mkdir(parents=True, exist_ok=True)
        self.attempts[key] = ToyAttempt(launch, directory)
        return [self._seen(key, alive=True)]

    def go(self, key: AttemptKey) -> None:
        toy = self.attempts.get(key)
        if toy is None or toy.ended or toy.go or toy.launch is None:
            return  # released the other way already, or not ours
        argv = list(toy.launch.argv or ("/bin/sh", "-c", toy.launch.command or "true"))
        subprocess.run([sys.executable, "-c", RUNNER, str(toy.directory), *argv],
                       cwd=toy.launch.cwd or str(self.root), env=self.environment(toy.launch),
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True)  # it forks and leaves
        toy.go = True
        deadline = time.monotonic() + RUNNER_WAIT_SECONDS
        while not self._found(toy) and time.monotonic() < deadline:
            time.sleep(0.005)

    def abort(self, key: AttemptKey) -> None:
        toy = self.attempts.get(key)
        if toy is not None and not toy.go and not toy.ended:
            toy.ended = True
            self.news.append(self._seen(key, alive=False))

    # -- signals ---------------------------------------------------------------

    def suspend(self, key: AttemptKey, by: str) -> None:
        self._signal(key, signal.SIGSTOP)
        self.attempts[key].suspended = True

    def resume(self, key: AttemptKey) -> None:
        self._signal(key, signal.SIGCONT)
        self.attempts[key].suspended = False

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        toy = self.attempts.get(key)
        if toy is None or toy.ended:
            return
        if not toy.go:
            return self.abort(key)
        self._signal(key, signal.SIGTERM)
        if toy.suspended:
            self.resume(key)
        toy.kill_at = time.monotonic() + grace

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        for key in keys:
            self.end(key, STOP_GRACE_SECONDS, False)
        events: list[Event] = []
        deadline = time.monotonic() + STOP_GRACE_SECONDS + 10
        while any(not self.attempts[k].ended for k in keys if k in self.attempts):
            assert time.monotonic() < deadline, "the toy could not stop its attempts"
            time.sleep(LOOK_SECONDS / 5)
            events += self.on_timer(time.monotonic())
        return events

    def _signal(self, key: AttemptKey, signum: int) -> None:
        toy = self.attempts[key]
        if self._alive(toy):
            try:
                os.killpg(toy.pid, signum)
            except ProcessLookupError:
                pass

    # -- looking ---------------------------------------------------------------

    def next_timer(self) -> float:
        if self.news:
            return time.monotonic()
        running = any(toy.go and not toy.ended for toy in self.attempts.values())
        return time.monotonic() + LOOK_SECONDS if running else math.inf

    def on_timer(self, now: float) -> list[Event]:
        events, self.news = self.news, []
        for key, toy in self.attempts.items():
            if not toy.go or toy.ended:
                continue
            if (toy.directory / "exit.json").exists() or not self._alive(toy):
                toy.ended = True
                events.append(self._seen(key, alive=False))
            elif toy.kill_at is not None and now >= toy.kill_at:
                toy.kill_at = None
                self._signal(key, signal.SIGKILL)
        return events

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        key = (job.job_id, attempt.attempt_id)
        toy = self.attempts.get(key)
        return self._seen(key, alive=toy is not None and not toy.ended
                          and (not toy.go or self._alive(toy)))

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        """A runner the last coordinator started is found by its pid and start time; an
        attempt it left at the barrier was never run, and is reported ended."""
        key = (job.job_id, attempt.attempt_id)
        toy = ToyAttempt(None, self.root / f"{job.job_id}.{attempt.attempt_id}")
        self.attempts[key] = toy
        toy.go = self._found(toy)
        alive = self._alive(toy)
        toy.ended = not alive  # its exit record, if it left one, is reported now, once
        return [self._seen(key, alive)]

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        return []  # ``on_timer`` looks at every attempt already

    def _found(self, toy: ToyAttempt) -> bool:
        """The runner's pid and start time, once it said its pid."""
        try:
            toy.pid = json.loads((toy.directory / "runner.json").read_text())["pid"]
            toy.created = psutil.Process(toy.pid).create_time()
        except FileNotFoundError:
            return False
        except psutil.NoSuchProcess:
            pass  # ended already: its exit record says how
        return True

    def _alive(self, toy: ToyAttempt) -> bool:
        if toy.pid is None:
            return False
        try:
            process = psutil.Process(toy.pid)
            return (process.create_time() == toy.created
                    and process.status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def _seen(self, key: AttemptKey, alive: bool) -> AttemptObserved:
        toy = self.attempts.get(key)
        record: dict[str, Any] = {}
        if toy is not None and (toy.directory / "exit.json").exists():
            record = json.loads((toy.directory / "exit.json").read_text())
        return AttemptObserved(
            at=time.time(), job_id=key[0], attempt_id=key[1], alive=alive and not record,
            go=toy is not None and toy.go, exited=bool(record),
            exit_code=record.get("exit_code"), signal=record.get("signal"),
            ended_at=record.get("ended_at"), handle={"backend": self.name, "pid": (
                toy.pid if toy is not None else None)})

    # -- what the toy needs none of --------------------------------------------

    def bind(self, effects: list[Effect]) -> list[Event]:
        return []

    def roll_back(self) -> None:
        pass

    def settle(self) -> None:
        pass

    def prepare(self, stopped: bool) -> None:
        pass

    def on_ready(self, token: Any) -> list[Event]:
        return []

    def close(self) -> None:
        self.attempts.clear()  # running commands stay running, to be adopted
