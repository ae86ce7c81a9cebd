"""``serve`` and ``demo``: run a run's coordinator, or take the tour on a scratch run."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from ..backends import registry
from ..config import load_policy
from ..errors import JournalCorrupt, NoRoomToStart, OwnerBusy, PolicyError, UnsafeLayout


EXIT_NO_ROOM = 74  # EX_IOERR: the run's disk is full, over quota or failing as it starts
EXIT_UNSAFE = 78   # EX_CONFIG: a directory of the run could be swapped by another uid (R-SEC-4)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the coordinator of a run directory")
    serve.add_argument("--run-dir", required=True)
    serve.add_argument("--config", help="task YAML (default: the embedded seed contract)")
    serve.add_argument("--fake-gpus", default=os.environ.get("PRAXIST_FAKE_GPUS"),
                       metavar="FILE", help="use the documented fake GPU inventory in FILE "
                       "instead of NVML (tests, demos)")
    serve.add_argument("--host-registry", default=os.environ.get("PRAXIST_HOST_REGISTRY"),
                       metavar="DIR", help="host-wide GPU allocation registry shared by the "
                       "runs of this host (default /run/praxist_fs or the runtime dir)")
    serve.add_argument("--psi-root", default=os.environ.get("PRAXIST_PSI_ROOT", "/proc/pressure"),
                       metavar="DIR", help="where to read PSI pressure files (default %(default)s)")
    serve.add_argument("--drop-damaged-record", type=int, metavar="SEQ",
                       help="drop the journal's damaged last record SEQ, as a refused start "
                       "names it, into resource_scheduler/quarantine/ (OPERATIONS.md *Crash*)")
    serve.add_argument("--metrics-textfile-dir", metavar="DIR",
                       default=os.environ.get("PRAXIST_METRICS_TEXTFILE_DIR"),
                       help="also write the run's metrics.prom into DIR as <run>-<hash>.prom, "
                       "for node_exporter's textfile collector (OPERATIONS.md *Metrics*)")
    serve.set_defaults(func=cmd_serve)

    demo = sub.add_parser("demo", help="a self-contained tour on a scratch run directory")
    demo.add_argument("--run-dir", default=".demo-run")
    demo.add_argument("--config", help="task YAML (default: fixtures/tasks/example.yaml)")
    demo.set_defaults(func=cmd_demo)


def cmd_serve(args: argparse.Namespace) -> int:
    from ..daemon import Coordinator

    logging.basicConfig(level=logging.INFO, format="praxist-fs: %(message)s")
    try:
        policy = load_policy(args.config)
    except PolicyError as exc:
        print(f"praxist-fs serve: invalid task file: {exc}", file=sys.stderr)
        return 2
    if policy.mode != "central":
        print("praxist-fs serve: the task is not 'mode: central'; legacy peer-local launching "
              "has no coordinator", file=sys.stderr)
        return 2
    if refused := registry.preflight(policy, Path(args.run_dir)):
        print("praxist-fs serve: invalid task file: " + "; ".join(refused), file=sys.stderr)
        return 2
    try:
        return Coordinator(args.run_dir, policy, fake_gpus=args.fake_gpus,
                           host_registry=args.host_registry, psi_root=args.psi_root,
                           drop_damaged_record=args.drop_damaged_record,
                           metrics_textfile_dir=args.metrics_textfile_dir).run()
    except (OwnerBusy, JournalCorrupt) as exc:
        print(f"praxist-fs serve: {exc}", file=sys.stderr)
        return 1
    except NoRoomToStart as exc:
        print(f"praxist-fs serve: {exc}", file=sys.stderr)
        return EXIT_NO_ROOM
    except UnsafeLayout as exc:
        print(f"praxist-fs serve: refusing an unsafe run directory: {exc}", file=sys.stderr)
        return EXIT_UNSAFE


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.run_dir, args.config)
