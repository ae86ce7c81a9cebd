"""A scheduling pass over 10,000 queued GPU jobs on a fake 8-GPU inventory (pure core).

    .venv/bin/python bench/bench_scheduling.py [--jobs 10000] [--rounds 20]
        [--pickers fcfs,fair_share,backfill,...] [--placement spread] [--budget-ms 5]
        [--shortest-first-by gpu_seconds]

Times ``Scheduler.next_launches`` in three situations, once per job picker (the
global ``job_picker``, so every queue uses it): the first pass that fills the
GPUs, a pass where every device is full (each job held), and a pass after one
job ended (the common case in a busy run). The jobs come from 17 peers and
declare ETAs, so fair share has usage to order by and backfill can reserve.
No files, no processes. A pass stops once nothing more can start, and the
reasons of the jobs it did not reach are worked out when asked for; that part
is timed apart (``reasons_ms_median``: a status write asks). Exits 1 when a
pass's median is over ``--budget-ms``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from praxist_fs.adapters.gpus import parse_fake_inventory
from praxist_fs.backends.memory import MemoryBackend, Run, VirtualHost
from praxist_fs.core.events import AttemptLaunched, HostSampled, RequestSeen
from praxist_fs.core.observations import GpuSample, PressureSample
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.request import Request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.driver import VirtualLoop

INVENTORY = Path(__file__).resolve().parents[1] / "fixtures" / "gpus" / "eight_h200.json"


PICKERS = ("fcfs,fair_share,backfill,shortest_expected_first,multifactor,"
           "least_attained_service")


def build(jobs: int, picker: str = "fcfs", placement: str = "spread",
          shortest_first_by: str = "run_time") -> Scheduler:
    profiles = {
        "g45": Profile(name="g45", accelerator="gpu", gpu_count=1, gpu_memory_gb=20,
                       gpu_utilization_pct=45, pressure_domains=("cpu",)),
        "g2x": Profile(name="g2x", accelerator="gpu", gpu_count=2, gpu_memory_gb=40,
                       gpu_utilization_pct=60),
        "gx": Profile(name="gx", accelerator="gpu", gpu_count=1),
    }
    sched = Scheduler(Policy(profiles=profiles, default_profile="g45", job_picker=picker,
                             placement=placement, shortest_first_by=shortest_first_by,
                             initial_concurrent_experiments=64, max_concurrent_experiments=64))
    names = list(profiles)
    for i in range(jobs):
        request = Request(request_id=f"r{i}", peer=f"p{i % 17}", tag=f"exp-{i}",
                          profile=names[i % 3], argv=("python", "train.py", str(i)),
                          eta_s=600.0 + 60 * (i % 7))
        sched.handle(RequestSeen(at=float(i), name=f"r{i}.json", digest=str(i),
                                 request_id=request.request_id, request=request))
    gpus = GpuSample(source="fake", devices=parse_fake_inventory(INVENTORY.read_text()))
    sched.handle(HostSampled(at=1e6, gpus=gpus, pressure=PressureSample(source="psi", cpu=1.0)))
    return sched


def run_launches(sched: Scheduler, launches: list[AttemptLaunched], at: float) -> VirtualLoop:
    """Carry a pass's launches out on a virtual host at ``at``: every attempt released and
    running; the first ends a million seconds later, the others outlast the bench."""
    first = launches[0].job_id
    loop = VirtualLoop(sched, MemoryBackend(
        lambda launch: Run(1e6 if launch.job_id == first else math.inf), VirtualHost(start=at)))
    for event in launches:
        loop.handle(event)
    return loop


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn()
    return (time.perf_counter() - start) * 1000, result


def measure(picker: str, jobs: int, rounds: int, placement: str = "spread",
            shortest_first_by: str = "run_time") -> dict[str, float | int]:
    fill, full, after_exit, reasons = [], [], [], []
    for _ in range(rounds):
        sched = build(jobs, picker, placement, shortest_first_by)
        ms, launches = timed(lambda: sched.next_launches(2e6))
        fill.append(ms)
        loop = run_launches(sched, launches, 2e6)
        sched.version += 1  # force a pass with the same state: everything is held now
        full.append(timed(lambda: sched.next_launches(2e6))[0])
        loop.advance(3e6)  # the first one ends
        ms, started = timed(lambda: sched.next_launches(3e6))
        after_exit.append(ms)
        reasons.append(timed(sched.refresh_reasons)[0])
        assert len(sched.pending) == sched.count(JobState.QUEUED) - len(started)
    return {
        "launched_first_pass": len(launches),
        "first_pass_ms_median": round(statistics.median(fill), 2),
        "all_held_pass_ms_median": round(statistics.median(full), 2),
        "pass_after_one_exit_ms_median": round(statistics.median(after_exit), 2),
        "reasons_ms_median": round(statistics.median(reasons), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pickers", default=PICKERS)
    parser.add_argument("--placement", default="spread",
                        help="the task file's placement (default %(default)s)")
    parser.add_argument("--shortest-first-by", default="run_time",
                        choices=("run_time", "gpu_seconds"),
                        help="the task file's shortest_first_by (recommended.yaml: "
                        "gpu_seconds; default %(default)s)")
    parser.add_argument("--budget-ms", type=float, default=5.0,
                        help="the most a pass may take (median; default %(default)s)")
    args = parser.parse_args()
    result = {"jobs": args.jobs, "devices": 8, "rounds": args.rounds,
              "placement": args.placement, "shortest_first_by": args.shortest_first_by,
              "pickers": {picker: measure(picker, args.jobs, args.rounds, args.placement,
                                          args.shortest_first_by)
                          for picker in args.pickers.split(",")}}
    result["over_budget"] = [f"{picker}.{name}" for picker, times in result["pickers"].items()
                             for name, ms in times.items()
                             if name.endswith("pass_ms_median") and ms > args.budget_ms]
    print(json.dumps(result, indent=2))
    sys.exit(1 if result["over_budget"] else 0)


if __name__ == "__main__":
    main()
