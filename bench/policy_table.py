"""Every built-in job picker and placement on the Philly prefix and its fractional variant,
at 0.8x to 1.5x of the offered load: the table in docs/SIMULATE.md, *Choosing a policy*.

    .venv/bin/python bench/policy_table.py [--trace ../shared/traces/trace_philly.csv]
        [--limit 2000] [--loads 0.8,1,1.25,1.5] [--eta-noise 1] [--workers 2]
        [--recommended-only]

Each policy is fixtures/policies/recommended.yaml with its ``job_picker`` and
``placement`` replaced, so they differ in nothing else (its cap of 10,000 jobs at once
leaves the GPUs the only limit). Two baselines: greedy one-job-per-GPU (fcfs, every job
exclusive: simulate's ``--placement exclusive``) and greedy co-location (fcfs, spread,
declared shares). The whole-GPU trace has no shares, so there the two are one, and
placement orders only empty devices: one placement is replayed. The fractional variant
is bench/derive_fractional_trace.py's. The capacities are the loads times the prefix's
offered load (GPU-seconds over its submit span). ``--eta-noise`` adds rows for the pickers
that read ETAs, with each ``eta_s`` off by exp(N(0, SIGMA)) (seed 0).

Prints markdown: per trace and capacity, mean, p50 and p95 delay, mean completion time,
mean delay of the 1-GPU and of the 8-GPU jobs; then the recommended policy against both
baselines (the ratio of its mean and p95 delay to theirs). Runs ``--workers``
replays at a time (each about 2-10 s at 2,000 jobs on the 2-core development machine).
"""

from __future__ import annotations

import argparse
import math
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from derive_fractional_trace import PHILLY, fractional

from praxist_fs.commands.render import _span as span
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.simulate import Result, TraceJob, load_trace, replay

RECOMMENDED = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "recommended.yaml"
PICKERS = ("fcfs", "backfill", "fair_share", "shortest_expected_first", "multifactor",
           "least_attained_service")
PLACEMENTS = ("spread", "best_fit", "fragmentation")
ETA_PICKERS = ("shortest_expected_first", "backfill")  # the built-in pickers that read eta_s
TRACES = ("whole-GPU", "fractional")


@dataclass(frozen=True)
class Case:
    trace: str          # whole-GPU | fractional
    gpus: int
    picker: str
    placement: str      # the task file's key
    mode: str = "declared"  # simulate's --placement: exclusive for the greedy baseline
    eta_noise: float = 0.0

    @property
    def label(self) -> str:
        if self.mode == "exclusive":
            return "greedy one job per GPU (fcfs, exclusive)"
        name = f"{self.picker} + {self.placement}"
        return name + (f", ETA noise σ={self.eta_noise:g}" if self.eta_noise else "")


@cache
def jobs(path: str, limit: int, kind: str) -> list[TraceJob]:
    whole = load_trace(path, limit)
    return whole if kind == "whole-GPU" else [fractional(job) for job in whole]


def run(case: Case, path: str, limit: int) -> Result:
    task = parse_task_text(RECOMMENDED.read_text(encoding="utf-8"), str(RECOMMENDED))
    task["compute_budget"]["resource_scheduler"].update(job_picker=case.picker,
                                                        placement=case.placement)
    return replay(jobs(path, limit, case.trace), gpus=case.gpus,
                  policy=policy_from_mapping(task), placement=case.mode, name=case.label,
                  eta_noise=case.eta_noise, seed=0)


def offered_load(trace: list[TraceJob]) -> float:
    """GPUs the trace keeps busy on average over its submit span, were nothing to wait."""
    submits = [job.submit_s for job in trace]
    return sum(job.gpus * job.duration_s for job in trace) / (max(submits) - min(submits))


def cases(trace: str, gpus: int, eta_noise: float,
          best: tuple[str, str] | None = None) -> list[Case]:
    """The baselines, then every picker and placement (``best``: only that one)."""
    placements = PLACEMENTS if trace == "fractional" else ("best_fit",)
    found = [Case(trace, gpus, "fcfs", "spread", mode="exclusive")]
    if trace == "fractional":
        found.append(Case(trace, gpus, "fcfs", "spread"))  # greedy co-location
    if best is not None:
        picker, placement = best
        placement = placement if trace == "fractional" else "best_fit"
        found.append(Case(trace, gpus, picker, placement))
        if eta_noise and picker in ETA_PICKERS:
            found.append(Case(trace, gpus, picker, placement, eta_noise=eta_noise))
        return found
    found += [Case(trace, gpus, picker, placement) for picker in PICKERS
              for placement in placements if (trace, picker, placement) != (
                  "fractional", "fcfs", "spread")]
    if eta_noise:
        found += [Case(trace, gpus, picker, placement, eta_noise=eta_noise)
                  for picker in ETA_PICKERS for placement in placements]
    return found


def ratio(delay: float, baseline: float) -> float:
    """``delay`` over ``baseline``; no wait against no wait is 1 (as good), not 0/0."""
    return delay / baseline if baseline else (1.0 if delay == 0 else math.inf)


def row(case: Case, result: Result, marks: str) -> str:
    widths = result.by_gpus
    cells = [f"{case.label}{marks}", span(result.mean_delay_s), span(result.p50_delay_s),
             span(result.p95_delay_s), span(result.mean_jct_s),
             *(span(widths[size]["mean_delay_s"]) if size in widths else "-"
               for size in ("1", "8")),
             f"{result.completed}/{result.jobs}"]
    return "| " + " | ".join(cells) + " |"


def table_parser(doc: str, limit: int, loads: str) -> argparse.ArgumentParser:
    """The arguments every replay table here takes: the trace, the head of it to replay,
    and the capacities as multiples of its offered load."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--trace", default=str(PHILLY))
    parser.add_argument("--limit", type=int, default=limit)
    parser.add_argument("--loads", default=loads,
                        help="capacities as multiples of the offered load")
    return parser


def main() -> None:
    parser = table_parser(__doc__, 2000, "0.8,1,1.25,1.5")
    parser.add_argument("--eta-noise", type=float, default=1.0, metavar="SIGMA",
                        help="also replay the ETA-reading pickers with noisy ETAs (0: not)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--recommended-only", action="store_true",
                        help="replay only the baselines and the recommended policy (the whole "
                        "trace at its own offered load: --limit 15000)")
    args = parser.parse_args()
    load = offered_load(jobs(args.trace, args.limit, "whole-GPU"))
    capacities = [round(load * float(x)) for x in args.loads.split(",")]
    recommended = policy_from_mapping(parse_task_text(RECOMMENDED.read_text(encoding="utf-8")))
    best = (recommended.job_picker, recommended.placement)
    todo = [case for trace in TRACES for gpus in capacities
            for case in cases(trace, gpus, args.eta_noise,
                              best if args.recommended_only else None)]
    results: dict[Case, Result] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(run, case, args.trace, args.limit): case for case in todo}
        for done in as_completed(futures):
            case = futures[done]
            results[case] = done.result()
            print(f"{len(results)}/{len(todo)}: {case.trace}, {case.gpus} GPUs, {case.label}: "
                  f"{results[case].wall_s:.1f} s", file=sys.stderr, flush=True)
    print(f"{args.limit:,} earliest jobs of {Path(args.trace).name}, offered load "
          f"{load:.0f} GPUs; capacities {', '.join(map(str, capacities))} GPUs "
          f"(x{args.loads.replace(',', ', x')}). **(recommended)**: recommended.yaml's "
          "picker and placement.\n")
    verdicts = []
    for trace in TRACES:
        for gpus in capacities:
            print(f"#### {trace} trace, {gpus} GPUs\n")
            print("| policy | mean delay | p50 delay | p95 delay | mean JCT "
                  "| 1 GPU: mean delay | 8 GPUs: mean delay | done |")
            print("|---|---|---|---|---|---|---|---|")
            mine = [c for c in todo if (c.trace, c.gpus) == (trace, gpus)]
            for case in mine:
                chosen = (case.picker, case.placement) == best and case.mode == "declared"
                print(row(case, results[case], " **(recommended)**" if chosen else ""))
            print()
            greedy, colocation = (results[mine[0]], results[mine[1 if trace == "fractional"
                                                                   else 0]])
            for case in mine:
                if (case.picker, case.placement) == best and case.mode == "declared":
                    verdicts.append((case, results[case], greedy, colocation))
    print("#### The recommended policy against greedy\n")
    print("| trace | GPUs | policy | mean / greedy exclusive | p95 / greedy exclusive "
          "| mean / greedy co-location | p95 / greedy co-location | halves, never worse |")
    print("|---|---|---|---|---|---|---|---|")
    for case, result, greedy, colocation in verdicts:
        ratios = [ratio(result.mean_delay_s, greedy.mean_delay_s),
                  ratio(result.p95_delay_s, greedy.p95_delay_s),
                  ratio(result.mean_delay_s, colocation.mean_delay_s),
                  ratio(result.p95_delay_s, colocation.p95_delay_s)]
        good = max(ratios[:2]) <= 0.5 and max(ratios[2:]) <= 1
        print(f"| {case.trace} | {case.gpus} | {case.label} | "
              + " | ".join(f"{r:.2f}" for r in ratios) + f" | {'yes' if good else 'NO'} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
