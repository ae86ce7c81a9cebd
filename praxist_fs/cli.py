"""Command line: parse, call, print. Each command group is a module of ``commands/``
(or of the subsystem it drives) with its own ``add_parsers``; no scheduling logic here.

Only the module of the verb given is imported (``VERBS``): each pulls in what its
command needs, and a CLI call should start in a blink, not pay every command's imports
(R-PERF-3). The whole parser is built only for ``--help`` and mistakes, to list them all."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable

from .adapters import procs
from .errors import NoProcfs

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import NoReturn

# Commands that read only files, so they work where procfs is missing; every other one
# identifies processes (a live coordinator, attempts, what to stop) and refuses there.
WITHOUT_PROCESSES = {"jobs", "logs", "simulate"}
EXIT_NO_PROCFS = 72  # EX_OSFILE: a system file this command needs is missing
# Each verb's module under commands/, in the order ``praxist-fs --help`` lists them;
# profile and bind parse their own flags (``main``).
VERBS = {"serve": "run", "demo": "run", "launch": "launch", "status": "status",
         "top": "top", "jobs": "jobs", "logs": "logs", "wait": "logs", "cancel": "control",
         "hold": "control", "release": "control", "update": "control",
         "raise-budget": "control", "profile": None, "bind": None, "generation": "supply",
         "lease": "supply", "stop": "stop", "simulate": "simulate", "report": "report"}


def run() -> NoReturn:
    """The entry of a process of its own: the console script's and ``python -m
    praxist_fs``'s. ``main``, with the cyclic garbage collector off while the verb's
    modules are imported and its flags parsed, and what those made frozen out of every
    later collection (``_collect_from_here``): modules and what they define live as long
    as the process, so the collections of the imports, of the verb and of the
    interpreter's teardown found nothing to free among them and only walked them: 2-6 ms
    of a 26-34 ms read or control verb, installed (R-PERF-3; bench/bench_cli.py)."""
    gc.disable()
    raise SystemExit(main(parsed=_collect_from_here))


def _collect_from_here() -> None:
    """The verb is known: what exists now is frozen, and the collector is on for the
    verb's own objects, as a long verb (``serve``, ``wait``, ``simulate``) needs, and as a
    short one's garbage is collected and finalized at its exit."""
    gc.freeze()
    gc.enable()


def main(argv: list[str] | None = None, parsed: Callable[[], object] = lambda: None) -> int:
    """Run the verb ``argv`` names (``sys.argv``'s by default) and return its exit status;
    ``parsed`` is called once the verb is known and its flags parsed, before it runs."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["profile"]:  # these two parse their own flags and pass the rest on
        parsed()
        from .profiler import main_profile
        return main_profile(argv[1:])
    if argv[:1] == ["bind"]:
        parsed()
        from .binding import main_bind
        return main_bind(argv[1:])
    parser = _parser(argv[0] if argv and VERBS.get(argv[0]) else None)
    args = parser.parse_args(argv)
    parsed()
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


def _parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``verb``'s module alone, or of every command (None)."""
    parser = _Parser(
        prog="praxist-fs", description="A filesystem-mailbox experiment scheduler: submit, "
        "watch and control the experiments of a run.")
    sub = parser.add_subparsers(dest="command")
    modules = [VERBS[verb]] if verb is not None else list(dict.fromkeys(VERBS.values()))
    for module in modules:
        if module is None:
            continue
        importlib.import_module(f".commands.{module}", __package__).add_parsers(sub)
        if module == "control" and verb is None:  # where --help has always listed them
            sub.add_parser("profile", add_help=False,
                           help="observe an unchanged command and propose a resource "
                           "profile: profile [--interval S] [--repeat N] [--out FILE] -- CMD")
            sub.add_parser("bind", add_help=False, help="run CMD with the attempt's GPU mask "
                           "verified or restored: bind -- CMD")
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too: ``add_subparsers`` makes them of this
    class), whose formatters are told the help's width instead of asking ``shutil``:
    argparse makes one at every ``add_argument`` (to check a metavar), and ``shutil``
    imports zlib, bz2 and lzma, ~2 ms of every call (R-PERF-3)."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        return self.formatter_class(prog=self.prog, width=_help_width())


def _help_width() -> int:
    """The width argparse's formatter takes by default: ``shutil.get_terminal_size()``'s
    columns ($COLUMNS, else the terminal's, else 80), less 2."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2
