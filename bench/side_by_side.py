"""The rows side by side with task-spooler (bench_all.py): submit-to-start latency (also
a shell user's), throughput at 2 and 16 slots, the cost of submitting, and the first
job after a start; ``compare`` runs them all, round by round."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shlex
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import bench_tsp
import disk
from bench_coordinator import (
    SH, TRUE, Blocker, Coordinator, Shell, percentile, read_json, summary_ms, wait_until,
)
from bench_table import ratio_of
from settle import settle
from praxist_fs.adapters.inotify_bell import InotifyBell
from praxist_fs.core.identity import job_id_for

POLL = 0.0005  # seconds between looks at a file, the same for both systems
Started = Callable[[int], None]  # told a latency scenario's coordinator's pid


def stamp_command(path: Path) -> str:
    return f"date +%s%N > '{path}'"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_file(path: Path, timeout: float, poll: float = POLL):
    return wait_until(lambda: read_json(path), timeout, poll, str(path))


def px_latency(n: int, shell: bool = False, started: Started | None = None) -> dict:
    """``n`` sequential jobs on a coordinator of their own (``LatencySide``). ``started``
    is given the coordinator's pid before the first job (timeline.py traces it)."""
    with Coordinator("latency", concurrency=2) as co, \
            (Shell() if shell else contextlib.nullcontext()) as sh:
        if started is not None:
            started(co.proc.pid)
        side = LatencySide(co, sh)
        for i in range(n):
            side.sample(i)
        return side.result()


class LatencySide:
    """praxist_fs's side of the latency scenario, one sequential job (``sample``) at a time,
    so that the side-by-side run can interleave them with task-spooler's
    (``interleaved_latency``). With ``sh`` (a ``Shell``) each request is submitted as a
    shell user does, a line given to that running shell, which printfs it into spool/tmp/
    and mvs it into spool/incoming/ (timed from just before the line is written; the first
    phase is then ``line_to_request_seen``, and ``line_to_mv_returned`` is the shell's own
    part, read when its ``echo`` after mv comes back), instead of by a rename from this
    process. Each sample's phases are kept (``samples`` in the result), so that the
    slowest ones can be told apart from the rest."""

    def __init__(self, co: Coordinator, sh: Shell | None = None) -> None:
        self.co, self.sh = co, sh
        self.stamps = co.scratch / "stamps"
        self.stamps.mkdir()
        self.run = time.time_ns()
        self.first = "line_to_request_seen" if sh else "rename_to_request_seen"
        self.to_start, self.to_reply, self.mv_returned = [], [], []
        self.failures: list[str] = []
        self.samples: list[dict] = []  # each job's submit time and phases, in ms

    def sample(self, i: int) -> None:
        co, sh = self.co, self.sh
        rid = f"lat-{self.run}-{i:05d}"
        stamp = self.stamps / f"{i:05d}"
        name = co.prepare(rid, rid, [SH, "-c", stamp_command(stamp)])
        line = shell_line(co, name) if sh else None
        submitted = time.time_ns()
        if sh:
            sh.run(line)
            self.mv_returned.append(time.time_ns() - submitted)
        else:
            co.drop(name)
        reply = wait_file(co.replies / f"{rid}.json", 30)
        replied = time.time_ns()
        if reply.get("outcome") != "accepted":
            self.failures.append(f"{rid}: {reply.get('outcome')} {reply.get('reason')}")
            return
        job = wait_file(co.done / f"{reply['job_id']}.json", 30)
        try:
            started = int(stamp.read_text())
        except (OSError, ValueError) as exc:
            self.failures.append(f"{rid}: {job.get('state')}: no timestamp: {exc}")
            return
        self.to_start.append(started - submitted)
        self.to_reply.append(replied - submitted)
        attempt = job["attempts"][-1]
        ready = read_json(co.attempts / job["job_id"] / attempt["attempt_id"] / "READY")
        seen, decided = int(job["submitted_at"] * 1e9), int(attempt["started_at"] * 1e9)
        at = {"submitted_s": round(submitted / 1e9 - co.started_ns / 1e9, 4),
              "submit_to_start": started - submitted, self.first: seen - submitted,
              "seen_to_launch_decided": decided - seen}
        if isinstance(ready, dict) and "at" in ready:
            at["decided_to_shim_READY"] = int(ready["at"] * 1e9) - decided
            at["READY_to_command_start"] = started - int(ready["at"] * 1e9)
        self.samples.append({k: v if k == "submitted_s" else round(v / 1e6, 3)
                             for k, v in at.items()})

    def result(self) -> dict:
        if not self.to_start:
            raise RuntimeError("praxist latency: no timestamps: " + "; ".join(self.failures[:5]))
        phases = (self.first, "seen_to_launch_decided", "decided_to_shim_READY",
                  "READY_to_command_start")
        result = {"jobs": len(self.to_start) + len(self.failures),
                  "command": [SH, "-c", stamp_command(Path("FILE"))],
                  "submit_to_start": summary_ms(self.to_start),
                  "submit_to_reply": summary_ms(self.to_reply),
                  "phases_p50_ms": {k: percentile(v, 50) if (v := [
                      s[k] for s in self.samples if k in s]) else None for k in phases},
                  "slowest": sorted(self.samples, key=lambda s: -s["submit_to_start"])[:5],
                  "samples": self.samples,
                  "failures": self.failures}
        if self.sh:
            result["line_to_mv_returned_p50_ms"] = round(
                percentile(self.mv_returned, 50) / 1e6, 3)
        return result


def shell_line(co: Coordinator, name: str) -> str:
    """The command line a shell user types to submit the request ``co.prepare`` wrote:
    its text printfed into spool/tmp/ and moved into spool/incoming/ (PROTOCOL.md)."""
    text = (co.tmp / name).read_text()
    (co.tmp / name).unlink()
    tmp, incoming = shlex.quote(str(co.tmp / name)), shlex.quote(str(co.incoming / name))
    return f"printf %s {shlex.quote(text)} > {tmp} && mv {tmp} {incoming} </dev/null && echo"


def interleaved_latency(n: int, tsp: str, shell: bool = False,
                        started: Started | None = None) -> dict[str, dict]:
    """The latency scenario (``shell``: a shell user's) on both systems at once: a
    coordinator and a tsp server are up side by side, and their ``n`` sequential jobs take
    turns, one job of each, the first of a pair swapping from pair to pair. A slow second
    of this shared machine then falls on both systems' samples alike, where running one
    system's 200 jobs and then the other's put a busy minute on one side only. Each side's
    job is measured as when it runs alone (``LatencySide``, ``bench_tsp.LatencySide``),
    once both systems went quiet (``settle``: what one still does after its job ended
    would otherwise fall on the other's job); ``unsettled`` counts the jobs before which
    they did not within its timeout. ``started``: as ``px_latency``'s."""
    with Coordinator("latency", concurrency=2) as co, \
            bench_tsp.TaskSpooler(tsp, "latency", slots=2) as ts, \
            (Shell() if shell else contextlib.nullcontext()) as px_sh, \
            (Shell(ts.env) if shell else contextlib.nullcontext()) as ts_sh:
        if started is not None:
            started(co.proc.pid)
        px = LatencySide(co, px_sh)
        other = bench_tsp.LatencySide(ts, stamp_command, summary_ms, POLL, ts_sh)
        unsettled = 0
        for i in range(n):
            for side in (px, other) if i % 2 == 0 else (other, px):
                unsettled += not settle([pid for pid in (co.proc.pid, ts.server_pid()) if pid])
                side.sample(i)
        return {"praxist_fs": {**px.result(), "unsettled": unsettled},
                "task_spooler": {**other.result(), "unsettled": unsettled}}


def px_first_job(n: int) -> dict:
    """Submit-to-start of the first job after a start, over ``n`` fresh coordinators: the
    request is renamed in as soon as endpoint.json exists (the coordinator serves)."""
    to_start = []
    for i in range(n):
        with Coordinator("first", concurrency=2, start_poll=0.0005) as co:
            stamp = co.scratch / "stamp"
            rid = f"first-{time.time_ns()}-{i}"
            name = co.prepare(rid, rid, [SH, "-c", stamp_command(stamp)])
            submitted = time.time_ns()
            co.drop(name)
            reply = wait_file(co.replies / f"{rid}.json", 30)
            if reply.get("outcome") != "accepted":
                raise RuntimeError(f"first job: {reply.get('outcome')} {reply.get('reason')}")
            co.wait_done(reply["job_id"])
            to_start.append(int(stamp.read_text()) - submitted)
    return {"coordinators": n, "submit_to_start": summary_ms(to_start)}


def wait_in_order(paths: list[Path], deadline: float, poll_s: float, missing: str) -> None:
    """Until each of ``paths`` exists, oldest first; past ``deadline`` (monotonic), a
    TimeoutError says ``missing`` with ``{name}`` the first file missing."""
    for path in paths:
        while not path.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(missing.format(name=path.name))
            time.sleep(poll_s)


def tally(paths: list[Path], key: str) -> dict[str, int]:
    """How many of the JSON files at ``paths`` hold each value of ``key``."""
    counts: dict[str, int] = {}
    for path in paths:
        value = (read_json(path) or {}).get(key, "unreadable")
        counts[value] = counts.get(value, 0) + 1
    return counts


def px_throughput(n: int, python_args: tuple[str, ...] = (), slots: int = 2) -> dict:
    with Coordinator("throughput", concurrency=slots, python_args=python_args) as co:
        run = time.time_ns()
        tags = [f"tp-{run}-{i:05d}" for i in range(n)]
        # oldest first at two slots: wait for each in turn
        wall, drop, cpu, states = drop_and_wait(
            co, tags, [co.done / f"{job_id_for(tag)}.json" for tag in tags],
            max(300.0, n * 0.5), 0.002, "praxist throughput: {name} not done", "state")
    return {"jobs": n, "slots": slots, "command": [TRUE], "wall_s": round(wall, 3),
            "jobs_per_s": round(n / wall, 2), "drop_s": round(drop, 4),
            "coordinator_cpu_s": round(cpu, 3),
            "coordinator_cpu_ms_per_job": round(cpu * 1000 / n, 3), "done_states": states}


def accept_batch(co: Coordinator, n: int, label: str) -> dict:
    """n requests renamed in at once: first rename -> last reply (waited for in order)."""
    run = time.time_ns()
    ids = [f"{label}-{run}-{i:05d}" for i in range(n)]
    wall, drop, cpu, outcomes = drop_and_wait(
        co, ids, [co.replies / f"{rid}.json" for rid in ids], max(120.0, n * 0.2), 0.001,
        "acceptance: no reply {name}", "outcome")
    return {"requests": n, "wall_s": round(wall, 4), "per_request_ms": round(wall * 1000 / n, 4),
            "drop_s": round(drop, 4), "coordinator_cpu_s": round(cpu, 3),
            "outcomes": outcomes}


def drop_and_wait(co: Coordinator, ids: list[str], paths: list[Path], timeout_s: float,
                  poll_s: float, missing: str, key: str) -> tuple[float, float, float, dict]:
    """Requests of ``[TRUE]`` (tag and request id each of ``ids``) renamed in at once, then
    ``paths`` waited for in order (``wait_in_order``): seconds from the first rename to
    the last path, and to the last rename; the coordinator's CPU seconds meanwhile; the
    tally of ``key`` over ``paths``."""
    names = [co.prepare(name, name, [TRUE]) for name in ids]
    cpu0 = co.own_cpu_s()
    start, dropped = co.drop_all(names)
    wait_in_order(paths, start + timeout_s, poll_s, missing)
    end = time.monotonic()
    cpu = co.own_cpu_s() - cpu0
    return end - start, dropped - start, cpu, tally(paths, key)


def accept_sequential(co: Coordinator, n: int, label: str) -> dict:
    """n requests one at a time: rename -> reply, each, the reply seen as it is renamed
    into spool/replies/ (``wait_rung``), not at a poll's next look: polled every 0.5 ms, a
    reply that came in 0.62 ms was seen at ~0.65 or ~1.15 ms, and the p50 of 100 such
    flipped between the two from round to round (acceptance at 10,000 finished 1.9x the
    0-finished p50 in one ``make bench``, 1.0x in the next)."""
    run = time.time_ns()
    deltas, outcomes = [], {}
    bell = InotifyBell()
    try:
        bell.watch(co.replies)
        for i in range(n):
            rid = f"{label}-{run}-{i:05d}"
            name = co.prepare(rid, rid, [TRUE])
            t0 = time.time_ns()
            co.drop(name)
            reply = wait_rung(bell, co.replies / f"{rid}.json", 60)
            deltas.append(time.time_ns() - t0)
            outcomes[reply.get("outcome")] = outcomes.get(reply.get("outcome"), 0) + 1
    finally:
        bell.stop()
    return {"requests": n, "rename_to_reply": summary_ms(deltas), "outcomes": outcomes}


def wait_rung(bell: InotifyBell, path: Path, timeout: float):
    """``path``'s JSON, read once ``bell`` (watching its directory) rang for it."""
    deadline = time.monotonic() + timeout
    while (found := read_json(path)) is None:
        if (left := deadline - time.monotonic()) <= 0:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {path}")
        select.select([bell], [], [], left)
        bell.drain()
    return found


def px_submit(n: int) -> dict:
    with Coordinator("submit", concurrency=1) as co:
        blocker = Blocker(co)
        result = accept_batch(co, n, "sub")
        co.stop()
        blocker.release()
    return result


def compare(rounds: int, counts: dict, tsp: str) -> dict:
    """Every scenario on both systems, ``rounds`` times. The latency rows interleave the two
    systems job by job (``interleaved_latency``); the others run one system then the other,
    the first swapping from round to round. Each round's ratio (of two runs made side by
    side, or one right after the other) is kept, with their median and spread: a ratio of
    medians taken minutes apart once moved 1.24x -> 0.98x between two quiet runs. The disk's
    state before each row of each round (``disk.floor_now``) is kept beside its runs: the
    throughput rows follow what the disk went through in the minute before them."""
    scenarios = {
        "latency": lambda: interleaved_latency(counts["latency"], tsp),
        # the method until round 3, kept beside it so that neither hides the other
        "latency_blocks": (lambda: px_latency(counts["latency"]),
                           lambda: bench_tsp.latency(tsp, counts["latency"], stamp_command,
                                                     summary_ms, POLL)),
        "throughput": (lambda: px_throughput(counts["throughput"]),
                       lambda: bench_tsp.throughput(tsp, counts["throughput"], [TRUE])),
        "submit": (lambda: px_submit(counts["submit"]),
                   lambda: bench_tsp.submit_cost(tsp, counts["submit"], [TRUE])),
        "shell_latency": lambda: interleaved_latency(counts["shell_latency"], tsp, shell=True),
        "throughput16": (lambda: px_throughput(counts["throughput16"], slots=16),
                         lambda: bench_tsp.throughput(tsp, counts["throughput16"], [TRUE],
                                                      slots=16)),
        "first_job": (lambda: px_first_job(counts["first_job"]), None),
    }
    runs = {name: {"praxist_fs": [], "task_spooler": []} for name in scenarios}
    floors: dict[str, list[dict]] = {name: [] for name in scenarios}
    for r in range(rounds):
        order = ("praxist_fs", "task_spooler") if r % 2 == 0 else ("task_spooler", "praxist_fs")
        for name, measure in scenarios.items():
            floors[name].append(disk.floor_now())
            if callable(measure):  # both at once
                log(f"round {r + 1}/{rounds}: {name}, both systems interleaved ...")
                for system, result in measure().items():
                    runs[name][system].append(result)
                continue
            px, ts = measure
            for system in order:
                if system == "task_spooler" and ts is None:
                    continue
                log(f"round {r + 1}/{rounds}: {name}, {system} ...")
                runs[name][system].append((px if system == "praxist_fs" else ts)())
    med = statistics.median

    def by_round(name: str, value) -> dict:
        """Each round's ratio of ``value(run)``, their median and their spread."""
        ratios = [ratio_of(value(p), value(t)) for p, t in zip(runs[name]["praxist_fs"],
                                                            runs[name]["task_spooler"])]
        return {"by_round": ratios, "median": med(ratios), "spread": [min(ratios),
                                                                       max(ratios)]}

    def latencies(name: str, method: str = "interleaved: both systems up, one job of each "
                  "in turn, each once both went quiet") -> dict:
        return {"jobs": counts[name.removesuffix("_blocks")], "runs": runs[name],
                "method": method, "disk_before_by_round": floors[name],
                **{system: {q: med(x["submit_to_start"][q] for x in runs[name][system])
                            for q in ("p50_ms", "p99_ms")}
                   for system in ("praxist_fs", "task_spooler")},
                "ratios": {q: by_round(name, lambda x, q=q: x["submit_to_start"][q])
                           for q in ("p50_ms", "p99_ms")}}

    def walls(name: str) -> dict:
        return {"jobs": counts[name], "runs": runs[name],
                "method": "blocks: one system, then the other, the first swapping by round",
                "disk_before_by_round": floors[name],
                **{system: med(x["wall_s"] for x in runs[name][system])
                   for system in ("praxist_fs", "task_spooler")},
                "ratios": {"wall_s": by_round(name, lambda x: x["wall_s"])}}

    return {
        "order": "latency rows interleaved job by job; the others alternating, round 1 "
                 "starts with praxist_fs",
        "latency": latencies("latency"),
        "latency_blocks": latencies("latency_blocks", "blocks: one system's jobs, then the "
                                    "other's, the first swapping by round"),
        "throughput": walls("throughput"),
        "submit": walls("submit"),
        "shell_latency": latencies("shell_latency"),
        "throughput16": walls("throughput16"),
        "first_job": {"coordinators": counts["first_job"], "runs": runs["first_job"],
                      "disk_before_by_round": floors["first_job"],
                      "praxist_fs": {q: med(x["submit_to_start"][q]
                                            for x in runs["first_job"]["praxist_fs"])
                                     for q in ("p50_ms", "max_ms")}},
    }


def main(argv: list[str] | None = None) -> int:
    """These rows alone, at bench_all's counts, on a temp dir of their own (``disk``)."""
    import bench_all  # its counts; it imports this module

    parser = argparse.ArgumentParser(description="the rows side by side with task-spooler "
                                     "alone (see bench_all.py); JSON to stdout")
    parser.add_argument("--quick", action="store_true", help="bench_all --quick's counts")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tsp", help="the tsp binary (default: tsp on PATH)")
    args = parser.parse_args(argv)
    counts = bench_all.QUICK if args.quick else bench_all.FULL
    tsp = bench_tsp.ensure_tsp(args.tsp)[0]
    scratch = disk.isolate()
    print(json.dumps({"disk": scratch, "load_avg": os.getloadavg(),
                      "comparisons": compare(args.rounds, counts, tsp)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
