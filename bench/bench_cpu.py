"""CPU time per trivial job: the coordinator's, and that of everything it starts.

    sudo .venv/bin/python bench/bench_cpu.py [REPO] [--jobs 1000] [--slots 2]

Wall-clock throughput on a shared, loaded machine says more about the neighbours than
about the code; CPU time (user + system) is what a job costs wherever it runs. N
``/bin/true`` jobs are renamed into a fresh run's spool at once, and the time is taken
from the first rename to the last ``jobs/done/`` file. The coordinator's own CPU comes
from ``/proc/<pid>/stat``; the rest (the shim server, supervisors and shims, the
commands themselves) from a cpuacct cgroup (cgroup v1, so root) that the coordinator
joins before its exec: shims reaped by the kernel (the server ignores SIGCHLD) add
nothing to anyone's ``cutime``, but a cgroup counts them. ``REPO`` (default: this
checkout) is the source tree the coordinator runs from, to compare two versions
alternately on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_coordinator import TASK_YAML

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def group_cpu_s(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


def measure(repo: Path, jobs: int, slots: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    group = CPUACCT / scratch.name
    group.mkdir()
    coordinator = None
    try:
        run = scratch / "run"
        (scratch / "task.yaml").write_text(TASK_YAML.format(concurrency=slots, maximum=slots))
        with open(scratch / "coordinator.log", "wb") as log:
            coordinator = subprocess.Popen(
                ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$0" -m praxist_fs serve '
                 f'--run-dir {run} --config {scratch}/task.yaml', sys.executable],
                cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT)
        sched = run / "resource_scheduler"
        while not (sched / "endpoint.json").exists():
            if coordinator.poll() is not None:
                raise SystemExit((scratch / "coordinator.log").read_text())
            time.sleep(0.01)
        time.sleep(1.0)  # its start-up is not a job's
        tmp, incoming, done = sched / "spool/tmp", sched / "spool/incoming", sched / "jobs/done"
        names = [f"j{number:05d}.json" for number in range(jobs)]
        for name in names:
            (tmp / name).write_text(json.dumps({
                "request_id": name[:-5], "peer": "bench", "tag": name[:-5],
                "argv": ["/bin/true"], "profile": "cpu_light", "cwd": str(scratch),
                "env": {"PATH": "/usr/bin:/bin"}}))
        total_before, own_before = group_cpu_s(group), own_cpu_s(coordinator.pid)
        began = time.monotonic()
        for name in names:
            os.rename(tmp / name, incoming / name)
        while len(os.listdir(done)) < jobs:
            time.sleep(0.02)
        wall = time.monotonic() - began
        total = group_cpu_s(group) - total_before
        own = own_cpu_s(coordinator.pid) - own_before
        states: dict[str, int] = {}
        for name in os.listdir(done):
            state = json.loads((done / name).read_text())["state"]
            states[state] = states.get(state, 0) + 1
        return {"repo": str(repo), "jobs": jobs, "slots": slots, "wall_s": round(wall, 2),
                "total_cpu_ms_per_job": round(total * 1000 / jobs, 3),
                "coordinator_cpu_ms_per_job": round(own * 1000 / jobs, 3),
                "rest_cpu_ms_per_job": round((total - own) * 1000 / jobs, 3),
                "load1": round(os.getloadavg()[0], 2), "states": states}
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.send_signal(signal.SIGTERM)
            coordinator.wait(timeout=60)
        deadline = time.monotonic() + 10  # supervisors leave once the coordinator has
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        group.rmdir()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("repo", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    if not (CPUACCT / "cpuacct.usage").exists() or not os.access(CPUACCT, os.W_OK):
        raise SystemExit(f"needs a writable cgroup v1 cpuacct hierarchy at {CPUACCT} (root)")
    print(json.dumps(measure(args.repo.resolve(), args.jobs, args.slots)))


if __name__ == "__main__":
    main()
