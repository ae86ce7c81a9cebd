"""``praxist-fs status``: the run's status.json, as a table or as JSON."""

from __future__ import annotations

import argparse
import sys

from .. import client
from ..adapters import manifests
from ..adapters.layout import RunLayout
from ..adapters.lock import live_endpoint
from . import add_run_dir, run_layout
from .render import format_json, format_peer_local, format_status


def add_parsers(sub: argparse._SubParsersAction) -> None:
    status = sub.add_parser("status", help="show the run's status.json")
    add_run_dir(status)
    status.add_argument("--json", action="store_true",
                        help="print status.json, with coordinator_alive added")
    status.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    if (layout := run_layout(args, "praxist-fs status")) is None:
        return 2
    doc = client.current_status(layout)
    local = [{**launch, "age_s": manifests.age(launch)} for launch in manifests.launches(layout)]
    if doc is None and not local:
        print(f"praxist-fs status: no status.json under {args.run_dir} yet", file=sys.stderr)
        return 1
    unsafe = layout_problems(layout, doc)
    if args.json:
        print(format_json({**(doc or {}), "coordinator_alive": live_endpoint(layout) is not None,
                           "peer_local_launches": local, "unsafe_layout": unsafe}))
    else:
        alive = live_endpoint(layout) is not None
        print("\n\n".join(([format_unsafe(unsafe)] if unsafe else [])
                          + ([format_status(doc, alive)] if doc else [])
                          + ([format_peer_local(local)] if local else [])))
    return 0


def layout_problems(layout: RunLayout, doc: dict | None) -> list[str]:
    """What would keep the run's coordinator from starting on it now (R-SEC-4): another
    uid could swap a directory of it. Read-only: only a start mends or refuses."""
    uid = ((doc or {}).get("coordinator") or {}).get("uid")
    if uid is None:
        try:
            uid = client.coordinator_uid(layout)
        except OSError:
            return []
    return layout.layout_problems(uid)


def format_unsafe(problems: list[str]) -> str:
    return "\n".join(["UNSAFE: another uid could swap a directory of this run; the next "
                      "start refuses it (docs/OPERATIONS.md, Peers under other uids):",
                      *(f"  {problem}" for problem in problems)])
