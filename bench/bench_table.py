"""The table bench_all.py prints (and keeps in its JSON): one row per measurement, with
issue 31's targets (SPEC R-PERF-3) for the rows side by side with task-spooler."""

from __future__ import annotations

import argparse
import json
import statistics

# issue 31's targets (SPEC R-PERF-3), praxist_fs / task-spooler: submit-to-start p50 and
# p99; the wall time of 1,000 jobs at 2 slots and 10,000 at 16; a shell user's p50
P50_RATIO, P99_RATIO, WALL_RATIO, SHELL_RATIO = 1.0, 1.5, 1.3, 1.3


def row(metric, px, ts, ratio, target, met, unit=""):
    return {"metric": metric, "praxist_fs": px, "task_spooler": ts, "ratio": ratio,
            "target": target, "met": met, "unit": unit}


def ratio_of(a, b):
    return round(a / b, 3) if a is not None and b else None


def _compared(entry: dict, key: str, px, ts) -> tuple[float | None, str]:
    """A comparison row's ratio, the median of each round's (``compare``), and their spread
    for its label; results of before round 3 have only the ratio of the medians."""
    by = entry.get("ratios", {}).get(key)
    if by is None:
        return ratio_of(px, ts), ""
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
    ratio = ratio_of(first, lat_p["p50_ms"])
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
            ratio = ratio_of(entry[key], base[key])
            first = int(level) == int(min(acc, key=int))
            rows.append(row(f"acceptance per request ({what}), {int(level):,} finished",
                            entry[key], None, None if first else ratio,
                            "baseline" if first else "<= 1.5x vs 0",
                            None if first else ratio is not None and ratio <= 1.5, "ms"))
    for level, entry in sorted(acc.items(), key=lambda kv: int(kv[0])):
        if at_start := entry.get("sequential_at_start"):
            rows.append(row(f"  one at a time p50 right after a start, {int(level):,} finished "
                            "(index rebuild, first compaction)",
                            at_start["rename_to_reply"]["p50_ms"], None, None, "", None, "ms"))
        if int(level):
            rows.append(row(f"  cold start with {int(level):,} finished (to endpoint.json)",
                            entry["start_s_median"], None, None, "", None, "s"))
            if entry.get("start_work_s"):
                rows.append(row("  ... to its start's index rebuild and compaction done",
                                statistics.median(entry["start_work_s"]), None, None, "", None,
                                "s"))
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
    if "append_fsync_after_50ms_quiet" in fl:  # not in older results
        rows.append(row("floor: journal append+fsync after 50 ms quiet (p50)",
                        fl["append_fsync_after_50ms_quiet"]["p50_ms"], None, None,
                        "reference", None, "ms"))
        rows.append(row("floor: same, right after another flush (p50)",
                        fl["append_fsync_after_a_flush"]["p50_ms"], None, None, "reference",
                        None, "ms"))
    import bench_queue_depth
    import perf3_rows  # here: it imports bench_compaction, which imports history_rows

    if "queue_depth" in r:  # not in older results
        rows += bench_queue_depth.rows(r["queue_depth"], row)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print the table of a bench_all results "
                                     "file again (bench/results/bench-*.json)")
    parser.add_argument("results", help="a JSON file bench_all.py wrote")
    args = parser.parse_args(argv)
    with open(args.results) as handle:
        print(render_table(json.load(handle)["table"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
