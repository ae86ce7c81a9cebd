"""The recommended policy's starvation bound against greedy placement: do wide jobs wait
longer than under greedy placement, and what does the bound cost (issue 32, item 1)?

    .venv/bin/python bench/starvation_table.py [--trace ../shared/traces/trace_philly.csv]
        [--limit 15000] [--loads 1,1.25] [--factors off,4] [--workers 2]

For the Philly trace and its fractional derivation (bench/derive_fractional_trace.py), at
each capacity (the loads times the trace's offered load, as bench/policy_table.py takes
it), replays greedy placement (fcfs; one job per GPU on the whole-GPU trace, co-located
by declared shares on the fractional one), fixtures/policies/recommended.yaml as it is,
and recommended.yaml with each ``shortest_first_starvation_factor`` (``off``: without the
bound). Prints markdown:
mean and p95 queueing delay, the p95 and the longest delay of the wide jobs (4 GPUs and
more), and each replay's wall time. The whole trace takes minutes per replay.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor

from policy_table import RECOMMENDED, TRACES, jobs, offered_load, table_parser

from praxist_fs.commands.render import _span as span
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.simulate import replay

NARROW = ("1", "2")  # simulate's size classes below "wide"


def one(case: tuple[str, str, int, int, str, float | None]) -> str:
    """A markdown row of one replay: (trace path, trace kind, limit, GPUs, label, factor);
    the label "greedy" replays fcfs without shares on the whole trace."""
    path, kind, limit, gpus, label, factor = case
    task = parse_task_text(RECOMMENDED.read_text(encoding="utf-8"), str(RECOMMENDED))
    scheduler = task["compute_budget"]["resource_scheduler"]
    mode = "declared"
    if label == "greedy":
        scheduler.update(job_picker="fcfs", placement="spread")
        mode = "exclusive" if kind == "whole-GPU" else "declared"
    if factor == 0:  # the bound off
        scheduler.pop("shortest_first_starvation_factor", None)
    elif factor is not None:
        scheduler["shortest_first_starvation_factor"] = factor
    started = time.monotonic()
    result = replay(jobs(path, limit, kind), gpus=gpus, policy=policy_from_mapping(task),
                    placement=mode, name=label, seed=0)
    wide = [summary for size, summary in result.by_gpus.items() if size not in NARROW]
    cells = [kind, str(gpus), label, span(result.mean_delay_s), span(result.p95_delay_s),
             span(max((s["p95_delay_s"] for s in wide), default=0.0)),
             span(max((s["max_delay_s"] for s in wide), default=0.0)),
             f"{result.completed}/{result.jobs}", f"{time.monotonic() - started:.0f} s"]
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = table_parser(__doc__, 15000, "1,1.25")
    parser.add_argument("--factors", default="off,4",
                        help="shortest_first_starvation_factor values to replay besides "
                        "recommended.yaml's own (off: none)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    load = offered_load(jobs(args.trace, args.limit, "whole-GPU"))
    factors = [0.0 if f == "off" else float(f) for f in args.factors.split(",") if f]
    cases = [(args.trace, kind, args.limit, round(load * float(mult)), label, factor)
             for kind in TRACES for mult in args.loads.split(",")
             for label, factor in [("greedy", None), ("recommended", None),
                                   *((f"recommended, factor {f:g}" if f else
                                      "recommended, no bound", f) for f in factors)]]
    print(f"{args.limit:,} earliest jobs of the trace, offered load {load:.0f} GPUs\n")
    print("| trace | GPUs | policy | mean delay | p95 delay | wide p95 | wide longest "
          "| done | replay |")
    print("|---|---|---|---|---|---|---|---|---|")
    with ProcessPoolExecutor(args.workers) as pool:
        for row in pool.map(one, cases):
            print(row, flush=True)


if __name__ == "__main__":
    main()
