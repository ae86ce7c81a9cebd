"""praxist_fs's rows over runs that already hold a history (bench_all.py): the cold
start's replay, acceptance with N jobs finished, and an idle coordinator; and the
fixtures they start on (built once by fixture.py, then copied per coordinator)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_coordinator import (
    HERE, TASK_YAML, TRUE, MiB, Blocker, Coordinator, discard, read_json, wait_until,
)
from settle import schedstat_s
from side_by_side import accept_batch, accept_sequential, log, wait_file

MB = 1_000_000


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
    turn, the first one rotating from round to round: requests one at a time, then a batch,
    once every coordinator is done with what its start began (``start_work_done``: the
    job index rebuilt from the history, the first compaction of a journal replayed whole),
    which holds each request back a chunk at most but takes a core for seconds at 100,000
    finished. The first round also measures requests one at a time right after the starts
    (``sequential_at_start``), each level in turn, while that work goes on.

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
                                  "start_work_s": [], "batches": [], "sequential": []}
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
                if r == 0:
                    for level, co in coordinators.items():
                        result[str(level)]["sequential_at_start"] = accept_sequential(
                            co, seq, f"acc{level}start")
                for level, co in coordinators.items():
                    result[str(level)]["start_work_s"].append(round(wait_until(
                        lambda: start_work_done(co), 900, 0.1,
                        "status.json: no job index rebuild, no compaction"), 1))
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


def start_work_done(co: Coordinator) -> float | None:
    """Seconds from ``co``'s start to now, once its status.json says it is neither
    rebuilding the job index nor compacting the journal; None before."""
    status = (read_json(co.sched / "status.json") or {}).get("coordinator") or {}
    if status.get("job_index_rebuilding") is False and status.get("compacting") is False:
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


def main(argv: list[str] | None = None) -> int:
    """These rows alone, at bench_all's counts, on a temp dir of their own (``disk``)."""
    import bench_all  # its counts; it imports this module
    import disk

    parser = argparse.ArgumentParser(description="the replay, acceptance and idle rows alone "
                                     "(see bench_all.py); JSON to stdout")
    parser.add_argument("--quick", action="store_true", help="bench_all --quick's counts")
    args = parser.parse_args(argv)
    c = bench_all.QUICK if args.quick else bench_all.FULL
    result = {"disk": disk.isolate(),
              "replay": px_replay(c["replay_events"], c["rounds"], None)}
    result["acceptance"], result["idle"] = px_acceptance_levels(
        c["accept_levels"], c["accept_rounds"], c["accept_batch"], c["accept_seq"],
        c["idle_level"], c["idle_s"])
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
