"""The Slurm backend: each attempt is one Slurm job running the Slurm-mode shim (R-DIST-1).

The run directory stays the source of truth: Slurm is asked to run a batch script
(``sbatch --parsable --no-requeue``) under a deterministic job name, the barrier and
the exit are files in the attempt directory on the shared filesystem
(slurm_shim.py), and Slurm's own view (``squeue``, ``sacct -c``) only says where a
job is and why it ended when the files cannot. Every Slurm command runs with the
coordinator's environment (``SLURM_CONF`` selects the cluster) and a timeout, since a
down slurmctld blocks client commands for about 9 s: call them off the event loop.
Nothing a command prints, nor a file a peer wrote, makes this module raise anything
but the two errors below. See docs/OPERATIONS.md, *Running on Slurm*.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import selectors
import shlex
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from praxist_fs.adapters.crashpoints import reach
from praxist_fs.adapters.fsio import makedirs, read_json, unlink, write_atomic, write_json
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.taskreports import task_report
from praxist_fs.backends.base import AttemptKey, Capabilities
from praxist_fs.backends.local.launcher import BARRIER_TIMEOUT_S, describe, make_durable
from praxist_fs.backends.slurm_config import SlurmConfig, parse_slurm_config
from praxist_fs.core.budget import INFRA_EXIT_CODE
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event, NodeOutcome, NodeProbeStarted
from praxist_fs.errors import PraxistError

if TYPE_CHECKING:
    from praxist_fs.core.model import Attempt, Job
    from praxist_fs.core.nodes import NodeRegistry
    from praxist_fs.core.policy import Policy

log = logging.getLogger("praxist_fs")

ENTRY = "slurm-entry.sh"  # the batch script, in the attempt directory
SPEC = "spec.json"  # what slurm_shim runs (0600): the local spec's keys, as JSON
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory praxist_fs is in
SHIM_BOOTSTRAP = ("import sys; sys.path[0] = %r; from praxist_fs.backends import slurm_shim; "
                  "sys.exit(slurm_shim.main())" % str(PACKAGE_ROOT))
PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                            "REQUEUE_FED", "RESIZING", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset({"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "SUSPENDED",
                            "STOPPED"})
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE",
                          "SPECIAL_EXIT", "REVOKED"})
INFRASTRUCTURE_STATES = frozenset({"NODE_FAIL", "BOOT_FAIL", "PREEMPTED"})


class SlurmRefused(PraxistError):
    """Slurm refused the job (sbatch exited non-zero); the message is sbatch's own."""


class SlurmUnavailable(PraxistError):
    """A Slurm command did not answer (timed out, not installed, slurmctld down): nothing
    is known, so nothing may be concluded. After an sbatch, the job may exist: find() it."""


# --- pure parts: names, arguments, parsing, the state mapping ---------------------------


def run_tag(run_dir: Path) -> str:
    """First 8 hex digits of the sha256 of the run directory's absolute path."""
    return hashlib.sha256(os.fsencode(os.path.abspath(run_dir))).hexdigest()[:8]


def _slurm_safe(text: str) -> str:
    """Job ids and attempt ids as Slurm and squeue's ``|``-separated output can carry."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def job_name(run_dir: Path, job_id: str, attempt_id: str) -> str:
    """``px-<run8>-<job>-<attempt>``: the same attempt always gets the same name, which is
    how a job is found again after a crash between sbatch and the journal."""
    return f"px-{run_tag(run_dir)}-{_slurm_safe(job_id)}-{_slurm_safe(attempt_id)}"


def gpu_request(profile: dict[str, Any], gpu_shards: int) -> list[str]:
    """GPUs as Slurm options. ``gpu_count`` N -> ``--gpus=N``; a single-GPU profile with
    known fractional demand (utilization under 100 %) -> ``--gres=shard:K`` of the
    ``gpu_shards`` a GPU is cut into, K = ceil(shards x utilization), only where the site
    configured shards (``gpu_shards`` > 0); else a whole GPU. No GPU memory: Slurm
    cannot schedule it (``--mem-per-gpu`` is host memory)."""
    if profile.get("accelerator") != "gpu":
        return []
    count = max(1, int(profile.get("gpu_count") or 1))
    utilization = profile.get("gpu_utilization_pct")
    fractional = (count == 1 and utilization is not None and utilization < 100
                  and profile.get("gpu_memory_gb") is not None)
    if fractional and gpu_shards > 0:
        return [f"--gres=shard:{max(1, math.ceil(gpu_shards * utilization / 100))}"]
    return [f"--gpus={count}"]


def time_limit(config: SlurmConfig, eta_seconds: float | None) -> int | None:
    """Minutes for ``-t``: the ETA times ``time_limit_factor`` when both are known, else
    ``time_limit_minutes``, else none (the partition's default)."""
    if (config.time_limit_factor is not None and eta_seconds is not None
            and math.isfinite(eta_seconds) and eta_seconds > 0):
        return max(1, math.ceil(eta_seconds * config.time_limit_factor / 60))
    return config.time_limit_minutes


def sbatch_argv(config: SlurmConfig, name: str, comment: str, attempt_dir: Path,
                profile: dict[str, Any], eta_seconds: float | None,
                exclude: list[str]) -> list[str]:
    """The one sbatch command of an attempt. ``profile``: Profile.to_dict() plus its
    ``name``. ``--no-requeue``: a requeued batch script would run the command twice."""
    resources = config.for_profile(profile.get("name"))
    argv = ["sbatch", "--parsable", "--no-requeue", "-J", name, "--comment", comment,
            "-D", str(attempt_dir), "-o", str(attempt_dir / "slurm.out"), "--open-mode=append",
            *gpu_request(profile, config.gpu_shards),
            "-c", str(resources.cpus), f"--mem={resources.mem_mb}M"]
    minutes = time_limit(config, eta_seconds)
    if minutes is not None:
        argv += ["-t", str(minutes)]
    for option, value in (("-p", config.partition), ("-A", config.account),
                          ("--qos", config.qos)):
        if value is not None:
            argv += [option, value]
    argv += config.extra_args
    if exclude:
        argv.append("--exclude=" + ",".join(sorted(set(exclude))))
    return [*argv, str(attempt_dir / ENTRY), str(attempt_dir)]


@dataclass(frozen=True)
class SlurmState:
    """One line of squeue: a job as Slurm sees it."""

    job_id: str
    name: str
    state: str  # squeue's %T: PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
    reason: str = ""  # %r: why it waits (Resources, Priority, ...), "None" if it does not
    nodes: str = ""  # %N: where it runs (or ran)


def parse_squeue(text: str) -> dict[str, SlurmState]:
    """``%i|%j|%T|%r|%N`` (or ``%i|%j|%T``) lines by job id; malformed lines are skipped."""
    states = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 3 or not fields[0].isdigit() or not fields[2]:
            continue
        reason = fields[3] if len(fields) > 3 else ""
        nodes = fields[4] if len(fields) > 4 else ""
        states[fields[0]] = SlurmState(fields[0], fields[1], fields[2].split()[0],
                                       reason, nodes)
    return states


@dataclass(frozen=True)
class FinalExit:
    """What Slurm's job completion record says of a job that ended."""

    state: str
    exit_code: int
    signal: int


def parse_sacct(text: str, job_id: str) -> FinalExit | None:
    """The last ``JobID|State|ExitCode`` record of ``job_id`` (ids get reused, so the
    jobcomp file may hold older ones first); None if there is none."""
    found = None
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 3 or fields[0] != job_id:
            continue
        code, _, signum = fields[2].partition(":")
        if code.isdigit() and (signum or "0").isdigit() and fields[1]:
            found = FinalExit(fields[1].split()[0], int(code), int(signum or 0))
    return found


def outcome(slurm_state: SlurmState | str | None, exit_json: dict[str, Any] | None,
            asked: str | None, ready: bool = True) -> tuple[str, str]:
    """What became of an attempt, from Slurm's state, the shim's exit.json and what
    praxist_fs asked (None, "cancel", "stop" or "preempt"): (outcome, reason).

    While it lives (no exit.json yet):
    - PENDING, CONFIGURING (and requeue states) -> ``launching``, reason = Slurm's
      pending reason (%r), e.g. "Resources", or the state while Slurm gives none ("None");
    - RUNNING (COMPLETING, SUSPENDED, ...) -> ``running`` once READY exists
      (``ready``), else ``launching``;
    - a state this table does not know -> ``running`` (never taken for success).
    Once it ended (a terminal state, or exit.json there), in this order:
    - exit.json says 0 -> ``exited`` (it finished before any cancel or failure);
    - praxist_fs asked: ``cancelled`` ("cancel", "stop") or ``preempted`` ("preempt"),
      whether Slurm says CANCELLED (scancel) or FAILED (TERM forwarded, exit 143);
    - CANCELLED -> ``failed`` "cancelled outside praxist_fs";
    - NODE_FAIL, BOOT_FAIL, PREEMPTED (by Slurm) -> ``infrastructure`` (retried like
      exit 75, counted against the node);
    - COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY (DEADLINE, ...) -> ``exited`` with
      exit.json's code, else ``failed`` with the Slurm state as reason;
    - unknown to Slurm (None: purged after MinJobAge, or never there) -> ``exited`` by
      exit.json, else ``lost`` (the caller releases it instead when GO was never
      journaled: then nothing can have run).
    """
    state = slurm_state.state if isinstance(slurm_state, SlurmState) else slurm_state
    reason = slurm_state.reason if isinstance(slurm_state, SlurmState) else ""
    code = exit_json.get("exit_code") if isinstance(exit_json, dict) else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    ended = state is None or state in ENDED_STATES | INFRASTRUCTURE_STATES | {"CANCELLED"}
    if code is None and not ended:
        if state in PENDING_STATES:
            # Slurm says "None" while no scheduling cycle has given the job a reason yet
            return "launching", f"waiting in Slurm: {state if reason in ('', 'None') else reason}"
        if state in RUNNING_STATES:
            return ("running", f"Slurm {state}") if ready else (
                "launching", "started in Slurm, waiting for READY")
        return "running", f"Slurm state {state} (not recognised)"
    if code == 0:
        return "exited", "exit 0"
    if asked in ("cancel", "stop"):
        return "cancelled", f"cancelled ({asked})"
    if asked == "preempt":
        return "preempted", "preempted (Slurm job ended)"
    if state == "CANCELLED":
        return "failed", "cancelled outside praxist_fs"
    if state in INFRASTRUCTURE_STATES:
        return "infrastructure", f"Slurm {state}"
    if code is not None:
        noted = state in ENDED_STATES - {"COMPLETED", "FAILED"}  # TIMEOUT, OUT_OF_MEMORY, ...
        return "exited", f"exit {code}" + (f" (Slurm {state})" if noted else "")
    if state is None:
        return "lost", "unknown to Slurm and no exit.json"
    return "failed", f"Slurm {state} without exit.json"


def entry_script(python: str) -> bytes:
    """The batch script: the Slurm-mode shim, by the interpreter named (on the shared
    filesystem), with ``-S`` so no site customisation runs before it."""
    return ("#!/bin/sh\n# praxist_fs: an attempt's Slurm-mode shim (praxist_fs/backends/"
            "slurm_shim.py)\nexec %s -S -c %s \"$@\"\n" % (
                shlex.quote(python), shlex.quote(SHIM_BOOTSTRAP))).encode()


# --- running Slurm's commands ------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    """A command's end: ``returncode`` None when it did not finish (timeout, not found)."""

    returncode: int | None
    stdout: str
    stderr: str


Runner = Callable[[list[str], float], Completed]


def run_command(argv: list[str], timeout: float) -> Completed:
    """``argv`` with the coordinator's environment (SLURM_CONF, PATH), never raising."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return Completed(None, "", f"{argv[0]}: no answer in {timeout:g} s (slurmctld down?)")
    except OSError as exc:
        return Completed(None, "", f"{argv[0]}: {exc}")
    return Completed(done.returncode, done.stdout.decode("utf-8", "replace"),
                     done.stderr.decode("utf-8", "replace"))


def write_spec(attempt_dir: Path, spec: dict[str, Any]) -> None:
    """What the Slurm-mode shim runs: the local spec's keys (argv, command, cwd, env, log,
    barrier_timeout_s), as JSON (any Python on the node reads it), 0600 as it may hold
    secrets; the shim removes it once read. Before sbatch, and not fsynced (raw secrets
    had better not be forced onto the disk; a lost spec means a job that cannot start,
    which the coordinator sees)."""
    write_json(attempt_dir / SPEC, spec, sync=False, mode=0o600)


class SlurmClient:
    """Attempts as Slurm jobs. ``can_suspend``: False (``scontrol suspend`` is for Slurm's
    operators), so suspend-style preemption is unavailable; ``places_gpus``: True (Slurm
    chooses the devices; READY says which)."""

    can_suspend = False
    places_gpus = True

    def __init__(self, config: SlurmConfig, run_dir: Path,
                 runner: Runner = run_command) -> None:
        self.config = config
        self.run_dir = Path(os.path.abspath(run_dir))
        self.runner = runner

    def _run(self, argv: list[str]) -> Completed:
        return self.runner(argv, self.config.command_timeout_s)

    def job_name(self, job_id: str, attempt_id: str) -> str:
        return job_name(self.run_dir, job_id, attempt_id)

    def submit(self, attempt_dir: Path, job_id: str, attempt_id: str, profile: dict[str, Any],
               eta_seconds: float | None, exclude: list[str]) -> str:
        """Submit the attempt (its spec.json written already); its Slurm job id. Raises
        SlurmRefused with sbatch's message, or SlurmUnavailable when sbatch did not answer
        (the job may exist: find() it by name before submitting again)."""
        attempt_dir = Path(os.path.abspath(attempt_dir))
        makedirs(attempt_dir)
        write_atomic(attempt_dir / ENTRY, entry_script(self.config.python), mode=0o755)
        comment = f"praxist:{run_tag(self.run_dir)}:{job_id}:{attempt_id}"
        return self._job_id(self._run(sbatch_argv(
            self.config, self.job_name(job_id, attempt_id), comment, attempt_dir, profile,
            eta_seconds, exclude)))

    def probe(self, node: str, name: str) -> str:
        """A tiny job pinned to ``node`` (R-BUD-2's probe): it runs ``true`` once the node
        takes work. Its Slurm job id; SlurmRefused or SlurmUnavailable as ``submit``."""
        argv = ["sbatch", "--parsable", "--no-requeue", "-J", name, f"--nodelist={node}",
                "-c", "1", "--mem=16M", "-t", "5", "-o", "/dev/null", "--wrap", "true"]
        if self.config.partition is not None:
            argv[1:1] = ["-p", self.config.partition]
        return self._job_id(self._run(argv))

    def _job_id(self, done: Completed) -> str:
        """The job id sbatch --parsable printed, or why there is none."""
        if done.returncode is None:
            raise SlurmUnavailable(done.stderr)
        if done.returncode != 0:
            raise SlurmRefused(done.stderr.strip() or f"sbatch exited {done.returncode}")
        slurm_id = done.stdout.strip().split(";")[0]
        if not slurm_id.isdigit():
            raise SlurmUnavailable(f"sbatch printed no job id: {done.stdout.strip()!r}")
        return slurm_id

    def find(self, name: str) -> str | None:
        """The Slurm job id of the job named ``name`` (the newest, should there be more),
        or None: how a crash between sbatch and the journal is resolved. By name, never by
        id alone: Slurm reuses ids once its state is wiped."""
        done = self._run(["squeue", "--me", "--states=all", "-h", "-n", name,
                          "-o", "%i|%j|%T"])
        if done.returncode != 0:
            raise SlurmUnavailable(done.stderr.strip() or "squeue failed")
        ids = [state.job_id for state in parse_squeue(done.stdout).values() if state.name == name]
        return max(ids, key=int) if ids else None

    def jobs_of_run(self) -> dict[str, SlurmState]:
        """Every job of this run Slurm still knows (named ``px-<run8>-``), by id: what a
        stop sweeps after its cancels, and what a restart holds against its journal."""
        done = self._run(["squeue", "--me", "--states=all", "-h", "-o", "%i|%j|%T|%r|%N"])
        if done.returncode != 0:
            raise SlurmUnavailable(done.stderr.strip() or "squeue failed")
        prefix = f"px-{run_tag(self.run_dir)}-"
        return {job: state for job, state in parse_squeue(done.stdout).items()
                if state.name.startswith(prefix)}

    def poll(self, ids: list[str]) -> dict[str, SlurmState]:
        """Slurm's view of ``ids`` in one squeue; an id missing from the answer is unknown
        to Slurm (purged after MinJobAge, or never there). SlurmUnavailable if squeue
        does not answer: then nothing is known."""
        ids = [slurm_id for slurm_id in ids if slurm_id.isdigit()]
        if not ids:
            return {}
        done = self._run(["squeue", "--states=all", "-h", "-o", "%i|%j|%T|%r|%N",
                          "-j", ",".join(ids)])
        if done.returncode != 0:
            if "Invalid job id" in done.stderr:  # one id, already purged
                return {}
            raise SlurmUnavailable(done.stderr.strip() or "squeue failed")
        return {job: state for job, state in parse_squeue(done.stdout).items() if job in ids}

    def final_exit(self, slurm_id: str) -> FinalExit | None:
        """Slurm's job completion record (``sacct -c``, jobcomp/filetxt), for a job that
        ended without exit.json; None where there is none (or no accounting)."""
        done = self._run(["sacct", "-c", "-j", slurm_id, "-o", "JobID,State,ExitCode", "-P"])
        return parse_sacct(done.stdout, slurm_id) if done.returncode == 0 else None

    def release(self, attempt_dir: Path, go: bool) -> None:
        """The barrier: GO (run it) or ABORT (never run it), written atomically and durably
        into the attempt directory, which the shim lists (no pipe reaches another node)."""
        write_atomic(Path(attempt_dir) / ("GO" if go else "ABORT"), b"", durable=True)

    def signal(self, slurm_id: str, signum: int) -> bool:
        """``signum`` to every process of the job (``--full``: else only the batch shell
        gets it); False if scancel failed (the job may have ended)."""
        name = signal.Signals(signum).name.removeprefix("SIG")
        return self._run(["scancel", "--full", f"--signal={name}", slurm_id]).returncode == 0

    def cancel(self, slurm_id: str) -> bool:
        """End the job (pending or running); False if scancel failed."""
        return self._run(["scancel", slurm_id]).returncode == 0

    def exclude(self, slurm_id: str, nodes: list[str]) -> bool:
        """Make a pending job's ``--exclude`` ``nodes`` (none: it may go anywhere again);
        False if scontrol failed (the job may have started meanwhile)."""
        return self._run(["scontrol", "update", f"jobid={slurm_id}",
                          "ExcNodeList=" + ",".join(nodes)]).returncode == 0


# --- the execution backend ---------------------------------------------------------------

SLURM_REFUSED_EXIT = 127  # sbatch refused the job: it could not be started, as a missing shim
EXTERNAL_CANCEL_EXIT = 128 + signal.SIGTERM  # scancel from outside praxist_fs, without sacct
SUBMITTERS = 4  # sbatch calls at once, each on its own thread: a burst is not one by one
STOP_WAIT_SECONDS = 30.0  # a stop waits this long for Slurm to end the run's jobs (KillWait)


@dataclass
class Tracked:
    """One attempt's Slurm job as this coordinator knows it."""

    slurm_id: str
    name: str
    state: SlurmState | None = None  # the last squeue answer; None: unknown to Slurm
    polled: bool = False  # a squeue answer came after the submission (None is news then)
    final: FinalExit | None = None  # sacct's record, for an end without exit.json
    final_asked: bool = False  # sacct was asked (it may have no record: no jobcomp)
    asked: str | None = None  # "cancel", "stop": what praxist_fs asked of it
    kill_at: float | None = None  # scancel --signal=KILL then (monotonic)
    killed_at: float | None = None  # when KILL was sent (wall clock): its command's end
    node_told: bool = False  # its end was reported against its node (R-BUD-2), once
    running_since: float | None = None  # (monotonic) when a poll first said it runs
    node: str = ""  # where a poll last said it runs
    no_ready: str | None = None  # why it was cancelled: no READY within the launch timeout
    exclude: list[str] | None = None  # its --exclude as last set; None: unknown (a restart)


class SlurmBackend:
    """Attempts as Slurm jobs behind the execution-backend seam (backends/base.py).

    ``start`` submits (one sbatch, under the attempt's deterministic name) and reports
    the Slurm job id as the attempt's handle; the barrier is GO/ABORT files on the shared
    filesystem; what Slurm says comes from one batched squeue per poll, run on a worker
    thread (a down slurmctld blocks client commands ~9 s) whose answer wakes the loop
    through a pipe. No suspend: preemption requeues."""

    name: ClassVar[str] = "slurm"
    capabilities: ClassVar[Capabilities] = Capabilities(can_suspend=False, places_gpus=True)

    def __init__(self, layout: RunLayout, selector: selectors.BaseSelector,
                 lookup: Callable[[str], Job | None], policy: Policy,
                 nodes: Callable[[], NodeRegistry], client: SlurmClient | None = None) -> None:
        self.layout = layout
        self.lookup = lookup
        self.nodes = nodes  # the core's node registry (R-BUD-2), read-only
        self.probes: dict[str, str] = {}  # node -> the Slurm job id of its probe
        self.profiles = policy.profiles
        self.config = parse_slurm_config(policy.slurm, tuple(policy.profiles))
        self.client = client or SlurmClient(self.config, layout.root)
        self.cluster = os.environ.get("SLURM_CONF") or "default"
        self.tracked: dict[AttemptKey, Tracked] = {}
        self.unresolved: set[AttemptKey] = set()  # launched, sbatch's answer lost: find()
        self.spawned: list[SpawnAttempt] = []
        self.partition = self.config.partition or "default"  # as the node registry knows it
        self.probe_states: dict[str, SlurmState | None] = {}  # a probe's id -> its last state
        self.swept = False
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="praxist-slurm-poll")
        self._submitters = ThreadPoolExecutor(SUBMITTERS, thread_name_prefix="praxist-sbatch")
        self._scancels = ThreadPoolExecutor(1, thread_name_prefix="praxist-scancel")
        # attempts being submitted: what to, the submission, and the nodes it excludes
        self.submitting: dict[AttemptKey, tuple[SpawnAttempt, Future, list[str]]] = {}
        self._polling: Future | None = None
        self._next_poll = 0.0
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector = selector
        selector.register(self._wake_read, selectors.EVENT_READ, ("backend", ("poll",)))

    # -- launching ------------------------------------------------------------------

    def bind(self, effects: list[Effect]) -> list[Event]:
        return []  # nothing waits ahead of need: a Slurm job is submitted per attempt

    def roll_back(self) -> None:
        pass

    def prepare(self, stopped: bool) -> None:
        pass

    def start(self, effect: SpawnAttempt,
              environment: Callable[[], dict[str, str]]) -> list[Event]:
        """Write the attempt's spec and submit it on a submitter thread (a down slurmctld
        blocks sbatch for seconds: never the loop); its handle, or why Slurm refused it,
        comes through ``on_ready``. A submission whose answer was lost (sbatch timed
        out) is found by its name."""
        key = (effect.job_id, effect.attempt_id)
        if effect.uid is not None and effect.uid != os.geteuid():
            return [self._could_not_start(key, (
                f"backend slurm runs every command as the coordinator's user (uid "
                f"{os.geteuid()}); a job of uid {effect.uid} is not run for it"))]
        attempt_dir = self.layout.attempt_dir(*key)
        log_path = self.layout.log(*key)
        makedirs(attempt_dir)
        makedirs(log_path.parent)
        write_spec(attempt_dir, {
            "argv": list(effect.argv) if effect.argv else None, "command": effect.command,
            "cwd": effect.cwd or str(self.layout.root), "env": environment(),
            "log": str(log_path), "barrier_timeout_s": BARRIER_TIMEOUT_S})
        profile = {"name": effect.profile, **self.profiles[effect.profile].to_dict()}
        exclude = self.nodes().excluded()
        future = self._submitters.submit(self._submit, attempt_dir, key, profile,
                                         effect.metadata.get("eta_s"), exclude)
        self.submitting[key] = (effect, future, exclude)
        future.add_done_callback(lambda _: self._wake())
        return []

    def _submit(self, attempt_dir: Path, key: AttemptKey, profile: dict[str, Any],
                eta_s: float | None, exclude: list[str]) -> tuple[str, str]:
        """On a submitter thread: ("submitted", Slurm job id), ("refused", sbatch's
        message) or ("lost", why: sbatch did not answer and no job has its name)."""
        try:
            return "submitted", self.client.submit(attempt_dir, *key, profile, eta_s, exclude)
        except SlurmRefused as exc:
            unlink(attempt_dir / SPEC)
            return "refused", f"Slurm refused it: {exc}"
        except OSError as exc:  # its entry script could not be written: nothing submitted
            return "lost", f"could not submit it: {exc}"
        except SlurmUnavailable as exc:
            log.warning("attempt %s/%s: sbatch did not answer (%s); finding it by name",
                        *key, exc)
            try:
                found = self.client.find(self.client.job_name(*key))
            except SlurmUnavailable:
                found = None
            return ("submitted", found) if found else ("lost", f"sbatch did not answer: {exc}")

    def _submitted(self) -> list[Event]:
        """The submissions that came back: each attempt's handle, or why it did not start
        (ABORT, which the core's release writes, keeps a lost one from ever running)."""
        events: list[Event] = []
        for key, (effect, future, exclude) in list(self.submitting.items()):
            if not future.done():
                continue
            del self.submitting[key]
            verdict, said = future.result()
            if verdict == "submitted":
                reach("slurm.after_sbatch")  # submitted, its Slurm job id not yet journaled
                self.spawned.append(effect)
                events.append(self._track(key, said, self.client.job_name(*key), exclude))
            elif verdict == "refused":
                events.append(self._could_not_start(key, said))
            else:
                events.append(AttemptObserved(at=time.time(), job_id=key[0],
                                              attempt_id=key[1], alive=False, error=said))
        return events

    def _track(self, key: AttemptKey, slurm_id: str, name: str,
               exclude: list[str] | None = None) -> AttemptObserved:
        self.tracked[key] = Tracked(slurm_id=slurm_id, name=name, exclude=exclude)
        self._next_poll = min(self._next_poll, time.monotonic() + self.config.poll_pending_s)
        # ``ready``: Slurm's queue is the barrier. GO is journaled with the Slurm job id and
        # written before the job can start, so the shim finds it at once; READY, written
        # durably before the shim looks for GO, says whether the command may have run
        return AttemptObserved(at=time.time(), job_id=key[0], attempt_id=key[1], alive=True,
                               ready=True, handle=self._handle(key),
                               note=f"submitted to Slurm as job {slurm_id}")

    def _handle(self, key: AttemptKey, node: str | None = None) -> dict[str, Any]:
        tracked = self.tracked[key]
        handle = {"backend": "slurm", "cluster": self.cluster, "job_id": tracked.slurm_id,
                  "job_name": tracked.name}
        if node:
            handle["node"] = node
        return handle

    def _could_not_start(self, key: AttemptKey, error: str) -> AttemptObserved:
        return AttemptObserved(at=time.time(), job_id=key[0], attempt_id=key[1], alive=False,
                               exited=True, exit_code=SLURM_REFUSED_EXIT, error=error)

    def settle(self) -> None:
        """attempt.json for each attempt submitted, off the launch path."""
        for effect in self.spawned:
            describe(self.layout, effect)
        self.spawned.clear()

    def go(self, key: AttemptKey) -> None:
        """GO, unless ABORT released the barrier first: it stays released, and a GO file
        beside READY would read as a command that ran (``observe``). The attempt
        directory is made durable first: exit.json is fsynced into it on the node."""
        attempt_dir = self.layout.attempt_dir(*key)
        if not (attempt_dir / "ABORT").exists():
            make_durable(self.layout, [key])
            self.client.release(attempt_dir, go=True)

    def abort(self, key: AttemptKey) -> None:
        """ABORT in the attempt directory (a job that starts later reads it and leaves);
        one still pending in Slurm is cancelled too, so it does not wait for a node."""
        attempt_dir = self.layout.attempt_dir(*key)
        if attempt_dir.is_dir():
            self.client.release(attempt_dir, go=False)
        tracked = self.tracked.get(key)
        if tracked is not None and tracked.asked is None and (
                tracked.state is None or tracked.state.state in PENDING_STATES):
            tracked.asked = "cancel"
            self._scancel(tracked.slurm_id)

    def _scancel(self, slurm_id: str, signum: int | None = None) -> None:
        """scancel (plain, or ``--signal``) off the loop, one at a time in the order asked
        (TERM before KILL): a down slurmctld blocks a client command for about 9 s, and
        what the job did about it is seen by the next squeue anyway."""
        if signum is None:
            self._scancels.submit(self.client.cancel, slurm_id)
        else:
            self._scancels.submit(self.client.signal, slurm_id, signum)

    # -- observing ------------------------------------------------------------------

    def observe(self, job: Job, attempt: Attempt) -> AttemptObserved:
        """The attempt from its files (READY, exit.json) and Slurm's last word on it."""
        key = (job.job_id, attempt.attempt_id)
        attempt_dir = self.layout.attempt_dir(*key)
        ready = read_json(attempt_dir / "READY")
        ready = ready if isinstance(ready, dict) else None
        exit_record = read_json(attempt_dir / "exit.json")
        tracked = self.tracked.get(key)
        # the command may have run only if the shim wrote READY (durably) and then found GO
        base = dict(at=time.time(), job_id=key[0], attempt_id=key[1], ready=ready is not None,
                    go=ready is not None and (attempt_dir / "GO").exists())
        if tracked is None:  # never submitted, or its submission is under way or being found
            return AttemptObserved(alive=key in self.unresolved or key in self.submitting,
                                   **base)
        node = (ready or {}).get("slurm_node") or (tracked.state.nodes if tracked.state
                                                   else "") or (ready or {}).get("host") \
            or tracked.node
        base["handle"] = self._handle(key, node or None)
        code = exit_record.get("exit_code") if isinstance(exit_record, dict) else None
        where = f" on node {node}" if node else ""
        if tracked.no_ready is not None and code != 0:
            if tracked.state is not None and tracked.state.state in PENDING_STATES | \
                    RUNNING_STATES:
                return AttemptObserved(alive=True, note=f"attempt {key[1]}: {tracked.no_ready}"
                                       f"; cancelling Slurm job {tracked.slurm_id}", **base)
            return AttemptObserved(alive=False, exited=True, exit_code=INFRA_EXIT_CODE,
                                   error=f"{tracked.no_ready}{where}", **base)
        if isinstance(code, int) and not isinstance(code, bool):
            # A failure is read with Slurm's end of the job: TERM from a node going down
            # (NODE_FAIL) or from an outside scancel also leaves an exit.json (143)
            if code != 0 and (not tracked.polled or tracked.state is not None and
                              tracked.state.state in PENDING_STATES | RUNNING_STATES):
                self._next_poll = min(self._next_poll, time.monotonic())
                return AttemptObserved(alive=True, **base)
            verdict, reason = outcome(tracked.state, exit_record, tracked.asked)
            if verdict == "infrastructure":
                return AttemptObserved(alive=False, exited=True, exit_code=INFRA_EXIT_CODE,
                                       error=f"{reason}{where} (the command exited {code})",
                                       **base)
            return AttemptObserved(
                alive=False, exited=True, exit_code=code, signal=exit_record.get("signal"),
                ended_at=exit_record.get("ended_at"),
                error=exit_record.get("error") or (reason if verdict == "failed" else None),
                failure=task_report(attempt_dir / "failure.json"), **base)
        if not tracked.polled:
            return AttemptObserved(alive=True, **base)
        verdict, reason = outcome(tracked.state, None, tracked.asked, ready is not None)
        if verdict == "launching":
            return AttemptObserved(alive=True, note=f"attempt {key[1]}: {reason} (Slurm job "
                                   f"{tracked.slurm_id})", **base)
        if verdict == "running":
            return AttemptObserved(alive=True, note=f"attempt {key[1]} running{where} (Slurm "
                                   f"job {tracked.slurm_id})", **base)
        if verdict == "infrastructure":
            return AttemptObserved(alive=False, exited=True, exit_code=INFRA_EXIT_CODE,
                                   error=f"{reason}{where}", **base)
        if base["go"] and not tracked.final_asked:
            # it ran and left no exit.json (its shim was killed): Slurm's completion
            # record is asked once before its end is told
            self._next_poll = min(self._next_poll, time.monotonic())
            return AttemptObserved(alive=True, **base)
        if verdict == "failed" and (tracked.state is not None
                                    and tracked.state.state == "CANCELLED" or base["go"]):
            final = tracked.final
            code = final.exit_code if final is not None and final.signal == 0 else (
                128 + final.signal if final is not None else EXTERNAL_CANCEL_EXIT)
            return AttemptObserved(alive=False, exited=True, exit_code=code,
                                   signal=final.signal if final is not None and final.signal
                                   else None, error=f"{reason}{where}", **base)
        final = tracked.final
        if verdict in ("cancelled", "preempted") and base["go"] and final is not None \
                and final.signal:
            # KILLed with its shim after the grace: Slurm's completion record has the signal
            return AttemptObserved(
                alive=False, exited=True, signal=final.signal, exit_code=128 + final.signal,
                ended_at=tracked.killed_at,
                error=f"{reason}{where}: ended by Slurm ({final.state})", **base)
        # cancelled or preempted before it ran, lost, or ended before GO without running:
        # the core settles it by what it asked and whether GO was given
        return AttemptObserved(alive=False, error=f"{reason}{where}", **base)

    def _told(self, key: AttemptKey, seen: AttemptObserved) -> list[Event]:
        """``seen``, and once an attempt has ended what that says of its node (R-BUD-2):
        exit 75 or a node's failure blame it, any other exit of a command that ran clears
        it; an end before the command ran (cancelled, released, lost) says nothing."""
        tracked = self.tracked.get(key)
        node = (seen.handle or {}).get("node")
        if not seen.exited or tracked is None or tracked.node_told or not node or (
                tracked.state is not None and tracked.state.state == "PREEMPTED"):
            return [seen]  # Slurm preempting us for others is not the node's failure
        tracked.node_told = True
        try:
            told = NodeOutcome(at=seen.at, node=node, partition=self.partition,
                               infrastructure=seen.exit_code == INFRA_EXIT_CODE,
                               reason=seen.error or f"exit {seen.exit_code}")
        except ValueError as exc:  # a name Slurm could not mean as one node: not counted
            log.warning("attempt %s/%s: node %r not counted: %s", *key, node, exc)
            return [seen]
        return [seen, told]

    def adopt(self, job: Job, attempt: Attempt) -> list[Event]:
        """After a restart: the journaled Slurm job, or (a crash between sbatch and the
        journal) the job found by its name; none found means none ran (no GO)."""
        key = (job.job_id, attempt.attempt_id)
        if self._known(key, attempt):
            self._poll_now()
            return self._told(key, self.observe(job, attempt))
        return self._find(key)

    def _known(self, key: AttemptKey, attempt: Attempt) -> bool:
        """Track the Slurm job the journal names for the attempt, if it names one."""
        handle = attempt.handle
        if key not in self.tracked and handle is not None and handle.get("backend") == "slurm":
            self.tracked[key] = Tracked(slurm_id=str(handle["job_id"]),
                                        name=str(handle["job_name"]))
        return key in self.tracked

    def _find(self, key: AttemptKey) -> list[Event]:
        name = self.client.job_name(*key)
        try:
            slurm_id = self.client.find(name)
        except SlurmUnavailable as exc:
            log.warning("attempt %s/%s: cannot ask Slurm for job %s yet (%s)", *key, name, exc)
            self.unresolved.add(key)
            return []
        self.unresolved.discard(key)
        if slurm_id is None:
            return [AttemptObserved(at=time.time(), job_id=key[0], attempt_id=key[1],
                                    alive=False, error=f"no Slurm job named {name}")]
        return [self._track(key, slurm_id, name)]

    def _poll_now(self) -> None:
        """One squeue, waited for: at start, before the loop serves."""
        ids = [t.slurm_id for t in self.tracked.values()]
        try:
            states = self.client.poll(ids)
        except SlurmUnavailable as exc:
            log.warning("squeue did not answer at start (%s); asking again later", exc)
            return
        self._take(ids, states, {})

    def reconcile(self, in_flight: list[Job]) -> list[Event]:
        """Each in-flight attempt from its files and Slurm's last answer (READY and exit.json
        appear on the shared filesystem, with no pipe to tell); attempts whose submission
        is unresolved are looked for again; once, jobs of this run that the journal does
        not know (a launch record lost) are cancelled: they must never run."""
        events: list[Event] = []
        for key in sorted(self.unresolved):
            events += self._find(key)
        for job in in_flight:
            key = (job.job_id, job.current.attempt_id)
            if key in self.tracked:
                events += self._told(key, self.observe(job, job.current))
        if not self.swept and not self.unresolved and not self.submitting:
            # a submission under way has a job in Slurm before its id is tracked
            self._sweep_strays({t.slurm_id for t in self.tracked.values()})
        events += self._probe(time.time())
        self._kick(time.monotonic())
        return events

    def _probe(self, now: float) -> list[Event]:
        """R-BUD-2: an offline node whose cool-down is over gets one probe, a tiny job
        pinned to it (``--nodelist``): it runs once the node takes work again, and its
        end brings the node back online or restarts the cool-down. A probe the journal
        placed but Slurm does not know (a restart) is closed without a verdict."""
        registry = self.nodes()
        events: list[Event] = []
        for name, node in registry.nodes.items():
            if node.probe_placed is not None and name not in self.probes:
                found = self._probe_job(name)
                if found is None:
                    events.append(NodeOutcome(at=now, node=name, partition=self.partition,
                                              infrastructure=None, probe=True,
                                              reason="its probe was not found in Slurm"))
                else:
                    self.probes[name] = found
        for name in registry.probes_due(now):
            if self._submit_probe(name):
                events.append(NodeProbeStarted(at=now, node=name))
        for name, slurm_id in list(self.probes.items()):
            if slurm_id not in self.probe_states:
                continue  # not polled since it was placed
            state = self.probe_states.pop(slurm_id)
            if state is not None and state.state in PENDING_STATES | RUNNING_STATES:
                self.probe_states[slurm_id] = state
                continue
            del self.probes[name]
            events.append(NodeOutcome(
                at=now, node=name, partition=self.partition, probe=True,
                infrastructure=None if state is None else state.state != "COMPLETED",
                reason=f"probe: Slurm {state.state if state else 'purged it unseen'}"))
        return events

    def _probe_name(self, node: str) -> str:
        return f"pxprobe-{run_tag(self.layout.root)}-{_slurm_safe(node)}"  # never swept

    def _probe_job(self, node: str) -> str | None:
        try:
            return self.client.find(self._probe_name(node))
        except SlurmUnavailable:
            return None

    def _submit_probe(self, node: str) -> bool:
        try:
            self.probes[node] = self.client.probe(node, self._probe_name(node))
        except (SlurmRefused, SlurmUnavailable) as exc:
            log.warning("node %s: its probe could not be submitted: %s", node, exc)
            return False
        return True

    def _sweep_strays(self, known: set[str]) -> None:
        try:
            strays = [slurm_id for slurm_id, state in self.client.jobs_of_run().items()
                      if slurm_id not in known and state.state in PENDING_STATES | RUNNING_STATES]
        except SlurmUnavailable:
            return
        self.swept = True
        for slurm_id in strays:
            log.warning("Slurm job %s of this run has no record in the journal: cancelled",
                        slurm_id)
            self.client.cancel(slurm_id)

    def on_ready(self, token: Any) -> list[Event]:
        """A submitter or the poll thread answered: the handles of submitted attempts, and
        Slurm's states, with an observation of each attempt they concern."""
        try:
            while os.read(self._wake_read, 4096):
                pass
        except BlockingIOError:
            pass
        events = self._submitted()
        if self._polling is None or not self._polling.done():
            return events
        polling, self._polling = self._polling, None
        try:
            asked, states, finals, excluded = polling.result()
        except SlurmUnavailable as exc:
            log.warning("squeue did not answer (%s); asking again later", exc)
            return events
        for tracked in self.tracked.values():
            if tracked.slurm_id in excluded:
                tracked.exclude = excluded[tracked.slurm_id]
        self._take(asked, states, finals)
        self._end_those_without_ready(time.monotonic())
        for key in list(self.tracked):
            job = self.lookup(key[0])
            if job is not None and job.current is not None and \
                    job.current.attempt_id == key[1] and job.current.phase != "ended":
                events += self._told(key, self.observe(job, job.current))
            else:
                del self.tracked[key]  # settled: Slurm's word on it is no longer needed
        return events + self._probe(time.time())

    def _take(self, asked: list[str], states: dict[str, SlurmState],
              finals: dict[str, FinalExit | None]) -> None:
        """Slurm's answer about the ids ``asked``: one missing from it is unknown to Slurm.
        Jobs submitted after the question was put wait for the next answer."""
        asked_ids = set(asked)
        for slurm_id in self.probes.values():
            if slurm_id in asked_ids:  # None: unknown to Slurm (purged)
                self.probe_states[slurm_id] = states.get(slurm_id)
        for tracked in self.tracked.values():
            if tracked.slurm_id in asked_ids:
                tracked.state = states.get(tracked.slurm_id)
                tracked.polled = True
                if tracked.state is not None and tracked.state.state in RUNNING_STATES:
                    tracked.node = tracked.state.nodes or tracked.node
                    if tracked.running_since is None:
                        tracked.running_since = time.monotonic()
            if tracked.slurm_id in finals:
                tracked.final, tracked.final_asked = finals[tracked.slurm_id], True

    def _end_those_without_ready(self, now: float) -> None:
        """R-BUD-2: a job that Slurm has run for ``launch_timeout_s`` (counted from the first
        poll that saw it running, not from sbatch: it may wait in Slurm's queue for hours)
        and whose shim wrote no READY is ended, ABORT then scancel: its node cannot start
        our work (a hung shared filesystem, no interpreter). ``observe`` then reports it
        as an infrastructure failure, retried like exit 75 and counted against the node."""
        for key, tracked in self.tracked.items():
            if (tracked.no_ready is not None or tracked.asked is not None
                    or tracked.running_since is None or tracked.state is None
                    or tracked.state.state not in RUNNING_STATES
                    or now < tracked.running_since + self.config.launch_timeout_s):
                continue
            attempt_dir = self.layout.attempt_dir(*key)
            if read_json(attempt_dir / "READY") is not None:
                continue
            tracked.no_ready = (f"no READY within the launch timeout "
                                f"({self.config.launch_timeout_s:g} s after Slurm started it)")
            log.warning("attempt %s/%s: %s on node %s: cancelling Slurm job %s", *key,
                        tracked.no_ready, tracked.node, tracked.slurm_id)
            self.client.release(attempt_dir, go=False)  # a shim that starts late leaves
            self._scancel(tracked.slurm_id)
            self._next_poll = min(self._next_poll, now)

    def _kick(self, now: float) -> None:
        """Start the next squeue on the worker thread when it is due and none runs."""
        if self._polling is not None or now < self._next_poll or not (self.tracked or
                                                                        self.probes):
            return
        waiting = any(t.state is None or t.state.state in PENDING_STATES
                      for t in self.tracked.values())
        self._next_poll = now + (self.config.poll_pending_s if waiting
                                 else self.config.poll_running_s)
        ids = [t.slurm_id for t in self.tracked.values()] + list(self.probes.values())
        ended = [t.slurm_id for t in self.tracked.values() if not t.final_asked and (
            t.state is not None and t.state.state not in PENDING_STATES | RUNNING_STATES)]
        excluded = self.nodes().excluded()
        outdated = [t.slurm_id for t in self.tracked.values() if t.exclude != excluded
                    and t.state is not None and t.state.state == "PENDING"]
        self._polling = self._pool.submit(self._poll, ids, ended, outdated, excluded)
        self._polling.add_done_callback(lambda _: self._wake())

    def _poll(self, ids: list[str], ended: list[str], outdated: list[str],
              excluded: list[str]) -> tuple[list[str], dict, dict, dict]:
        """On the worker thread: the ``--exclude`` of pending jobs submitted before a node
        went offline or came back (R-BUD-2: ``outdated``) made ``excluded``, so that an
        attempt waits for no node that is back, nor goes to one that is out; then one
        squeue for every job, and sacct for those that ended."""
        updated = {slurm_id: excluded for slurm_id in outdated
                   if self.client.exclude(slurm_id, excluded)}
        states = self.client.poll(ids)
        return ids, states, {slurm_id: self.client.final_exit(slurm_id)
                             for slurm_id in ended}, updated

    def _wake(self) -> None:
        try:
            os.write(self._wake_write, b"p")
        except OSError:
            pass  # the loop is being closed

    # -- signalling ---------------------------------------------------------------

    def suspend(self, key: AttemptKey, by: str) -> None:
        raise NotImplementedError("backend slurm cannot suspend (the task file refuses it)")

    def resume(self, key: AttemptKey) -> None:
        raise NotImplementedError("backend slurm cannot suspend (the task file refuses it)")

    def end(self, key: AttemptKey, grace: float, suspended: bool) -> None:
        """Cancel or evict: ABORT if it never got GO, else TERM to every process of the
        job (the shim forwards it to the command's group and records the exit), and KILL
        once ``grace`` has passed."""
        tracked = self.tracked.get(key)
        if tracked is None or not (self.layout.attempt_dir(*key) / "READY").exists():
            self.abort(key)  # its shim has not started: ABORT wins over GO, and it leaves
            return
        tracked.asked = "cancel"
        self._scancel(tracked.slurm_id, signal.SIGTERM)
        tracked.kill_at = time.monotonic() + grace

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """Stop the run: ABORT for those at the barrier, scancel for all (Slurm sends TERM,
        then KILL after its KillWait), and wait until Slurm has ended them."""
        ids = []
        for key in keys:  # a stop a crashed coordinator left is carried out before adoption
            if (job := self.lookup(key[0])) is not None and job.current is not None:
                self._known(key, job.current)
            self.abort(key)
            if (tracked := self.tracked.get(key)) is not None:
                tracked.asked = "stop"
                ids.append(tracked.slurm_id)
        for slurm_id in ids:
            self.client.cancel(slurm_id)
        deadline = time.monotonic() + STOP_WAIT_SECONDS
        while ids and time.monotonic() < deadline:
            try:
                states = self.client.poll(ids)
            except SlurmUnavailable:
                break
            if all(state.state not in PENDING_STATES | RUNNING_STATES
                   for state in states.values()):
                self._take(ids, states, {slurm_id: self.client.final_exit(slurm_id)
                                         for slurm_id in ids})
                break
            self._take(ids, states, {})
            time.sleep(0.2)
        events: list[Event] = []
        for key in keys:
            job = self.lookup(key[0])
            if job is not None and job.current is not None and job.current.attempt_id == key[1]:
                events += self._told(key, self.observe(job, job.current))
        return events

    def next_timer(self) -> float:
        kills = [t.kill_at for t in self.tracked.values() if t.kill_at is not None]
        polls = [self._next_poll] if (self.tracked or self.probes) and \
            self._polling is None else []
        return min(kills + polls, default=math.inf)

    def on_timer(self, now: float) -> list[Event]:
        for key, tracked in self.tracked.items():
            if tracked.kill_at is not None and now >= tracked.kill_at:
                log.warning("attempt %s/%s outlived its grace: KILL (Slurm job %s)", *key,
                            tracked.slurm_id)
                self._scancel(tracked.slurm_id, signal.SIGKILL)
                tracked.kill_at, tracked.killed_at = None, time.time()
        self._kick(now)
        return []

    def close(self) -> None:
        """The coordinator leaves; the jobs stay in Slurm, to be adopted by the next one."""
        if self._wake_read < 0:
            return  # closed already
        self._submitters.shutdown(wait=True)  # a submission under way is found by name later
        self._scancels.shutdown(wait=True)  # what was asked is done
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.selector.unregister(self._wake_read)
        os.close(self._wake_read)
        os.close(self._wake_write)
        self._wake_read = self._wake_write = -1
