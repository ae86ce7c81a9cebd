"""task-spooler (``tsp``) side of the side-by-side benchmark (bench/bench_all.py).

Each scenario gets a private tsp server: its own TS_SOCKET and TMPDIR (job
output files) in a fresh temp directory, TS_MAXFINISHED large enough to keep
every result listed, and ``tsp -S <slots>``. ``tsp -K`` kills the server at the
end and the directory is removed. ``ensure_tsp`` installs the distribution's
package (``apt-get install task-spooler``; the binary is ``tsp`` on Debian and
Ubuntu) when the binary is missing and we are root.

Scenarios, each measured the same way as its praxist_fs counterpart:

latency     N sequential ``tsp /bin/sh -c 'date +%s%N > FILE'``: from just
            before the ``tsp`` call to the timestamp date writes; the next job
            is submitted once the previous one finished (``tsp -w``). With
            ``shell`` (bench_all's shell row) each ``tsp`` call is a line given
            to one running ``/bin/sh`` (``bench_coordinator.Shell``), as the
            praxist_fs side gives its ``printf ... && mv ...`` line. A job at a
            time (``LatencySide``): side_by_side.py interleaves them with praxist_fs's.
throughput  N ``tsp /bin/true`` at two slots: from the first ``tsp`` call to the
            last job finished.
submit      the per-call cost of ``tsp CMD`` while one slot is held by a
            blocker job (nothing else runs, as on the praxist_fs side). tsp keeps
            one client process and one server connection per queued job and its
            queue holds at most ~1,000 connections (``-B`` reports "queue full"
            past that), so at most ``SUBMIT_CAP`` calls are made and the cost of
            N calls is extrapolated from their mean.

Run alone: ``.venv/bin/python bench/bench_tsp.py [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench_coordinator import Shell, discard

SH = "/bin/sh"
SUBMIT_CAP = 900  # stay below tsp's ~1,000 connection limit (blocker + queued clients)


def ensure_tsp(explicit: str | None = None) -> tuple[str, str]:
    """The tsp binary and its version line; installs task-spooler with apt-get if missing."""
    path = explicit or shutil.which("tsp")
    if path is None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise SystemExit("task-spooler is not installed and this is not a root Debian/Ubuntu "
                             "system: install it (sudo apt-get install task-spooler; the binary "
                             "is tsp) or pass --tsp PATH")
        print("installing task-spooler with apt-get ...", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        quiet = {"stdout": subprocess.DEVNULL, "env": env}
        if subprocess.run(["apt-get", "install", "-y", "-q", "task-spooler"], **quiet).returncode:
            subprocess.run(["apt-get", "update", "-q"], check=True, **quiet)
            subprocess.run(["apt-get", "install", "-y", "-q", "task-spooler"], check=True, **quiet)
        path = shutil.which("tsp")
        if path is None:
            raise SystemExit("apt-get installed task-spooler but no tsp binary is on PATH")
    out = subprocess.run([path, "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True).stdout.strip()
    return path, out.splitlines()[0] if out else "unknown"


class TaskSpooler:
    """A private tsp server (own socket and output dir) with ``slots`` slots; a context manager."""

    def __init__(self, tsp: str, label: str, slots: int) -> None:
        self.tsp = tsp
        self.slots = slots
        self.scratch = Path(tempfile.mkdtemp(prefix=f"tsp-bench-{label}-"))
        (self.scratch / "out").mkdir()
        self.env = {**os.environ, "TS_SOCKET": str(self.scratch / "socket"),
                    "TMPDIR": str(self.scratch / "out"), "TS_MAXFINISHED": "1000000",
                    "TS_SLOTS": str(slots)}
        for name in ("TS_ONFINISH", "TS_ENV", "TS_MAILTO", "TS_SAVELIST"):
            self.env.pop(name, None)
        self._server_pid: int | None = None

    def __enter__(self) -> TaskSpooler:
        self.call("-S", str(self.slots))  # starts the server
        return self

    def __exit__(self, *exc_info) -> None:
        try:
            self.call("-K", check=False)
            deadline = time.monotonic() + 10
            while (self.scratch / "socket").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            discard(self.scratch)

    def server_pid(self) -> int | None:
        """This scenario's server: the oldest tsp process with our TS_SOCKET (a client
        started since, ``tsp -w`` or a submission, is younger)."""
        if self._server_pid is None:
            ours = []
            for proc in psutil.process_iter(["name", "create_time"]):
                try:
                    if proc.info["name"] == "tsp" and \
                            proc.environ().get("TS_SOCKET") == self.env["TS_SOCKET"]:
                        ours.append((proc.info["create_time"], proc.pid))
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self._server_pid = min(ours)[1] if ours else None
        return self._server_pid

    def call(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run([self.tsp, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=self.env, text=True)
        if check and proc.returncode != 0:
            raise RuntimeError(f"tsp {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def submit(self, argv: list[str]) -> int:
        """Queue a job (``tsp -B``: fail rather than block on a full queue); its id."""
        return int(self.call("-B", *argv).strip())

    def wait(self, job_id: int) -> None:
        subprocess.run([self.tsp, "-w", str(job_id)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env=self.env)

    def states(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for line in self.call("-l").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 2:
                counts[fields[1]] = counts.get(fields[1], 0) + 1
        return counts

    def errorlevels(self) -> dict[str, int]:
        """Finished jobs by exit status (the E-Level column of ``tsp -l``)."""
        counts: dict[str, int] = {}
        for line in self.call("-l").splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 4 and fields[1] == "finished":
                counts[fields[3]] = counts.get(fields[3], 0) + 1
        return counts


# --- scenarios ----------------------------------------------------------------


def latency(tsp: str, n: int, command, summary, poll_s: float = 0.0005,
            shell: bool = False) -> dict:
    """``n`` sequential jobs on a tsp server of their own (``LatencySide``)."""
    with TaskSpooler(tsp, "latency", slots=2) as ts, \
            (Shell(ts.env) if shell else contextlib.nullcontext()) as sh:
        side = LatencySide(ts, command, summary, poll_s, sh)
        for i in range(n):
            side.sample(i)
        return side.result()


class LatencySide:
    """task-spooler's side of the latency scenario, one sequential job (``sample``) at a
    time, so that side_by_side.py can interleave them with praxist_fs's. ``command(stamp_path)
    -> shell text``; ``summary(values_ns)`` -> percentiles. With ``sh`` (a ``Shell`` with
    ``ts.env``) each ``tsp`` call is made by that running shell, not by this process."""

    def __init__(self, ts: TaskSpooler, command, summary, poll_s: float = 0.0005,
                 sh: Shell | None = None) -> None:
        self.ts, self.command, self.summary, self.poll_s, self.sh = \
            ts, command, summary, poll_s, sh
        self.stamps = ts.scratch / "stamps"
        self.stamps.mkdir()
        self.to_start: list[int] = []
        self.failures: list[str] = []

    def sample(self, i: int) -> None:
        ts = self.ts
        stamp = self.stamps / f"{i:05d}"
        argv = [SH, "-c", self.command(stamp)]
        line = shlex.join([ts.tsp, "-B", *argv]) + " </dev/null"
        submitted = time.time_ns()
        job_id = int(self.sh.run(line)) if self.sh else ts.submit(argv)
        deadline = time.monotonic() + 30
        started = None
        while time.monotonic() < deadline:
            try:
                text = stamp.read_text()
                if text.endswith("\n"):
                    started = int(text)
                    break
            except (OSError, ValueError):
                pass
            time.sleep(self.poll_s)
        ts.wait(job_id)
        if started is None:
            self.failures.append(f"job {job_id}: no timestamp in {stamp}")
            return
        self.to_start.append(started - submitted)

    def result(self) -> dict:
        if not self.to_start:
            raise RuntimeError("tsp latency: no job produced a timestamp: "
                               + "; ".join(self.failures[:5]))
        return {"jobs": len(self.to_start) + len(self.failures),
                "command": [SH, "-c", self.command(Path("FILE"))],
                "submit_to_start": self.summary(self.to_start), "states": self.ts.states(),
                "failures": self.failures}


def throughput(tsp: str, n: int, argv: list[str], slots: int = 2) -> dict:
    """``n`` x ``tsp argv`` at ``slots`` slots, submission to the last job finished. tsp
    refuses a call while about 1,000 jobs are queued ("queue full" with ``-B``): such a
    call is repeated after 10 ms (``full_retries``), as a script submitting more would."""
    with TaskSpooler(tsp, "throughput", slots=slots) as ts:
        start = time.monotonic()
        ids, retries = [], 0
        while len(ids) < n:
            try:
                ids.append(ts.submit(argv))
            except RuntimeError:
                retries += 1
                if retries > 100 * n:
                    raise
                time.sleep(0.01)
        submitted = time.monotonic()
        ts.wait(ids[-1])
        # FIFO at two slots: the last job starts last; make sure every other one ended too.
        while (states := ts.states()).get("finished", 0) < n:
            if time.monotonic() - start > max(300.0, n * 0.5):
                raise TimeoutError(f"tsp throughput: {states} after {time.monotonic() - start:.0f}s")
            time.sleep(0.005)
        end = time.monotonic()
        levels = ts.errorlevels()
    wall = end - start
    return {"jobs": n, "slots": slots, "command": argv, "wall_s": round(wall, 3),
            "jobs_per_s": round(n / wall, 2), "submit_calls_s": round(submitted - start, 3),
            "full_retries": retries, "exit_levels": levels}


def submit_cost(tsp: str, n: int, argv: list[str]) -> dict:
    """Per-call cost of ``tsp CMD`` with the only slot held (at most SUBMIT_CAP calls)."""
    calls = min(n, SUBMIT_CAP)
    with TaskSpooler(tsp, "submit", slots=1) as ts:
        stop, pid_file = ts.scratch / "STOP", ts.scratch / "blocker.pid"
        ts.submit([SH, "-c", f"echo $$ > '{pid_file}'; "
                   f"while [ ! -e '{stop}' ]; do sleep 0.05; done"])
        deadline = time.monotonic() + 10
        # running, and its pid written: a blocker whose pid _wait_blocker could not read
        # (a few calls are made in less time than its shell's start) was not waited for,
        # and its scratch dir was set aside with STOP in it: it looped on forever
        while ts.states().get("running", 0) < 1 or not _written(pid_file):
            if time.monotonic() > deadline:
                raise TimeoutError("tsp submit: the blocker did not start")
            time.sleep(0.01)
        each = []
        start = time.monotonic()
        for _ in range(calls):
            t0 = time.perf_counter()
            ts.submit(argv)
            each.append(time.perf_counter() - t0)
        wall = time.monotonic() - start
        queued = ts.states().get("queued", 0)
        try:
            ts.call("-K", check=False)  # the queued jobs never run; then let the blocker go
        finally:
            stop.touch()
            _wait_blocker(pid_file)
    each.sort()
    mean = sum(each) / len(each)
    return {"calls": calls, "calls_wall_s": round(wall, 4),
            "per_call_mean_ms": round(mean * 1000, 3),
            "per_call_p50_ms": round(each[len(each) // 2] * 1000, 3),
            "per_call_max_ms": round(each[-1] * 1000, 3),
            "extrapolated_to": n, "wall_s": round(mean * n, 4), "queued_seen": queued}


def _written(path: Path) -> bool:
    """Whether the line a shell's ``echo ... > path`` writes is whole."""
    try:
        return path.read_text().endswith("\n")
    except OSError:
        return False


def _wait_blocker(pid_file: Path, timeout: float = 10.0) -> None:
    """Wait for the blocker's shell and the tsp process that runs it (its parent) to exit."""
    try:
        pid = int(pid_file.read_text())
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        pids = [pid, int(stat[stat.rfind(b")") + 2:].split()[1])]
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + timeout
    for p in pids:
        while os.path.exists(f"/proc/{p}") and time.monotonic() < deadline:
            time.sleep(0.01)
    if any(os.path.exists(f"/proc/{p}") for p in pids):
        print(f"warning: tsp blocker {pids} still running", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_coordinator import summary_ms  # noqa: E402
    parser = argparse.ArgumentParser(description="task-spooler alone (see bench_all.py)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tsp", help="the tsp binary (default: tsp on PATH, installed if missing)")
    args = parser.parse_args(argv)
    tsp, version = ensure_tsp(args.tsp)
    n_lat, n_tp, n_sub = (50, 200, 200) if args.quick else (200, 1000, 1000)
    result = {"tsp": tsp, "version": version,
              "latency": latency(tsp, n_lat, lambda p: f"date +%s%N > '{p}'", summary_ms),
              "throughput": throughput(tsp, n_tp, ["/bin/true"]),
              "submit": submit_cost(tsp, n_sub, ["/bin/true"])}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
