"""The CLI's commands, one module per command group; rendering lives in render.py."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from ..adapters.layout import RunLayout

NO_RUN_DIR = "needs --run-dir (or PRAXIST_RUN_DIR)"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def add_run_dir(parser: argparse.ArgumentParser) -> None:
    """``--run-dir``, as every command that works on one run takes it."""
    parser.add_argument("--run-dir", default=os.environ.get("PRAXIST_RUN_DIR"),
                        help="the run directory (default $PRAXIST_RUN_DIR)")


def add_owner(parser: argparse.ArgumentParser) -> None:
    """``--uid``: whose tags a command's names are (R-SEC-5: each uid's tags name its own
    jobs). Reading another uid's job needs only the run's group; acting on it, an
    operator."""
    parser.add_argument("--uid", type=int, metavar="UID",
                        help="the tags named are this uid's (default: your own)")


def run_layout(args: argparse.Namespace, command: str) -> RunLayout | None:
    """The run ``--run-dir`` names, or None after saying that ``command`` (``praxist-fs
    COMMAND``) needs one."""
    if not args.run_dir:
        print(f"{command}: {NO_RUN_DIR}", file=sys.stderr)
        return None
    return RunLayout.at(args.run_dir)


def since(text: str) -> float:
    """``--since WHEN``, as ``jobs`` and ``simulate`` read it: ``2h``, ``30m``, ``1d`` (that
    long ago) or an ISO-8601 time, as epoch seconds."""
    if match := DURATION_RE.fullmatch(text.strip()):
        return time.time() - float(match[1]) * UNITS[match[2]]
    from datetime import datetime  # here: most calls give a duration or no --since

    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a duration (90s, 30m, 2h, 1d, 1w) or an ISO-8601 time "
            "(2024-05-01, 2024-05-01T14:30, 2024-05-01T14:30+02:00)") from None
