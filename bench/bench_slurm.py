#!/usr/bin/env python3
"""The Slurm backend side by side with plain ``sbatch`` of the same command, on the same
Slurm (issue 16, item 6; a first slice: the backend alone, not yet a coordinator).

    .venv/bin/python bench/bench_slurm.py [--n 10] [--jobs 12]

Needs a running Slurm: ``SLURM_CONF`` set, else tests/slurm/setup.sh is run (root) and
tests/slurm/teardown.sh after. Both sides run ``/bin/sh -c 'date +%s%N > FILE'`` with one
CPU and 256 MB, so "start" is the timestamp date writes.

  latency     submit-to-start over N sequential jobs, praxist_fs and plain sbatch
              alternating, each on an idle cluster (the previous job out of squeue's
              running states). praxist_fs's submit: spec.json, the entry script, sbatch,
              GO; plain: one ``sbatch --wrap``.
  throughput  ``--jobs`` jobs submitted at once: from the first submit to the last
              command's timestamp; ``--rounds`` rounds, the first side alternating,
              the median reported (Slurm starts jobs in scheduler passes about a
              second apart, so one round mostly measures where in a pass it began).

One job per side runs first, unmeasured: the first job after slurmctld starts waits
for the node's first scheduling pass.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from praxist_fs.backends.slurm import SlurmClient, parse_slurm_config, write_spec  # noqa: E402

CPU = {"name": "cpu", "accelerator": "cpu", "gpu_count": 0}
RUNNING = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


def stamp_command(path: Path) -> str:
    return f"date +%s%N > {path}"


def read_stamp(path: Path, timeout: float = 120.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text:
            return int(text) / 1e9
        time.sleep(0.005)
    raise SystemExit(f"no start stamp in {path} after {timeout:g} s")


class Sides:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.backend = SlurmClient(
            parse_slurm_config({"default_resources": {"cpus": 1, "mem_mb": 256}}), base / "run")
        self.serial = 0

    def praxist(self, stamp: Path) -> str:
        self.serial += 1
        job = f"j{self.serial}"
        attempt = self.backend.run_dir / "attempts" / job / "a1"
        attempt.mkdir(parents=True)
        write_spec(attempt, {"argv": None, "command": stamp_command(stamp),
                             "cwd": str(self.base), "env": {"PATH": os.defpath},
                             "log": str(attempt / "out.log"), "barrier_timeout_s": 120})
        slurm_id = self.backend.submit(attempt, job, "a1", CPU, None, [])
        self.backend.release(attempt, go=True)
        return slurm_id

    def plain(self, stamp: Path) -> str:
        self.serial += 1
        out = self.base / f"plain{self.serial}.out"
        done = subprocess.run(
            ["sbatch", "--parsable", "--no-requeue", "-c", "1", "--mem=256M", "-D",
             str(self.base), "-o", str(out), "--wrap", stamp_command(stamp)],
            capture_output=True, text=True, check=True)
        return done.stdout.strip().split(";")[0]

    def settle(self, ids: list[str]) -> None:
        """Until none of ``ids`` holds resources: the next measurement starts idle."""
        while True:
            states = self.backend.poll(ids)
            if not any(state.state in RUNNING for state in states.values()):
                return
            time.sleep(0.05)


def latency(sides: Sides, n: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"praxist_fs": [], "sbatch": []}
    for index in range(n):
        order = ("praxist_fs", "sbatch") if index % 2 == 0 else ("sbatch", "praxist_fs")
        for side in order:
            stamp = sides.base / f"lat-{side}-{index}"
            submit = sides.praxist if side == "praxist_fs" else sides.plain
            began = time.time()
            slurm_id = submit(stamp)
            results[side].append(read_stamp(stamp) - began)
            sides.settle([slurm_id])
    return results


def warm_up(sides: Sides) -> None:
    for submit in (sides.praxist, sides.plain):
        stamp = sides.base / f"warm-{sides.serial}"
        slurm_id = submit(stamp)
        read_stamp(stamp)
        sides.settle([slurm_id])


def throughput(sides: Sides, jobs: int, rounds: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"praxist_fs": [], "sbatch": []}
    for round_ in range(rounds):
        order = ("praxist_fs", "sbatch") if round_ % 2 == 0 else ("sbatch", "praxist_fs")
        for side in order:
            submit = sides.praxist if side == "praxist_fs" else sides.plain
            stamps = [sides.base / f"tp-{side}-{round_}-{index}" for index in range(jobs)]
            began = time.time()
            ids = [submit(stamp) for stamp in stamps]
            results[side].append(max(read_stamp(stamp) for stamp in stamps) - began)
            sides.settle(ids)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="sequential jobs per side")
    parser.add_argument("--jobs", type=int, default=12, help="jobs at once per side")
    parser.add_argument("--rounds", type=int, default=4, help="throughput rounds per side")
    args = parser.parse_args()
    started_slurm = "SLURM_CONF" not in os.environ
    if started_slurm:
        done = subprocess.run([str(ROOT / "tests/slurm/setup.sh")], capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise SystemExit(f"no Slurm to measure: {done.stderr.strip()}")
        os.environ["SLURM_CONF"] = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-slurm-") as base:
            sides = Sides(Path(base))
            warm_up(sides)
            lat = latency(sides, args.n)
            tput = throughput(sides, args.jobs, args.rounds)
    finally:
        if started_slurm:
            subprocess.run([str(ROOT / "tests/slurm/teardown.sh")], check=False)
    print(f"{'':28}{'praxist_fs':>12}{'sbatch':>12}{'overhead':>10}")
    for label, pick in (("submit-to-start p50 (ms)", statistics.median),
                        ("submit-to-start max (ms)", max)):
        ours, theirs = pick(lat["praxist_fs"]) * 1e3, pick(lat["sbatch"]) * 1e3
        print(f"{label:28}{ours:12.0f}{theirs:12.0f}{(ours / theirs - 1) * 100:9.1f}%")
    ours, theirs = statistics.median(tput["praxist_fs"]), statistics.median(tput["sbatch"])
    print(f"{f'{args.jobs} jobs at once, p50 (s)':28}{ours:12.2f}{theirs:12.2f}"
          f"{(ours / theirs - 1) * 100:9.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
