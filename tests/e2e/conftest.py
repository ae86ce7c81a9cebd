"""A real coordinator in a subprocess on a temporary run directory, driven through files."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: {slots}
    min_concurrent_experiments: 1
    max_concurrent_experiments: 8
    infrastructure_retries: {retries}
    default_profile: cpu
    profiles:
      cpu: {{accelerator: cpu, pressure_domains: [cpu]}}
      other_cpu: {{accelerator: cpu}}
      gpu_work: {{accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}}
"""


def wait_for(predicate, timeout=15.0, interval=0.02, message="condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


CALM_PSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def held_start(tmp_path: Path) -> tuple[dict[str, str], Callable[[], None]]:
    """An environment in which a coordinator's start waits in its first host sample (its
    PSI ``cpu`` file is a FIFO), after the shim server started and forked its first
    supervisors, before the spool is read and endpoint.json written; and what lets that
    sample, the only one, go on (later ones would wait again)."""
    root = tmp_path / "held-pressure"
    root.mkdir()
    os.mkfifo(root / "cpu")
    for domain in ("memory", "io"):
        (root / domain).write_text(CALM_PSI)
    return {"PRAXIST_PSI_ROOT": str(root)}, lambda: (root / "cpu").write_text(CALM_PSI)


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class Run:
    """One run directory and (at most) one coordinator process serving it."""

    def __init__(self, root: Path, task: Path) -> None:
        self.root = root
        self.task = task
        self.sched = root / "resource_scheduler"
        self.proc: subprocess.Popen | None = None
        self._serial = 0

    # -- coordinator ----------------------------------------------------------

    def serve_command(self) -> list[str]:
        return [sys.executable, "-m", "praxist_fs", "serve", "--run-dir", str(self.root),
                "--config", str(self.task)]

    def start(self, env: dict[str, str] | None = None, user: int | None = None
              ) -> subprocess.Popen:
        """Start a coordinator and wait until it serves (its endpoint.json names it)."""
        self.start_raw(env, user)
        pid = self.proc.pid

        def serving() -> bool:
            if self.proc.poll() is not None:  # it will never serve: say why at once
                raise AssertionError(f"the coordinator exited {self.proc.returncode}: "
                                     + self.log_text()[-2000:])
            return (read_json(self.sched / "endpoint.json") or {}).get("pid") == pid

        wait_for(serving, message="endpoint.json of the new coordinator")
        return self.proc

    def log_text(self) -> str:
        """What the coordinators of this run printed (stdout and stderr)."""
        path = self.root.parent / f"coordinator-{self.root.name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_raw(self, env: dict[str, str] | None = None, user: int | None = None
                  ) -> subprocess.Popen:
        """Start a coordinator without waiting for it. Unless ``env`` says otherwise it reads
        calm PSI files of its own: the real /proc/pressure of a loaded CI box would hold
        work at random. ``user``: a uid to run it as (its own group, no others)."""
        calm = self.root.parent / f"calm-pressure-{self.root.name}"
        calm.mkdir(exist_ok=True)
        for domain in ("cpu", "memory", "io"):
            (calm / domain).write_text(CALM_PSI)
        env = {"PRAXIST_PSI_ROOT": str(calm),
               "PRAXIST_HOST_REGISTRY": str(self.root.parent / "host-registry"), **(env or {})}
        log = open(self.root.parent / f"coordinator-{self.root.name}.log", "ab")
        as_user = {} if user is None else {"user": user, "group": pwd.getpwuid(user).pw_gid,
                                           "extra_groups": []}
        self.proc = subprocess.Popen(self.serve_command(), stdout=log, stderr=log,
                                     env={**os.environ, **env}, **as_user)
        log.close()
        return self.proc

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        code = self.proc.wait(timeout=15)
        self.proc = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    # -- peer side ------------------------------------------------------------

    def submit(self, doc: dict, name: str | None = None) -> str:
        if name is None:
            self._serial += 1
            name = f"req-{self._serial}-{time.time_ns()}.json"
        tmp = self.sched / "spool" / "tmp" / name
        tmp.write_text(json.dumps(doc))
        os.rename(tmp, self.sched / "spool" / "incoming" / name)
        return doc.get("request_id") or name[: -len(".json")]

    def drop_raw(self, name: str, data: bytes) -> None:
        tmp = self.sched / "spool" / "tmp" / name
        tmp.write_bytes(data)
        os.rename(tmp, self.sched / "spool" / "incoming" / name)

    def reply(self, request_id: str, timeout: float = 15.0) -> dict:
        path = self.sched / "spool" / "replies" / f"{request_id}.json"
        return wait_for(lambda: read_json(path), timeout, message=f"reply {request_id}")

    def job(self, job_id: str) -> dict | None:
        for directory in ("done", "running", "queued"):
            doc = read_json(self.sched / "jobs" / directory / f"{job_id}.json")
            if doc:
                return doc
        return None

    def job_dirs(self, job_id: str) -> list[str]:
        return [d for d in ("queued", "running", "done")
                if (self.sched / "jobs" / d / f"{job_id}.json").exists()]

    def wait_state(self, job_id: str, *states: str, timeout: float = 15.0) -> dict:
        return wait_for(lambda: (doc := self.job(job_id)) and doc["state"] in states and doc,
                        timeout, message=f"job {job_id} in {states}")

    def wait_attempt_field(self, job_id: str, field: str, timeout: float = 15.0):
        """A field of the job's latest attempt once it is set (not null). The job file is
        rewritten as the attempt goes on: its shim's pid, say, is recorded just after the
        launch was written, and may land after its command has started."""
        def value():
            doc = self.job(job_id)
            found = doc["attempts"][-1][field] if doc and doc["attempts"] else None
            return None if found is None else (found,)
        return wait_for(value, timeout, message=f"{field} of job {job_id}'s attempt")[0]

    def status(self) -> dict | None:
        return read_json(self.sched / "status.json")

    def kill_attempt_groups(self) -> None:
        """Test cleanup: no shim or command of this run may outlive the test.

        Shims are found by their command line (a shim that has not written READY yet
        has no other trace), their commands by the process group the shim leads, and
        what left that group (setsid), or outlived its shim, by the run in its
        environment."""
        attempts = str(self.sched / "attempts")
        for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
            if any(attempts in part for part in proc.info["cmdline"] or ()):
                try:
                    os.killpg(proc.info["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            elif (proc.info["environ"] or {}).get("PRAXIST_RUN_DIR") == str(self.root):
                try:
                    proc.kill()
                except psutil.Error:
                    pass


@pytest.fixture
def make_run(tmp_path):
    runs: list[Run] = []

    def make(slots: int = 2, retries: int = 1, name: str = "run", task_text: str | None = None,
             max_slots: int = 8) -> Run:
        """``max_slots`` below 8 pins concurrency: on calm samples it rises from ``slots``
        to 8, and a job a test needs queued for a while could start."""
        task = tmp_path / f"{name}-task.yaml"
        task.write_text(task_text or TASK.format(slots=slots, retries=retries).replace(
            "max_concurrent_experiments: 8", f"max_concurrent_experiments: {max_slots}"))
        run = Run(tmp_path / name, task)
        run.root.mkdir()
        # The layout exists before the first start so tests may drop files early.
        for sub in ("spool/tmp", "spool/incoming"):
            (run.sched / sub).mkdir(parents=True)
        runs.append(run)
        return run

    yield make
    for run in runs:
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        run.kill_attempt_groups()


@pytest.fixture
def run(make_run):
    run = make_run()
    run.start()
    return run


def request(tag: str, argv: list[str] | None = None, **fields) -> dict:
    doc = {"peer": "tester", "tag": tag, "argv": argv or ["true"]}
    doc.update(fields)
    return doc
