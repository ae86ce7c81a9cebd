"""``praxist-fs logs`` and ``praxist-fs wait``: read or follow a job to its end.

Both read files only (job files, attempt logs): they work from any shell that can
read the run, whoever submitted the job, and submit nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from .. import client
from ..adapters.layout import RunLayout
from . import add_owner, add_run_dir, run_layout
from .render import attempt_header

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import BinaryIO

EXIT_UNKNOWN_JOB = 2
EXIT_NOT_COMPLETED = 1  # wait: a job ended otherwise than completed
EXIT_TIMEOUT = 124      # wait: as timeout(1)
ATTEMPT_RE = re.compile(r"a[1-9][0-9]*|all")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    logs = sub.add_parser(
        "logs", help="print (or follow) a job's output, every attempt under a header",
        description="Print the output of a job's attempts, oldest first, each under a line "
        "'==> attempt aN (started T, how it ended) <=='. With -f, follow it through retries "
        "until the job ends, then exit with the job's exit code (0 completed; its exit "
        "code when failed; 70 drained_unknown; 75 expired; 1 when it ended without one).")
    logs.add_argument("job", metavar="JOB", help="a job id, or the tag it was submitted with")
    logs.add_argument("-f", "--follow", action="store_true",
                      help="follow new output and new attempts until the job has ended")
    logs.add_argument("--attempt", default="all", type=_attempt, metavar="aN|all",
                      help="only this attempt (default: all of them)")
    add_owner(logs)
    add_run_dir(logs)
    logs.set_defaults(func=cmd_logs)

    wait = sub.add_parser(
        "wait", help="wait until jobs have ended: exit 0 only if all completed",
        description="Block until every JOB has ended (and every job --tag or --all "
        "selects). Exit 0 if all completed; 1 if any ended otherwise (each is named on "
        "stderr with its state and reason); 124 on timeout; 2 if a JOB names no accepted "
        "job, or the selection none.")
    wait.add_argument("jobs", nargs="*", metavar="JOB", help="job ids or tags")
    wait.add_argument("--tag", metavar="GLOB", help="also every job of yours (or --uid's) "
                      "whose tag matches GLOB (* ? [abc]), as accepted by now")
    wait.add_argument("--all", action="store_true", help="also every job of yours (or "
                      "--uid's) not ended yet (none: exit 0 at once); with --tag, those of "
                      "its jobs")
    wait.add_argument("--timeout", type=float, metavar="SECONDS", help="give up after this long")
    add_owner(wait)
    add_run_dir(wait)
    wait.set_defaults(func=cmd_wait)


def cmd_logs(args: argparse.Namespace) -> int:
    layout = run_layout(args, "praxist-fs logs")
    found = layout and _find(layout, [args.job], "logs", args.uid)
    if not found:
        return EXIT_UNKNOWN_JOB
    (job_id, doc), = found
    ids = [a["attempt_id"] for a in doc["attempts"]]
    if args.attempt != "all" and args.attempt not in ids and not args.follow:
        print(f"praxist-fs logs: job {job_id} has no attempt {args.attempt} (attempts: "
              f"{', '.join(ids) or 'none yet'})", file=sys.stderr)
        return EXIT_UNKNOWN_JOB
    final = write_logs(layout, job_id, sys.stdout.buffer, args.attempt, args.follow)
    if not final["attempts"]:
        print(f"praxist-fs logs: job {job_id} is {final['state']} with no attempt yet: "
              f"{final['reason']}", file=sys.stderr)
    return client.exit_status(final) if args.follow else 0


def write_logs(layout: RunLayout, job_id: str, out: BinaryIO, attempt: str = "all",
               follow: bool = False) -> dict:
    """Write the job's output to ``out``, each ``attempt`` (or all) under its header;
    ``follow`` until the job ends. Returns its last job file. ``praxist-fs top`` shows
    a job's log the same way. An attempt run by Slurm is followed, once it ended, by
    Slurm's own output file under a header of its own (where Slurm says CANCELLED, a
    time limit or an OOM kill)."""
    told: set[str] = set()

    def slurm_output(ended: dict | None) -> None:
        if ended is not None and ended["ended_at"] is not None and \
                ended["attempt_id"] not in told:
            told.add(ended["attempt_id"])
            _write_slurm_output(layout, job_id, ended, out)

    def announce(shown: dict, previous: dict | None) -> None:
        slurm_output(previous)
        out.write(("" if previous is None else "\n").encode()
                  + attempt_header(shown, time.time()).encode() + b"\n")
        out.flush()  # following, an attempt shows up before its output does

    final = client.follow(layout, job_id, out, announce=announce, once=not follow,
                          select=lambda a: attempt in ("all", a["attempt_id"]))
    for each in final["attempts"]:
        if attempt in ("all", each["attempt_id"]):
            slurm_output(each)
    return final


def _write_slurm_output(layout: RunLayout, job_id: str, attempt: dict, out: BinaryIO) -> None:
    """``==> attempt a1: Slurm's output (job 431, …/slurm.out) <==`` and the file, if the
    attempt ran as a Slurm job and Slurm wrote anything."""
    handle = attempt.get("handle") or {}
    if handle.get("backend") != "slurm":
        return
    path = layout.attempt_dir(job_id, attempt["attempt_id"]) / "slurm.out"
    try:
        data = path.read_bytes()
    except OSError:
        return
    if data:
        out.write(f"\n==> attempt {attempt['attempt_id']}: Slurm's output (job "
                  f"{handle.get('job_id')}, {path}) <==\n".encode() + data
                  + (b"" if data.endswith(b"\n") else b"\n"))
        out.flush()


def cmd_wait(args: argparse.Namespace) -> int:
    layout = run_layout(args, "praxist-fs wait")
    if layout is None:
        return EXIT_UNKNOWN_JOB
    if not (args.jobs or args.tag or args.all):
        print("praxist-fs wait: name jobs (ids or tags), or select them with --tag GLOB or "
              "--all", file=sys.stderr)
        return EXIT_UNKNOWN_JOB
    found = _find(layout, args.jobs, "wait", args.uid) if args.jobs else []
    if found is None:
        return EXIT_UNKNOWN_JOB
    if args.tag or args.all:
        selected = client.selected_jobs(layout, args.tag, args.all, args.uid)
        if not selected and args.tag:
            whose = "yours" if args.uid is None else f"uid {args.uid}"
            print(f"praxist-fs wait: no job of {whose} has a tag matching {args.tag!r}"
                  + (" and has not ended" if args.all else ""), file=sys.stderr)
            return EXIT_UNKNOWN_JOB
        found += selected  # --all alone: none left running is all ended
    ended, pending = client.wait_for_jobs(layout, [job_id for job_id, _ in found],
                                          args.timeout)
    if pending:
        still = {job_id: client.job_document(layout, job_id) or {} for job_id in pending}
        print(f"praxist-fs wait: timed out after {args.timeout:g}s; not ended: "
              + ", ".join(f"{job_id} ({doc.get('state')})" for job_id, doc in still.items()),
              file=sys.stderr)
    failed = {job_id: doc for job_id, doc in ended.items() if doc["state"] != "completed"}
    for job_id, doc in failed.items():
        print(f"praxist-fs wait: job {job_id} {doc['state']}: {doc['reason']}", file=sys.stderr)
    return EXIT_TIMEOUT if pending else EXIT_NOT_COMPLETED if failed else 0


def _find(layout: RunLayout, names: list[str], command: str, uid: int | None
          ) -> list[tuple[str, dict]] | None:
    """Every named job (tags: ``uid``'s, default ours), or None after saying which names
    no accepted job."""
    found = {name: client.find_job(layout, name, uid) for name in names}
    unknown = [name for name, job in found.items() if job is None]
    if unknown:
        whose = "yours" if uid is None else f"uid {uid}'s"
        print(f"praxist-fs {command}: no job with id or tag {', '.join(map(repr, unknown))} "
              f"(tags: {whose}) in {layout.root} (a request is a job once its reply says "
              "accepted)", file=sys.stderr)
        return None
    return list(found.values())


def _attempt(text: str) -> str:
    if not ATTEMPT_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected an attempt id (a1, a2, ...) or all")
    return text
