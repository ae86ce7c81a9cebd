"""``praxist-fs launch``: submit an experiment and wait for it like srun (R-SUB-6)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator

from .. import client
from ..adapters.layout import RunLayout
from ..adapters.lock import live_endpoint
from ..core.bounds import NAME_EXPECTED, NAME_RE, PRIORITY_RANGE, WORK_CLASSES
from ..errors import PolicyError
from . import add_run_dir, slurm_flags
from .render import attempt_marker

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a launch's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any

EXIT_REJECTED = 2        # the request was refused (rejected, conflict, terminal duplicate)
EXIT_NO_COORDINATOR = 69  # EX_UNAVAILABLE: no live coordinator owns the run
# and, once the job ended: client.exit_status (70 when the attempt vanished:
# drained_unknown; 75 when it expired before any attempt ran)
PENDING_AFTER = 2.0       # seconds queued before the pending reason is shown
PENDING_LOOK = 0.5        # then how often it is read again (status.json, job file)
INTERRUPT_WINDOW = 1.0    # a second SIGINT within this long cancels the job, as srun's


def add_parsers(sub: argparse._SubParsersAction) -> None:
    launch = sub.add_parser("launch", help="submit an experiment and wait for it, like srun")
    add_run_dir(launch)
    launch.add_argument("--peer", default=os.environ.get("PRAXIST_PEER_ID"),
                        help="who submits (default $PRAXIST_PEER_ID)")
    launch.add_argument("--tag", required=True,
                        help="the experiment's scientific identity (variant, data, seeds...): "
                        "the same tag and request is the same job")
    launch.add_argument("--profile", help="a resource profile of the task file (default: "
                        "its default_profile)")
    launch.add_argument("--work-class", default="ordinary",
                        help="its queue: " + ", ".join(WORK_CLASSES) + " (default ordinary)")
    launch.add_argument("--eta", type=float, metavar="SECONDS",
                        help="expected wall time; unknown when left out")
    launch.add_argument("--retry-terminal", action="store_true",
                        help="run a failed, rejected or cancelled job of this tag again")
    launch.add_argument("--lease", help="the locator of the idle-supply lease this uses")
    launch.add_argument("--after", action="append", default=[], metavar="JOB_OR_TAG",
                        help="start only once that job completed successfully (repeatable)")
    launch.add_argument("--after-any", action="append", default=[], metavar="JOB_OR_TAG",
                        help="start only once that job ended, however (repeatable)")
    launch.add_argument("--after-notok", action="append", default=[], metavar="JOB_OR_TAG",
                        help="start only once that job ended other than completed")
    launch.add_argument("--hold", action="store_true",
                        help="queue it held: it starts only after 'praxist-fs release'")
    low, high = PRIORITY_RANGE
    launch.add_argument("--priority", type=int, metavar="N",
                        help=f"{low}..{high} (default 0): higher starts first inside its queue")
    launch.add_argument("--max-cost", type=float, metavar="X",
                        help="reject the request if its estimated cost (eta x calibrated "
                        "ratio x GPUs x the profile's budget rate) is over X; needs --eta")
    launch.add_argument("--admission-timeout", type=float, metavar="SECONDS",
                        help="end the job 'expired' (exit 75) if it has not started within "
                        "SECONDS; the same launch may then simply be run again (default: the "
                        "task's admission_timeout_seconds, else none)")
    launch.add_argument("--detach", action="store_true",
                        help="print the job id once accepted and exit 0")
    launch.add_argument("--cancel-shared", action="store_true",
                        help="let Ctrl-C (twice), TERM and HUP cancel a job this launch shares "
                        "but did not create (its reply said duplicate); without it they "
                        "only end this launch, and the job goes on for whoever made it")
    launch.add_argument("--wait-coordinator", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for a live coordinator (default 10)")
    launch.add_argument("--config", default=os.environ.get("PRAXIST_TASK_CONFIG"),
                        metavar="TASK", help="the task YAML: one that is not 'mode: central' "
                        "runs the command peer-local when no coordinator owns or has served "
                        "the run (default $PRAXIST_TASK_CONFIG)")
    launch.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                        metavar="DIR", help="where a peer-local launch registers the run "
                        "for stop --all (default as for serve)")
    slurm_flags.add_arguments(launch)
    launch.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    launch.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    missing = [flag for flag, value in (("--run-dir", args.run_dir), ("--peer", args.peer))
               if not value]
    if missing or not cmd:
        print(f"praxist-fs launch: needs {', '.join(missing) or 'a command after --'}",
              file=sys.stderr)
        return 2
    if not NAME_RE.fullmatch(args.peer):  # it names the request too: refuse it unwritten
        print(f"praxist-fs launch: --peer (or $PRAXIST_PEER_ID) {args.peer!r}: expected "
              f"{NAME_EXPECTED}", file=sys.stderr)
        return EXIT_REJECTED
    layout = RunLayout.at(args.run_dir)
    try:
        if client.enclosing_attempt(layout, dict(os.environ)) is not None:
            # Inside a live attempt: the child stays in its allocation, not queued again.
            import subprocess  # here: a launch to the coordinator runs nothing itself

            try:
                code = subprocess.call(cmd)
            except OSError as exc:
                print(f"praxist-fs launch: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
                return 127
            return 128 - code if code < 0 else code  # killed by signal N: 128 + N
    except client.NotInAttempt as exc:
        print(f"praxist-fs launch: refusing nested launch: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    if live_endpoint(layout) is None:  # a live coordinator decides, whatever the task says
        # Imported here: the task file's policy, config and backends; a launch to a live
        # coordinator needs none of them (and starts in a blink, R-PERF-3).
        from .. import legacy

        try:
            local = legacy.peer_local(layout, args.config)
        except PolicyError as exc:
            print(f"praxist-fs launch: invalid task file: {exc}", file=sys.stderr)
            return EXIT_REJECTED
        if local:
            try:
                return _launch_peer_local(args, layout, cmd)
            except legacy.Deferred:
                pass  # a coordinator took the run meanwhile: the request goes to it
    with _ends_noted() as ends:
        return _submit_and_follow(args, layout, cmd, ends)


@contextlib.contextmanager
def _ends_noted() -> Iterator[list[int]]:
    """SIGTERM and SIGHUP from before the request is written until launch follows its job
    (``_Watch``) are noted, not fatal: the command may already run by the time launch
    reads the reply, and a launch killed then would leave it running, uncancelled."""
    noted: list[int] = []
    handlers = {signum: signal.signal(signum, lambda signum, _frame: noted.append(signum))
                for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield noted
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _submit_and_follow(args: argparse.Namespace, layout: RunLayout, cmd: list[str],
                       ends: list[int]) -> int:
    try:
        client.wait_for_coordinator(layout, args.wait_coordinator)
        request = client.job_submission(
            args.peer, args.tag, argv=cmd, cwd=os.getcwd(),
            env=client.submission_env(dict(os.environ)), profile=args.profile,
            work_class=args.work_class, eta_s=args.eta, retry_terminal=args.retry_terminal,
            lease=args.lease, max_cost=args.max_cost, priority=args.priority, hold=args.hold,
            admission_timeout_s=args.admission_timeout, slurm=slurm_flags.request_field(args),
            after=[{"job": ref, "when": when} for when, refs in (
                ("ok", args.after), ("any", args.after_any), ("notok", args.after_notok))
                for ref in refs])
        # A retry shows its own attempts: those of the job before the request are not. Read
        # now, not after the reply, by when the retry's first attempt may have run and ended.
        before = client.find_job(layout, args.tag) if args.retry_terminal else None
        client.submit(layout, request)
        reply = client.wait_for_reply(layout, request["request_id"], args.wait_coordinator)
    except client.NoCoordinator as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR
    except (client.TooLarge, client.NotYours, client.SetAside) as exc:
        print(f"praxist-fs launch: rejected: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    except KeyboardInterrupt:  # before an answer: the request may still be taken
        print("praxist-fs launch: interrupted before the coordinator answered; a request "
              "already in the spool is still processed", file=sys.stderr)
        return 130
    outcome, job_id = reply["outcome"], reply["job_id"]
    if outcome == "rejected":
        print(f"praxist-fs launch: rejected: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if outcome == "terminal_duplicate":
        print(f"praxist-fs launch: not rerun: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if args.detach:
        print(job_id)
        return 128 + ends[0] if ends else 0  # detached: the job is not launch's to cancel
    watch = _Watch(layout, job_id, args.peer,
                   owns=outcome not in ("duplicate",) or args.cancel_shared)
    watch.signalled = ends[0] if ends else None  # its first tick cancels
    try:
        with watch.signals():  # before the reply is shown: a Ctrl-C at it is the watch's
            cost, differs = reply.get("estimate"), reply.get("differs")
            print(f"praxist-fs launch: {outcome}: job {job_id}"
                  + (f" (estimated cost {cost['cost']:g})" if cost else "")
                  + (f" (shared: its tag names it; this launch differs in {', '.join(differs)})"
                     if differs else ""), file=sys.stderr, flush=True)
            earlier = {attempt["attempt_id"] for attempt in before[1]["attempts"]} \
                if outcome == "retry_accepted" and before and before[0] == job_id else set()
            final = client.follow(layout, job_id, sys.stdout.buffer,
                                  select=lambda attempt: attempt["attempt_id"] not in earlier,
                                  announce=_announce_retry, tick=watch.tick)
    except Detached as left:
        return 128 + left.args[0]
    if watch.cancelled_by is not None:
        print(f"praxist-fs launch: job {job_id} {final['state']}: {final['reason']}",
              file=sys.stderr)
        return 128 + watch.cancelled_by
    if final["state"] != "completed":
        print(f"praxist-fs launch: job {job_id} {final['state']}: {final['reason']}",
              file=sys.stderr)
    return client.exit_status(final)


def _announce_retry(attempt: dict, previous: dict | None) -> None:
    """Between attempts, a line on stderr, where launch says everything of its own: stdout
    carries the experiment's output alone, as srun's does."""
    if previous is not None:
        print(attempt_marker(attempt, previous), file=sys.stderr, flush=True)


def _launch_peer_local(args: argparse.Namespace, layout: RunLayout, cmd: list[str]) -> int:
    """R-DUR-3: a legacy task's launch runs the command itself, recorded for stop and status."""
    bad = [flag for flag, value in (("--peer", args.peer), ("--tag", args.tag))
           if not NAME_RE.fullmatch(value)]
    needs = [flag for flag, given in (("--detach", args.detach),
                                      ("--max-cost", args.max_cost is not None),
                                      ("a Slurm option", slurm_flags.request_field(args)))
             if given]
    if bad or needs:
        print("praxist-fs launch: " + (f"{', '.join(bad)}: expected {NAME_EXPECTED}" if bad
              else f"{needs[0]} needs a coordinator (the task is not 'mode: central')"),
              file=sys.stderr)
        return EXIT_REJECTED
    from .. import legacy

    try:
        return legacy.launch(layout, peer=args.peer, tag=args.tag, argv=cmd,
                             host_registry=args.host_registry, wait=args.wait_coordinator)
    except legacy.Refused as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return 127 if isinstance(exc, legacy.NotStarted) else EXIT_REJECTED
    except legacy.Busy as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR


class Detached(Exception):
    """A launch that shares a job it did not create leaves on a signal: ``args[0]``."""


class _Watch:
    """What ``launch`` does while it follows its job, like srun: says why the job waits
    (after PENDING_AFTER seconds, then whenever the reason changes in kind, not only in
    its numbers), and turns signals into a cancel: SIGTERM or SIGHUP at once, SIGINT when
    a second one comes within INTERRUPT_WINDOW (the first prints the job's state). A
    launch that shares a job it did not create leaves it to go on instead (``Detached``),
    unless ``--cancel-shared``. The handlers only take note;
    ``tick``, called from the follow loop, acts, so no signal ever ends in a traceback."""

    def __init__(self, layout: RunLayout, job_id: str, peer: str, owns: bool = True) -> None:
        self.layout, self.job_id, self.peer = layout, job_id, peer
        self.owns = owns  # it made the job (or may cancel a shared one: --cancel-shared)
        self.since = time.monotonic()
        self.said: str | None = None  # the kind of pending reason last said (reason_kind)
        self.look_at = self.since + PENDING_AFTER  # when the pending reason is read next
        self.interrupts: list[float] = []
        self.noted = 0                        # interrupts already answered
        self.signalled: int | None = None     # the signal that asks for a cancel
        self.cancelled_by: int | None = None  # the signal whose cancel was sent

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        handlers = {signum: signal.signal(signum, self._on_signal)
                    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            yield
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if signum != signal.SIGINT:
            self.signalled = signum
            return
        now = time.monotonic()
        if self.interrupts and now - self.interrupts[-1] <= INTERRUPT_WINDOW:
            self.signalled = signum
        self.interrupts.append(now)

    def tick(self, doc: dict[str, Any] | None) -> None:
        if doc is None:
            return
        if self.signalled is not None and self.cancelled_by is None:
            if not self.owns:
                print(f"praxist-fs launch: {signal.Signals(self.signalled).name}: leaving job "
                      f"{self.job_id} ({doc['state']}) to go on: this launch shares it but "
                      "did not create it (--cancel-shared cancels it)", file=sys.stderr,
                      flush=True)
                raise Detached(self.signalled)
            self._cancel(doc)
        elif len(self.interrupts) > self.noted and self.cancelled_by is None:
            self.noted = len(self.interrupts)
            print(f"praxist-fs launch: job {self.job_id} is {doc['state']} ({doc['reason']});"
                  f" interrupt again within {INTERRUPT_WINDOW:g} s to "
                  + ("cancel it" if self.owns else "leave it (shared: it goes on)"),
                  file=sys.stderr, flush=True)
        elif doc["state"] == "queued" and time.monotonic() >= self.look_at:
            # Here: the admission model (the policy, dataclasses: tens of ms) is loaded only
            # by a launch whose job has waited PENDING_AFTER seconds, not at every start.
            from ..core.admission import reason_kind

            self.look_at = time.monotonic() + PENDING_LOOK  # status.json: not every tick
            reason = client.pending_reason(self.layout, doc)
            if reason_kind(reason) != self.said:  # not each time only its numbers move
                self.said = reason_kind(reason)
                print(f"praxist-fs launch: queued: {reason}", file=sys.stderr, flush=True)
        elif doc["state"] == "running" and "(Slurm job " in doc["reason"] and \
                doc["reason"] != self.said:  # why Slurm holds it, where it runs: as srun
            self.said = doc["reason"]
            print(f"praxist-fs launch: {doc['reason']}", file=sys.stderr, flush=True)

    def _cancel(self, doc: dict[str, Any]) -> None:
        self.cancelled_by = self.signalled
        name = signal.Signals(self.signalled).name
        print(f"praxist-fs launch: {name}: cancelling job {self.job_id} "
              f"({doc['state']}) and waiting for it to end", file=sys.stderr, flush=True)
        request = {"request_id": client.new_request_id(self.peer), "action": "cancel",
                   "jobs": [self.job_id], "by": self.peer,
                   "reason": f"praxist-fs launch got {name}"}
        try:
            reply = client.send_control(self.layout, request, 30.0, "the cancel")
        except (TimeoutError, client.NotYours) as exc:
            print(f"praxist-fs launch: {exc}", file=sys.stderr, flush=True)
            return
        if reply["outcome"] != "ok":
            print(f"praxist-fs launch: cancel refused: {reply['reason']}", file=sys.stderr,
                  flush=True)
