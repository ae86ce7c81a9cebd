"""Where a job's submit-to-start goes, from the kernel's side: the latency scenario
(side_by_side.py) run under ``perf record -a`` with the scheduler's tracepoints and a
few system calls', and each praxist_fs job's path laid out from the client's rename to
its command's exec, as medians (ms) over the jobs.

    sudo .venv/bin/python bench/timeline.py --jobs 150            # interleaved with tsp
    sudo .venv/bin/python bench/timeline.py --jobs 150 --alone    # praxist_fs alone

Probes in the code measure a process's own steps; this shows what lies between them:
which process ran on which CPU while another waited. It found that a shim woken by the
coordinator's pipe write (a sync wakeup) is queued on the coordinator's CPU: at GO it
waited behind the batch's files while the other CPU idled (the backend now gives way,
``LocalBackend.go``), and, told its attempt ahead of the commit, it ran its preparation
on the CPU the coordinator sleeps off in the commit's fsync, so that the coordinator,
its I/O done, waited for the shim (``coordinator_waiting_in_fsync``; now kept apart:
``launcher.keep_off_our_cpu``). Needs perf and the
right to trace the whole machine (root, or kernel.perf_event_paranoid = -1); its data
goes to /dev/shm, off the disk whose fsyncs it times. Not part of ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EVENTS = ("sched:sched_wakeup,sched:sched_switch,syscalls:sys_enter_rename,"
          "syscalls:sys_enter_fsync,syscalls:sys_exit_fsync,syscalls:sys_enter_clone3,"
          "syscalls:sys_exit_execve")
# GO is the one-byte write; READY and the shim's other small writes are 100-140 bytes.
# Every other write is left out: perf's own would otherwise be traced as it saves them.
WRITES = "count == 1 || (count > 100 && count < 140)"
PHASES = ("coordinator_woken", "coordinator_runs", "shim_told", "shim_runs", "shim_READY",
          "fsync_begins", "fsync_ends", "GO_written", "shim_spawns", "sh_execs",
          "command_execs")
# the critical path in order, then the shim's side, which runs beside the commit
STEPS = (("coordinator_woken", "coordinator_runs"), ("coordinator_runs", "shim_told"),
         ("shim_told", "fsync_begins"), ("fsync_begins", "fsync_ends"),
         ("fsync_ends", "GO_written"), ("GO_written", "shim_spawns"),
         ("shim_spawns", "sh_execs"), ("sh_execs", "command_execs"),
         ("shim_told", "shim_runs"), ("shim_runs", "shim_READY"), ("shim_READY", "GO_written"))
LINE = re.compile(r"^\s*(\S.*?)\s+(\d+)/\d+\s+\[\d+\]\s+([\d.]+):\s+\S+?:(\S+):\s*(.*)$")


def parse(lines) -> list[tuple[float, str, int, str, str]]:
    """``perf script -F comm,pid,tid,cpu,time,event,trace`` lines as (ms, comm, pid, event,
    its fields), in time order."""
    events = []
    for line in lines:
        if (m := LINE.match(line)) and m.group(1) != "perf":
            comm, pid, seconds, event, fields = m.groups()
            events.append((float(seconds) * 1000, comm, int(pid), event, fields))
    return sorted(events, key=lambda event: event[0])


def _woken(fields: str) -> int:
    return int(re.search(r"\bpid=(\d+)", fields).group(1))


def _next(fields: str) -> int:
    return int(re.search(r"next_pid=(\d+)", fields).group(1))


def jobs(events, client: int, coordinator: int) -> list[dict[str, float]]:
    """Each job's phases, ms after the client's rename into the spool: the first of each
    that follows it (the shim is the process the coordinator wakes first), up to the
    command's exec; a job whose chain is not whole (a lost event) is left out."""
    found = []
    for i, (start, _, pid, event, _) in enumerate(events):
        if event != "sys_enter_rename" or pid != client:
            continue
        at: dict[str, float] = {}
        shim = None
        for ms, comm, pid, event, fields in events[i + 1:]:
            if (event == "sys_enter_rename" and pid == client) or ms - start > 50:
                break
            if event == "sched_wakeup":
                woken = _woken(fields)
                if woken == coordinator:
                    at.setdefault("coordinator_woken", ms)
                elif pid == coordinator and shim is None and "fsync_begins" not in at \
                        and woken != client and "comm=python" in fields:
                    shim, at["shim_told"] = woken, ms
            elif event == "sched_switch":
                runs = _next(fields)
                if runs == coordinator and "coordinator_woken" in at:
                    at.setdefault("coordinator_runs", ms)
                elif runs == shim:
                    at.setdefault("shim_runs", ms)
            elif pid == coordinator and event == "sys_enter_fsync" and "coordinator_runs" in at:
                at.setdefault("fsync_begins", ms)
            elif pid == coordinator and event == "sys_exit_fsync" and "fsync_begins" in at:
                at.setdefault("fsync_ends", ms)
            elif event == "sys_enter_write" and fields.endswith("count: 0x00000001"):
                if pid == coordinator and "fsync_ends" in at:
                    at.setdefault("GO_written", ms)
            elif event == "sys_enter_write" and pid == shim:
                at.setdefault("shim_READY", ms)
            elif event == "sys_enter_clone3" and pid == shim:
                at.setdefault("shim_spawns", ms)
            elif event == "sys_exit_execve" and fields.endswith("0x0") and "shim_spawns" in at:
                if comm == "sh" and "sh_execs" not in at:
                    at["sh_execs"] = ms
                elif comm != "sh" and "sh_execs" in at:
                    at["command_execs"] = ms
                    break
        if set(PHASES) <= at.keys():
            found.append({phase: round(at[phase] - start, 4) for phase in PHASES})
    return found


def waiting_in_fsync(events, coordinator: int) -> list[float]:
    """For each fsync of the coordinator, how long (ms) it was runnable and not running
    inside it: woken by a finished I/O while another task held its CPU."""
    waits = []
    inside, woken, waited = False, None, 0.0
    for ms, _, pid, event, fields in events:
        if pid == coordinator and event == "sys_enter_fsync":
            inside, woken, waited = True, None, 0.0
        elif not inside:
            continue
        elif event == "sched_wakeup" and _woken(fields) == coordinator:
            woken = ms
        elif event == "sched_switch" and _next(fields) == coordinator and woken is not None:
            waited, woken = waited + ms - woken, None
        elif pid == coordinator and event == "sys_exit_fsync":
            waits.append(round(waited, 4))
            inside = False
    return waits


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3)}


def report(lines, client: int, coordinator: int) -> dict:
    events = parse(lines)
    rows = jobs(events, client, coordinator)
    waits = waiting_in_fsync(events, coordinator)
    return {"jobs": len(rows),
            "ms_after_rename_p50": {p: summary([r[p] for r in rows])["p50"] for p in PHASES}
            if rows else {},
            "steps": {f"{a} -> {b}": summary([r[b] - r[a] for r in rows])
                      for a, b in STEPS} if rows else {},
            "coordinator_waiting_in_fsync": {**summary(waits), "fsyncs": len(waits),
                                             "over_0.1_ms": sum(w > 0.1 for w in waits)}
            if waits else {}}


def scenario(jobs_each: int, alone: bool, shell: bool, pids: Path) -> dict:
    """The latency scenario in this process (the client), the coordinator's pid written
    to ``pids`` as soon as it runs."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import disk
    disk.isolate()
    import side_by_side
    from bench_tsp import ensure_tsp

    def started(coordinator_pid: int) -> None:
        pids.write_text(json.dumps({"client": os.getpid(), "coordinator": coordinator_pid}))

    if alone:
        return side_by_side.px_latency(jobs_each, shell, started=started)
    return side_by_side.interleaved_latency(jobs_each, ensure_tsp()[0], shell,
                                            started=started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=150, help="jobs on each side")
    parser.add_argument("--alone", action="store_true",
                        help="praxist_fs alone, not interleaved with task-spooler")
    parser.add_argument("--shell", action="store_true", help="submitted as a shell user does")
    parser.add_argument("--scenario", metavar="PIDS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scenario:  # the child that perf runs
        result = scenario(args.jobs, args.alone, args.shell, Path(args.scenario))
        print(json.dumps({side: result[side]["submit_to_start"] for side in result}
                         if not args.alone else result["submit_to_start"]))
        return 0
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) \
            as scratch:
        data, pids = Path(scratch, "perf.data"), Path(scratch, "pids.json")
        child = [sys.executable, __file__, "--scenario", str(pids), "--jobs", str(args.jobs),
                 *(["--alone"] if args.alone else []), *(["--shell"] if args.shell else [])]
        subprocess.run(["perf", "record", "-q", "-a", "-o", str(data), "-e", EVENTS,
                        "-e", "syscalls:sys_enter_write", "--filter", WRITES, "--", *child],
                       check=True)
        script = subprocess.run(["perf", "script", "-i", str(data),
                                 "-F", "comm,pid,tid,cpu,time,event,trace"],
                                check=True, capture_output=True, text=True).stdout
        ids = json.loads(pids.read_text())
    print(json.dumps(report(script.splitlines(), ids["client"], ids["coordinator"]), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
