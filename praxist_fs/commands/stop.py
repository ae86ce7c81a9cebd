"""``praxist-fs stop RUN…`` and ``stop --all``: the command line of ``praxist_fs.stopper``.

``--all`` acts on runs nobody named, so it first lists them (on stderr: stdout stays
the JSON result) and goes on only with ``--yes`` or a ``y`` typed at the terminal."""

from __future__ import annotations

import argparse
import os
import sys

from ..stopper import stop_runs
from .render import format_json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..adapters.layout import RunLayout


def cmd_stop(args: argparse.Namespace) -> int:
    args.runs = [*args.runs, *args.run_dirs]
    if bool(args.all) == bool(args.runs):
        print("praxist-fs stop: name the runs to stop, or give --all (not both)",
              file=sys.stderr)
        return 2
    if not args.all:
        result = stop_runs(args.runs, grace=args.grace, timeout=args.timeout)
    else:
        # Here: the run registry (filelock, hashing) is --all's alone, not every stop's.
        from ..adapters import runs
        from ..adapters.layout import RunLayout
        from ..stopper import stop_all
        from .render import format_stop_listing

        try:
            entries = runs.registered(args.host_registry)
        except OSError as exc:  # the registry itself: unreadable, or its lock never free
            print(f"praxist-fs stop: cannot read the run registry "
                  f"{runs.directory(args.host_registry)}: {exc}", file=sys.stderr)
            return 1
        what = {e.run_dir: _what_runs(RunLayout.at(e.run_dir)) for e in entries if e.to_stop}
        print(format_stop_listing(entries, runs.directory(args.host_registry), what),
              file=sys.stderr)
        count = sum(e.to_stop for e in entries)
        if count and not args.yes:
            if not sys.stdin.isatty():
                print("praxist-fs stop: not stopping without a confirmation: give --yes "
                      "(stdin is not a terminal to ask on)", file=sys.stderr)
                return 2
            if not _confirmed(count):
                print("praxist-fs stop: nothing stopped", file=sys.stderr)
                return 1
        result = stop_all(entries, grace=args.grace, timeout=args.timeout)
    print(format_json(result))
    return 1 if result["failed_run_ids"] else 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    stop = sub.add_parser("stop", help="freeze runs and terminate their work (fenced)")
    stop.add_argument("runs", nargs="*", metavar="RUN", help="run directories")
    stop.add_argument("--run-dir", action="append", default=[], dest="run_dirs",
                      metavar="RUN", help="a run directory, as the other commands name it "
                      "(repeatable; $PRAXIST_RUN_DIR is not read: name what you stop)")
    stop.add_argument("--all", action="store_true",
                      help="every run of this host's run registry (lists them first)")
    stop.add_argument("--yes", action="store_true",
                      help="with --all: stop the listed runs without asking (needed when "
                      "stdin is not a terminal)")
    stop.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                      metavar="DIR", help="the host registry whose runs/ --all reads "
                      "(default /run/praxist_fs, the runtime dir, or /tmp/praxist_fs-<uid>)")
    stop.add_argument("--grace", type=float, default=10.0,
                      help="seconds between TERM and KILL (default 10)")
    stop.add_argument("--timeout", type=float, default=60.0,
                      help="seconds to wait for each run to stop (default 60)")
    stop.set_defaults(func=cmd_stop)


def _what_runs(layout: RunLayout) -> str:
    """Who serves the run and what it runs, as far as its files tell cheaply: the counts
    of status.json (a dead coordinator's are its last), the manifests' live launches."""
    from ..adapters import manifests, runs
    from ..adapters.fsio import read_json
    from ..adapters.lock import live_endpoint

    status = read_json(layout.status)
    counts = status.get("counts") if isinstance(status, dict) else None
    jobs = (f"{counts.get('running', 0)} running, {counts.get('queued', 0)} queued"
            if isinstance(counts, dict) else None)
    if (endpoint := live_endpoint(layout)) is not None:
        return f"live coordinator (pid {endpoint.get('pid')})" + (f": {jobs}" if jobs else "")
    said = ["no live coordinator, " + ("work still alive" if runs.alive(layout)
                                       else "nothing alive")]
    if jobs:
        said.append(f"last status: {jobs}")
    if launches := [l for l in manifests.launches(layout) if l["state"] != manifests.GONE]:
        said.append(f"{len(launches)} peer-local launch{'es' * (len(launches) != 1)}")
    return "; ".join(said)


def _confirmed(count: int) -> bool:
    """Ask on the terminal (the question on stderr); anything but y or yes is a no."""
    print(f"stop {'this run' if count == 1 else f'these {count} runs'}? [y/N] ", end="",
          file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    return answer.strip().lower() in ("y", "yes")
