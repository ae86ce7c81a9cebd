"""Issue 32's done-means table: greedy co-location and every shipped policy
(fixtures/policies/*.yaml) on the Philly trace and its fractional derivation, at four
capacities each, with and without work classes, with exact and noisy ETAs.

    .venv/bin/python bench/shipped_table.py [--trace ../shared/traces/trace_philly.csv]
        [--limit 15000] [--loads 0.8,1,1.25,1.5] [--eta-noise 1] [--workers 2]
        [--cache bench/.shipped_table] [--policies recommended,backfill,...]

Each replay's numbers are kept in ``--cache`` (one JSON file per row, named by a hash
of the trace's bytes, the case, the policy file's text and the scheduler's source), so a run
that was stopped goes on where it was, and a second run prints at once; ``--workers``
replays run at a time. Work classes are bench/derive_fractional_trace.py's
(``--work-classes``); σ is the ETA noise (``eta_s`` off by exp(N(0, σ)), seed 0).
Greedy co-location is fcfs with ``spread`` by declared shares (on the whole-GPU trace,
one job per GPU: the same). The shipped files other than recommended.yaml carry one
host's cap of 8 jobs at once: they are replayed ``--uncapped``, so the GPUs bound them
as they bound the rest. A policy that reads no ETA (greedy, fcfs, preempt, requeue) is
replayed once for both ETA columns. Every replay is audited for capacity violations:
``replay``'s ledger counts them, and a replay with any stops the table; a row kept
before the count was kept with it is replayed.

Prints markdown: per trace, the delays of each policy (mean, p95, the wide jobs' p95
and longest wait; wide: 4 GPUs or more; days), then the recommended policy against
greedy co-location in each row: mean and p95 as fractions of greedy's (issue 32: at
most 0.7 with work classes and noise, 0.6 without), and whether the wide jobs' p95 and
longest wait are greedy's or less.
"""

from __future__ import annotations

import hashlib
import json
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

from derive_fractional_trace import with_work_class
from policy_table import TRACES, jobs, offered_load, table_parser

import praxist_fs
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.simulate import TraceJob, replay

POLICIES = Path(__file__).resolve().parents[1] / "fixtures" / "policies"
GREEDY = "greedy co-location"
SHIPPED = ("recommended", "fcfs", "backfill", "preempt", "requeue")
READS_ETA = ("recommended", "backfill")  # the shipped files whose pickers read eta_s
NARROW = ("1", "2")  # simulate's size classes below "wide"
DAY = 86400.0


@dataclass(frozen=True)
class Case:
    trace: str          # whole-GPU | fractional
    gpus: int
    classes: bool       # work classes on
    sigma: float        # ETA noise
    policy: str         # GREEDY or a shipped file's stem

    def key(self, path: str, limit: int) -> str:
        """The cache file's name: what decides the replay's numbers."""
        text = "" if self.policy == GREEDY else (POLICIES / f"{self.policy}.yaml").read_text()
        blob = json.dumps([asdict(self), trace_digest(path), limit, text, source_digest()])
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


@cache
def trace_digest(path: str) -> str:
    """The trace's bytes, not its path or times: a copy of the same trace (a fresh
    checkout, ../shared copied again) keeps every cached row."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@cache
def source_digest() -> str:
    """A digest of the scheduler's and the simulator's source: a change to either
    invalidates every cached row."""
    root = Path(praxist_fs.__file__).parent
    digest = hashlib.sha256()
    for path in sorted([*root.glob("core/**/*.py"), root / "simulate.py", root / "config.py"]):
        digest.update(path.read_bytes())
    return digest.hexdigest()


@cache
def trace_jobs(path: str, limit: int, kind: str, classes: bool) -> list[TraceJob]:
    found = jobs(path, limit, kind)
    return [with_work_class(job) for job in found] if classes else found


def run(case: Case, path: str, limit: int) -> dict[str, float | int]:
    """One replay's row: delays in seconds, jobs done, wall time."""
    name = "recommended" if case.policy == GREEDY else case.policy
    task_file = POLICIES / f"{name}.yaml"
    task = parse_task_text(task_file.read_text(encoding="utf-8"), str(task_file))
    mode, uncapped = "declared", case.policy not in ("recommended", GREEDY)
    if case.policy == GREEDY:
        task["compute_budget"]["resource_scheduler"].update(job_picker="fcfs",
                                                            placement="spread")
        mode = "exclusive" if case.trace == "whole-GPU" else "declared"
    result = replay(trace_jobs(path, limit, case.trace, case.classes), gpus=case.gpus,
                    policy=policy_from_mapping(task), placement=mode, name=case.policy,
                    eta_noise=case.sigma, seed=0, uncapped=uncapped)
    if result.capacity_violations:
        raise SystemExit(f"{case}: {result.capacity_violations} capacity violation(s), "
                         f"the first: {result.violations[0]}")
    wide = [s for size, s in result.by_gpus.items() if size not in NARROW]
    return {"capacity_violations": result.capacity_violations, "mean": result.mean_delay_s, "p95": result.p95_delay_s,
            "wide_p95": max((s["p95_delay_s"] for s in wide), default=0.0),
            "wide_max": max((s["max_delay_s"] for s in wide), default=0.0),
            "completed": result.completed, "jobs": result.jobs, "wall_s": result.wall_s}


def replayed(case: Case) -> Case:
    """The replay whose numbers stand for ``case``: a policy that reads no ETA is the
    same replay with exact ones."""
    if case.sigma and case.policy not in READS_ETA:
        return Case(case.trace, case.gpus, case.classes, 0.0, case.policy)
    return case


def days(seconds: float) -> str:
    return f"{seconds / DAY:.2f}"


def main() -> None:
    parser = table_parser(__doc__, 15000, "0.8,1,1.25,1.5")
    parser.add_argument("--eta-noise", type=float, default=1.0, metavar="SIGMA",
                        help="the noisy ETAs' σ (0: exact ETAs only)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", default=str(Path(__file__).parent / ".shipped_table"),
                        help="a folder for one JSON file per replayed row")
    parser.add_argument("--policies", default=",".join(SHIPPED),
                        help="the shipped files to replay besides greedy co-location")
    args = parser.parse_args()
    load = offered_load(jobs(args.trace, args.limit, "whole-GPU"))
    capacities = [round(load * float(x)) for x in args.loads.split(",")]
    sigmas = [0.0] + ([args.eta_noise] if args.eta_noise else [])
    policies = [GREEDY, *(p for p in args.policies.split(",") if p)]
    cases = [Case(trace, gpus, classes, sigma, policy) for trace in TRACES
             for gpus in capacities for classes in (False, True) for sigma in sigmas
             for policy in policies]
    cache_dir = Path(args.cache)
    cache_dir.mkdir(parents=True, exist_ok=True)
    rows: dict[Case, dict[str, float | int]] = {}
    todo = []
    for case in dict.fromkeys(map(replayed, cases)):
        kept = cache_dir / f"{case.key(args.trace, args.limit)}.json"
        row = json.loads(kept.read_text()) if kept.exists() else {}
        if "capacity_violations" in row:  # audited: else kept before the audit was
            rows[case] = row
        else:
            todo.append(case)
    with ProcessPoolExecutor(args.workers) as pool:
        futures = {pool.submit(run, case, args.trace, args.limit): case for case in todo}
        for done in as_completed(futures):
            case = futures[done]
            rows[case] = done.result()
            kept = cache_dir / f"{case.key(args.trace, args.limit)}.json"
            kept.with_suffix(".tmp").write_text(json.dumps(rows[case]))
            kept.with_suffix(".tmp").replace(kept)
            print(f"{len(rows)}: {case}: {rows[case]['wall_s']:.0f} s", file=sys.stderr,
                  flush=True)
    print(f"{args.limit:,} earliest jobs of {Path(args.trace).name}, offered load "
          f"{load:.0f} GPUs; capacities {', '.join(map(str, capacities))} GPUs "
          f"(x{args.loads.replace(',', ', x')}). Delays in days; wide: 4 GPUs or more. "
          "Shipped files other than recommended.yaml replayed --uncapped.\n")
    for trace in TRACES:
        print(f"#### {trace} trace\n")
        print("| GPUs | work classes | ETAs | policy | mean | p95 | wide p95 | wide longest "
              "| done |")
        print("|---|---|---|---|---|---|---|---|---|")
        for case in cases:
            if case.trace == trace:
                row = rows[replayed(case)]
                print(f"| {case.gpus} | {'on' if case.classes else 'off'} | "
                      f"{f'σ={case.sigma:g}' if case.sigma else 'exact'} | {case.policy} | "
                      f"{days(row['mean'])} | {days(row['p95'])} | {days(row['wide_p95'])} | "
                      f"{days(row['wide_max'])} | {row['completed']}/{row['jobs']} |")
        print()
    if "recommended" not in policies:
        return
    print("#### The recommended policy against greedy co-location\n")
    print("| trace | GPUs | work classes | ETAs | mean / greedy | p95 / greedy "
          "| wide p95 / greedy | wide longest / greedy | item 4 (≤ 0.7) | item 1 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        if case.policy != "recommended":
            continue
        mine = rows[replayed(case)]
        greedy = rows[replayed(Case(case.trace, case.gpus, case.classes, case.sigma, GREEDY))]
        ratios = [mine[k] / greedy[k] if greedy[k] else 1.0
                  for k in ("mean", "p95", "wide_p95", "wide_max")]
        item4 = max(ratios[:2]) <= 0.7
        item1 = max(ratios[:2]) <= 0.6 and max(ratios[2:]) <= 1.0
        print(f"| {case.trace} | {case.gpus} | {'on' if case.classes else 'off'} | "
              f"{f'σ={case.sigma:g}' if case.sigma else 'exact'} | "
              + " | ".join(f"{r:.2f}" for r in ratios)
              + f" | {'yes' if item4 else 'NO'} | {'yes' if item1 else 'NO'} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
