"""The fractional variant of a whole-GPU trace: one-GPU jobs declare a share of their GPU.

    .venv/bin/python bench/derive_fractional_trace.py [--trace ../shared/traces/trace_philly.csv]
        [--limit N] [--work-classes] [--whole] > philly_fractional.csv

Philly's jobs take whole GPUs; issue 18's production trace has fractional demand, which
is where co-location, packing and backfill's reservations differ. This derivation stands
in for it, reproducibly: each one-GPU job declares 25 %, 50 % or 100 % of its GPU with
20, 40 or 70 GiB (30 %, 30 %, 40 % of them, chosen by a hash of the job id, so the same
job always gets the same share, whatever the prefix), and every multi-GPU job declares
100 % and 70 GiB of each of its GPUs. Submit times, run times, GPU counts and users are
unchanged. The output is a trace in docs/SIMULATE.md's format (with ``gpu_util_pct``
and ``gpu_mem_gb``); ``bench/policy_table.py`` derives it in memory.

``--work-classes`` also gives every job a ``work_class``, which selects its queue: a
quarter ``scout``, half ``ordinary`` and a quarter ``mature`` (seed 000's default
``mature_supply_fraction`` is 0.25), by another byte of the same hash, so a job's class
does not depend on its share, size or run time. ``--whole`` leaves the GPUs whole (the
work classes alone).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
from dataclasses import replace
from pathlib import Path

from praxist_fs.simulate import TraceJob, load_trace

PHILLY = Path(__file__).resolve().parents[2] / "shared" / "traces" / "trace_philly.csv"

# (share of one-GPU jobs in tenths, gpu_util_pct, gpu_mem_gb)
ONE_GPU_SHARES = ((3, 25.0, 20.0), (3, 50.0, 40.0), (4, 100.0, 70.0))
WIDE_SHARE = (100.0, 70.0)
# (share of jobs in quarters, work class)
WORK_CLASS_SHARES = ((1, "scout"), (2, "ordinary"), (1, "mature"))


def fractional(job: TraceJob) -> TraceJob:
    """``job`` with a declared share: by a hash of its id when it takes one GPU."""
    if job.gpus > 1:
        util, mem = WIDE_SHARE
    else:
        tenth = _hash(job)[0] % 10
        for tenths, util, mem in ONE_GPU_SHARES:
            if tenth < tenths:
                break
            tenth -= tenths
    return replace(job, gpu_util_pct=util, gpu_mem_gb=mem)


def with_work_class(job: TraceJob) -> TraceJob:
    """``job`` with a work class, by a hash of its id (``WORK_CLASS_SHARES``)."""
    quarter = _hash(job)[1] % 4
    for quarters, work_class in WORK_CLASS_SHARES:
        if quarter < quarters:
            break
        quarter -= quarters
    return replace(job, work_class=work_class)


def _hash(job: TraceJob) -> bytes:
    return hashlib.sha256(job.job_id.encode()).digest()


def cell(value: float) -> str:
    """A number as the trace had it: an integer without ``.0``, else exact."""
    return str(int(value)) if value.is_integer() else repr(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(PHILLY))
    parser.add_argument("--limit", type=int, help="only the N earliest submissions")
    parser.add_argument("--work-classes", action="store_true",
                        help="give each job a work class too (a column work_class)")
    parser.add_argument("--whole", action="store_true",
                        help="leave the GPUs whole: no share columns")
    args = parser.parse_args()
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(("job_id", "submit_s", "duration_s", "gpus", "user")
                 + (() if args.whole else ("gpu_util_pct", "gpu_mem_gb"))
                 + (("work_class",) if args.work_classes else ()))
    for job in load_trace(args.trace, args.limit):
        if not args.whole:
            job = fractional(job)
        if args.work_classes:
            job = with_work_class(job)
        out.writerow((job.job_id, cell(job.submit_s), cell(job.duration_s), job.gpus, job.user)
                     + (() if args.whole else (cell(job.gpu_util_pct), cell(job.gpu_mem_gb)))
                     + ((job.work_class,) if args.work_classes else ()))


if __name__ == "__main__":
    main()
