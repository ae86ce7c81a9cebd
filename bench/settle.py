"""Wait for the processes of a system under measurement to go quiet (bench_all's
interleaved latency rows).

A sequential job's submit-to-start is timed from the moment the previous job's end is
seen. Each system still has work to do then: praxist_fs's coordinator finishes the turn
that wrote the job file (the job index, status.json, metrics.prom) and its supervisor goes
back to the pool; tsp's server writes the job's output and answers ``tsp -w``. Run one
system after the other, that work fell on the system's own next job. Interleaved, it
fell on the other system's (measured at a load of 8-10: task-spooler's p50 went from
6.5-10 ms alone to 8.5-17 ms beside praxist_fs, the ratio from 2.5x to 1.4x). So before
each job of the interleaved rows both systems are let go quiet: no process of theirs
ran for ``QUIET_S`` (``/proc/<pid>/task/*/schedstat``: nanoseconds of CPU, exact).
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

QUIET_S = 0.005  # no CPU used for this long: a status.json write waits 2 ms for a lull
TIMEOUT_S = 0.2  # a system that never goes quiet this long is measured as it is
POLL_S = 0.001


def schedstat_s(pid: int) -> float:
    """CPU time of all the process's threads from /proc/<pid>/task/*/schedstat (ns, exact);
    utime/stime are sampled at the tick (10 ms units, biased upward for short wakeups)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def settle(pids: list[int], quiet_s: float = QUIET_S, timeout_s: float = TIMEOUT_S) -> bool:
    """Until ``pids`` and every process under them used no CPU for ``quiet_s``; False if
    they did not within ``timeout_s`` (then the sample is taken as things are)."""
    tree = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree += [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            continue

    def used() -> float:
        total = 0.0
        for pid in tree:
            try:
                total += schedstat_s(pid)
            except FileNotFoundError:  # it ended: its CPU is no longer anyone's to wait for
                pass
        return total

    start = quiet_since = time.monotonic()
    last = used()
    while (now := time.monotonic()) - start < timeout_s:
        time.sleep(POLL_S)
        now, seen = time.monotonic(), used()
        if seen != last:
            last, quiet_since = seen, now
        elif now - quiet_since >= quiet_s:
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="Wait until the processes PID (and every "
                                     "process under them) used no CPU for --quiet seconds; "
                                     "print how long that took (exit 1: not within --timeout)")
    parser.add_argument("pids", metavar="PID", type=int, nargs="+")
    parser.add_argument("--quiet", type=float, default=QUIET_S)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    args = parser.parse_args(argv)
    began = time.monotonic()
    quiet = settle(args.pids, args.quiet, args.timeout)
    print(f"{'quiet' if quiet else 'not quiet'} after {time.monotonic() - began:.4f} s")
    return 0 if quiet else 1


if __name__ == "__main__":
    raise SystemExit(main())
