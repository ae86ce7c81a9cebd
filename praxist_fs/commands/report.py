"""``praxist-fs report``: the run's journal as one self-contained HTML file
(``praxist_fs.report`` draws it)."""

from __future__ import annotations

import argparse
import sys

from ..report import COLOUR_BY, ReportError, report_of, write
from . import add_run_dir, run_layout


def add_parsers(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="write an HTML report of the run (per-GPU "
                            "timeline, queue, delays, GPU-hours, failures, leases)")
    add_run_dir(report)
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html",
                        help="the file to write (the run directory is left untouched)")
    report.add_argument("--colour-by", choices=COLOUR_BY, default="peer",
                        help="what the timeline's colours tell apart (default %(default)s)")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    if (layout := run_layout(args, "praxist-fs report")) is None:
        return 2
    try:
        document, jobs = report_of(layout, args.colour_by)
    except ReportError as exc:
        print(f"praxist-fs report: {exc}", file=sys.stderr)
        return 1
    try:
        size = write(args.output, document)
    except OSError as exc:
        print(f"praxist-fs report: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"report written to {args.output} ({size / 1e6:.2f} MB, {jobs} jobs)")
    return 0
