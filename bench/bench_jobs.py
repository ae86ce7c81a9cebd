#!/usr/bin/env python3
"""How fast ``praxist-fs jobs`` answers on a run with many finished jobs.

Builds a run directory with N finished jobs (bench/fixture.py: submitted evenly
over the last N x SPACING seconds, 1,000 per hour by default, so ``--since 1h``
finds about 1,000), starts a real coordinator on it, which builds the job index
at start exactly as after any start it cannot trust the index at, stops it
(SIGTERM, a clean stop), and times each command as a subprocess (the whole
``python -m praxist_fs`` start included), printing the best and the median of
several runs. ``status`` is timed too, as the floor every command pays (the
interpreter and the CLI's imports). The job files alone (no index: a run made
before it) are timed once for comparison.

Usage: bench/bench_jobs.py [--finished N] [--runs R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_coordinator import TASK_YAML
from fixture import build_run

TARGET_S = 0.5
PER_HOUR = 1000


def cli(run_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "praxist_fs", *args, "--run-dir", str(run_dir)]


def time_command(command: list[str], runs: int) -> dict:
    """Wall seconds of ``runs`` runs of ``command``, stdout discarded; and its row count."""
    times, lines = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        times.append(time.perf_counter() - started)
        lines = len(result.stdout.splitlines())
    return {"best_s": round(min(times), 3), "median_s": round(statistics.median(times), 3),
            "runs": runs, "stdout_lines": lines}


def build_index(run_dir: Path, task: Path) -> float:
    """Start a coordinator (which rebuilds the index), wait until it serves and its index
    is whole (rebuilt while it serves), stop it cleanly: the seconds from Popen to
    serving."""
    endpoint = run_dir / "resource_scheduler" / "endpoint.json"
    index = run_dir / "resource_scheduler" / "index" / "jobs.sqlite"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "praxist_fs", "serve", "--run-dir",
                             str(run_dir), "--config", str(task)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PRAXIST_HOST_REGISTRY": str(run_dir.parent)})
    deadline = time.monotonic() + 300
    while not endpoint.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the coordinator did not start")
        time.sleep(0.02)
    serving = time.perf_counter() - started
    while not index.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the coordinator built no job index")
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    if proc.wait(timeout=120) != 0:
        raise RuntimeError(f"the coordinator exited {proc.returncode}")
    return serving


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    try:
        task = scratch / "task.yaml"
        task.write_text(TASK_YAML.format(concurrency=2, maximum=8))
        run_dir = scratch / "run"
        built = build_run(run_dir, task, finished=args.finished, spacing=3600 / PER_HOUR,
                          last_at=time.time() - 60)
        seconds = built["journal_build_s"] + built["views_build_s"]
        print(f"fixture: {args.finished} finished jobs in {seconds:.1f}s", flush=True)
        serving = build_index(run_dir, task)
        index = run_dir / "resource_scheduler" / "index" / "jobs.sqlite"
        print(f"coordinator start with the index rebuilt: {serving:.2f}s "
              f"(index {index.stat().st_size / 1e6:.1f} MB)", flush=True)
        results = {"finished_jobs": args.finished, "start_with_rebuild_s": round(serving, 3)}
        commands = {"status (floor)": "status", "jobs --limit 20": "jobs --limit 20",
                    "jobs --since 1h": "jobs --since 1h",
                    "jobs --since 1h --limit 0": "jobs --since 1h --limit 0",
                    "jobs --since 1h --json": "jobs --since 1h --json",
                    "jobs --state failed": "jobs --state failed"}
        for name, command in commands.items():
            results[name] = time_command(cli(run_dir, *command.split()), args.runs)
        index.rename(index.with_name("aside.sqlite"))  # as a run made before the index
        results["jobs --limit 20, job files (no index)"] = time_command(
            cli(run_dir, "jobs", "--limit", "20"), 1)
        print(f"\n{'command':42} {'best':>7} {'median':>7}  lines  target")
        for name, value in results.items():
            if isinstance(value, dict):
                target = f"< {TARGET_S} s" if name in ("jobs --limit 20", "jobs --since 1h") \
                    else ""
                print(f"{name:42} {value['best_s']:>6.3f}s {value['median_s']:>6.3f}s "
                      f"{value['stdout_lines']:>6}  {target}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
