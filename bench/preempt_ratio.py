"""Replay time of the preemption policies against fcfs (issue 32 item 5: preemption
replays within 3x of fcfs's time) on the Philly head and its fractional derivation, with
and without work classes.

    .venv/bin/python bench/preempt_ratio.py [--trace ../shared/traces/trace_philly.csv]
        [--limit 2000] [--loads 1] [--policies fcfs,preempt,requeue] [--repeat 3]

Each replay is the shipped task file (fixtures/policies/NAME.yaml) replayed ``--uncapped``
as bench/shipped_table.py replays it, at a capacity of ``--loads`` times the head's
offered load; its time is the CPU seconds of ``simulate.replay`` (trace loading
excluded; CPU rather than wall time, since the development machine is shared), the
median of ``--repeat`` replays, which run in turn (policy after policy, then again), so
that a change in the machine's load falls on every policy alike. Prints markdown: per
trace, capacity and work classes, each policy's seconds and its multiple of fcfs's,
and the load average as the runs ended.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from derive_fractional_trace import with_work_class
from policy_table import TRACES, jobs, offered_load, table_parser

from praxist_fs.config import load_policy
from praxist_fs.simulate import replay

POLICIES = Path(__file__).resolve().parents[1] / "fixtures" / "policies"


def seconds(trace: list, gpus: int, policy: str) -> float:
    """CPU seconds of one replay of ``policy`` (a shipped file's stem)."""
    task = load_policy(str(POLICIES / f"{policy}.yaml"))
    started = time.process_time()
    replay(trace, gpus=gpus, policy=task, name=policy, uncapped=True)
    return time.process_time() - started


def main() -> None:
    parser = table_parser(__doc__, 2000, "1")
    parser.add_argument("--policies", default="fcfs,preempt,requeue",
                        help="shipped policy files to replay (the first is the baseline)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    policies = args.policies.split(",")
    whole = jobs(args.trace, args.limit, "whole-GPU")
    capacities = [round(offered_load(whole) * float(x)) for x in args.loads.split(",")]
    print(f"{args.limit:,} earliest jobs of {Path(args.trace).name}; CPU seconds of each "
          f"replay (median of {args.repeat}), and as a multiple of {policies[0]}'s.\n")
    print("| trace | GPUs | work classes | " + " | ".join(policies) + " |")
    print("|---|---|---|" + "---|" * len(policies))
    for kind in TRACES:
        plain = jobs(args.trace, args.limit, kind)
        for classes in (False, True):
            trace = [with_work_class(job) for job in plain] if classes else plain
            for gpus in capacities:
                timed: dict[str, list[float]] = {policy: [] for policy in policies}
                for _ in range(args.repeat):
                    for policy in policies:
                        timed[policy].append(seconds(trace, gpus, policy))
                median = {policy: statistics.median(times) for policy, times in timed.items()}
                base = median[policies[0]]
                print(f"| {kind} | {gpus} | {'on' if classes else 'off'} | " + " | ".join(
                    f"{median[policy]:.1f} s ({median[policy] / base:.1f}x)"
                    for policy in policies) + " |", flush=True)
    print(f"\nload average as the runs ended: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
