"""Slurm's side of the Slurm backend (R-DIST-1): the names, sbatch arguments and parsing
of Slurm's answers (pure), the mapping of Slurm's states to an attempt's outcome, and
``SlurmClient``, which runs Slurm's commands (sbatch, squeue, scancel, sacct, scontrol)
with the coordinator's environment (``SLURM_CONF`` selects the cluster) and a timeout:
a down slurmctld blocks client commands for about 9 s, so call them off the event loop.
Nothing a command prints makes this module raise anything but the two errors below.
The backend that drives it is backend.py; docs/OPERATIONS.md, *Running on Slurm*.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from praxist_fs.adapters.fsio import makedirs, write_atomic, write_json
from praxist_fs.backends.shim_command import ATTEMPT_DIR_MODE
from praxist_fs.backends.slurm.config import SLURM_PATH, SlurmConfig
from praxist_fs.errors import PraxistError

log = logging.getLogger("praxist_fs")
ENTRY = "slurm-entry.sh"  # the batch script, in the attempt directory
SPEC = "spec.json"  # what the Slurm-mode shim runs (0600): the local spec's keys, as JSON
PACKAGE_ROOT = Path(__file__).resolve().parents[3]  # the directory praxist_fs is in
SHIM_BOOTSTRAP = ("import sys; sys.path[0] = %r; from praxist_fs.backends.slurm import shim; "
                  "sys.exit(shim.main())" % str(PACKAGE_ROOT))
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


def slurm_safe(text: str) -> str:
    """Job ids and attempt ids as Slurm and squeue's ``|``-separated output can carry."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def job_name(run_dir: Path, job_id: str, attempt_id: str) -> str:
    """``<job>-<attempt>-px<run8>``: the same attempt always gets the same name, which is
    how a job is found again after a crash between sbatch and the journal; it starts
    with the job id, which starts with the tag, so that plain ``squeue`` (8 characters
    of name) shows what a person submitted, and it ends with the run's mark."""
    return f"{slurm_safe(job_id)}-{slurm_safe(attempt_id)}{run_suffix(run_dir)}"


def run_suffix(run_dir: Path) -> str:
    """How every job name of the run ends."""
    return f"-px{run_tag(run_dir)}"


def legacy_job_name(run_dir: Path, job_id: str, attempt_id: str) -> str:
    """``px-<run8>-<job>-<attempt>``: the name versions before issue 28 gave, still
    looked for (a job submitted before an upgrade is the run's all the same)."""
    return f"px-{run_tag(run_dir)}-{slurm_safe(job_id)}-{slurm_safe(attempt_id)}"


def of_run(run_dir: Path, name: str) -> bool:
    """Whether ``name`` is one of the run's job names (either spelling); a node's probe,
    ``pxprobe-<run8>-<node>``, is not."""
    return name.endswith(run_suffix(run_dir)) or name.startswith(f"px-{run_tag(run_dir)}-")


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


def job_options(config: SlurmConfig, profile: str | None,
                requested: dict[str, Any] | None) -> dict[str, Any]:
    """An attempt's per-job options (core/slurm_options.py's keys, R-DIST-2): its
    request's own over its profile's defaults (``resources.<profile>``) over the run-wide
    keys; ``options`` are the profile's then the request's (sbatch takes the last)."""
    resources = config.for_profile(profile)
    merged: dict[str, Any] = {"partition": config.partition, "account": config.account,
                              "qos": config.qos, "warning_seconds": config.warning_seconds,
                              "mem_mb": resources.mem_mb}
    for layer in (resources.job, requested or {}):
        merged.update({key: value for key, value in layer.items() if key != "options"})
    merged["options"] = [*resources.job.get("options", ()),
                         *(requested or {}).get("options", ())]
    return {key: value for key, value in merged.items() if value is not None}


def sbatch_argv(config: SlurmConfig, name: str, comment: str, attempt_dir: Path,
                profile: dict[str, Any], eta_seconds: float | None,
                exclude: list[str], requested: dict[str, Any] | None = None,
                hold: bool = False) -> list[str]:
    """The one sbatch command of an attempt (``hold``: held in Slurm until released,
    while no node has passed its first probe). ``profile``: Profile.to_dict() plus its
    ``name``; ``requested``: the request's own Slurm options. ``--no-requeue``: a
    requeued batch script would run the command twice. A time limit comes with a warning
    signal to the batch shell (the shim, which passes it on to the command) the job's
    ``warning_seconds`` before it."""
    resources = config.for_profile(profile.get("name"))
    job = job_options(config, profile.get("name"), requested)
    argv = ["sbatch", "--parsable", "--no-requeue", "-J", name, "--comment", comment,
            "-D", str(attempt_dir), "-o", str(attempt_dir / "slurm.out"), "--open-mode=append",
            *(gpu_request(profile, config.gpu_shards) if tasks(job) is None else
              process_request(job, profile)),
            "-c", str(resources.cpus), f"--mem={job['mem_mb']}M"]
    minutes = job.get("time_limit_minutes") or time_limit(config, eta_seconds)
    if minutes is not None:
        argv += ["-t", str(minutes)]
        if job["warning_seconds"]:
            argv.append(f"--signal=B:{config.warning_signal}@{job['warning_seconds']}")
    for option, key in (("-p", "partition"), ("-A", "account"), ("--qos", "qos"),
                        ("--constraint", "constraint")):
        if key in job:
            argv += [option, job[key]]
    argv += [*config.extra_args, *job["options"]]
    if exclude:
        argv.append("--exclude=" + ",".join(sorted(set(exclude))))
    if hold:
        argv.append("--hold")
    return [*argv, str(attempt_dir / ENTRY), str(attempt_dir)]


def tasks(job: dict[str, Any]) -> dict[str, int] | None:
    """R-DIST-3: how a job of several processes is laid out (``nodes``, ``tasks_per_node``),
    or None for the one process of an ordinary attempt."""
    if not {"nodes", "tasks_per_node", "gpus_per_node"} & job.keys():
        return None
    return {"nodes": job.get("nodes", 1), "tasks_per_node": job.get("tasks_per_node", 1)}


def process_request(job: dict[str, Any], profile: dict[str, Any]) -> list[str]:
    """The allocation of a job of several processes: ``--nodes``, ``--ntasks-per-node``,
    and ``--gpus-per-node`` (the job's own, else its profile's ``gpu_count`` on each
    node); Slurm starts the batch script on the first node, the shim the tasks."""
    layout = tasks(job)
    argv = [f"--nodes={layout['nodes']}", f"--ntasks-per-node={layout['tasks_per_node']}"]
    per_node = job.get("gpus_per_node", int(profile.get("gpu_count") or 0)
                       if profile.get("accelerator") == "gpu" else 0)
    return argv + ([f"--gpus-per-node={per_node}"] if per_node else [])


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
    - CANCELLED -> ``cancelled`` "cancelled in Slurm while pending" if its shim never
      wrote READY (``ready`` False: the command never ran), else ``failed`` "cancelled
      outside praxist_fs";
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
        return ("failed", "cancelled outside praxist_fs") if ready or code is not None else (
            "cancelled", "cancelled in Slurm while pending")
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
            "slurm/shim.py)\nexec %s -S -c %s \"$@\"\n" % (
                shlex.quote(python), shlex.quote(SHIM_BOOTSTRAP))).encode()


# --- running Slurm's commands ------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    """A command's end: ``returncode`` None when it did not finish (timeout, not found)."""

    returncode: int | None
    stdout: str
    stderr: str


Runner = Callable[[list[str], float], Completed]


def run_command(argv: list[str], timeout: float,
                env: dict[str, str] | None = None) -> Completed:
    """``argv`` with the coordinator's environment (SLURM_CONF, PATH), or ``env``, never
    raising."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout, check=False, env=env)
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
               eta_seconds: float | None, exclude: list[str],
               requested: dict[str, Any] | None = None, hold: bool = False) -> str:
        """Submit the attempt (its spec.json written already), with the request's own Slurm
        options (``requested``); its Slurm job id. Raises
        SlurmRefused with sbatch's message, or SlurmUnavailable when sbatch did not answer
        (the job may exist: find() it by name before submitting again)."""
        attempt_dir = Path(os.path.abspath(attempt_dir))
        makedirs(attempt_dir, mode=ATTEMPT_DIR_MODE)
        write_atomic(attempt_dir / ENTRY, entry_script(self.config.python), mode=0o755)
        comment = f"praxist:{run_tag(self.run_dir)}:{job_id}:{attempt_id}"
        return self._job_id(self._run(sbatch_argv(
            self.config, self.job_name(job_id, attempt_id), comment, attempt_dir, profile,
            eta_seconds, exclude, requested, hold)))

    def probe(self, node: str, name: str) -> str:
        """A tiny job pinned to ``node`` (R-BUD-2's probe): it runs ``true`` once the node
        takes work. Its Slurm job id; SlurmRefused or SlurmUnavailable as ``submit``."""
        argv = ["sbatch", "--parsable", "--no-requeue", "-J", name, f"--nodelist={node}",
                "-c", "1", "--mem=16M", "-t", "5", "-o", "/dev/null", "--wrap", "true"]
        if self.config.partition is not None:
            argv[1:1] = ["-p", self.config.partition]
        return self._job_id(self._run(argv))

    def list_nodes(self) -> list[str]:
        """The nodes of the run's partition (all, without one), as sinfo names them."""
        argv = ["sinfo", "-h", "-N", "-o", "%N"]
        if self.config.partition is not None:
            argv += ["-p", self.config.partition]
        done = self._run(argv)
        if done.returncode != 0:
            raise SlurmUnavailable(done.stderr.strip() or "sinfo failed")
        return sorted(set(done.stdout.split()))

    def release_hold(self, slurm_id: str) -> bool:
        """Let a job submitted ``--hold`` run; False if scontrol failed."""
        return self._run(["scontrol", "release", slurm_id]).returncode == 0

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

    def find(self, *names: str) -> tuple[str, str] | None:
        """The Slurm job id and name of the job named one of ``names`` (the newest, should
        there be more), or None: how a crash between sbatch and the journal is resolved.
        By name, never by id alone: Slurm reuses ids once its state is wiped."""
        done = self._run(["squeue", "--me", "--states=all", "-h", "-n", ",".join(names),
                          "-o", "%i|%j|%T"])
        if done.returncode != 0:
            raise SlurmUnavailable(done.stderr.strip() or "squeue failed")
        found = [(state.job_id, state.name) for state in parse_squeue(done.stdout).values()
                 if state.name in names]
        return max(found, key=lambda each: int(each[0])) if found else None

    def find_attempt(self, job_id: str, attempt_id: str) -> tuple[str, str] | None:
        """The attempt's Slurm job id and name (``find``), under either spelling."""
        return self.find(self.job_name(job_id, attempt_id),
                         legacy_job_name(self.run_dir, job_id, attempt_id))

    def jobs_of_run(self) -> dict[str, SlurmState]:
        """Every job of this run Slurm still knows (``of_run``), by id: what a stop sweeps
        after its cancels, and what a restart holds against its journal."""
        done = self._run(["squeue", "--me", "--states=all", "-h", "-o", "%i|%j|%T|%r|%N"])
        if done.returncode != 0:
            raise SlurmUnavailable(done.stderr.strip() or "squeue failed")
        return {job: state for job, state in parse_squeue(done.stdout).items()
                if of_run(self.run_dir, state.name)}

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

    def end_run(self, known: list[str], deadline: float,
                sleep: Callable[[float], None] = time.sleep
                ) -> tuple[list[str], dict[str, SlurmState] | None]:
        """A stop's end of the run in Slurm: scancel the jobs ``known`` (the ids the journal
        names) and every other job of the run still pending or running (found by name: a
        submission the journal never recorded), then wait until Slurm has ended them all
        or ``deadline`` (monotonic) has passed. The ids cancelled, and Slurm's last answer
        about them (an id missing from it is unknown to Slurm; None if squeue never
        answered). SlurmUnavailable if squeue did not answer the search by
        name: then nothing is known of the jobs the journal does not name."""
        active = PENDING_STATES | RUNNING_STATES
        ids = list(dict.fromkeys([*known, *(
            slurm_id for slurm_id, state in self.jobs_of_run().items()
            if state.state in active)]))
        for slurm_id in ids:
            self.cancel(slurm_id)
        answer: dict[str, SlurmState] | None = None
        while ids:
            try:
                answer = self.poll(ids)
            except SlurmUnavailable:
                pass  # asked again until the deadline
            if answer is not None and all(state.state not in active
                                          for state in answer.values()):
                break
            if time.monotonic() >= deadline:
                break
            sleep(0.2)
        return ids, answer

    def test_only(self, partition: str | None, account: str | None,
                  qos: str | None) -> str | None:
        """Slurm's own words if it would refuse a job in ``partition`` under ``account`` and
        ``qos`` (``sbatch --test-only``: nothing is submitted), None if it would take one.
        SlurmUnavailable when sbatch did not answer, or could not reach slurmctld."""
        argv = ["sbatch", "--test-only", "-c", "1", "--mem=1M", "-o", "/dev/null"]
        for option, value in (("-p", partition), ("-A", account), ("--qos", qos)):
            if value is not None:
                argv += [option, value]
        done = self._run([*argv, "--wrap", "true"])
        if done.returncode is None or "Unable to contact slurm controller" in done.stderr:
            raise SlurmUnavailable(done.stderr.strip())
        return None if done.returncode == 0 else (
            done.stderr.strip() or f"sbatch --test-only exited {done.returncode}")

    def exclude(self, slurm_id: str, nodes: list[str]) -> bool:
        """Make a pending job's ``--exclude`` ``nodes`` (none: it may go anywhere again);
        False if scontrol failed (the job may have started meanwhile)."""
        return self._run(["scontrol", "update", f"jobid={slurm_id}",
                          "ExcNodeList=" + ",".join(nodes)]).returncode == 0


def refused_placements(config: SlurmConfig, run_dir: Path,
                       runner: Runner = run_command) -> list[str]:
    """What Slurm says of the task file's partition, account and QOS, run-wide and as each
    profile's defaults set them (``sbatch --test-only`` once per combination), at serve's
    start: one line per refusal, naming the key and giving Slurm's own words, so that a
    wrong partition is refused there, not at every job's sbatch. A Slurm that does not
    answer refuses nothing (it may come back): that is logged."""
    client = SlurmClient(config, run_dir, runner)
    asked, refusals = set(), []
    placements = [(SLURM_PATH, {})] + [(f"{SLURM_PATH}.resources.{name}", resources.job)
                                      for name, resources in sorted(config.resources.items())]
    for path, job in placements:
        combination = tuple(job.get(key, getattr(config, key))
                            for key in ("partition", "account", "qos"))
        if combination in asked:
            continue
        asked.add(combination)
        try:
            refused = client.test_only(*combination)
        except SlurmUnavailable as exc:
            log.warning("Slurm did not answer sbatch --test-only (%s); the task's partition "
                        "and account are checked at each job's sbatch", exc)
            return []
        if refused is not None:
            named = ", ".join(f"{key} {value}" for key, value in zip(
                ("partition", "account", "qos"), combination) if value is not None)
            refusals.append(f"{path}: Slurm refuses {named or 'its defaults'}: "
                            + " ".join(line.strip() for line in refused.splitlines()))
    return refusals
