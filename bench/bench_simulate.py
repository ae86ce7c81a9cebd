"""Wall time of a `praxist-fs simulate` replay of the full Philly trace (15,000 jobs).

    .venv/bin/python bench/bench_simulate.py [--gpus 64] [--limit N] [--policy TASK.yaml]
                                             [--picker NAME] [--placement declared]
                                             [--uncapped]
                                             [--profile OUT.pstats]

Prints one JSON object: the replay's wall time (``wall_s``, trace loading excluded), its
metrics (``by_gpus``: the delays by job size) and how many clock steps (one
``next_launches`` call each) it took. ``--profile`` also runs it under cProfile and
prints where the time went (docs/SIMULATE.md, Performance, has the numbers to expect).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
from dataclasses import replace
from pathlib import Path

from praxist_fs.config import load_policy
from praxist_fs.simulate import load_trace, replay

TRACE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "trace_philly.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", default=str(TRACE))
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--policy", help="task YAML (default: the embedded seed contract)")
    parser.add_argument("--picker", help="the job picker every queue uses (the task file's "
                        "job_picker, and no queue's own; default: the task file's)")
    parser.add_argument("--placement", default="declared", choices=("declared", "exclusive"))
    parser.add_argument("--uncapped", action="store_true",
                        help="lift the task file's concurrency cap, as simulate --uncapped "
                        "(the numbers in docs/SIMULATE.md, Performance, were taken so)")
    parser.add_argument("--profile", metavar="OUT.pstats")
    args = parser.parse_args()
    jobs = load_trace(args.trace, args.limit)
    policy = load_policy(args.policy)
    if args.picker:
        policy = replace(policy, job_picker=args.picker, queues=policy.queues and tuple(
            replace(queue, picker=None) for queue in policy.queues))
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = replay(jobs, gpus=args.gpus, policy=policy, placement=args.placement,
                    uncapped=args.uncapped,
                    name=Path(args.policy).stem if args.policy else "default")
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("tottime").print_stats(12)
    print(json.dumps({"trace": args.trace, "profiled": bool(profiler), "picker": policy.job_picker,
                      "clock_steps": len(result.series),  # one next_launches call each
                      **result.to_dict(), "unrunnable": len(result.unrunnable)}, indent=2))


if __name__ == "__main__":
    main()
