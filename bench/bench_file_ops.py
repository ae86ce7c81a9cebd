#!/usr/bin/env python3
"""Per-job file work of the coordinator and of its shims, counted with strace.

    .venv/bin/python bench/bench_file_ops.py                # 200 /usr/bin/true at 2 slots
    .venv/bin/python bench/bench_file_ops.py --jobs 50 --slots 4 --by-path

A coordinator (``python -m praxist_fs serve``, as bench_coordinator.py starts it) runs
under ``strace -f -y``; once it serves, N trivial jobs are dropped into the spool at once
and run to the end. Only the system calls made from the first drop until the last job
file is in jobs/done/ (and two seconds more, for the shims' last writes) count. Each
process is the coordinator (its threads too), a shim (the shim server, its supervisors
and shims started by Popen: an interpreter started with ``import shim``, and its forks),
or a command (and its forks). Per job, for the coordinator and for the shims: fsync (and fdatasync),
file creations (open with O_CREAT), mkdir, rename, unlink; with ``--by-path``, where
each comes from (paths with ids and numbers masked). The numbers are counts, not times:
strace slows every call it sees.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_coordinator import REPO, TASK_YAML, TRUE, Coordinator, wait_until  # noqa: E402

CALLS = ("fsync", "fdatasync", "openat", "open", "creat", "mkdir", "mkdirat", "rename",
         "renameat", "renameat2", "unlink", "unlinkat", "execve", "clone", "clone3", "fork",
         "vfork")
KINDS = {"fsync": "fsync", "fdatasync": "fsync", "creat": "create", "mkdir": "mkdir",
         "mkdirat": "mkdir", "rename": "rename", "renameat": "rename", "renameat2": "rename",
         "unlink": "unlink", "unlinkat": "unlink"}
LINE = re.compile(r"(\d+)\s+(\w+)\((.*)")
EXEC = re.compile(r"(\d+)\s+execve\(")
SPAWN = re.compile(r"(\d+)\s+(?:<\.\.\. )?(?:clone3?|v?fork)\b.*= (\d+)")


def trace(jobs: int, slots: int, out: Path) -> tuple[int, int]:
    """Run ``jobs`` true jobs at ``slots`` under strace into ``out``; the byte offsets of
    the trace where the jobs were dropped and where they were all done."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-fileops-"))
    try:
        task = scratch / "task.yaml"
        task.write_text(TASK_YAML.format(concurrency=slots, maximum=max(8, slots)))
        run = scratch / "run"
        env = {**os.environ, "PRAXIST_HOST_REGISTRY": os.environ.get(
            "PRAXIST_HOST_REGISTRY", str(scratch / "hosts"))}
        env.pop("PRAXIST_FORCE_POLLING", None)
        with open(scratch / "coordinator.log", "wb") as log:
            proc = subprocess.Popen(
                ["strace", "-f", "-qq", "-y", "-s", "512", "-o", str(out),
                 "-e", "trace=" + ",".join(CALLS),
                 sys.executable, "-m", "praxist_fs", "serve", "--run-dir", str(run),
                 "--config", str(task)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                env=env)
        co = Coordinator.__new__(Coordinator)  # its peer side only: prepare, drop
        co.scratch, co.run_dir = scratch, run
        co.sched = run / "resource_scheduler"
        co.tmp, co.incoming = co.sched / "spool" / "tmp", co.sched / "spool" / "incoming"
        try:
            wait_until(lambda: proc.poll() is not None or (
                (co.sched / "endpoint.json").exists() and co.incoming.is_dir()),
                120, 0.05, "the coordinator to serve")
            if proc.poll() is not None:
                raise SystemExit("the coordinator exited: "
                                 + (scratch / "coordinator.log").read_text()[-2000:])
            time.sleep(1)  # its start-up's last writes
            stamp = time.time_ns()
            names = [co.prepare(f"ops-{stamp}-{i}", f"ops-{stamp}-{i}", [TRUE])
                     for i in range(jobs)]
            start = out.stat().st_size
            for name in names:
                co.drop(name)
            done = co.sched / "jobs" / "done"
            wait_until(lambda: sum(n.endswith(".json") for n in os.listdir(done)) >= jobs,
                       max(120, jobs), 0.05, f"{jobs} jobs done")
            time.sleep(2)  # the shims' last writes (exit.json is before the job ends)
            end = out.stat().st_size
        finally:
            served = [p for p in _children(proc.pid) if p != proc.pid]
            if served:
                os.kill(served[0], signal.SIGTERM)  # the coordinator; strace follows it out
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return start, end
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """strace's pid, then its direct children (the traced coordinator)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [pid, *map(int, handle.read().split())]
    except OSError:
        return [pid]


def count(path: Path, start: int, end: int, jobs: int) -> dict:
    """Per job, by process kind and call kind; and by (kind, call, masked path)."""
    data = path.read_bytes()
    roles: dict[str, str] = {}
    coordinator = data.split(None, 1)[0].decode()
    roles[coordinator] = "coordinator"
    parent_of: dict[str, str] = {}

    def note(line: str) -> None:
        if (found := EXEC.match(line)) is not None:  # its argv: the whole line
            roles[found.group(1)] = "shim" if "import shim" in line else (
                "coordinator" if '"serve"' in line else "command")
        elif (found := SPAWN.match(line)) is not None:
            parent_of[found.group(2)] = found.group(1)

    def role_of(pid: str) -> str:
        """Its own exec's, else its parent's: threads and forks inherit the kind."""
        seen = set()
        while pid not in roles and pid in parent_of and pid not in seen:
            seen.add(pid)
            pid = parent_of[pid]
        return roles.get(pid, "other")

    for line in data[:start].decode(errors="replace").splitlines():
        note(line)
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    where: collections.Counter = collections.Counter()
    for line in data[start:end].decode(errors="replace").splitlines():
        note(line)
        found = LINE.match(line)
        if found is None:
            continue
        pid, call, rest = found.groups()
        if call in ("openat", "open"):
            if "O_CREAT" not in rest:
                continue
            kind = "create"
        else:
            kind = KINDS.get(call)
        if kind is None:
            continue
        if "= -1 " in rest:
            kind += " (failed)"
        role = role_of(pid)  # a supervisor: forked by the shim server, no exec
        totals[role][kind] += 1
        target = re.search(r'"([^"]*)"', rest) or re.search(r"<([^>]*)>", rest)
        shown = target.group(1) if target else rest[:40]
        shown = re.sub(r"ops-\d+-\d+", "REQ", shown)
        shown = re.sub(r"[0-9a-f]{8,}", "ID", shown)
        shown = re.sub(r"/tmp/[^/]*/run/", "RUN/", shown)
        where[(role, kind, re.sub(r"\d+", "N", shown))] += 1
    return {
        "jobs": jobs,
        "per_job": {role: {kind: round(n / jobs, 2) for kind, n in sorted(counter.items())}
                    for role, counter in sorted(totals.items())},
        "by_path": [{"process": role, "call": kind, "per_job": round(n / jobs, 2), "path": p}
                    for (role, kind, p), n in where.most_common() if n / jobs >= 0.05],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="trivial jobs (default 200)")
    parser.add_argument("--slots", type=int, default=2, help="concurrency (default 2)")
    parser.add_argument("--by-path", action="store_true", help="where each call comes from")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    if shutil.which("strace") is None:
        raise SystemExit("strace is not installed (apt-get install strace)")
    with tempfile.TemporaryDirectory(prefix="praxist-bench-fileops-trace-") as directory:
        out = Path(directory) / "trace"
        start, end = trace(args.jobs, args.slots, out)
        result = count(out, start, end, args.jobs)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"per job ({args.jobs} x {TRUE} at {args.slots} slots, strace -f):")
    for role, kinds in result["per_job"].items():
        print(f"  {role:12}", "  ".join(f"{kind} {n:g}" for kind, n in kinds.items()))
    if args.by_path:
        for row in result["by_path"]:
            print(f"  {row['process']:12} {row['call']:16} {row['per_job']:5.2f}  {row['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
