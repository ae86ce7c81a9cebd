"""Command line: parse, call, print. Each command group is a module of ``commands/``
(or of the subsystem it drives) with its own ``add_parsers``; no scheduling logic here."""

from __future__ import annotations

import argparse
import sys

from .backends.local import procs
from .commands import (control, jobs, launch, logs, report, run, simulate, status, stop,
                       supply, top)
from .errors import NoProcfs

# Commands that read only files, so they work where procfs is missing; every other one
# identifies processes (a live coordinator, attempts, what to stop) and refuses there.
WITHOUT_PROCESSES = {"jobs", "logs", "simulate"}
EXIT_NO_PROCFS = 72  # EX_OSFILE: a system file this command needs is missing


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:  # these two parse their own flags and pass the rest on
        from .profiler import main_profile
        return main_profile(argv[1:])
    if argv[:1] == ["bind"]:
        from .binding import main_bind
        return main_bind(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command not in WITHOUT_PROCESSES:
        try:
            procs.require_procfs()
        except NoProcfs as exc:
            print(f"praxist-fs {args.command}: {exc}", file=sys.stderr)
            return EXIT_NO_PROCFS
    try:
        return args.func(args)
    except BrokenPipeError:  # `praxist-fs status | head`
        sys.stderr.close()
        return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="praxist-fs", description="A filesystem-mailbox experiment scheduler: submit, "
        "watch and control the experiments of a run.")
    sub = parser.add_subparsers(dest="command")
    run.add_parsers(sub)
    launch.add_parsers(sub)
    status.add_parsers(sub)
    top.add_parsers(sub)
    jobs.add_parsers(sub)
    logs.add_parsers(sub)
    control.add_parsers(sub)
    sub.add_parser("profile", add_help=False,
                   help="observe an unchanged command and propose a resource profile: "
                   "profile [--interval S] [--repeat N] [--out FILE] -- CMD")
    sub.add_parser("bind", add_help=False,
                   help="run CMD with the attempt's GPU mask verified or restored: bind -- CMD")

    supply.add_parsers(sub)
    stop.add_parsers(sub)
    simulate.add_parsers(sub)
    report.add_parsers(sub)
    return parser
