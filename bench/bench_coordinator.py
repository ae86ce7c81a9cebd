#!/usr/bin/env python3
"""Benchmark the praxist_fs coordinator on this machine.

Scenarios (each on a fresh run directory under the system temp dir, with its
own coordinator started by ``python -m praxist_fs serve`` and stopped by SIGTERM):

1. latency     submit-to-start latency over N sequential trivial jobs: from the
               rename into spool/incoming/ to the command's first instruction.
               The command is ``/usr/bin/date +%s%N`` (one exec, its stdout is the
               attempt log), so "start" is the timestamp date prints. The floor
               (what spawning ``date`` itself costs, from just before Popen to its
               timestamp) is measured separately and reported, never subtracted.
2. throughput  wall time for N ``/bin/true`` jobs dropped at once at concurrency
               2: from the first rename to the last job file in jobs/done/.
3. acceptance  N requests dropped at once while the only slot is held by a
               blocker job: from the first rename to the last reply file.
4. idle        after scenario 2 (N finished jobs), the coordinator's own CPU
               time (user+system, not its children) over an idle window, as a
               percentage of one core, and its RSS.

Usage: bench/bench_coordinator.py [--quick] [--json PATH]
Only the standard library and psutil are needed.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from praxist_fs.adapters.watcher import filesystem_type

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEER = "bench"
MiB = 1024 * 1024

TASK_YAML = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: {concurrency}
    min_concurrent_experiments: 1
    max_concurrent_experiments: {maximum}
    default_profile: cpu_light
    profiles:
      cpu_light: {{accelerator: cpu}}
"""

FULL = {"latency": 200, "throughput": 1000, "acceptance": 1000, "idle_s": 30.0}
QUICK = {"latency": 50, "throughput": 200, "acceptance": 200, "idle_s": 5.0}


# --- helpers -----------------------------------------------------------------

_graveyard: Path | None = None


def discard(path: Path) -> None:
    """Set a scratch directory aside, deleted only when the benchmark exits.

    This machine's /tmp is ext4 without a journal, where allocating an inode skips every
    inode freed in the last few seconds (ext4's ``recently_deleted``; tens of seconds
    while their inode table blocks are dirty): right after a scenario's thousands of
    files are removed, creating a file costs 100-180 us instead of 5-30 us. Deleting
    at exit keeps one scenario's clean-up out of the next one's numbers."""
    global _graveyard
    if not path.exists():
        return
    if _graveyard is None:
        _graveyard = Path(tempfile.mkdtemp(prefix="praxist-bench-discarded-"))
        atexit.register(shutil.rmtree, _graveyard, ignore_errors=True)
    try:
        path.rename(_graveyard / f"{len(os.listdir(_graveyard))}-{path.name}")
    except OSError:  # another file system: delete it now
        shutil.rmtree(path, ignore_errors=True)



def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n*q/100), at least 1
    return ordered[int(rank) - 1]


def summary_ms(values_ns: list[int]) -> dict[str, float]:
    ms = [v / 1e6 for v in values_ns]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 3),
            "p99_ms": round(percentile(ms, 99), 3), "mean_ms": round(statistics.fmean(ms), 3),
            "min_ms": round(min(ms), 3), "max_ms": round(max(ms), 3)}


def wait_until(predicate, timeout: float, interval: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def read_json(path: Path):
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def count_json(directory: Path) -> int:
    return sum(1 for name in os.listdir(directory)
               if name.endswith(".json") and not name.startswith("."))


def executable(name: str, fallback: str) -> str:
    return shutil.which(name) or fallback


DATE = executable("date", "/bin/date")
TRUE = executable("true", "/bin/true")
SH = "/bin/sh"


class Shell:
    """A shell user's own shell: one ``/bin/sh`` that lives through a scenario and reads
    command lines from a pipe. ``run`` gives it a line and returns the first line the
    commands print, so a submission is timed from just before the line is written, as
    when a user presses Enter in a running shell: neither system pays a shell start, and
    each pays the commands it needs (``printf`` is built in; ``mv`` or ``tsp`` is one
    exec). A context manager; ``env`` is the shell's environment."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen([SH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)

    def __enter__(self) -> Shell:
        return self

    def __exit__(self, *exc_info) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def run(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the shell exited ({self.proc.poll()}) on: {line[:200]}")
        return answer.rstrip("\n")


# --- a coordinator on a scratch run directory ----------------------------------


class Coordinator:
    """``python -m praxist_fs serve`` on a fresh temp run dir; a context manager."""

    def __init__(self, label: str, concurrency: int, *, scratch: Path | None = None,
                 keep: bool = False, python_args: tuple[str, ...] = (),
                 start_timeout: float = 60.0, start_poll: float = 0.01) -> None:
        """``scratch``: an existing directory (a fixture: ``run/``, maybe ``task.yaml``)
        instead of a fresh one; ``keep``: leave it in place at exit; ``python_args``:
        interpreter options before ``-m praxist_fs`` (e.g. cProfile)."""
        self.owned = scratch is None
        self.keep = keep
        self.python_args = tuple(python_args)
        self.start_timeout, self.start_poll = start_timeout, start_poll
        self.scratch = Path(tempfile.mkdtemp(prefix=f"praxist-bench-{label}-")) \
            if scratch is None else Path(scratch)
        self.run_dir = self.scratch / "run"
        self.task = self.scratch / "task.yaml"
        if self.owned or not self.task.exists():
            self.task.write_text(TASK_YAML.format(concurrency=concurrency,
                                                     maximum=max(8, concurrency)))
        self.sched = self.run_dir / "resource_scheduler"
        self.tmp = self.sched / "spool" / "tmp"
        self.incoming = self.sched / "spool" / "incoming"
        self.replies = self.sched / "spool" / "replies"
        self.done = self.sched / "jobs" / "done"
        self.attempts = self.sched / "attempts"
        self.logs = self.run_dir / "logs" / "experiments"
        self.log_path = self.scratch / "coordinator.log"
        self.proc: subprocess.Popen | None = None
        self.returncode: int | None = None

    def environment(self) -> dict[str, str]:
        """The coordinator's environment: this process's, never forced to poll, and with a
        host registry in its scratch unless one is given (``disk.isolate`` gives one): a
        bench function called on its own, without ``make bench``, must not register its
        runs on the machine's registry, where they stay once their scratch is gone."""
        env = dict(os.environ)
        env.pop("PRAXIST_FORCE_POLLING", None)
        env.setdefault("PRAXIST_HOST_REGISTRY", str(self.scratch / "hosts"))
        return env

    def __enter__(self) -> Coordinator:
        env = self.environment()
        with open(self.log_path, "wb") as log:
            self.started_ns = time.time_ns()
            self.proc = subprocess.Popen(
                [sys.executable, *self.python_args, "-m", "praxist_fs", "serve",
                 "--run-dir", str(self.run_dir), "--config", str(self.task)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                env=env)
        try:
            wait_until(self._ready, self.start_timeout, self.start_poll, "endpoint.json")
        except BaseException:
            self.stop()
            self.cleanup()
            raise
        self.ready_ns = time.time_ns()  # Popen -> endpoint.json (within start_poll)
        self.ps = psutil.Process(self.proc.pid)
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"coordinator exited with {self.proc.returncode}:\n"
                               + self.log_tail())
        return (self.sched / "endpoint.json").exists() and self.incoming.is_dir()

    def __exit__(self, *exc_info) -> None:
        try:
            self.stop()
        finally:
            self.cleanup()

    def stop(self) -> int | None:
        if self.proc is None or self.returncode is not None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                print(f"warning: coordinator {self.proc.pid} ignored SIGTERM for 30 s; killed",
                      file=sys.stderr)
        self.returncode = self.proc.returncode
        if self.returncode != 0:
            print(f"warning: coordinator exited with {self.returncode}:\n{self.log_tail()}",
                  file=sys.stderr)
        return self.returncode

    def cleanup(self) -> None:
        if not self.keep:
            discard(self.scratch)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- the peer side -----------------------------------------------------

    def prepare(self, request_id: str, tag: str, argv: list[str]) -> str:
        """Write a request into spool/tmp; return its file name (rename it to submit)."""
        name = f"{request_id}.json"
        doc = {"request_id": request_id, "peer": PEER, "tag": tag, "argv": argv,
               "profile": "cpu_light", "cwd": str(self.scratch),
               "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"}}
        with open(self.tmp / name, "wb") as handle:
            handle.write(json.dumps(doc).encode())
        return name

    def drop(self, name: str) -> None:
        os.rename(self.tmp / name, self.incoming / name)

    def drop_all(self, names: list[str]) -> tuple[float, float]:
        """Rename the prepared ``names`` in, back to back: (monotonic time before the
        first, after the last)."""
        start = time.monotonic()
        for name in names:
            self.drop(name)
        return start, time.monotonic()

    def reply(self, request_id: str):
        return read_json(self.replies / f"{request_id}.json")

    def wait_reply(self, request_id: str, timeout: float = 30.0) -> dict:
        return wait_until(lambda: self.reply(request_id), timeout, 0.0005,
                          f"the reply to {request_id}")

    def wait_done(self, job_id: str, timeout: float = 30.0) -> dict:
        path = self.done / f"{job_id}.json"
        return wait_until(lambda: read_json(path) if path.exists() else None, timeout, 0.0005,
                          f"job {job_id} in jobs/done")

    def own_cpu_s(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system


# --- scenarios ----------------------------------------------------------------


def date_floor(samples: int) -> dict:
    """What ``date +%s%N`` costs to reach its first instruction, spawned from Python."""
    deltas = []
    for _ in range(samples):
        start = time.time_ns()
        out = subprocess.run([DATE, "+%s%N"], stdout=subprocess.PIPE, check=True).stdout
        deltas.append(int(out) - start)
    return summary_ms(deltas)


def bench_latency(n: int) -> dict:
    to_start, to_reply, to_done = [], [], []
    phases = {"notice": [], "launch": [], "shim_ready": [], "go_to_cmd": []}
    failures = []
    with Coordinator("latency", concurrency=2) as co:
        stamp = time.time_ns()
        for i in range(n):
            request_id = f"lat-{stamp}-{i:05d}"
            name = co.prepare(request_id, f"lat-{stamp}-{i:05d}", [DATE, "+%s%N"])
            submitted = time.time_ns()
            co.drop(name)
            reply = co.wait_reply(request_id)
            replied = time.time_ns()
            if reply.get("outcome") != "accepted":
                failures.append(f"{request_id}: {reply.get('outcome')} {reply.get('reason')}")
                continue
            job = co.wait_done(reply["job_id"])
            done = time.time_ns()
            if job.get("state") != "completed" or not job.get("attempts"):
                failures.append(f"{job['job_id']}: {job.get('state')} {job.get('reason')}")
                continue
            attempt = job["attempts"][-1]["attempt_id"]
            log = co.logs / job["job_id"] / f"{attempt}.log"
            try:
                started = int(log.read_text().split()[0])
            except (OSError, ValueError, IndexError) as exc:
                failures.append(f"{job['job_id']}: no timestamp in {log}: {exc}")
                continue
            to_start.append(started - submitted)
            to_reply.append(replied - submitted)
            to_done.append(done - submitted)
            # Where the time goes, from the coordinator's own (float seconds) records.
            ready = read_json(co.attempts / job["job_id"] / attempt / "READY") or {}
            seen_ns = int(job["submitted_at"] * 1e9)
            decided_ns = int(job["attempts"][-1]["started_at"] * 1e9)
            phases["notice"].append(seen_ns - submitted)
            phases["launch"].append(decided_ns - seen_ns)
            if "at" in ready:
                ready_ns = int(ready["at"] * 1e9)
                phases["shim_ready"].append(ready_ns - decided_ns)
                phases["go_to_cmd"].append(started - ready_ns)
    if not to_start:
        raise RuntimeError("latency: no job produced a timestamp: " + "; ".join(failures[:5]))
    return {
        "jobs": n, "command": [DATE, "+%s%N"],
        "submit_to_start": summary_ms(to_start),
        "submit_to_reply": summary_ms(to_reply),
        "submit_to_done_seen": summary_ms(to_done),
        "phases_p50_ms": {
            "rename_to_request_seen": _p50(phases["notice"]),
            "seen_to_launch_decided": _p50(phases["launch"]),
            "decided_to_shim_READY": _p50(phases["shim_ready"]),
            "READY_to_command_start": _p50(phases["go_to_cmd"]),
        },
        "floor_date_spawn": date_floor(50),
        "failures": failures,
    }


def _p50(values_ns: list[int]) -> float | None:
    return round(percentile([v / 1e6 for v in values_ns], 50), 3) if values_ns else None


def poll_until(n: int, count, mark, start: float, deadline: float, poll_s: float,
               what: str, noun: str) -> float | None:
    """Every ``poll_s`` until ``count()`` reaches ``n``: the monotonic time ``mark(count)``
    first held (None if it never did). Past ``deadline``, a TimeoutError says how many."""
    marked = None
    while True:
        got = count()
        if marked is None and mark(got):
            marked = time.monotonic()
        if got >= n:
            return marked
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: only {got} of {n} {noun} after {deadline - start:.0f}s")
        time.sleep(poll_s)


def bench_throughput_and_idle(n: int, idle_s: float) -> tuple[dict, dict]:
    with Coordinator("throughput", concurrency=2) as co:
        stamp = time.time_ns()
        names = [co.prepare(f"tp-{stamp}-{i:05d}", f"tp-{stamp}-{i:05d}", [TRUE])
                 for i in range(n)]
        rss_before = co.ps.memory_info().rss
        cpu_before = co.own_cpu_s()
        start, dropped = co.drop_all(names)
        all_replied = poll_until(n, lambda: count_json(co.done),
                                 lambda done: count_json(co.replies) >= n,
                                 start, start + max(300.0, n * 0.5), 0.01,
                                 "throughput", "jobs done")
        end = time.monotonic()
        if all_replied is None:
            all_replied = end
        cpu_busy = co.own_cpu_s() - cpu_before
        states: dict[str, int] = {}
        for name in os.listdir(co.done):
            if name.endswith(".json") and not name.startswith("."):
                state = (read_json(co.done / name) or {}).get("state", "unreadable")
                states[state] = states.get(state, 0) + 1
        wall = end - start
        throughput = {
            "jobs": n, "concurrency": 2, "command": [TRUE],
            "wall_s": round(wall, 3), "jobs_per_s": round(n / wall, 2),
            "drop_s": round(dropped - start, 4),
            "first_rename_to_all_replied_s": round(all_replied - start, 3),
            "coordinator_cpu_s": round(cpu_busy, 3),
            "coordinator_cpu_ms_per_job": round(cpu_busy * 1000 / n, 3),
            "done_states": states,
        }

        # Idle: everything is finished; let the last status write settle first.
        time.sleep(1.0)
        rss_after_jobs = co.ps.memory_info().rss
        cpu0, wall0 = co.own_cpu_s(), time.monotonic()
        time.sleep(idle_s)
        cpu1, wall1 = co.own_cpu_s(), time.monotonic()
        ps = co.ps
        children = [c for c in ps.children(recursive=True)]
        idle = {
            "after_finished_jobs": n, "window_s": round(wall1 - wall0, 3),
            "cpu_s": round(cpu1 - cpu0, 4),
            "cpu_pct_of_one_core": round((cpu1 - cpu0) / (wall1 - wall0) * 100, 3),
            "rss_mib_at_start": round(rss_before / MiB, 2),
            "rss_mib_after_jobs": round(rss_after_jobs / MiB, 2),
            "rss_mib_after_idle": round(ps.memory_info().rss / MiB, 2),
            "num_fds": ps.num_fds(), "num_threads": ps.num_threads(),
            "children": len(children),
            "zombie_children": sum(1 for c in children if _status(c) == psutil.STATUS_ZOMBIE),
        }
    return throughput, idle


def _status(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.Error:
        return "gone"


class Blocker:
    """A job that holds the coordinator's only slot until released."""

    def __init__(self, co: Coordinator) -> None:
        self.co = co
        self.stop_file = co.scratch / f"STOP-{time.time_ns()}"
        rid = f"blocker-{time.time_ns()}"
        co.drop(co.prepare(rid, rid, [SH, "-c",
                                      f"while [ ! -e '{self.stop_file}' ]; do sleep 0.05; done"]))
        reply = co.wait_reply(rid, timeout=120)
        if reply.get("outcome") != "accepted":
            raise RuntimeError(f"blocker not accepted: {reply}")
        attempt = co.attempts / reply["job_id"] / "a1"
        self.ready = wait_until(lambda: read_json(attempt / "READY"), 120, 0.005,
                                "the blocker's READY")
        wait_until(lambda: (attempt / "GO").exists(), 120, 0.005, "the blocker's GO")

    def release(self) -> None:
        """After the coordinator stopped (queued jobs stay queued): let the shim finish."""
        self.stop_file.touch()
        pid = self.ready.get("pid")
        if isinstance(pid, int):
            try:
                psutil.Process(pid).wait(timeout=30)
            except psutil.NoSuchProcess:
                pass
            except psutil.TimeoutExpired:
                print(f"warning: the blocker shim {pid} did not exit", file=sys.stderr)


def bench_acceptance(n: int) -> dict:
    with Coordinator("acceptance", concurrency=1) as co:
        blocker = Blocker(co)
        stamp = time.time_ns()
        ids = [f"acc-{stamp}-{i:05d}" for i in range(n)]
        names = [co.prepare(rid, rid, [TRUE]) for rid in ids]
        cpu_before = co.own_cpu_s()
        start, dropped = co.drop_all(names)
        first_reply = poll_until(n, lambda: count_json(co.replies) - 1,  # the blocker's reply
                                 lambda replied: replied > 0,
                                 start, start + max(120.0, n * 0.2), 0.002,
                                 "acceptance", "replies")
        end = time.monotonic()
        cpu_busy = co.own_cpu_s() - cpu_before
        outcomes: dict[str, int] = {}
        for rid in ids:
            outcome = (co.reply(rid) or {}).get("outcome", "unreadable")
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        co.stop()  # queued jobs stay queued; the blocker's shim outlives the coordinator
        blocker.release()
    wall = end - start
    return {
        "requests": n, "wall_s": round(wall, 3), "requests_per_s": round(n / wall, 1),
        "drop_s": round(dropped - start, 4),
        "first_reply_s": round(first_reply - start, 4) if first_reply else None,
        "coordinator_cpu_s": round(cpu_busy, 3),
        "coordinator_cpu_ms_per_request": round(cpu_busy * 1000 / n, 3),
        "outcomes": outcomes,
    }


# --- main -----------------------------------------------------------------------


def machine() -> dict:
    tmp = tempfile.gettempdir()
    return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "implementation": platform.python_implementation(),
            "kernel": platform.release(), "tmp_dir": tmp, "tmp_fs": filesystem_type(tmp),
            "mem_total_mib": round(psutil.virtual_memory().total / MiB)}


def table(results: dict) -> str:
    m, lat, tp, acc, idle = (results[k] for k in ("machine", "latency", "throughput",
                                                   "acceptance", "idle"))
    s = lat["submit_to_start"]
    f = lat["floor_date_spawn"]
    ph = lat["phases_p50_ms"]
    rows = [
        ("machine", f"nproc {m['nproc']} (affinity {m['affinity']}), Python {m['python']}, "
                    f"{m['tmp_dir']} on {m['tmp_fs']}, kernel {m['kernel']}"),
        ("mode", results["mode"]),
        (f"submit-to-start ({lat['jobs']} seq.)",
         f"p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  mean {s['mean_ms']:.2f} ms  "
         f"max {s['max_ms']:.2f} ms"),
        ("  floor: spawn date +%s%N", f"p50 {f['p50_ms']:.2f} ms  p99 {f['p99_ms']:.2f} ms"),
        ("  submit-to-reply", f"p50 {lat['submit_to_reply']['p50_ms']:.2f} ms  "
                              f"p99 {lat['submit_to_reply']['p99_ms']:.2f} ms"),
        ("  phases (p50)", f"rename->seen {ph['rename_to_request_seen']} ms, "
                           f"seen->launch {ph['seen_to_launch_decided']} ms, "
                           f"launch->shim READY {ph['decided_to_shim_READY']} ms, "
                           f"READY->cmd {ph['READY_to_command_start']} ms"),
        (f"throughput ({tp['jobs']} x true, c=2)",
         f"wall {tp['wall_s']:.2f} s  ({tp['jobs_per_s']:.1f} jobs/s; all replied after "
         f"{tp['first_rename_to_all_replied_s']:.2f} s; coordinator CPU "
         f"{tp['coordinator_cpu_ms_per_job']:.2f} ms/job)"),
        (f"acceptance ({acc['requests']} at once)",
         f"{acc['wall_s']:.3f} s to last reply = {acc['requests_per_s']:.0f} req/s "
         f"(first reply {acc['first_reply_s']} s; CPU {acc['coordinator_cpu_ms_per_request']:.2f}"
         f" ms/req; {acc['outcomes']})"),
        (f"idle CPU ({idle['window_s']:.0f} s)",
         f"{idle['cpu_pct_of_one_core']:.3f} % of one core ({idle['cpu_s']:.3f} s CPU)"),
        (f"RSS after {idle['after_finished_jobs']} jobs",
         f"{idle['rss_mib_after_idle']:.1f} MiB (at start {idle['rss_mib_at_start']:.1f} MiB); "
         f"fds {idle['num_fds']}, threads {idle['num_threads']}, children {idle['children']}"),
    ]
    width = max(len(k) for k, _ in rows)
    problems = lat["failures"][:3]
    if tp["done_states"].get("completed") != tp["jobs"]:
        problems.append(f"throughput done states: {tp['done_states']}")
    if acc["outcomes"].get("accepted") != acc["requests"]:
        problems.append(f"acceptance outcomes: {acc['outcomes']}")
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"PROBLEM: {p}" for p in problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small counts (50 latency, 200 throughput, 200 acceptance, 5 s idle)")
    parser.add_argument("--json", metavar="PATH",
                        help="write the results here (default bench/results/coordinator-<ts>.json)")
    args = parser.parse_args(argv)
    counts = QUICK if args.quick else FULL
    results = {"mode": "quick" if args.quick else "full", "counts": counts,
               "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine()}

    print(f"[1/3] latency: {counts['latency']} sequential jobs ...", flush=True)
    results["latency"] = bench_latency(counts["latency"])
    print(f"[2/3] throughput: {counts['throughput']} jobs at concurrency 2, then "
          f"{counts['idle_s']:g} s idle ...", flush=True)
    results["throughput"], results["idle"] = bench_throughput_and_idle(
        counts["throughput"], counts["idle_s"])
    print(f"[3/3] acceptance: {counts['acceptance']} requests at once ...", flush=True)
    results["acceptance"] = bench_acceptance(counts["acceptance"])

    path = Path(args.json) if args.json else \
        HERE / "results" / f"coordinator-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
