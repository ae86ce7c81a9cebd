"""``praxist-fs jobs``: the run's queued, running and finished jobs, like squeue + sacct.

Reads files only (the job index, or the job files), so it works without a live
coordinator and from any uid that can read the run.
"""

from __future__ import annotations

import argparse
import sys
import time

from .. import client
from ..core.job_state import JobState
from . import add_run_dir, run_layout, since
from .render import format_jobs, job_row, jobs_json

DEFAULT_LIMIT = 100


def add_parsers(sub: argparse._SubParsersAction) -> None:
    jobs = sub.add_parser(
        "jobs", help="list queued, running and finished jobs, newest first",
        description="List the run's jobs, newest first: by submission time (when the job "
        "was first accepted; a --retry-terminal resubmission keeps its place). Reads "
        "files only: works without a coordinator and under any uid that can read the run.")
    add_run_dir(jobs)
    jobs.add_argument("--state", type=_states, default=(), metavar="S[,S...]",
                      help=f"only these states ({', '.join(s.value for s in JobState)}; "
                      "held: the queued jobs that are held)")
    jobs.add_argument("--peer", help="only this peer's jobs")
    jobs.add_argument("--tag", metavar="GLOB",
                      help="only tags matching GLOB (case-sensitive; * ? [abc] [^abc])")
    jobs.add_argument("--since", type=since, metavar="2h|30m|1d|ISO-8601",
                      help="only jobs active since then: not ended yet, or submitted, "
                      "started or ended since (ISO times without a zone are local)")
    jobs.add_argument("--limit", type=_count, default=DEFAULT_LIMIT, metavar="N",
                      help=f"at most N jobs (default {DEFAULT_LIMIT}; 0: all); the table "
                      "then says how many more matched, --json has 'matched'")
    jobs.add_argument("--json", action="store_true",
                      help="a JSON object: jobs (job files plus derived fields), matched, "
                      "source (docs/PROTOCOL.md, Listing jobs)")
    jobs.set_defaults(func=cmd_jobs)


def cmd_jobs(args: argparse.Namespace) -> int:
    if (layout := run_layout(args, "praxist-fs jobs")) is None:
        return 2
    from ..adapters.jobindex import JobQuery, list_jobs  # sqlite3: launch processes stay lean

    if not layout.scheduler.is_dir():
        print(f"praxist-fs jobs: {args.run_dir} is not a run directory (no "
              "resource_scheduler/)", file=sys.stderr)
        return 2
    status = client.status_document(layout) or {}
    query = JobQuery(states=args.state, peer=args.peer, tag_glob=args.tag, since=args.since,
                     limit=args.limit or None)
    listing = list_jobs(layout, query, owner=status.get("coordinator", {}).get("since"))
    if listing.note:
        print(f"praxist-fs jobs: {listing.note}", file=sys.stderr)
    now = time.time()
    rows = [job_row(document, now) for document in listing.documents]
    if args.json:
        print(jobs_json(rows, listing.matched, listing.source))
    else:
        print(format_jobs(rows, listing.matched, now))
    return 0


def _states(text: str) -> tuple[str, ...]:
    known = {s.value for s in JobState} | {"held"}
    states = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in states if s not in known]
    if unknown or not states:
        raise argparse.ArgumentTypeError(
            f"unknown state {', '.join(unknown) or repr(text)}; one of {', '.join(sorted(known))}")
    return states


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a count (0: no limit)")
    return value
