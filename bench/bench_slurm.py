#!/usr/bin/env python3
"""A coordinator with ``backend: slurm`` side by side with plain ``sbatch`` of the same
command, on the same Slurm (issue 16, item 6; issue 28, item 6).

    .venv/bin/python bench/bench_slurm.py [--n 10] [--jobs 12] [--alternating 30]

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

  alternating ``--alternating`` jobs per side, one at a time, the sides taking turns
              (praxist_fs, sbatch, praxist_fs, ...), each on an idle cluster: per side
              the makespan (its jobs' submit-to-end-seen added up, as a chain that
              submits each job once the last was seen ended), and the p50 of
              submit-to-start and of submit-to-end-seen. "End seen" is when a user
              learns the job ended: praxist_fs's job file in jobs/done/, plain
              sbatch's job out of squeue's running states (the bench's own poller,
              every 20 ms for both). ``--rounds`` rounds, the first side alternating;
              each figure is the median over the rounds.

One job per side runs first, unmeasured: the first job after slurmctld starts waits
for the node's first scheduling pass.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from praxist_fs.backends.slurm.client import SlurmClient  # noqa: E402
from praxist_fs.backends.slurm.config import parse_slurm_config  # noqa: E402
from praxist_fs.core.identity import job_id_for  # noqa: E402

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


SEEN_EVERY = 0.02  # the bench's poller: the job file in done/, or one squeue for sbatch's


def alternating(sides: Sides, jobs: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per side, per round: makespan (its jobs' submit-to-end-seen added up: each one is
    submitted once the last was seen ended), submit-to-start p50, submit-to-end-seen p50."""
    figures = {side: {"makespan": [], "start": [], "seen": []}
               for side in ("praxist_fs", "sbatch")}
    done_dir = sides.run / "resource_scheduler" / "jobs" / "done"
    for round_ in range(rounds):
        order = ("praxist_fs", "sbatch") if round_ % 2 == 0 else ("sbatch", "praxist_fs")
        starts: dict[str, list[float]] = {side: [] for side in order}
        seen: dict[str, list[float]] = {side: [] for side in order}
        for index in range(jobs):
            for side in order:
                stamp = sides.base / f"alt-{side}-{round_}-{index}"
                began = time.time()
                if side == "praxist_fs":
                    done = done_dir / f"{job_id_for(sides.praxist(stamp)[:-1])}.json"
                    ended = done.exists
                else:
                    slurm_id = sides.plain(stamp)

                    def ended(slurm_id=slurm_id):
                        state = sides.backend.poll([slurm_id]).get(slurm_id)
                        return state is None or state.state not in RUNNING
                deadline = time.monotonic() + 120
                while not ended():
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{side} job {index} not seen ended in 120 s")
                    time.sleep(SEEN_EVERY)
                seen[side].append(time.time() - began)
                starts[side].append(read_stamp(stamp) - began)
                sides.settle(["all-of-the-run-"] if side == "praxist_fs" else [slurm_id])
        for side in order:
            figures[side]["makespan"].append(sum(seen[side]))
            figures[side]["start"].append(statistics.median(starts[side]))
            figures[side]["seen"].append(statistics.median(seen[side]))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10, help="sequential jobs per side")
    parser.add_argument("--jobs", type=int, default=12, help="jobs at once per side")
    parser.add_argument("--rounds", type=int, default=4, help="throughput rounds per side")
    parser.add_argument("--alternating", type=int, default=30, metavar="JOBS",
                        help="jobs per side in the one-at-a-time comparison (0: skip it)")
    parser.add_argument("--only-alternating", action="store_true",
                        help="skip the latency and throughput parts")
    args = parser.parse_args()
    started_slurm = "SLURM_CONF" not in os.environ
    if started_slurm:  # a private Slurm in a directory of its own, stopped at the end
        slurm_env = {**os.environ, "PRAXIST_SLURM_DIR": tempfile.mkdtemp(prefix="praxist-slurm.")}
        done = subprocess.run([str(ROOT / "tests/slurm/setup.sh")], capture_output=True,
                              text=True, check=False, env=slurm_env)
        if done.returncode != 0:
            raise SystemExit(f"no Slurm to measure: {done.stderr.strip()}")
        os.environ["SLURM_CONF"] = done.stdout.strip().splitlines()[-1].split("=", 1)[1]
    try:
        with tempfile.TemporaryDirectory(prefix="bench-slurm-") as base:
            sides = Sides(Path(base))
            try:
                warm_up(sides)
                lat = None if args.only_alternating else latency(sides, args.n)
                tput = None if args.only_alternating else throughput(sides, args.jobs,
                                                                     args.rounds)
                alt = alternating(sides, args.alternating, args.rounds) \
                    if args.alternating else None
            finally:
                sides.close()
    finally:
        if started_slurm:
            subprocess.run([str(ROOT / "tests/slurm/teardown.sh")], check=False, env=slurm_env)
            shutil.rmtree(slurm_env["PRAXIST_SLURM_DIR"])
    print(f"{'':44}{'praxist_fs':>12}{'sbatch':>12}{'ratio':>8}")
    if lat is not None:
        for label, pick in (("submit-to-start p50 (ms)", statistics.median),
                            ("submit-to-start max (ms)", max)):
            ours, theirs = pick(lat["praxist_fs"]) * 1e3, pick(lat["sbatch"]) * 1e3
            print(f"{label:44}{ours:12.0f}{theirs:12.0f}{ours / theirs:7.2f}x")
        ours, theirs = statistics.median(tput["praxist_fs"]), statistics.median(tput["sbatch"])
        print(f"{f'{args.jobs} jobs at once, p50 (s)':44}{ours:12.2f}{theirs:12.2f}"
              f"{ours / theirs:7.2f}x")
    if alt is not None:
        for key, label in (("makespan", "makespan (s)"), ("start", "submit-to-start p50 (s)"),
                           ("seen", "submit-to-end-seen p50 (s)")):
            ours = statistics.median(alt["praxist_fs"][key])
            theirs = statistics.median(alt["sbatch"][key])
            print(f"{f'{args.alternating} alternating: {label}':44}{ours:12.2f}{theirs:12.2f}"
                  f"{ours / theirs:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
