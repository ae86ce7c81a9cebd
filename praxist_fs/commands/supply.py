"""``generation open|assess|close`` (the operator) and ``lease wait|decline`` (a peer):
the command line of ``praxist_fs.supply_client``."""

from __future__ import annotations

import argparse
import os
import sys

from .. import client
from ..supply_client import SupplyError, generation_command, lease_decline, lease_wait
from . import NO_RUN_DIR, add_run_dir
from .render import format_json

EXIT_ERROR = 2           # invalid input, unresolvable generation, rejected control request
EXIT_TIMEOUT = 1         # no reply / no lease within --timeout
EXIT_NO_COORDINATOR = 69  # as `praxist-fs launch`
EXIT_INTERRUPTED = 130


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``generation open|assess|close`` and ``lease wait|decline`` on ``sub``."""
    generation = sub.add_parser("generation", help="open, assess or close a generation "
                                "(an operator request to the coordinator)")
    actions = generation.add_subparsers(dest="generation_action", metavar="open|assess|close")
    actions.required = True
    for action, text in (("open", "open generation N"),
                         ("assess", "move generation N into assessment"),
                         ("close", "close generation N")):
        parser = actions.add_parser(action, help=text)
        add_run_dir(parser)
        parser.add_argument("number", type=int, metavar="N", help="the generation (>= 1)")
        if action == "open":
            parser.add_argument("--cohort", nargs="+", action="extend", default=[],
                                metavar="PEER", help="the peers of the generation")
            parser.add_argument("--deadline", metavar="ISO",
                                help="ISO-8601 date-time with a timezone")
        parser.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                            help="how long to wait for the reply (default 30)")
        parser.add_argument("--wait-coordinator", type=float, default=0.0, metavar="SECONDS",
                            help="how long to wait for a live coordinator (default 0)")
        parser.set_defaults(func=cmd_generation)

    lease = sub.add_parser("lease", help="wait for or decline an idle-supply lease (a peer)")
    verbs = lease.add_subparsers(dest="lease_action", metavar="wait|decline")
    verbs.required = True
    wait = verbs.add_parser("wait", help="register as idle and print the next granted lease")
    decline = verbs.add_parser("decline", help="decline a granted lease")
    for parser in (wait, decline):
        add_run_dir(parser)
        parser.add_argument("--peer", default=os.environ.get("PRAXIST_PEER_ID"))
        parser.add_argument("--generation", type=int, metavar="N",
                            help="default: the current generation in status.json")
        parser.set_defaults(func=cmd_lease)
    wait.add_argument("--timeout", type=float, metavar="SECONDS",
                      help="give up (exit 1) after this long (default: wait for ever)")
    decline.add_argument("--lease", metavar="ID",
                         help="default: the lease in the peer's lease file, if granted")


def _fail(command: str, message: object, code: int) -> int:
    print(f"praxist-fs {command}: {message}", file=sys.stderr)
    return code


def cmd_generation(args: argparse.Namespace) -> int:
    command = f"generation {args.generation_action}"
    if not args.run_dir:
        return _fail(command, NO_RUN_DIR, EXIT_ERROR)
    try:
        reply = generation_command(args.run_dir, args.generation_action, args.number,
                                   cohort=getattr(args, "cohort", ()),
                                   deadline=getattr(args, "deadline", None),
                                   timeout=args.timeout, wait_coordinator=args.wait_coordinator)
    except (SupplyError, client.NotYours) as exc:
        return _fail(command, exc, EXIT_ERROR)
    except client.NoCoordinator as exc:
        return _fail(command, exc, EXIT_NO_COORDINATOR)
    except TimeoutError as exc:
        return _fail(command, exc, EXIT_TIMEOUT)
    print(format_json(reply), flush=True)
    if reply.get("outcome") != "ok":
        return _fail(command, f"{reply.get('outcome')}: {reply.get('reason')}", EXIT_ERROR)
    return 0


def cmd_lease(args: argparse.Namespace) -> int:
    command = f"lease {args.lease_action}"
    if not args.run_dir:
        return _fail(command, NO_RUN_DIR, EXIT_ERROR)
    try:
        if args.lease_action == "wait":
            lease_wait(args.run_dir, args.peer, args.generation, args.timeout)
        else:
            written = lease_decline(args.run_dir, args.peer, args.lease, args.generation)
            print(format_json(written), flush=True)
    except SupplyError as exc:
        return _fail(command, exc, EXIT_ERROR)
    except TimeoutError as exc:
        return _fail(command, exc, EXIT_TIMEOUT)
    except KeyboardInterrupt:
        return _fail(command, "interrupted; the idle registration was withdrawn",
                     EXIT_INTERRUPTED)
    return 0
