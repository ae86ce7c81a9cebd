"""A real coordinator in a subprocess on a temporary run directory, driven through files;
and the helpers the end-to-end tests share (the crash matrix's scenarios are in
crashes.py)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

def scheduler_task(body: str) -> str:
    """A task file in central mode whose resource_scheduler block holds ``body``: its own
    YAML lines, written unindented, so a test spells only what it is about
    (``str.format`` placeholders and ``{{`` escapes in ``body`` stand)."""
    return "compute_budget:\n  resource_scheduler:\n    mode: central\n" + textwrap.indent(
        body, "    ")


TASK = scheduler_task("""\
initial_concurrent_experiments: {slots}
min_concurrent_experiments: 1
max_concurrent_experiments: 8
infrastructure_retries: {retries}
default_profile: cpu
profiles:
  cpu: {{accelerator: cpu, pressure_domains: [cpu]}}
  other_cpu: {{accelerator: cpu}}
  gpu_work: {{accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}}
""")


def accepted(run, doc: dict) -> str:
    """The job id of ``doc``, a request ``run`` must accept."""
    reply = run.reply(run.submit(doc))
    assert reply["outcome"] == "accepted", reply
    return reply["job_id"]


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
        """Test cleanup, and the power cut of the power-loss tests: no shim or command of
        this run may outlive the test, and none may see another die first.

        Shims are found by their command line (a shim that has not written READY yet
        has no other trace), their commands by the process group the shim leads, what
        left that group (its own group, setsid), or outlived its shim, by the run in its
        environment, and the shim of such a command by being its parent (a warm shim's
        command line names no attempt). Every one is stopped before any is killed, as a
        machine losing power stops them all at once: a shim killed after its command
        would have recorded an exit (137) that no shim could record in a power cut."""
        stopped: dict[int, bool] = {}  # pid -> it leads a group of the run's
        while found := {pid: group for pid, group in self._attempt_processes()
                        if pid not in stopped}:
            for pid, group in found.items():
                _signal_process(pid, signal.SIGSTOP, group)
            stopped.update(found)
        for pid, group in stopped.items():
            _signal_process(pid, signal.SIGKILL, group)

    def _attempt_processes(self) -> list[tuple[int, bool]]:
        """(pid, whether to signal its whole group) of every process of this run's attempts."""
        attempts, found = str(self.sched / "attempts"), []
        for proc in psutil.process_iter(["pid", "ppid", "cmdline", "environ"]):
            if proc.info["pid"] == os.getpid():  # stopped, the test would never go on
                continue
            if any(attempts in part for part in proc.info["cmdline"] or ()):
                found.append((proc.info["pid"], True))
            elif (proc.info["environ"] or {}).get("PRAXIST_RUN_DIR") == str(self.root):
                found.append((proc.info["pid"], False))
                try:
                    parent = psutil.Process(proc.info["ppid"])
                    if any("import shim" in part for part in parent.cmdline()):
                        found.append((parent.pid, False))
                except psutil.Error:
                    pass
        return found


def _signal_process(pid: int, signum: int, group: bool) -> None:
    """``signum`` to ``pid``'s group when it leads one (``group``), else to ``pid``; one
    already gone is no error."""
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
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


# -- helpers the end-to-end tests share (they import them from here, not from each other)


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpus"
JOBS = [sys.executable, "-m", "praxist_fs", "jobs"]
STOP = [sys.executable, "-m", "praxist_fs", "stop", "--grace=1"]


def counting(marker, body: str) -> list[str]:
    """A command that appends its tag to ``marker`` as its first act (counts starts)."""
    return ["sh", "-c", f'echo "$PRAXIST_EXPERIMENT_ID" >> {marker}; {body}']


def starts(marker) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE  # its parent has not reaped it yet
    except psutil.NoSuchProcess:
        return True


CPU_ONLY = scheduler_task("""\
initial_concurrent_experiments: 2
max_concurrent_experiments: 2
default_profile: cpu
profiles:
  cpu: {accelerator: cpu}
""")
# a run on the fake Slurm cluster (tests/slurm): one CPU profile; add its ``slurm:`` block
SLURM_CPU = scheduler_task("""\
backend: slurm
max_concurrent_experiments: 2
default_profile: cpu
profiles:
  cpu: {accelerator: cpu}
""")
# ... polling the fake cluster fast, each job one CPU and 64 MB
SLURM_TASK = SLURM_CPU + """\
    slurm:
      default_resources: {cpus: 1, mem_mb: 64}
      poll_pending_s: 0.2
      poll_running_s: 1.0
"""


def forked_at_start(run) -> tuple[psutil.Process, list[psutil.Process]]:
    """The shim server of a coordinator still starting, and the two supervisors it forked."""
    server = shim_server(run)
    wait_for(lambda: len(server.children()) >= 2, message="two supervisors forked")
    return server, server.children()


def stop(*runs):
    result = subprocess.run([*STOP, *(str(r.root) for r in runs)], capture_output=True,
                            text=True, timeout=120)
    return result.returncode, json.loads(result.stdout)


ENDED = ("completed", "failed", "drained_unknown")


def no_exit_json(tmp_path) -> list[str]:
    """A command that leaves a directory where its exit.json goes, so that its shim dies on
    the rename of exit.json (once it told the exit on its pipe), marks its start in
    ``runs`` and exits 3."""
    return ["sh", "-c", f'mkdir "$PRAXIST_EXPERIMENT_ATTEMPT_DIR/exit.json"; '
            f"echo ran >> {tmp_path}/runs; exit 3"]


def orphaning(tmp_path) -> list[str]:
    """Attempt a1 leaves a sleep in a session of its own (its pid in ``escaped``) and waits
    on another; any later attempt exits 0 at once."""
    return ["sh", "-c", 'if [ "$PRAXIST_EXPERIMENT_ATTEMPT_ID" != a1 ]; then exit 0; fi; '
            f"setsid sleep 300 & echo $! > {tmp_path}/escaped; sleep 300"]


def processes_of(attempt_dir) -> list[int]:
    """Live processes that carry the attempt in their environment."""
    found = []
    for proc in psutil.process_iter(["pid", "environ", "status"]):
        if (proc.info["environ"] or {}).get("PRAXIST_EXPERIMENT_ATTEMPT_DIR") == \
                str(attempt_dir) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.info["pid"])
    return found


def dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_lost_and_terminated(doc, attempt_dir):
    first = doc["attempts"][0]
    assert first["outcome"] == "lost" and first["exit_code"] is None
    assert first["error"].startswith("supervisor died") and \
        first["error"].endswith("; command terminated")
    assert processes_of(attempt_dir) == []  # the setsid'd sleep too


def listed(run, *args: str) -> dict:
    return json.loads(jobs(run, "--json", *args).stdout)


LEGACY_TASK = "compute_budget:\n  resource_scheduler:\n    mode: legacy\n"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def pid_in(path: Path) -> int:
    return wait_for(lambda: path.exists() and path.read_text().strip().isdigit()
                    and int(path.read_text()), message=f"{path.name} to be written")


class Host:
    """The fake GPU inventory, PSI files and host registry a coordinator observes."""

    def __init__(self, root: Path, gpus: str = "two_h200.json") -> None:
        self.gpus = root / "gpus.json"
        shutil.copy(FIXTURES / gpus, self.gpus)
        self.psi = root / "pressure"
        self.psi.mkdir()
        self.registry = root / "registry"
        self.set_pressure(cpu=0.0, memory=0.0, io=0.0)

    def env(self) -> dict[str, str]:
        return {"PRAXIST_FAKE_GPUS": str(self.gpus), "PRAXIST_PSI_ROOT": str(self.psi),
                "PRAXIST_HOST_REGISTRY": str(self.registry)}

    def set_pressure(self, **domains: float) -> None:
        for domain, value in domains.items():
            (self.psi / domain).write_text(
                f"some avg10={value:.2f} avg60=0.00 avg300=0.00 total=0\n"
                "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")

    def edit_device(self, index: int, **fields) -> None:
        doc = json.loads(self.gpus.read_text())
        doc["devices"][index].update(fields)
        tmp = self.gpus.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        tmp.rename(self.gpus)


def shim_server(run) -> psutil.Process:
    attempts = str(run.sched / "attempts")

    def find():
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if "--server" in cmdline and attempts in cmdline and proc.ppid() == run.proc.pid:
                return proc
        return None
    return wait_for(find, message="the shim server")


def jobs(run, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([*JOBS, *args], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PRAXIST_RUN_DIR": str(run.root), **(env or {})})
    assert result.returncode == 0, result.stderr
    return result


