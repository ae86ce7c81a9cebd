"""``praxist-fs simulate``: replay a job trace through the core on a virtual clock and
simulated GPUs (docs/SIMULATE.md); the replay itself is ``praxist_fs.simulate``."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from dataclasses import replace
from pathlib import Path

from ..adapters.history import read_run
from ..adapters.layout import RunLayout
from ..config import load_policy
from ..core.snapshot import SnapshotError
from ..errors import PolicyError
from ..report import devices_of, render_parts, write
from ..report_history import History
from ..simulate import (
    H200_MIB, H200_MODEL, PLACEMENTS, Livelock, Result, SimulatedGpu, TraceError, TraceJob,
    load_trace, replay, trace_from_history, write_jobs_csv,
)
from . import since
from .render import cap_bound, format_json, format_simulation, write_plot


def add_parsers(sub: argparse._SubParsersAction) -> None:
    sim = sub.add_parser("simulate", help="replay a job trace through the scheduler core "
                         "on a virtual clock and simulated GPUs")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", metavar="FILE.csv",
                        help="columns job_id,submit_s,duration_s,gpus,user "
                        "[,gpu_util_pct,gpu_mem_gb,work_class]")
    source.add_argument("--from-run", metavar="RUN",
                        help="replay a run's own history instead: its jobs' submit times, "
                        "peers, work classes, declared GPU demand and actual run times, from "
                        "its journal")
    sim.add_argument("--since", type=since, metavar="WHEN",
                     help="with --from-run, only the jobs submitted since: a duration (7d, "
                     "12h) ago or an ISO-8601 time")
    sim.add_argument("--gpus", required=True, type=int, metavar="N",
                     help="simulated GPUs (one host)")
    sim.add_argument("--gpu-model", default=H200_MODEL, metavar="NAME",
                     help="the simulated devices' model name (default %(default)s)")
    sim.add_argument("--gpu-memory-gb", type=float, default=H200_MIB / 1024, metavar="GIB",
                     help="memory of each simulated device in GiB (default %(default).1f, "
                     "an H200)")
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
    sim.add_argument("--uncapped", action="store_true",
                     help="lift the task file's concurrency limits (max_concurrent_experiments "
                     "raised to the job count) so GPUs are the only constraint")
    sim.add_argument("--json", action="store_true",
                     help="print the metrics per policy and placement as JSON")
    sim.add_argument("--deterministic", action="store_true",
                     help="leave the wall time out of the output (it goes to stderr), so two "
                     "runs of the same command print the same bytes")
    sim.add_argument("--jobs-csv", metavar="FILE.csv",
                     help="write one row per job and policy: submit, start, end, delay, "
                     "suspended time, completion time, slowdown, preemptions, devices")
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
        (args.since is not None and not args.from_run, "--since needs --from-run"),
        (not (args.gpu_memory_gb > 0 and math.isfinite(args.gpu_memory_gb)),
         "--gpu-memory-gb must be > 0"),
        (not args.gpu_model.strip(), "--gpu-model must not be empty"),
        (args.jobs_csv and not Path(args.jobs_csv).resolve().parent.is_dir(),
         f"--jobs-csv {args.jobs_csv}: its directory does not exist"),
        (args.plot and importlib.util.find_spec("matplotlib") is None,
         "--plot needs matplotlib, which is not installed: pip install 'praxist-fs[plot]'"),
    ) if bad), None)
    if problem:
        print(f"praxist-fs simulate: {problem}", file=sys.stderr)
        return 2
    try:
        jobs = (load_trace(args.trace, args.limit) if args.trace
                else _history(args.from_run, args.since)[:args.limit])
        policies = [(_label(path, args.policy), load_policy(path))
                    for path in args.policy or [None]]
    except (TraceError, PolicyError) as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 2
    if args.speedup != 1:
        jobs = [replace(j, submit_s=j.submit_s / args.speedup) for j in jobs]
    placements = PLACEMENTS if args.placement == "both" else (args.placement,)
    device = SimulatedGpu(model=args.gpu_model.strip(),
                          memory_mib=round(args.gpu_memory_gb * 1024))
    try:
        results = [replay(jobs, gpus=args.gpus, policy=policy, placement=placement, name=name,
                          eta_noise=args.eta_noise, seed=args.seed, uncapped=args.uncapped,
                          device=device, keep_scheduler=bool(args.report))
                   for name, policy in policies for placement in placements]
    except TraceError as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 2
    except Livelock as exc:
        print(f"praxist-fs simulate: {exc}", file=sys.stderr)
        return 3
    if args.jobs_csv:
        try:
            write_jobs_csv(results, args.jobs_csv)
        except OSError as exc:
            print(f"praxist-fs simulate: --jobs-csv {args.jobs_csv}: cannot write "
                  f"({exc.strerror})", file=sys.stderr)
            return 2
    for r in results:
        if r.cap_bound_s:  # a one-host file replayed at a cluster's scale, say
            print(f"praxist-fs simulate: warning: policy {r.policy} ({r.placement}): "
                  f"{cap_bound(r)}; the numbers measure its cap (a policy file's first "
                  "comment line says the scale it is for; --uncapped lifts the cap)",
                  file=sys.stderr)
    wall = not args.deterministic
    if args.json:
        print(format_json({"trace": args.trace, **({"from_run": args.from_run}
                                                     if args.from_run else {}),
                           "gpus": args.gpus, "jobs": len(jobs),
                           "gpu_model": device.model, "gpu_memory_mib": device.memory_mib,
                           "concurrency": "uncapped" if args.uncapped else "task file",
                           "results": [r.to_dict(wall=wall) for r in results]}))
    else:
        print(format_simulation(results, wall=wall))
    if not wall:
        for r in results:
            print(f"praxist-fs simulate: {r.policy} ({r.placement}) replayed in "
                  f"{r.wall_s:.1f} s", file=sys.stderr)
    if args.plot:
        write_plot(results, args.plot)
        print(f"praxist-fs simulate: plot written to {args.plot}", file=sys.stderr)
    if args.report:
        for result, path in zip(results, _report_paths(args.report, results)):
            sched = result.scheduler
            history = History.of(sched.jobs.values())
            size = write(path, render_parts(
                sched, until=history.end(None), history=history, title=(
                    f"praxist-fs simulate: {args.trace or '--from-run ' + args.from_run} on "
                    f"{args.gpus} GPUs, policy "
                    f"{result.policy}, {result.placement} placement"),
                devices=devices_of(None, sched)))
            print(f"praxist-fs simulate: report written to {path} ({size / 1e6:.2f} MB)",
                  file=sys.stderr)
    return 0


def _history(run_dir: str, since: float | None) -> list[TraceJob]:
    """The run's jobs as its coordinator would rebuild them at a start (its snapshot, then
    its journal), read without writing anything, as a trace; what is left out, and why,
    goes to stderr."""
    layout = RunLayout.at(run_dir)
    try:
        sched, _ = read_run(layout)
    except FileNotFoundError:
        raise TraceError(f"--from-run {run_dir}: not a run directory (no "
                         f"{layout.journal.relative_to(layout.root)})") from None
    except OSError as exc:
        raise TraceError(f"--from-run {run_dir}: cannot read {exc.filename} "
                         f"({exc.strerror})") from None
    except (SnapshotError, ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"--from-run {run_dir}: its journal does not replay ({exc})") from None
    jobs, left_out = trace_from_history(sched.jobs.values(), sched.policy.profiles, since)
    print(f"praxist-fs simulate: --from-run {run_dir}: {len(jobs)} jobs"
          + "".join(f"; left out: {count} {why}" for why, count in sorted(left_out.items())),
          file=sys.stderr)
    return jobs
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
