"""Command line: parse, call, print. Each command group is a module of ``commands/``
(or of the subsystem it drives) with its own ``add_parsers``; no scheduling logic here."""

from __future__ import annotations

import argparse
import sys

from .commands import control, jobs, launch, logs, run, simulate, status, stop, supply


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
    return parser
