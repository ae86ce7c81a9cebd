"""``praxist-fs launch``'s per-job Slurm options (R-DIST-2): flags named and spelled as
sbatch's own, read into the request's ``slurm`` object (core/slurm_options.py), which
the coordinator checks against the task file (a run on another backend, or an sbatch
option the task file does not allow, is rejected naming the field)."""

from __future__ import annotations

import argparse
import re

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a launch's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any

# sbatch's --time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_MEM = re.compile(r"(\d+)([KMGT]?)B?", re.IGNORECASE)
_KIB = {"K": 1, "": 1024, "M": 1024, "G": 1024**2, "T": 1024**3}  # a unit's KiB; none: MB


def add_arguments(parser: argparse.ArgumentParser) -> None:
    slurm = parser.add_argument_group(
        "Slurm options (a run with backend: slurm; over the profile's defaults)")
    slurm.add_argument("--time", type=minutes, metavar="LIMIT", help="time limit, as "
                       "sbatch's --time: minutes, or [D-]HH:MM[:SS] (rounded up to minutes)")
    slurm.add_argument("--partition", metavar="NAME", help="Slurm partition (-p)")
    slurm.add_argument("--account", metavar="NAME", help="Slurm account (-A)")
    slurm.add_argument("--qos", metavar="NAME", help="Slurm quality of service")
    slurm.add_argument("--constraint", metavar="FEATURES",
                       help="node features, as sbatch's --constraint (e.g. 'a100&ib')")
    slurm.add_argument("--mem", type=megabytes, metavar="SIZE", help="host memory, as "
                       "sbatch's --mem: megabytes, or with a K, M, G or T suffix")
    slurm.add_argument("--warning-seconds", type=int, metavar="SECONDS",
                       help="send the task file's warning signal (default USR2) this long "
                       "before the time limit, to checkpoint; 0: none (default: the task's)")
    slurm.add_argument("--nodes", type=int, metavar="N", help="a job of several processes: "
                       "one allocation of N nodes, the command run once per task (R-DIST-3)")
    slurm.add_argument("--ntasks-per-node", type=int, metavar="T",
                       help="tasks (command processes) per node (default 1)")
    slurm.add_argument("--gpus-per-node", type=int, metavar="G",
                       help="GPUs per node (default: the profile's gpu_count)")
    slurm.add_argument("--sbatch-option", action="append", default=[], metavar="--NAME[=VALUE]",
                       help="another sbatch option the task file allows "
                       "(slurm.allowed_options); repeatable; write it --sbatch-option=--NAME")


def request_field(args: argparse.Namespace) -> dict[str, Any] | None:
    """The request's ``slurm`` object from the flags given, or None without any."""
    given = {"time_limit_minutes": args.time, "partition": args.partition,
             "account": args.account, "qos": args.qos, "constraint": args.constraint,
             "mem_mb": args.mem, "warning_seconds": args.warning_seconds,
             "options": args.sbatch_option or None, "nodes": args.nodes,
             "tasks_per_node": args.ntasks_per_node, "gpus_per_node": args.gpus_per_node}
    given = {key: value for key, value in given.items() if value is not None}
    return given or None


def minutes(text: str) -> int:
    """sbatch's time formats, in whole minutes (rounded up)."""
    match = _TIME.fullmatch(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    days, first, second, third = match.groups()
    if days is not None:  # D-H, D-H:M, D-H:M:S
        seconds = (int(days) * 24 + int(first)) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # H:M:S
        seconds = int(first) * 3600 + int(second) * 60 + int(third)
    else:  # M, M:S
        seconds = int(first) * 60 + int(second or 0)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a time limit must be positive")
    return -(-seconds // 60)


def megabytes(text: str) -> int:
    """sbatch's --mem sizes, in megabytes (rounded up)."""
    match = _MEM.fullmatch(text.strip())
    if not match or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 4000, 500M or 64G")
    return -(-int(match.group(1)) * _KIB[match.group(2).upper()] // 1024)
