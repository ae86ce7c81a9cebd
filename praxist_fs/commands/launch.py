"""``praxist-fs launch``: submit an experiment and wait for it like srun (R-SUB-6)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from .. import client, legacy
from ..adapters.layout import RunLayout
from ..adapters.lock import live_endpoint
from ..core.request import NAME_EXPECTED, NAME_RE
from ..errors import PolicyError
from .render import attempt_marker

EXIT_REJECTED = 2        # the request was refused (rejected, conflict, terminal duplicate)
EXIT_NO_COORDINATOR = 69  # EX_UNAVAILABLE: no live coordinator owns the run
# and, once the job ended: client.exit_status (70 when the attempt vanished: drained_unknown)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    launch = sub.add_parser("launch", help="submit an experiment and wait for it, like srun")
    launch.add_argument("--run-dir", default=os.environ.get("PRAXIST_RUN_DIR"))
    launch.add_argument("--peer", default=os.environ.get("PRAXIST_PEER_ID"))
    launch.add_argument("--tag", required=True)
    launch.add_argument("--profile")
    launch.add_argument("--work-class", default="ordinary")
    launch.add_argument("--eta", type=float)
    launch.add_argument("--retry-terminal", action="store_true")
    launch.add_argument("--lease")
    launch.add_argument("--max-cost", type=float, metavar="X",
                        help="reject the request if its estimated cost (eta x calibrated "
                        "ratio x GPUs x the profile's budget rate) is over X; needs --eta")
    launch.add_argument("--detach", action="store_true",
                        help="print the job id once accepted and exit 0")
    launch.add_argument("--wait-coordinator", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for a live coordinator (default 10)")
    launch.add_argument("--config", default=os.environ.get("PRAXIST_TASK_CONFIG"),
                        metavar="TASK", help="the task YAML: one that is not 'mode: central' "
                        "runs the command peer-local when no coordinator owns or has served "
                        "the run (default $PRAXIST_TASK_CONFIG)")
    launch.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                        metavar="DIR", help="where a peer-local launch registers the run "
                        "for stop --all (default as for serve)")
    launch.add_argument("cmd", nargs=argparse.REMAINDER)
    launch.set_defaults(func=cmd_launch)


def cmd_launch(args: argparse.Namespace) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    missing = [flag for flag, value in (("--run-dir", args.run_dir), ("--peer", args.peer))
               if not value]
    if missing or not cmd:
        print(f"praxist-fs launch: needs {', '.join(missing) or 'a command after --'}",
              file=sys.stderr)
        return 2
    layout = RunLayout.at(args.run_dir)
    try:
        if client.enclosing_attempt(layout, dict(os.environ)) is not None:
            # Inside a live attempt: the child stays in its allocation, not queued again.
            try:
                code = subprocess.call(cmd)
            except OSError as exc:
                print(f"praxist-fs launch: cannot run {cmd[0]!r}: {exc}", file=sys.stderr)
                return 127
            return 128 - code if code < 0 else code  # killed by signal N: 128 + N
    except client.NotInAttempt as exc:
        print(f"praxist-fs launch: refusing nested launch: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    try:  # a live coordinator decides, whatever the task file or the environment says
        local = live_endpoint(layout) is None and legacy.peer_local(layout, args.config)
    except PolicyError as exc:
        print(f"praxist-fs launch: invalid task file: {exc}", file=sys.stderr)
        return EXIT_REJECTED
    if local:
        try:
            return _launch_peer_local(args, layout, cmd)
        except legacy.Deferred:
            pass  # a coordinator took the run meanwhile: the request goes to it
    try:
        client.wait_for_coordinator(layout, args.wait_coordinator)
        request = {
            "request_id": client.new_request_id(args.peer), "peer": args.peer, "tag": args.tag,
            "profile": args.profile, "work_class": args.work_class, "eta_s": args.eta,
            "argv": cmd, "cwd": os.getcwd(), "env": client.submission_env(dict(os.environ)),
            "retry_terminal": args.retry_terminal, "lease": args.lease,
            "max_cost": args.max_cost,
        }
        client.submit(layout, {k: v for k, v in request.items() if v is not None})
        reply = client.wait_for_reply(layout, request["request_id"], args.wait_coordinator)
    except client.NoCoordinator as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR
    outcome, job_id = reply["outcome"], reply["job_id"]
    if outcome == "rejected":
        print(f"praxist-fs launch: rejected: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if outcome == "terminal_duplicate":
        print(f"praxist-fs launch: not rerun: {reply['reason']}", file=sys.stderr)
        return EXIT_REJECTED
    if args.detach:
        print(job_id)
        return 0
    cost = reply.get("estimate")
    print(f"praxist-fs launch: {outcome}: job {job_id}"
          + (f" (estimated cost {cost['cost']:g})" if cost else ""), file=sys.stderr)
    earlier = set()
    if outcome == "retry_accepted":  # show this retry's attempts, not the failed ones
        doc = client.job_document(layout, job_id) or {"attempts": []}
        earlier = {a["attempt_id"] for a in doc["attempts"] if a["ended_at"] is not None}
    final = client.follow(layout, job_id, sys.stdout.buffer,
                          select=lambda attempt: attempt["attempt_id"] not in earlier,
                          announce=_announce_retry)
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
                                      ("--max-cost", args.max_cost is not None)) if given]
    if bad or needs:
        print("praxist-fs launch: " + (f"{', '.join(bad)}: expected {NAME_EXPECTED}" if bad
              else f"{needs[0]} needs a coordinator (the task is not 'mode: central')"),
              file=sys.stderr)
        return EXIT_REJECTED
    try:
        return legacy.launch(layout, peer=args.peer, tag=args.tag, argv=cmd,
                             host_registry=args.host_registry, wait=args.wait_coordinator)
    except legacy.Refused as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return 127 if isinstance(exc, legacy.NotStarted) else EXIT_REJECTED
    except legacy.Busy as exc:
        print(f"praxist-fs launch: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR
