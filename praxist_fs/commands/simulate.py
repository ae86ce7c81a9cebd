"""``praxist-fs simulate``: replay a job trace through the core on a virtual clock and
simulated GPUs (docs/SIMULATE.md); the replay itself is ``praxist_fs.simulate``."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

from ..config import load_policy
from ..errors import PolicyError
from ..report import end_of, render, write
from ..simulate import PLACEMENTS, Livelock, Result, TraceError, load_trace, replay
from .render import format_json, format_simulation, write_plot


def add_parsers(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("simulate", help="replay a job trace through the scheduler core "
                         "on a virtual clock and simulated GPUs")
    sim.add_argument("--trace", required=True, metavar="FILE.csv",
                     help="columns job_id,submit_s,duration_s,gpus,user "
                     "[,gpu_util_pct,gpu_mem_gb,work_class]")
    sim.add_argument("--gpus", required=True, type=int, metavar="N",
                     help="simulated H200-like GPUs (one host)")
    sim.add_argument("--policy", action="append", default=[], metavar="TASK.yaml",
                     help="a task file to compare; repeat for more (default: the embedded "
                     "seed contract)")
    sim.add_argument("--placement", choices=(*PLACEMENTS, "both"), default="declared",
                     help="declared: co-locate jobs by their declared share; exclusive: one "
                     "job per GPU; both: side by side (default %(default)s)")
    sim.add_argument("--speedup", type=float, default=1.0, metavar="X",
                     help="divide submit times by X (X > 1 packs arrivals tighter and raises "
                     "the load); durations are unchanged")
    sim.add_argument("--eta-noise", type=float, default=0.0, metavar="SIGMA",
                     help="request eta_s = duration x exp(N(0, SIGMA)) (default exact)")
    sim.add_argument("--seed", type=int, default=0, help="seed of the ETA noise")
    sim.add_argument("--limit", type=int, metavar="N", help="replay only the first N jobs")
    sim.add_argument("--json", action="store_true",
                     help="print the metrics per policy and placement as JSON")
    sim.add_argument("--plot", metavar="OUT.png",
                     help="queue length and busy GPUs over time (needs matplotlib: "
                     "pip install 'praxist-fs[plot]')")
    sim.add_argument("--report", metavar="OUT.html",
                     help="also write the replay's HTML report, as praxist-fs report draws a "
                     "run's (one file per policy and placement when there are several: "
                     "OUT-<policy>-<placement>.html)")
    sim.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    problem = next((text for bad, text in (
        (args.gpus < 1, "--gpus must be >= 1"),
        (not (args.speedup > 0 and math.isfinite(args.speedup)), "--speedup must be > 0"),
        (not (args.eta_noise >= 0 and math.isfinite(args.eta_noise)),
         "--eta-noise must be >= 0"),
        (args.limit is not None and args.limit < 1, "--limit must be >= 1"),
        (args.plot and importlib.util.find_spec("matplotlib") is None,
         "--plot needs matplotlib, which is not installed: pip install 'praxist-fs[plot]'"),
    ) if bad), None)
    if problem:
        print(f"praxist-fs simulate: {problem}", file=sys.stderr)
        return 2
    try:
        jobs = load_trace(args.trace, args.limit)
        policies = [(_label(path, args.policy), load_policy(path))
                    for path in args.policy or [None]]
    except (TraceError, PolicyError) as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 2
    if args.speedup != 1:
        jobs = [replace(j, submit_s=j.submit_s / args.speedup) for j in jobs]
    placements = PLACEMENTS if args.placement == "both" else (args.placement,)
    try:
        results = [replay(jobs, gpus=args.gpus, policy=policy, placement=placement, name=name,
                          eta_noise=args.eta_noise, seed=args.seed,
                          keep_scheduler=bool(args.report))
                   for name, policy in policies for placement in placements]
    except TraceError as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 2
    except Livelock as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 3
    if args.json:
        print(format_json({"trace": args.trace, "gpus": args.gpus, "jobs": len(jobs),
                           "results": [r.to_dict() for r in results]}))
    else:
        print(format_simulation(results))
    if args.plot:
        write_plot(results, args.plot)
        print(f"praxist-fs simulate: plot written to {args.plot}", file=sys.stderr)
    if args.report:
        for result, path in zip(results, _report_paths(args.report, results)):
            sched = result.scheduler
            size = write(path, render(sched, until=end_of(sched, None), title=(
                f"praxist-fs simulate: {args.trace} on {args.gpus} GPUs, policy "
                f"{result.policy}, {result.placement} placement")))
            print(f"praxist-fs simulate: report written to {path} ({size / 1e6:.2f} MB)",
                  file=sys.stderr)
    return 0


def _report_paths(path: str, results: list[Result]) -> list[str]:
    """``path`` for one replay; one file beside it per policy and placement for more."""
    if len(results) == 1:
        return [path]
    out = Path(path)
    return [str(out.with_name(f"{out.stem}-{Path(r.policy).stem}-{r.placement}{out.suffix}"))
            for r in results]


def _label(path: str | None, paths: list[str]) -> str:
    """A policy's name in the table: its file name, or its path when two share a name."""
    if path is None:
        return "default"
    stem = Path(path).stem
    return stem if sum(Path(p).stem == stem for p in paths) == 1 else path
