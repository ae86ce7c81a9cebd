"""What EASY backfill's reservations hold, and for whom: greedy co-location against
fixtures/policies/backfill.yaml (``--uncapped``) with exact and noisy ETAs, on the
Philly trace or its fractional derivation at one capacity (docs/SIMULATE.md, *Why
backfill loses the mean on the whole trace*).

    .venv/bin/python bench/backfill_reservations.py [--limit 15000] [--load 0.8]
        [--trace-kind whole-GPU|fractional] [--eta-noise 1]

Per replay it prints the mean and p95 delay and the mean delay by GPU count (days);
GPU-days left idle while jobs waited (from the replay's busy-GPU series); and for
backfill, its reservations (``Pass.reserve``, observed, not changed): how many jobs got
one, in how many passes, the share of reservations whose expected start was the
pass's own instant (running work past its ETA counts as ending now), how much later
than its first reservation's start the reserved job really started (hours: a start
pushed back pass after pass).
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from derive_fractional_trace import PHILLY
from policy_table import jobs, offered_load
from shipped_table import GREEDY, POLICIES, trace_jobs

from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.core.model import Job
from praxist_fs.core.pickers.context import Pass
from praxist_fs.core.pickers.walk import Reservation
from praxist_fs.simulate import replay

DAY = 86400.0


class Reservations:
    """Wraps ``Pass.reserve`` to note each reservation (it returns what it did)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str, float]] = []  # at, trace job, expected start
        self._reserve = Pass.reserve

    def __enter__(self) -> Reservations:
        seen, reserve = self.seen, self._reserve

        def noted(ctx: Pass, job: Job) -> Reservation | None:
            found = reserve(ctx, job)
            if found is not None:
                seen.append((ctx.at, job.request.tag, found.start))
            return found

        Pass.reserve = noted
        return self

    def __exit__(self, *_: object) -> None:
        Pass.reserve = self._reserve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(PHILLY))
    parser.add_argument("--limit", type=int, default=15000)
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument("--trace-kind", default="whole-GPU", choices=("whole-GPU", "fractional"))
    parser.add_argument("--eta-noise", type=float, default=1.0)
    args = parser.parse_args()
    gpus = round(offered_load(jobs(args.trace, args.limit, "whole-GPU")) * args.load)
    print(f"{args.limit:,} jobs, {args.trace_kind}, {gpus} GPUs (x{args.load:g})")
    noisy = [("backfill", args.eta_noise)] if args.eta_noise else []
    for policy, sigma in [(GREEDY, 0.0), ("backfill", 0.0), *noisy]:
        name = "recommended" if policy == GREEDY else policy
        task = parse_task_text((POLICIES / f"{name}.yaml").read_text(encoding="utf-8"), name)
        mode = "declared"
        if policy == GREEDY:
            task["compute_budget"]["resource_scheduler"].update(job_picker="fcfs",
                                                                placement="spread")
            mode = "exclusive" if args.trace_kind == "whole-GPU" else "declared"
        with Reservations() as noted:
            result = replay(trace_jobs(args.trace, args.limit, args.trace_kind, False),
                            gpus=gpus, policy=policy_from_mapping(task), placement=mode,
                            name=policy, eta_noise=sigma, seed=0, uncapped=policy != GREEDY)
        series = result.series
        idle = sum((after[0] - before[0]) * (gpus - before[2])
                   for before, after in zip(series, series[1:]) if before[1] > 0)
        sizes = ", ".join(f"{size}: {summary['mean_delay_s'] / DAY:.2f}"
                          for size, summary in sorted(result.by_gpus.items()))
        print(f"\n{policy}{'' if policy == GREEDY else f', σ={sigma:g}'}: mean "
              f"{result.mean_delay_s / DAY:.2f}, p95 {result.p95_delay_s / DAY:.2f} days; "
              f"mean by GPUs {sizes}; GPU-days idle while jobs waited {idle / DAY:.1f} "
              f"(of {gpus * (series[-1][0] - series[0][0]) / DAY:.0f})")
        if not noted.seen:
            continue
        first: dict[str, float] = {}
        for _, tag, start in noted.seen:
            first.setdefault(tag, start)
        started = {record.job.job_id: record.start for record in result.records}
        late = [(started[tag] - start) / 3600 for tag, start in first.items()
                if started.get(tag) is not None]
        print(f"  reservations: {len(first)} jobs, {len(noted.seen)} passes; expected start "
              f"'now' in {sum(at == start for at, _, start in noted.seen) / len(noted.seen):.0%}; "
              f"started after the first reservation's start by median "
              f"{statistics.median(late):.1f} h, p95 {sorted(late)[int(0.95 * (len(late) - 1))]:.1f} h, "
              f"longest {max(late):.1f} h")


if __name__ == "__main__":
    main()
