"""``cancel``, ``hold``, ``release`` and ``update``: job control as control requests;
and ``raise-budget``, the run budget's raise-only ceilings (seed 003).

Each command writes one control file (docs/PROTOCOL.md, *Job control*), exactly what
a shell script may drop with printf and mv, and prints the coordinator's answer: one
line per selected job with what happened to it. The coordinator journals the decision
before it signals anything.
"""

from __future__ import annotations

import argparse
import sys
import time

from .. import client
from ..adapters.layout import RunLayout
from ..core.bounds import PRIORITY_RANGE, SELECTABLE_STATES
from . import add_owner, add_run_dir, run_layout
from .render import format_control_reply, format_json

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any

EXIT_REFUSED = 2          # invalid input, unknown job, or a selection that needs --yes
EXIT_NO_COORDINATOR = 69  # as `praxist-fs launch`
EXIT_NO_REPLY = 1         # the coordinator did not answer in time


def add_parsers(sub: argparse._SubParsersAction) -> None:
    cancel = sub.add_parser("cancel", help="cancel jobs: queued ones at once, running ones "
                            "by TERM to their whole process group, then KILL after a grace")
    _selection(cancel, "cancel")
    cancel.add_argument("--reason", help="why, recorded in the job file ('cancelled by WHO: "
                        "REASON')")
    cancel.add_argument("--grace", type=float, metavar="SECONDS",
                        help="seconds between TERM and KILL (default: the task's "
                        "cancel_grace_seconds, 10)")
    cancel.set_defaults(func=cmd_control, action="cancel")

    hold = sub.add_parser("hold", help="keep queued jobs from starting until released")
    _selection(hold, "hold")
    hold.set_defaults(func=cmd_control, action="hold")

    release = sub.add_parser("release", help="let held jobs start again")
    _selection(release, "release")
    release.set_defaults(func=cmd_control, action="release")

    update = sub.add_parser("update", help="change a queued job's priority")
    _selection(update, "update")
    low, high = PRIORITY_RANGE
    update.add_argument("--priority", type=int, required=True, metavar="N",
                        help=f"the new priority, {low}..{high}; higher starts first inside "
                        "its queue")
    update.set_defaults(func=cmd_control, action="update")

    raise_budget = sub.add_parser(
        "raise-budget", help="raise the run budget's ceilings at run time (operators only); "
        "a ceiling lower than the one in force is refused")
    add_run_dir(raise_budget)
    raise_budget.add_argument("--cost", type=float, metavar="COST",
                              help="the new cost ceiling (budget.cost)")
    raise_budget.add_argument("--gpu-hours", type=float, metavar="HOURS",
                              help="the new GPU-hours ceiling (budget.gpu_hours)")
    _answer_options(raise_budget)
    raise_budget.set_defaults(func=cmd_raise_budget, action="budget_raise")


def _selection(parser: argparse.ArgumentParser, action: str) -> None:
    parser.add_argument("jobs", nargs="*", metavar="JOB_OR_TAG",
                        help="job ids or tags; none: every job --peer/--state select")
    add_run_dir(parser)
    parser.add_argument("--peer", help="only the jobs of this peer")
    parser.add_argument("--state", action="append", default=[], metavar="STATE",
                        help="only jobs in this state: " + ", ".join(SELECTABLE_STATES)
                        + " (repeat, or separate with commas)")
    parser.add_argument("--by", default=client.default_by(),
                        help="who asks, for the job's record (default $PRAXIST_PEER_ID, "
                        "else $USER)")
    add_owner(parser)
    parser.add_argument("--yes", action="store_true",
                        help=f"{action} every job --peer/--state select, when more than one")
    _answer_options(parser)


def _answer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long to wait for a live coordinator (one restarting) and "
                        "its answer (default 30)")
    parser.add_argument("--json", action="store_true", help="print the reply document")


def cmd_control(args: argparse.Namespace) -> int:
    command = f"praxist-fs {args.action}"
    if (layout := run_layout(args, command)) is None:
        return EXIT_REFUSED
    states = [s for value in args.state for s in value.split(",") if s]
    if not (args.jobs or args.peer or states):
        print(f"{command}: name jobs (ids or tags), or select them with --peer/--state",
              file=sys.stderr)
        return EXIT_REFUSED
    if not args.jobs and not args.yes:
        selected = client.select_jobs(layout, args.peer, states)
        if len(selected) > 1:
            print(f"{command}: --peer/--state select {len(selected)} jobs ("
                  + ", ".join(selected[:5]) + (", ..." if len(selected) > 5 else "")
                  + f"); add --yes to {args.action} them all", file=sys.stderr)
            return EXIT_REFUSED
    request = client.control_request(args.action, args.jobs, args.by, peer=args.peer,
                                     states=states, reason=getattr(args, "reason", None),
                                     grace=getattr(args, "grace", None),
                                     priority=getattr(args, "priority", None), owner=args.uid)
    return _send(args, layout, request, command)


def cmd_raise_budget(args: argparse.Namespace) -> int:
    command = "praxist-fs raise-budget"
    if (layout := run_layout(args, command)) is None:
        return EXIT_REFUSED
    if args.cost is None and args.gpu_hours is None:
        print(f"{command}: give the new ceiling: --cost and/or --gpu-hours", file=sys.stderr)
        return EXIT_REFUSED
    request = client.without_unset({"request_id": client.new_request_id("budget"),
                              "action": args.action, "cost": args.cost,
                              "gpu_hours": args.gpu_hours})
    return _send(args, layout, request, command)


def _send(args: argparse.Namespace, layout: RunLayout, request: dict[str, Any],
          command: str) -> int:
    """Drop the control request, print the coordinator's answer, exit 0 only on ok. A
    coordinator that is restarting (none live yet) is waited for within ``--timeout``."""
    deadline = time.monotonic() + args.timeout
    try:
        client.wait_for_coordinator(layout, args.timeout)
        reply = client.send_control(layout, request, max(0.0, deadline - time.monotonic()),
                                    f"{args.action} ({request['request_id']})")
    except client.NoCoordinator as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_NO_COORDINATOR
    except TimeoutError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_NO_REPLY
    except client.NotYours as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.json:
        print(format_json(reply))
    else:
        print(format_control_reply(reply))
    return 0 if reply["outcome"] == "ok" else EXIT_REFUSED
