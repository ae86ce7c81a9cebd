#!/usr/bin/env python3
"""praxist_fs side by side with task-spooler, plus praxist_fs-only measurements.

    .venv/bin/python bench/bench_all.py            # full: 3 rounds, about 15 minutes
    .venv/bin/python bench/bench_all.py --quick    # small counts, 1 round, about 2 minutes
    .venv/bin/python bench/bench_all.py --profile  # also cProfile the coordinator

Comparisons (ratio = praxist_fs / task-spooler, the median of each round's; the
latency rows run both systems at once, a job of each in turn, each once both went
quiet; the others one system then the other, the first swapping by round):

  latency     submit-to-start p50/p99 over N sequential trivial jobs. Both run
              the same command, ``/bin/sh -c 'date +%s%N > FILE'`` (task-spooler
              execs its argv; praxist_fs gets it as ``argv``), so "start" is the
              timestamp date writes. Submit is the rename into spool/incoming/
              (praxist_fs) or the ``tsp`` call (task-spooler), timed just before.
  throughput  wall time for N ``/usr/bin/true`` at two slots, from the first
              submission to the last job finished.
  submit      the cost of submitting N jobs while the only slot is held by a
              blocker (nothing runs): praxist_fs from the first rename to the
              last ``accepted`` reply (each acceptance fsynced in the journal
              before its reply is written); task-spooler's per-call cost x N.
  shell       the latency scenario as a shell user submits, both systems through
              one running ``/bin/sh`` fed a command line per job (timed just
              before the line is written): ``printf ... > spool/tmp/X && mv
              spool/tmp/X spool/incoming/`` (printf is built in: one exec, mv)
              against ``tsp /bin/sh -c '...'`` (one exec, tsp). Until round 3
              praxist_fs's side started a new ``sh -c`` per job and task-spooler's
              execed tsp straight from Python: praxist_fs paid a shell start
              (~1 ms) that task-spooler did not.
  16 slots    the throughput scenario at 16 slots on both sides (10,000 jobs).
  first job   (praxist_fs only) submit-to-start of the first job after a start,
              against the sequential p50.

praxist_fs alone: acceptance per request with 0 / 10,000 / 100,000 finished jobs
already in the run; a scheduling pass over 10,000 queued jobs on the fake 8-GPU
inventory; journal replay of 100,000 events (cold start to serving); idle CPU
and RSS with 10,000 finished jobs; and the physical floor of this machine. At
100,000 finished (10,000 quick; bench/perf3_rows.py): each CLI verb's start, the
longest reply wait while the journal compacts, the report's peak RSS; and a burst of
10,000 invalid requests (2,000 quick).
Existing jobs are a journal written directly (bench/fixture.py), not run.

The table goes to stdout, everything to bench/results/bench-<timestamp>.json.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_scheduling  # noqa: E402
import bench_tsp  # noqa: E402
from settle import schedstat_s, settle  # noqa: E402
from bench_coordinator import (  # noqa: E402
    SH, TASK_YAML, TRUE, MiB, Blocker, Coordinator, Shell, discard, machine, percentile,
    read_json, summary_ms, wait_until,
)
from praxist_fs.core.identity import job_id_for  # noqa: E402

MB = 1_000_000
POLL = 0.0005  # seconds between looks at a file, the same for both systems
# issue 31's targets (SPEC R-PERF-3), praxist_fs / task-spooler: submit-to-start p50 and
# p99; the wall time of 1,000 jobs at 2 slots and 10,000 at 16; a shell user's p50
P50_RATIO, P99_RATIO, WALL_RATIO, SHELL_RATIO = 1.0, 1.5, 1.3, 1.3

FULL = {"rounds": 3, "latency": 200, "throughput": 1000, "submit": 1000,
        "shell_latency": 200, "throughput16": 10_000, "first_job": 5,
        "accept_levels": [0, 10_000, 100_000], "accept_rounds": 3, "accept_batch": 1000,
        "accept_seq": 100,
        "idle_level": 10_000, "idle_s": 30.0, "replay_events": 100_000,
        "sched_jobs": 10_000, "sched_rounds": 10, "floor": 200, "history": 100_000,
        "burst": 10_000}
QUICK = {"rounds": 1, "latency": 50, "throughput": 200, "submit": 200,
         "shell_latency": 50, "throughput16": 1000, "first_job": 3,
         "accept_levels": [0, 1_000, 10_000], "accept_rounds": 1, "accept_batch": 200,
         "accept_seq": 30,
         "idle_level": 10_000, "idle_s": 5.0, "replay_events": 20_000,
         "sched_jobs": 10_000, "sched_rounds": 3, "floor": 50, "history": 10_000,
         "burst": 2_000}


def stamp_command(path: Path) -> str:
    return f"date +%s%N > '{path}'"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- praxist_fs scenarios ----------------------------------------------------------


def wait_file(path: Path, timeout: float, poll: float = POLL):
    return wait_until(lambda: read_json(path), timeout, poll, str(path))


def px_latency(n: int, shell: bool = False) -> dict:
    """``n`` sequential jobs on a coordinator of their own (``LatencySide``)."""
    with Coordinator("latency", concurrency=2) as co, \
            (Shell() if shell else contextlib.nullcontext()) as sh:
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


def interleaved_latency(n: int, tsp: str, shell: bool = False) -> dict[str, dict]:
    """The latency scenario (``shell``: a shell user's) on both systems at once: a
    coordinator and a tsp server are up side by side, and their ``n`` sequential jobs take
    turns, one job of each, the first of a pair swapping from pair to pair. A slow second
    of this shared machine then falls on both systems' samples alike, where running one
    system's 200 jobs and then the other's put a busy minute on one side only. Each side's
    job is measured as when it runs alone (``LatencySide``, ``bench_tsp.LatencySide``),
    once both systems went quiet (``settle``: what one still does after its job ended
    would otherwise fall on the other's job); ``unsettled`` counts the jobs before which
    they did not within its timeout."""
    with Coordinator("latency", concurrency=2) as co, \
            bench_tsp.TaskSpooler(tsp, "latency", slots=2) as ts, \
            (Shell() if shell else contextlib.nullcontext()) as px_sh, \
            (Shell(ts.env) if shell else contextlib.nullcontext()) as ts_sh:
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
        names = [co.prepare(tag, tag, [TRUE]) for tag in tags]
        done_paths = [co.done / f"{job_id_for(tag)}.json" for tag in tags]
        cpu0 = co.own_cpu_s()
        start, dropped = co.drop_all(names)
        # oldest first at two slots: wait for each in turn
        wait_in_order(done_paths, start + max(300.0, n * 0.5), 0.002,
                      "praxist throughput: {name} not done")
        end = time.monotonic()
        cpu = co.own_cpu_s() - cpu0
        states = tally(done_paths, "state")
    wall = end - start
    return {"jobs": n, "slots": slots, "command": [TRUE], "wall_s": round(wall, 3),
            "jobs_per_s": round(n / wall, 2), "drop_s": round(dropped - start, 4),
            "coordinator_cpu_s": round(cpu, 3),
            "coordinator_cpu_ms_per_job": round(cpu * 1000 / n, 3), "done_states": states}


def accept_batch(co: Coordinator, n: int, label: str) -> dict:
    """n requests renamed in at once: first rename -> last reply (waited for in order)."""
    run = time.time_ns()
    ids = [f"{label}-{run}-{i:05d}" for i in range(n)]
    names = [co.prepare(rid, rid, [TRUE]) for rid in ids]
    reply_paths = [co.replies / f"{rid}.json" for rid in ids]
    cpu0 = co.own_cpu_s()
    start, dropped = co.drop_all(names)
    wait_in_order(reply_paths, start + max(120.0, n * 0.2), 0.001, "acceptance: no reply {name}")
    end = time.monotonic()
    cpu = co.own_cpu_s() - cpu0
    outcomes = tally(reply_paths, "outcome")
    wall = end - start
    return {"requests": n, "wall_s": round(wall, 4), "per_request_ms": round(wall * 1000 / n, 4),
            "drop_s": round(dropped - start, 4), "coordinator_cpu_s": round(cpu, 3),
            "outcomes": outcomes}


def accept_sequential(co: Coordinator, n: int, label: str) -> dict:
    """n requests one at a time: rename -> reply, each."""
    run = time.time_ns()
    deltas, outcomes = [], {}
    for i in range(n):
        rid = f"{label}-{run}-{i:05d}"
        name = co.prepare(rid, rid, [TRUE])
        t0 = time.time_ns()
        co.drop(name)
        reply = wait_file(co.replies / f"{rid}.json", 60)
        deltas.append(time.time_ns() - t0)
        outcomes[reply.get("outcome")] = outcomes.get(reply.get("outcome"), 0) + 1
    return {"requests": n, "rename_to_reply": summary_ms(deltas), "outcomes": outcomes}


def px_submit(n: int) -> dict:
    with Coordinator("submit", concurrency=1) as co:
        blocker = Blocker(co)
        result = accept_batch(co, n, "sub")
        co.stop()
        blocker.release()
    return result


# --- fixtures: runs with existing jobs ---------------------------------------------------


def build_fixture(label: str, finished: int, concurrency: int = 1) -> tuple[Path, dict]:
    """A scratch dir with task.yaml and run/ holding ``finished`` completed jobs (subprocess,
    so the builder's memory is not the bench's)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"praxist-bench-{label}-"))
    (scratch / "task.yaml").write_text(TASK_YAML.format(concurrency=concurrency,
                                                        maximum=max(8, concurrency)))
    if not finished:
        return scratch, {"finished_jobs": 0, "journal_events": 0}
    out = subprocess.run(
        [sys.executable, str(HERE / "fixture.py"), str(scratch / "run"),
         str(scratch / "task.yaml"), "--finished", str(finished), "--prefix", label, "--replay"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE.parent)
    if out.returncode:
        discard(scratch)
        raise RuntimeError(f"fixture {label}: {out.stderr}")
    return scratch, json.loads(out.stdout)


def cold_start(scratch: Path | None, label: str, python_args: tuple[str, ...] = ()) -> dict:
    """Start a coordinator on ``scratch`` (None: a fresh empty run) with a probe request
    already waiting in incoming/: Popen -> endpoint.json, and Popen -> the probe's reply."""
    co = Coordinator(label, concurrency=1, scratch=scratch, keep=scratch is not None,
                     python_args=python_args, start_timeout=900, start_poll=0.001)
    rid = f"probe-{time.time_ns()}"
    for path in (co.tmp, co.incoming):
        path.mkdir(parents=True, exist_ok=True)
    co.drop(co.prepare(rid, rid, [TRUE]))
    with co:
        reply = wait_file(co.replies / f"{rid}.json", 900, 0.001)
        replied = time.time_ns()
        if reply.get("outcome") != "accepted":
            raise RuntimeError(f"probe not accepted: {reply}")
        rss = co.ps.memory_info().rss
        wait_file(co.done / f"{reply['job_id']}.json", 60)  # leave no shim behind
    return {"popen_to_endpoint_s": round((co.ready_ns - co.started_ns) / 1e9, 4),
            "popen_to_probe_reply_s": round((replied - co.started_ns) / 1e9, 4),
            "rss_mb_after_start": round(rss / MB, 1)}


def px_replay(events: int, rounds: int, profile_to: Path | None) -> dict:
    """Cold starts on copies of one run with ``events`` journaled events, as each way of
    stopping leaves it: compacted at a clean stop (snapshot, empty journal, derived files
    vouched for); the same after a crash (the snapshot's watermark vouches for them); and
    a journal never compacted, replayed event by event (a crash before the first compaction at
    COMPACT_AFTER_RECORDS; ``events`` beyond that is more than a crash can leave)."""
    jobs = max(1, (events - 1) // 4)  # CoordinatorStarted + 4 events per finished job
    pristine, built = build_fixture("replay", jobs)
    compacted = copy_fixture(pristine, "compacted")
    out = subprocess.run([sys.executable, str(HERE / "fixture.py"), str(compacted / "run"),
                          str(compacted / "task.yaml"), "--compact"], capture_output=True,
                         text=True, cwd=HERE.parent, check=True)
    built["compacted"] = json.loads(out.stdout)
    marker = Path("run/resource_scheduler/journal/clean_stop.json")
    variants = {"clean": (compacted, True), "crashed": (compacted, False),
                "uncompacted": (pristine, False)}
    try:
        starts: dict[str, list[dict]] = {name: [] for name in variants}
        empty = []
        for r in range(rounds):
            empty.append(cold_start(None, "empty"))
            for name, (source, keep_marker) in variants.items():
                scratch = copy_fixture(source, f"{name}{r}")
                if not keep_marker:
                    (scratch / marker).unlink()
                try:
                    starts[name].append(cold_start(scratch, name))
                finally:
                    discard(scratch)
        profile = None
        if profile_to is not None:
            scratch = copy_fixture(pristine, "profiled")
            try:
                cold_start(scratch, "replay", ("-m", "cProfile", "-o", str(profile_to)))
            finally:
                discard(scratch)
            profile = str(profile_to)
    finally:
        discard(pristine)
        discard(compacted)
    result = {"fixture": built, "starts": starts, "empty_run_starts": empty, "profile": profile,
              "median_empty_probe_reply_s": statistics.median(
                  s["popen_to_probe_reply_s"] for s in empty)}
    for name, runs in starts.items():
        result[f"median_{name}_probe_reply_s"] = statistics.median(
            s["popen_to_probe_reply_s"] for s in runs)
        result[f"median_{name}_rss_mb"] = statistics.median(
            s["rss_mb_after_start"] for s in runs)
    return result


def _link_or_copy(src: str, dst: str) -> None:
    """Derived files are only ever replaced (temp file + rename), never written in place, so
    a copy may share them; everything else (the journal, appended in place) is copied."""
    if f"{os.sep}jobs{os.sep}" in src or f"{os.sep}replies{os.sep}" in src:
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


def copy_fixture(pristine: Path, label: str) -> Path:
    """A fresh scratch dir holding a copy of a fixture (hard links for the derived files)."""
    scratch = Path(tempfile.mkdtemp(prefix=f"praxist-bench-{label}-"))
    shutil.copy2(pristine / "task.yaml", scratch / "task.yaml")
    if (pristine / "run").exists():
        shutil.copytree(pristine / "run", scratch / "run", copy_function=_link_or_copy)
    return scratch


def px_acceptance_levels(levels: list[int], rounds: int, batch: int, seq: int,
                         idle_level: int, idle_s: float) -> tuple[dict, dict]:
    """Each round starts one coordinator per level on a fresh copy of that level's run (so
    requests accepted in earlier rounds do not pile up in the queue) and keeps them up
    together, each with a blocker holding its only slot; the levels are then measured in
    turn, the first one rotating from round to round: requests one at a time, then a batch.

    Idle: one more coordinator, on a copy of the ``idle_level`` run, is started with the
    first round's and given nothing to do; its CPU is measured over ``idle_s`` twice
    (``measure_idle``): once the first round's coordinators settled (the start's tail: its
    first pass over the history, which finds what changed while no coordinator ran, is
    most of it), and after the rounds, once its status.json says that pass is over
    (``coordinator.history_checked``): an idle coordinator."""
    result: dict[str, dict] = {}
    idle: dict = {}
    pristine: dict[int, Path] = {}
    idler: Coordinator | None = None
    try:
        for level in levels:
            log(f"acceptance: building a run with {level:,} finished jobs ...")
            pristine[level], built = build_fixture(f"acc{level}", level)
            result[str(level)] = {"fixture": built, "start_s": [], "rss_mb_settled": [],
                                  "batches": [], "sequential": []}
        for r in range(rounds):
            coordinators, blockers = {}, {}
            try:
                if r == 0 and idle_level in pristine:
                    idler = Coordinator(f"idle{idle_level}", concurrency=1,
                                        scratch=copy_fixture(pristine[idle_level], "idle"),
                                        start_timeout=900, start_poll=0.005)
                    idler.__enter__()
                for level in levels:
                    log(f"acceptance round {r + 1}/{rounds}: starting a coordinator on a copy "
                        f"of the {level:,}-finished run ...")
                    co = Coordinator(f"acc{level}r{r}", concurrency=1,
                                     scratch=copy_fixture(pristine[level], f"acc{level}r{r}"),
                                     start_timeout=900, start_poll=0.005)
                    co.__enter__()
                    coordinators[level] = co
                    result[str(level)]["start_s"].append(
                        round((co.ready_ns - co.started_ns) / 1e9, 3))
                time.sleep(2.0)  # first samples taken, status written
                for level, co in coordinators.items():
                    result[str(level)]["rss_mb_settled"].append(
                        round(co.ps.memory_info().rss / MB, 1))
                if idler is not None and r == 0:
                    log(f"idle: {idle_s:g} s with {idle_level:,} finished jobs, right after "
                        "a start ...")
                    after_start = measure_idle(idler, idle_level, idle_s)
                for level, co in coordinators.items():
                    blockers[level] = Blocker(co)
                order = levels[r % len(levels):] + levels[:r % len(levels)]
                log(f"acceptance round {r + 1}/{rounds}: measuring levels {order} ...")
                for level in order:
                    co, entry = coordinators[level], result[str(level)]
                    entry["sequential"].append(accept_sequential(co, seq, f"acc{level}s{r}"))
                    entry["batches"].append(accept_batch(co, batch, f"acc{level}b{r}"))
            finally:
                for level, co in coordinators.items():
                    co.stop()  # queued jobs stay queued; then the blocker's shim may end
                    if level in blockers:
                        blockers[level].release()
                    co.cleanup()
        if idler is not None:
            log(f"idle: {idle_s:g} s with {idle_level:,} finished jobs, once the start's "
                "history pass is over ...")
            checked_after_s = wait_until(lambda: history_checked(idler), 900, 0.1,
                                         "status.json's coordinator.history_checked")
            idle = {**measure_idle(idler, idle_level, idle_s),
                    "history_checked_after_s": round(checked_after_s, 1),
                    "first_window_after_start": after_start}
    finally:
        if idler is not None:
            idler.__exit__(None, None, None)
        for scratch in pristine.values():
            discard(scratch)
    for entry in result.values():
        entry["per_request_ms"] = statistics.median(b["per_request_ms"] for b in entry["batches"])
        entry["sequential_p50_ms"] = statistics.median(
            s["rename_to_reply"]["p50_ms"] for s in entry["sequential"])
        entry["start_s_median"] = statistics.median(entry["start_s"])
        entry["rss_mb_median"] = statistics.median(entry["rss_mb_settled"])
    return result, idle


def history_checked(co: Coordinator) -> float | None:
    """Seconds from ``co``'s start to now, once its status.json says the start's first
    pass over the history is over (``coordinator.history_checked``); None before."""
    status = read_json(co.sched / "status.json") or {}
    if (status.get("coordinator") or {}).get("history_checked"):
        return (time.time_ns() - co.started_ns) / 1e9
    return None


def measure_idle(co: Coordinator, finished: int, idle_s: float) -> dict:
    pid = co.proc.pid
    ctx0 = co.ps.num_ctx_switches()
    cpu0, exact0, wall0 = co.own_cpu_s(), schedstat_s(pid), time.monotonic()
    time.sleep(idle_s)
    cpu1, exact1, wall1 = co.own_cpu_s(), schedstat_s(pid), time.monotonic()
    ctx1 = co.ps.num_ctx_switches()
    ps = co.ps
    mem = ps.memory_info()
    window = wall1 - wall0
    return {"finished_jobs": finished, "window_s": round(window, 3),
            "cpu_s": round(cpu1 - cpu0, 4),
            "cpu_s_schedstat": round(exact1 - exact0, 4),
            "cpu_pct_of_one_core": round((cpu1 - cpu0) / window * 100, 3),
            "cpu_pct_schedstat": round((exact1 - exact0) / window * 100, 3),
            "voluntary_switches_per_s": round((ctx1.voluntary - ctx0.voluntary) / window, 1),
            "rss_mb": round(mem.rss / MB, 2), "rss_mib": round(mem.rss / MiB, 2),
            "num_fds": ps.num_fds(), "num_threads": ps.num_threads(),
            "children": len(ps.children(recursive=True))}


def px_scheduling(jobs: int, rounds: int) -> dict:
    """bench_scheduling.py's three passes, medians over ``rounds`` fresh schedulers."""
    fill, held, after_exit, launched = [], [], [], 0
    for _ in range(rounds):
        sched = bench_scheduling.build(jobs)
        ms, launches = bench_scheduling.timed(lambda: sched.next_launches(2e6))
        fill.append(ms)
        launched = len(launches)
        loop = bench_scheduling.run_launches(sched, launches, 2e6)
        sched.version += 1  # same state again: every job is held now
        held.append(bench_scheduling.timed(lambda: sched.next_launches(2e6))[0])
        loop.advance(3e6)  # the first one ends
        after_exit.append(bench_scheduling.timed(lambda: sched.next_launches(3e6))[0])
    return {"jobs": jobs, "devices": 8, "rounds": rounds, "launched_first_pass": launched,
            "first_pass_ms": round(statistics.median(fill), 3),
            "all_held_pass_ms": round(statistics.median(held), 3),
            "pass_after_one_exit_ms": round(statistics.median(after_exit), 3)}


def physical_floor(n: int) -> dict:
    """What one durable file hand-off and one process start cost here, from Python."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-bench-floor-"))
    data = json.dumps({"request_id": "x" * 24, "argv": ["/usr/bin/true"], "pad": "y" * 200})
    durable, spawn = [], []
    try:
        dir_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(n):
                t0 = time.perf_counter_ns()
                fd = os.open(scratch / f".{i}.tmp", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, data.encode())
                os.fsync(fd)
                os.close(fd)
                os.rename(scratch / f".{i}.tmp", scratch / f"{i}.json")
                os.fsync(dir_fd)
                durable.append(time.perf_counter_ns() - t0)
        finally:
            os.close(dir_fd)
        for _ in range(n):
            t0 = time.perf_counter_ns()
            pid = os.posix_spawn(TRUE, [TRUE], os.environ)
            os.waitpid(pid, 0)
            spawn.append(time.perf_counter_ns() - t0)
    finally:
        discard(scratch)
    d, s = summary_ms(durable), summary_ms(spawn)
    return {"samples": n, "write_fsync_rename_dirfsync": d, "spawn_true_and_wait": s,
            "sum_p50_ms": round(d["p50_ms"] + s["p50_ms"], 3)}


def profile_summary(path: Path, top: int = 25) -> str:
    import io
    import pstats
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


# --- the table ---------------------------------------------------------------------------


def row(metric, px, ts, ratio, target, met, unit=""):
    return {"metric": metric, "praxist_fs": px, "task_spooler": ts, "ratio": ratio,
            "target": target, "met": met, "unit": unit}


def _ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


def _compared(entry: dict, key: str, px, ts) -> tuple[float | None, str]:
    """A comparison row's ratio, the median of each round's (``compare``), and their spread
    for its label; results of before round 3 have only the ratio of the medians."""
    by = entry.get("ratios", {}).get(key)
    if by is None:
        return _ratio(px, ts), ""
    low, high = by["spread"]
    return by["median"], f"; {low:.2f}-{high:.2f}x by round" if len(by["by_round"]) > 1 else ""


def comparison_rows(cmp_: dict) -> list[dict]:
    """The rows side by side with task-spooler (``compare``'s result) and the first job
    after a start; issue 31's targets."""
    rows = []
    lat_p = cmp_["latency"]["praxist_fs"]
    lat_t = cmp_["latency"]["task_spooler"]
    interleaved = ", interleaved" if "method" in cmp_["latency"] else ""
    for q, limit in (("p50_ms", P50_RATIO), ("p99_ms", P99_RATIO)):
        ratio, spread = _compared(cmp_["latency"], q, lat_p[q], lat_t[q])
        rows.append(row(f"submit-to-start {q[:3]}, {cmp_['latency']['jobs']} sequential jobs"
                        f"{interleaved}{spread}", lat_p[q], lat_t[q], ratio, f"<= {limit}x",
                        ratio is not None and ratio <= limit, "ms"))
    if "latency_blocks" in cmp_:  # results of before round 3 lack it
        blocks = cmp_["latency_blocks"]
        for q in ("p50_ms", "p99_ms"):
            ratio, spread = _compared(blocks, q, blocks["praxist_fs"][q],
                                      blocks["task_spooler"][q])
            rows.append(row(f"  same {q[:3]}, one system's jobs then the other's (until round "
                            f"3){spread}", blocks["praxist_fs"][q], blocks["task_spooler"][q],
                            ratio, "reference", None, "ms"))
    tp = cmp_["throughput"]
    ratio, spread = _compared(tp, "wall_s", tp["praxist_fs"], tp["task_spooler"])
    rows.append(row(f"{tp['jobs']:,} trivial jobs at 2 slots, wall{spread}", tp["praxist_fs"],
                    tp["task_spooler"], ratio, f"<= {WALL_RATIO}x",
                    ratio is not None and ratio <= WALL_RATIO, "s"))
    sub = cmp_["submit"]
    ratio, spread = _compared(sub, "wall_s", sub["praxist_fs"], sub["task_spooler"])
    rows.append(row(f"submitting {sub['jobs']:,} jobs{spread}", sub["praxist_fs"],
                    sub["task_spooler"], ratio, "<= 0.1x", ratio is not None and ratio <= 0.1,
                    "s"))
    shell = cmp_["shell_latency"]
    ratio, spread = _compared(shell, "p50_ms", shell["praxist_fs"]["p50_ms"],
                              shell["task_spooler"]["p50_ms"])
    rows.append(row(f"submit-to-start p50, {shell['jobs']} from a running sh (printf+mv; tsp)"
                    f"{interleaved}{spread}", shell["praxist_fs"]["p50_ms"],
                    shell["task_spooler"]["p50_ms"], ratio, f"<= {SHELL_RATIO}x",
                    ratio is not None and ratio <= SHELL_RATIO, "ms"))
    tp16 = cmp_["throughput16"]
    ratio, spread = _compared(tp16, "wall_s", tp16["praxist_fs"], tp16["task_spooler"])
    rows.append(row(f"{tp16['jobs']:,} trivial jobs at 16 slots, wall{spread}",
                    tp16["praxist_fs"], tp16["task_spooler"], ratio, f"<= {WALL_RATIO}x",
                    ratio is not None and ratio <= WALL_RATIO, "s"))
    first = cmp_["first_job"]["praxist_fs"]["p50_ms"]
    ratio = _ratio(first, lat_p["p50_ms"])
    rows.append(row(f"first job after a start, submit-to-start ({cmp_['first_job']['coordinators']}"
                    " starts, p50; ratio vs the sequential p50)", first, None, ratio, "<= 2.0x",
                    ratio is not None and ratio <= 2.0, "ms"))
    return rows


def build_rows(r: dict) -> list[dict]:
    rows = comparison_rows(r["comparisons"])
    acc = r["acceptance"]
    base = acc[min(acc, key=int)]
    for level, entry in sorted(acc.items(), key=lambda kv: int(kv[0])):
        for key, what in (("per_request_ms", "batch"), ("sequential_p50_ms", "one at a time p50")):
            ratio = _ratio(entry[key], base[key])
            first = int(level) == int(min(acc, key=int))
            rows.append(row(f"acceptance per request ({what}), {int(level):,} finished",
                            entry[key], None, None if first else ratio,
                            "baseline" if first else "<= 1.5x vs 0",
                            None if first else ratio is not None and ratio <= 1.5, "ms"))
    for level, entry in sorted(acc.items(), key=lambda kv: int(kv[0])):
        if int(level):
            rows.append(row(f"  cold start with {int(level):,} finished (to endpoint.json)",
                            entry["start_s_median"], None, None, "", None, "s"))
            rows.append(row(f"  RSS with {int(level):,} finished (settled)",
                            entry["rss_mb_median"], None, None, "", None, "MB"))
    sched = r["scheduling"]
    for key, what in (("first_pass_ms", "fill"), ("all_held_pass_ms", "all held"),
                      ("pass_after_one_exit_ms", "after one exit")):
        rows.append(row(f"scheduling pass, {sched['jobs']:,} queued, 8 GPUs ({what})",
                        sched[key], None, None, "<= 5 ms", sched[key] <= 5.0, "ms"))
    rep = r["replay"]
    events = rep["fixture"].get("journal_events")
    rows.append(row(f"cold start to serving, {events:,} events, compacted at a clean stop",
                    rep["median_clean_probe_reply_s"], None, None, "<= 1 s",
                    rep["median_clean_probe_reply_s"] <= 1.0, "s"))
    rows.append(row("  same, after a crash (the watermark vouches for the files)",
                    rep["median_crashed_probe_reply_s"], None, None, "", None, "s"))
    rows.append(row(f"  {events:,} events never compacted, replayed one by one",
                    rep["median_uncompacted_probe_reply_s"], None, None, "", None, "s"))
    rows.append(row("  RSS after the compacted start", rep["median_clean_rss_mb"], None, None,
                    "", None, "MB"))
    rows.append(row("  cold start of an empty run (to serving)", rep["median_empty_probe_reply_s"],
                    None, None, "", None, "s"))
    ip = rep["fixture"].get("in_process_replay") or {}
    if ip:
        rows.append(row("  in-process replay only (load + handle)", ip["total_s"], None, None,
                        "", None, "s"))
    idle = r["idle"]
    if idle:
        first = idle.get("first_window_after_start")  # results of before round 3 lack it
        label = "idle CPU over {:.0f} s, {:,} finished, ".format(idle["window_s"],
                                                                 idle["finished_jobs"])
        rows.append(row(label + ("once the start's history pass is over (after "
                                 f"{idle['history_checked_after_s']:.0f} s)" if first else
                                 "the first seconds after a start"),
                        idle["cpu_pct_of_one_core"], None, None, "<= 0.2 %",
                        idle["cpu_pct_of_one_core"] <= 0.2, "% core"))
        rows.append(row("  same, exact (schedstat, all threads)", idle["cpu_pct_schedstat"], None,
                        None, "", None, "% core"))
        if first:
            rows.append(row(f"  the first {first['window_s']:.0f} s after a start (its history "
                            "pass runs)", first["cpu_pct_of_one_core"], None, None,
                            "reference", None, "% core"))
            rows.append(row("    same, exact (schedstat, all threads)",
                            first["cpu_pct_schedstat"], None, None, "", None, "% core"))
        rows.append(row(f"RSS with {idle['finished_jobs']:,} finished jobs", idle["rss_mb"], None,
                        None, "<= 50 MB", idle["rss_mb"] <= 50, "MB"))
    fl = r["floor"]
    rows.append(row("floor: write+fsync+rename+dir fsync (p50)",
                    fl["write_fsync_rename_dirfsync"]["p50_ms"], None, None, "reference", None,
                    "ms"))
    rows.append(row("floor: posix_spawn true + wait (p50)", fl["spawn_true_and_wait"]["p50_ms"],
                    None, None, "reference", None, "ms"))
    rows.append(row("floor: sum", fl["sum_p50_ms"], None, None, "reference", None, "ms"))
    import perf3_rows

    return rows + perf3_rows.rows(r["perf3"], row)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def render_table(rows: list[dict]) -> str:
    head = ("metric", "unit", "praxist_fs", "tsp", "ratio", "target", "met")
    body = [(r["metric"], r["unit"], _fmt(r["praxist_fs"]), _fmt(r["task_spooler"]),
             _fmt(r["ratio"]) + ("x" if r["ratio"] is not None else ""), r["target"],
             _fmt(r["met"])) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w)
                       for i, (x, w) in enumerate(zip(line, widths)))
             for line in (head, *body)]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------


def compare(rounds: int, counts: dict, tsp: str) -> dict:
    """Every scenario on both systems, ``rounds`` times. The latency rows interleave the two
    systems job by job (``interleaved_latency``); the others run one system then the other,
    the first swapping from round to round. Each round's ratio (of two runs made side by
    side, or one right after the other) is kept, with their median and spread: a ratio of
    medians taken minutes apart once moved 1.24x -> 0.98x between two quiet runs."""
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
    for r in range(rounds):
        order = ("praxist_fs", "task_spooler") if r % 2 == 0 else ("task_spooler", "praxist_fs")
        for name, measure in scenarios.items():
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
        ratios = [_ratio(value(p), value(t)) for p, t in zip(runs[name]["praxist_fs"],
                                                            runs[name]["task_spooler"])]
        return {"by_round": ratios, "median": med(ratios), "spread": [min(ratios),
                                                                       max(ratios)]}

    def latencies(name: str, method: str = "interleaved: both systems up, one job of each "
                  "in turn, each once both went quiet") -> dict:
        return {"jobs": counts[name.removesuffix("_blocks")], "runs": runs[name],
                "method": method,
                **{system: {q: med(x["submit_to_start"][q] for x in runs[name][system])
                            for q in ("p50_ms", "p99_ms")}
                   for system in ("praxist_fs", "task_spooler")},
                "ratios": {q: by_round(name, lambda x, q=q: x["submit_to_start"][q])
                           for q in ("p50_ms", "p99_ms")}}

    def walls(name: str) -> dict:
        return {"jobs": counts[name], "runs": runs[name],
                "method": "blocks: one system, then the other, the first swapping by round",
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
                      "praxist_fs": {q: med(x["submit_to_start"][q]
                                            for x in runs["first_job"]["praxist_fs"])
                                     for q in ("p50_ms", "max_ms")}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, one round")
    parser.add_argument("--rounds", type=int, help="rounds of the comparisons (default 3, "
                        "quick 1)")
    parser.add_argument("--profile", action="store_true",
                        help="also run the coordinator under cProfile for one throughput run "
                        "and one cold start; print the top functions")
    parser.add_argument("--tsp", help="the tsp binary (default: tsp on PATH, installed with "
                        "apt-get if missing)")
    parser.add_argument("--json", metavar="PATH",
                        help="write results here (default bench/results/bench-<ts>.json)")
    args = parser.parse_args(argv)
    counts = dict(QUICK if args.quick else FULL)
    if args.rounds:
        counts["rounds"] = args.rounds
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.json) if args.json else HERE / "results" / f"bench-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    # Measure what an installed package does (pip compiles a wheel's modules): with
    # PYTHONDONTWRITEBYTECODE set, every coordinator and cold shim would compile its source.
    compileall.compile_dir(HERE.parent / "praxist_fs", quiet=1)
    tsp, version = bench_tsp.ensure_tsp(args.tsp)
    t_begin = time.monotonic()
    results = {"mode": "quick" if args.quick else "full", "counts": counts,
               "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
               "load_avg_at_start": os.getloadavg(), "task_spooler": {"binary": tsp,
                                                                      "version": version}}
    log(f"physical floor ({counts['floor']} samples) ...")
    results["floor"] = physical_floor(counts["floor"])
    log(f"scheduling pass over {counts['sched_jobs']:,} queued jobs ...")
    results["scheduling"] = px_scheduling(counts["sched_jobs"], counts["sched_rounds"])
    results["comparisons"] = compare(counts["rounds"], counts, tsp)
    log(f"replay of {counts['replay_events']:,} events: building the journal ...")
    profile_start = HERE / "results" / f"profile-coldstart-{stamp}.pstats" if args.profile \
        else None
    results["replay"] = px_replay(counts["replay_events"], counts["rounds"], profile_start)
    results["acceptance"], results["idle"] = px_acceptance_levels(
        counts["accept_levels"], counts["accept_rounds"], counts["accept_batch"],
        counts["accept_seq"],
        counts["idle_level"], counts["idle_s"])
    log(f"CLI verbs, compaction stall, report memory at {counts['history']:,} finished; "
        f"a burst of {counts['burst']:,} invalid requests ...")
    import perf3_rows  # here: it imports bench_compaction, which imports this module

    results["perf3"] = perf3_rows.measure(counts["history"], counts["burst"],
                                          counts["floor"] // 10, 4000)
    if args.profile:
        path = HERE / "results" / f"profile-throughput-{stamp}.pstats"
        log(f"cProfile: {counts['throughput']} jobs at 2 slots, coordinator under cProfile ...")
        results["profile_throughput"] = px_throughput(counts["throughput"],
                                                      ("-m", "cProfile", "-o", str(path)))
        results["profile_throughput"]["pstats"] = str(path)
    results["load_avg_at_end"] = os.getloadavg()
    results["elapsed_s"] = round(time.monotonic() - t_begin, 1)
    results["table"] = build_rows(results)
    out.write_text(json.dumps(results, indent=2) + "\n")

    m = results["machine"]
    print()
    print(f"machine: nproc {m['nproc']}, Python {m['python']}, {m['tmp_dir']} on {m['tmp_fs']}, "
          f"kernel {m['kernel']}; {version}; mode {results['mode']}, "
          f"{counts['rounds']} round(s); load avg {results['load_avg_at_start'][0]:.2f} -> "
          f"{results['load_avg_at_end'][0]:.2f}")
    print(render_table(results["table"]))
    lat = results["comparisons"]["latency"]["runs"]["praxist_fs"][-1]
    print(f"\npraxist_fs submit-to-start phases (p50 ms, last round): {lat['phases_p50_ms']}")
    print("its slowest jobs (ms; submitted_s: seconds after the coordinator's start):")
    for sample in lat["slowest"]:
        print(f"  {sample}")
    problems = _problems(results)
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if args.profile:
        for key in ("profile_coldstart", "profile_throughput"):
            path = Path(results["replay"]["profile"]) if key == "profile_coldstart" else \
                Path(results["profile_throughput"]["pstats"])
            if path.exists():
                print(f"\n=== {key}: {path} ===")
                print(profile_summary(path))
    print(f"\nresults: {out} ({results['elapsed_s']:.0f} s)")
    return 1 if problems else 0


def _problems(results: dict) -> list[str]:
    problems = []
    c = results["comparisons"]
    for name in ("latency", "latency_blocks", "shell_latency"):
        for run in c[name]["runs"]["praxist_fs"] + c[name]["runs"]["task_spooler"]:
            problems += run["failures"][:3]
    for name in ("throughput", "throughput16"):
        for run in c[name]["runs"]["praxist_fs"]:
            if run["done_states"].get("completed") != run["jobs"]:
                problems.append(f"praxist {name} done states: {run['done_states']}")
        for run in c[name]["runs"]["task_spooler"]:
            if run["exit_levels"].get("0") != run["jobs"]:
                problems.append(f"tsp {name} exit levels: {run['exit_levels']}")
    for run in c["submit"]["runs"]["praxist_fs"]:
        if run["outcomes"].get("accepted") != run["requests"]:
            problems.append(f"praxist submit outcomes: {run['outcomes']}")
    for level, entry in results["acceptance"].items():
        for b in entry["batches"]:
            if b["outcomes"].get("accepted") != b["requests"]:
                problems.append(f"acceptance at {level}: {b['outcomes']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())
