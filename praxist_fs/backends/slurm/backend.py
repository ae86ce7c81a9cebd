"""The Slurm backend: each attempt is one Slurm job running the Slurm-mode shim (R-DIST-1).

The run directory stays the source of truth: Slurm is asked to run a batch script
(``sbatch --parsable --no-requeue``) under a deterministic job name, the barrier and
the exit are files in the attempt directory on the shared filesystem
(slurm/shim.py), and Slurm's own view (``squeue``, ``sacct -c``) only says where a
job is and why it ended when the files cannot. Slurm's commands run through
``SlurmClient`` (slurm/client.py), off the event loop; what it knows of each attempt's
job and of each node's probe is in slurm/jobs.py. Nothing a command prints, nor a
file a peer wrote, makes this module raise. See docs/OPERATIONS.md, *Running on Slurm*.
"""

from __future__ import annotations

import logging
import math
import os
import selectors
import signal
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from praxist_fs.adapters.crashpoints import reach
from praxist_fs.adapters.fsio import makedirs, read_json, unlink
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.taskreports import task_report
from praxist_fs.adapters.wakepipe import drain
from praxist_fs.backends.attempt_dir import BARRIER_TIMEOUT_S, describe, make_durable
from praxist_fs.backends.base import AttemptKey, RunContext
from praxist_fs.backends.shim_command import ATTEMPT_DIR_MODE
from praxist_fs.backends.slurm.client import (
    PENDING_STATES, RUNNING_STATES, SPEC, FinalExit, SlurmClient, SlurmRefused, SlurmState,
    SlurmUnavailable, job_options, outcome, refused_placements, tasks, write_spec,
)
from praxist_fs.backends.slurm.config import parse_slurm_config
from praxist_fs.backends.slurm.doorbell import open_doorbell
from praxist_fs.backends.slurm.jobs import NodeProbes, Tracked, warning_reason
from praxist_fs.backends.slurm.new_nodes import NewNodes
from praxist_fs.backends.slurm.stop import record_cluster
from praxist_fs.core.budget import INFRA_EXIT_CODE
from praxist_fs.core.capabilities import Capabilities
from praxist_fs.core.effects import Effect, SpawnAttempt
from praxist_fs.core.events import AttemptObserved, Event, NodeOutcome

if TYPE_CHECKING:
    from praxist_fs.core.model import Attempt, Job
    from praxist_fs.core.nodes import NodeRegistry
    from praxist_fs.core.policy import Policy

log = logging.getLogger("praxist_fs")

# --- the execution backend ---------------------------------------------------------------

SLURM_REFUSED_EXIT = 127  # sbatch refused the job: it could not be started, as a missing shim
EXTERNAL_CANCEL_EXIT = 128 + signal.SIGTERM  # scancel from outside praxist_fs, without sacct
SUBMITTERS = 4  # sbatch calls at once, each on its own thread: a burst is not one by one
STOP_WAIT_SECONDS = 30.0  # a stop waits this long for Slurm to end the run's jobs (KillWait)
# a command whose node went down under it (NODE_FAIL) was TERMed: its shim may still be
# writing exit.json, which has the command's own exit; its end waits this long for it
NODE_FAIL_EXIT_WAIT_SECONDS = 5.0


def refused_by_slurm(policy: Policy, run_dir: Path) -> list[str]:
    """R-DIST-2: a partition, account or QOS Slurm refuses (``sbatch --test-only``), asked
    before the coordinator starts (backends/registry.py, ``preflight``)."""
    return refused_placements(parse_slurm_config(policy.slurm, tuple(policy.profiles)),
                              run_dir)


class SlurmBackend:
    """Attempts as Slurm jobs behind the execution-backend seam (backends/base.py).

    ``start`` submits (one sbatch, under the attempt's deterministic name) and reports
    the Slurm job id as the attempt's handle; the barrier is GO/ABORT files on the shared
    filesystem; what Slurm says comes from one batched squeue per poll, run on a worker
    thread (a down slurmctld blocks client commands ~9 s) whose answer wakes the loop
    through a pipe. No suspend: preemption requeues."""

    name: ClassVar[str] = "slurm"
    capabilities: ClassVar[Capabilities] = Capabilities(
        can_suspend=False, places_gpus=True, on_this_host=False, queues_attempts=True,
        takes_slurm_options=True)

    def __init__(self, layout: RunLayout, selector: selectors.BaseSelector,
                 lookup: Callable[[str], Job | None], policy: Policy,
                 nodes: Callable[[], NodeRegistry],
                 environment: Callable[[SpawnAttempt], dict[str, str]],
                 client: SlurmClient | None = None) -> None:
        self.layout = layout
        self.lookup = lookup
        self.environment = environment  # a launch's, secrets revealed: built at its submission
        self.nodes = nodes  # the core's node registry (R-BUD-2), read-only
        self.profiles = policy.profiles
        self.config = parse_slurm_config(policy.slurm, tuple(policy.profiles))
        self.client = client or SlurmClient(self.config, layout.root)
        self.cluster = os.environ.get("SLURM_CONF") or "default"
        self.tracked: dict[AttemptKey, Tracked] = {}
        self.unresolved: set[AttemptKey] = set()  # launched, sbatch's answer lost: find()
        self.spawned: list[SpawnAttempt] = []
        self.partition = self.config.partition or "default"  # as the node registry knows it
        self.swept = False
        self.cluster_recorded = False
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
        self.doorbell = open_doorbell(self.config.notify_host)  # READY, exit.json: at once
        self.node_probes = NodeProbes(self.client, layout.root, self.partition, nodes)
        self.new_nodes = NewNodes(self.client, self.partition, self.config.probe_new_nodes,
                                  self._pool, self._wake)
        self.new_nodes.ask()  # before the first job, if asked: a probe before its first
        if self.doorbell is not None:
            selector.register(self.doorbell, selectors.EVENT_READ, ("backend", ("rung",)))

    @classmethod
    def made(cls, context: RunContext) -> SlurmBackend:
        return cls(context.layout, context.selector, context.lookup, context.policy,
                   context.nodes, context.environment)

    # -- launching ------------------------------------------------------------------

    def bind(self, effects: list[Effect]) -> list[Event]:
        return []  # nothing waits ahead of need: a Slurm job is submitted per attempt

    def roll_back(self) -> None:
        pass

    def prepare(self, stopped: bool) -> None:
        pass

    def start(self, effect: SpawnAttempt) -> list[Event]:
        """Write the attempt's spec and submit it on a submitter thread (a down slurmctld
        blocks sbatch for seconds: never the loop); its handle, or why Slurm refused it,
        comes through ``on_ready``. A submission whose answer was lost (sbatch timed
        out) is found by its name."""
        key = (effect.job_id, effect.attempt_id)
        if effect.uid is not None and effect.uid != os.geteuid():
            return [self._could_not_start(key, (
                f"backend slurm runs every command as the coordinator's user (uid "
                f"{os.geteuid()}); a job of uid {effect.uid} is not run for it"))]
        if not self.cluster_recorded:  # for a stop that finds no coordinator (slurm/stop.py)
            record_cluster(self.layout, self.config)
            self.cluster_recorded = True
        attempt_dir = self.layout.attempt_dir(*key)
        log_path = self.layout.log(*key)
        makedirs(attempt_dir, mode=ATTEMPT_DIR_MODE)
        makedirs(log_path.parent)
        job = self.lookup(effect.job_id)
        requested = job.request.slurm if job is not None else None
        write_spec(attempt_dir, {
            "argv": list(effect.argv) if effect.argv else None, "command": effect.command,
            "cwd": effect.cwd or str(self.layout.root), "env": self.environment(effect),
            "log": str(log_path), "barrier_timeout_s": BARRIER_TIMEOUT_S,
            "notify": self.doorbell.address if self.doorbell is not None else None,
            "tasks": tasks(job_options(self.config, effect.profile, requested))})
        profile = {"name": effect.profile, **self.profiles[effect.profile].to_dict()}
        hold = self.new_nodes.hold(self.nodes())  # no exclusion then: it could be all
        exclude = [] if hold else self.nodes().excluded()
        future = self._submitters.submit(self._submit, attempt_dir, key, profile,
                                         effect.metadata.get("eta_s"), exclude, requested,
                                         hold)
        self.submitting[key] = (effect, future, exclude)
        future.add_done_callback(lambda _: self._wake())
        return []

    def _submit(self, attempt_dir: Path, key: AttemptKey, profile: dict[str, Any],
                eta_s: float | None, exclude: list[str],
                requested: dict[str, Any] | None, hold: bool) -> tuple[str, str]:
        """On a submitter thread: ("submitted", Slurm job id), ("refused", sbatch's
        message) or ("lost", why: sbatch did not answer and no job has its name)."""
        try:
            return "submitted", self.client.submit(attempt_dir, *key, profile, eta_s, exclude,
                                                   requested, hold)
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
            return ("submitted", found[0]) if found else (
                "lost", f"sbatch did not answer: {exc}")

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

    def _handle(self, key: AttemptKey, node: str | None = None,
                ready: dict[str, Any] | None = None) -> dict[str, Any]:
        """The attempt's Slurm job; once it runs, ``node``; once its shim wrote READY, when
        that was (``started_at``: its command's start) and the GPUs Slurm gave it."""
        tracked = self.tracked[key]
        handle = {"backend": "slurm", "cluster": self.cluster, "job_id": tracked.slurm_id,
                  "job_name": tracked.name}
        if node:
            handle["node"] = node
        if ready is not None:
            handle["started_at"] = ready.get("at")
            handle["gpus"] = [gpu for gpu in str(ready.get("gpus") or "").split(",") if gpu]
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
        if tracked is None:  # never submitted, its submission under way or being found, or
            # settled and forgotten (its end, read now by someone else, is its exit.json's)
            code = exit_record.get("exit_code") if isinstance(exit_record, dict) else None
            if isinstance(code, int) and not isinstance(code, bool):
                return AttemptObserved(alive=False, exited=True, exit_code=code,
                                       signal=exit_record.get("signal"),
                                       ended_at=exit_record.get("ended_at"), **base)
            return AttemptObserved(alive=key in self.unresolved or key in self.submitting,
                                   **base)
        node = (ready or {}).get("slurm_node") or (tracked.state.nodes if tracked.state
                                                   else "") or (ready or {}).get("host") \
            or tracked.node
        base["handle"] = self._handle(key, node or None, ready)
        code = exit_record.get("exit_code") if isinstance(exit_record, dict) else None
        where = f" on node {node}" if node else ""
        if tracked.no_ready is not None and code != 0:
            if tracked.state is not None and tracked.state.state in PENDING_STATES | \
                    RUNNING_STATES:
                return AttemptObserved(alive=True, note=f"attempt {key[1]}: {tracked.no_ready}"
                                       f"; cancelling Slurm job {tracked.slurm_id}", **base)
            return AttemptObserved(alive=False, exited=code is not None, exit_code=code,
                                   infrastructure=f"{tracked.no_ready}{where}", **base)
        if isinstance(code, int) and not isinstance(code, bool):
            # A failure is read with Slurm's end of the job: TERM from a node going down
            # (NODE_FAIL) or from an outside scancel also leaves an exit.json (143)
            if code != 0 and (not tracked.polled or tracked.state is not None and
                              tracked.state.state in PENDING_STATES | RUNNING_STATES):
                self._next_poll = min(self._next_poll, time.monotonic())
                return AttemptObserved(alive=True, **base)
            verdict, reason = outcome(tracked.state, exit_record, tracked.asked)
            if verdict == "infrastructure":  # the command's own exit, and why it ended
                return AttemptObserved(alive=False, exited=True, exit_code=code,
                                       signal=exit_record.get("signal"),
                                       ended_at=exit_record.get("ended_at"),
                                       infrastructure=f"{reason}{where}", **base)
            return AttemptObserved(
                alive=False, exited=True, exit_code=code, signal=exit_record.get("signal"),
                ended_at=exit_record.get("ended_at"),
                error=exit_record.get("error") or (reason if verdict == "failed" else None)
                or (warning_reason(exit_record) if code else None),
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
        if verdict == "infrastructure" and base["go"]:  # no exit.json yet: a while for it
            now = time.monotonic()
            tracked.node_failed = tracked.node_failed or now
            if now - tracked.node_failed < NODE_FAIL_EXIT_WAIT_SECONDS:
                return AttemptObserved(alive=True, **base)
        if verdict == "infrastructure":  # its command left no exit: none is known
            return AttemptObserved(alive=False, infrastructure=f"{reason}{where}", **base)
        if verdict == "cancelled" and tracked.asked is None:  # scancel before it started
            return AttemptObserved(alive=False, cancelled=reason, **base)
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
        ended = seen.exited or seen.infrastructure is not None
        if not ended or tracked is None or tracked.node_told or not node or (
                tracked.state is not None and tracked.state.state == "PREEMPTED"):
            return [seen]  # Slurm preempting us for others is not the node's failure
        tracked.node_told = True
        try:
            told = NodeOutcome(at=seen.at, node=node, partition=self.partition,
                               infrastructure=seen.infrastructure is not None
                               or seen.exit_code == INFRA_EXIT_CODE,
                               reason=seen.infrastructure or seen.error
                               or f"exit {seen.exit_code}")
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
            found = self.client.find_attempt(*key)
        except SlurmUnavailable as exc:
            log.warning("attempt %s/%s: cannot ask Slurm for job %s yet (%s)", *key, name, exc)
            self.unresolved.add(key)
            return []
        self.unresolved.discard(key)
        if found is None:
            return [AttemptObserved(at=time.time(), job_id=key[0], attempt_id=key[1],
                                    alive=False, error=f"no Slurm job named {name}")]
        return [self._track(key, *found)]

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
        self.new_nodes.ask()  # again, if sinfo did not answer
        events += self.node_probes.due(time.time())
        self._kick(time.monotonic())
        return events

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
        Slurm's states, with an observation of each attempt they concern. Or a shim rang
        the doorbell: its attempt is looked at now."""
        if token == ("rung",):
            return self._rung()
        drain(self._wake_read)
        events = self._submitted() + self.new_nodes.answered(self.nodes())
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
        return events + self.node_probes.due(time.time())

    def _rung(self) -> list[Event]:
        """The attempts whose shims rang (READY or exit.json written), observed from their
        files now; a ring for an attempt not tracked here is ignored (a hint, not a fact).
        An end that needs Slurm's word (an exit but 0) brings the next squeue forward."""
        events: list[Event] = []
        for key in sorted(self.doorbell.rung()):
            job = self.lookup(key[0])
            if key in self.tracked and job is not None and job.current is not None and \
                    job.current.attempt_id == key[1] and job.current.phase != "ended":
                events += self._told(key, self.observe(job, job.current))
        return events

    def _take(self, asked: list[str], states: dict[str, SlurmState],
              finals: dict[str, FinalExit | None]) -> None:
        """Slurm's answer about the ids ``asked``: one missing from it is unknown to Slurm.
        Jobs submitted after the question was put wait for the next answer."""
        asked_ids = set(asked)
        self.node_probes.take(asked_ids, states)
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
        if self._polling is not None or now < self._next_poll or not (
                self.tracked or self.node_probes.probes):
            return
        waiting = any(t.state is None or t.state.state in PENDING_STATES
                      for t in self.tracked.values())
        self._next_poll = now + (self.config.poll_pending_s if waiting
                                 else self.config.poll_running_s)
        ids = [t.slurm_id for t in self.tracked.values()] + list(self.node_probes.probes.values())
        ended = [t.slurm_id for t in self.tracked.values() if not t.final_asked and (
            t.state is not None and t.state.state not in PENDING_STATES | RUNNING_STATES)]
        excluded = self.nodes().excluded()
        outdated = [t.slurm_id for t in self.tracked.values() if t.exclude != excluded
                    and t.state is not None and t.state.state == "PENDING"]
        held = self.new_nodes.releasable(self.nodes(), {
            t.slurm_id: t.state.reason for t in self.tracked.values()
            if t.state is not None and t.state.state == "PENDING"})
        self._polling = self._pool.submit(self._poll, ids, ended, outdated, excluded, held)
        self._polling.add_done_callback(lambda _: self._wake())

    def _poll(self, ids: list[str], ended: list[str], outdated: list[str],
              excluded: list[str], held: list[str]) -> tuple[list[str], dict, dict, dict]:
        """On the worker thread: the ``--exclude`` of pending jobs submitted before a node
        went offline or came back (R-BUD-2: ``outdated``) made ``excluded``, so that an
        attempt waits for no node that is back, nor goes to one that is out; then one
        squeue for every job, and sacct for those that ended."""
        updated = {slurm_id: excluded for slurm_id in outdated
                   if self.client.exclude(slurm_id, excluded)}
        for slurm_id in held:  # a node passed its probe: what waited for one goes (issue 28)
            self.client.release_hold(slurm_id)
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
        attempt_dir = self.layout.attempt_dir(*key)
        if tracked is None or not (attempt_dir / "READY").exists():
            self.abort(key)  # its shim has not started: ABORT wins over GO, and it leaves
            return
        if not (attempt_dir / "GO").exists():  # at the barrier: released the other way,
            self.client.release(attempt_dir, go=False)  # so a GO after it is refused
        tracked.asked = "cancel"
        self._scancel(tracked.slurm_id, signal.SIGTERM)
        tracked.kill_at = time.monotonic() + grace

    def terminate(self, keys: list[AttemptKey]) -> list[Event]:
        """Stop the run: ABORT for those not started, scancel for every Slurm job of the run
        (those of ``keys``, a submission under way once sbatch answered, and any other
        found by name; Slurm sends TERM, then KILL after its KillWait), and wait until
        Slurm has ended them."""
        events = self._submissions_answered()
        known = []
        for key in keys:  # a stop a crashed coordinator left is carried out before adoption
            if (job := self.lookup(key[0])) is not None and job.current is not None:
                self._known(key, job.current)
            self.abort(key)
            if (tracked := self.tracked.get(key)) is not None:
                tracked.asked = "stop"
                known.append(tracked.slurm_id)
        try:
            ids, states = self.client.end_run(known, time.monotonic() + STOP_WAIT_SECONDS)
        except SlurmUnavailable as exc:  # the named jobs are cancelled by the next start's
            log.warning("stop: squeue did not answer (%s); the run's Slurm jobs are "
                        "cancelled as they are found", exc)
            ids, states = known, None
            for slurm_id in known:
                self.client.cancel(slurm_id)
        if strays := sorted(set(ids) - set(known), key=int):
            log.warning("stop: Slurm jobs %s of this run, unknown to the journal: cancelled",
                        ", ".join(strays))
        if states is not None:
            ended = [slurm_id for slurm_id in known if slurm_id not in states
                     or states[slurm_id].state not in PENDING_STATES | RUNNING_STATES]
            self._take(known, states, {slurm_id: self.client.final_exit(slurm_id)
                                       for slurm_id in ended})
        for key in keys:
            job = self.lookup(key[0])
            if job is not None and job.current is not None and job.current.attempt_id == key[1]:
                events += self._told(key, self.observe(job, job.current))
        return events

    def _submissions_answered(self) -> list[Event]:
        """Wait (as long as one Slurm command may take) for the submissions under way, so a
        stop cancels their jobs by id: what ``on_ready`` would have reported of them."""
        futures = [future for _, future, _ in self.submitting.values()]
        if futures:
            wait(futures, timeout=self.config.command_timeout_s)
        return self._submitted()

    def next_timer(self) -> float:
        kills = [t.kill_at for t in self.tracked.values() if t.kill_at is not None]
        polls = [self._next_poll] if (self.tracked or self.node_probes.probes) and \
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
        if self.doorbell is not None:
            self.selector.unregister(self.doorbell)
            self.doorbell.close()
