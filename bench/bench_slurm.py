#!/usr/bin/env python3
"""A coordinator with ``backend: slurm`` side by side with plain ``sbatch`` of the same
command, on the same Slurm (issue 16, item 6).

    .venv/bin/python bench/bench_slurm.py [--n 10] [--jobs 12]

Needs a running Slurm: ``SLURM_CONF`` set, else tests/slurm/setup.sh is run (root) and
tests/slurm/teardown.sh after. Both sides run ``/bin/sh -c 'date +%s%N > FILE'`` with one
CPU and 256 MB, so "start" is the timestamp date writes.

  latency     submit-to-start over N sequential jobs, praxist_fs and plain sbatch
              alternating, each on an idle cluster (the previous job out of squeue's
              running states). praxist_fs's submit: a request file renamed into the
              spool of a running ``praxist-fs serve`` (which validates, journals, writes
              spec.json and the entry script, runs sbatch, sees READY and gives GO);
              plain: one ``sbatch --wrap``.
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

from praxist_fs.backends.slurm_client import SlurmClient  # noqa: E402
from praxist_fs.backends.slurm_config import parse_slurm_config  # noqa: E402

RUNNING = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    backend: slurm
    max_concurrent_experiments: 64
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
    slurm:
      default_resources: {cpus: 1, mem_mb: 256}
      poll_pending_s: 0.5
"""


def stamp_command(path: Path) -> str:
    return f"date +%s%N > {path}"


def read_stamp(path: Path, timeout: float = 120.0,
               parse=lambda text: int(text) / 1e9) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
        except OSError:
            text = ""
        if text:
            return parse(text)
        time.sleep(0.005)
    raise SystemExit(f"nothing in {path} after {timeout:g} s")


class Sides:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.run = base / "run"
        self.spool = self.run / "resource_scheduler" / "spool"
        self.backend = SlurmClient(parse_slurm_config({}), self.run)  # to poll, not submit
        self.serial = 0
        (base / "task.yaml").write_text(TASK)
        self.log = open(base / "coordinator.log", "ab")
        self.coordinator = subprocess.Popen(
            [sys.executable, "-m", "praxist_fs", "serve", "--run-dir", str(self.run),
             "--config", str(base / "task.yaml")], stdout=self.log, stderr=self.log,
            env={**os.environ, "PRAXIST_HOST_REGISTRY": str(base / "registry")})
        endpoint = self.run / "resource_scheduler" / "endpoint.json"
        read_stamp(endpoint, timeout=60, parse=lambda text: 1.0)

    def close(self) -> None:
        self.coordinator.terminate()
        self.coordinator.wait(timeout=60)
        self.log.close()

    def praxist(self, stamp: Path) -> str:
        """A request, as a peer writes one; the job's name prefix stands for its id."""
        self.serial += 1
        name = f"j{self.serial}.json"
        (self.spool / "tmp" / name).write_text(
            f'{{"peer": "bench", "tag": "j{self.serial}", "command": "{stamp_command(stamp)}"}}')
        os.rename(self.spool / "tmp" / name, self.spool / "incoming" / name)
        return f"j{self.serial}-"

    def plain(self, stamp: Path) -> str:
        self.serial += 1
        out = self.base / f"plain{self.serial}.out"
        done = subprocess.run(
            ["sbatch", "--parsable", "--no-requeue", "-c", "1", "--mem=256M", "-D",
             str(self.base), "-o", str(out), "--wrap", stamp_command(stamp)],
            capture_output=True, text=True, check=True)
        return done.stdout.strip().split(";")[0]

    def settle(self, ids: list[str]) -> None:
        """Until none of ``ids`` (Slurm ids, or a praxist_fs job's name prefix) holds
        resources: the next measurement starts idle."""
        while True:
            states = self.backend.jobs_of_run() if any("-" in i for i in ids) else {}
            states.update(self.backend.poll([i for i in ids if "-" not in i]))
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
            try:
                warm_up(sides)
                lat = latency(sides, args.n)
                tput = throughput(sides, args.jobs, args.rounds)
            finally:
                sides.close()
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
