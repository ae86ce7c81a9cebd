"""Memory and restart against history (issue 19, item 3): at N finished jobs, the
coordinator's RSS settled after its start, and Popen -> the first reply (a probe
request waiting in incoming/) for the three ways a run is left: stopped cleanly by a
coordinator that served the fixture (compacted, job index kept), the same run after a
coordinator served it again and was killed -9 (a crash: no ``clean_stop.json``, a
journal tail), and the fixture's journal never compacted (replayed event by event).
Each version measured builds its own sources (its own compaction).

``bench_history.py [--levels 10000,100000] [--rounds 3] [--settle 2] [--json PATH]
[--fixtures DIR]`` (DIR keeps the built runs, so that versions compare on one)
prints one line per level and way, and the medians; targets (issue 19): RSS <= 60 MB
and every start <= 1 s at 100,000 finished jobs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from history_rows import MB, build_fixture, cold_start, copy_fixture  # noqa: E402
from bench_coordinator import Coordinator, discard, machine, wait_until  # noqa: E402

MARKER = Path("run/resource_scheduler/journal/clean_stop.json")
INDEX = Path("run/resource_scheduler/index/jobs.sqlite")
WAYS = ("clean", "crashed", "uncompacted")


def settled_rss(source: Path, settle: float) -> float:
    """MB of RSS of a coordinator started on a copy of ``source``, ``settle`` s after it
    serves (its endpoint.json): what a long run's history costs it at rest."""
    scratch = copy_fixture(source, "rss")
    try:
        with Coordinator("rss", concurrency=1, scratch=scratch, keep=True,
                         start_timeout=900, start_poll=0.005) as co:
            time.sleep(settle)  # a measurement window, not a synchronisation
            return round(co.ps.memory_info().rss / MB, 1)
    finally:
        discard(scratch)


def left_by(source: Path, label: str, crash: bool) -> Path:
    """A copy of ``source`` as a coordinator that served it leaves it: stopped cleanly
    (SIGTERM: compacted, job index kept, ``clean_stop.json``), or killed (-9) once
    serving, which leaves its start's records in the journal and no clean-stop marker.
    Either once its job index is whole (the fixture has none: it is built while the
    coordinator serves, and a stop before it is done leaves none)."""
    scratch = copy_fixture(source, label)
    co = Coordinator(label, concurrency=1, scratch=scratch, keep=True, start_timeout=900)
    with co:
        wait_until((scratch / INDEX).exists, 900, 0.01, "the job index")
        if crash:
            co.proc.kill()
            co.returncode = co.proc.wait()
    return scratch


def measure_level(finished: int, rounds: int, settle: float, fixtures: Path | None,
                  ways: tuple[str, ...] = WAYS) -> dict:
    given = fixtures / str(finished) if fixtures is not None else None
    if given is not None and given.exists():  # built before (by any version: the journal
        pristine, built = given, {"finished_jobs": finished, "reused": str(given)}  # is one)
    else:
        pristine, built = build_fixture(f"hist{finished}", finished)
        if given is not None:
            given.parent.mkdir(parents=True, exist_ok=True)
            pristine = Path(shutil.move(pristine, given))
    clean = left_by(pristine, f"hist{finished}clean", crash=False)
    crashed = left_by(clean, f"hist{finished}crashed", crash=True)
    uncompacted = copy_fixture(pristine, f"hist{finished}uncompacted")
    (uncompacted / MARKER).unlink()  # never served: the journal as a crash leaves it
    sources = {"clean": clean, "crashed": crashed, "uncompacted": uncompacted}
    if given is None:
        discard(pristine)
    try:
        starts: dict[str, list[dict]] = {way: [] for way in ways}
        rss, empty = [], []
        for r in range(rounds):
            empty.append(cold_start(None, "empty")["popen_to_probe_reply_s"])
            print(f"  N={finished:,} round {r}: an empty run's start {empty[-1]:.3f} s (the "
                  "floor on this machine now)", flush=True)
            rss.append(settled_rss(clean, settle))
            print(f"  N={finished:,} round {r}: settled RSS {rss[-1]} MB", flush=True)
            for way in ways:
                scratch = copy_fixture(sources[way], f"{way}{r}")
                try:
                    starts[way].append(cold_start(scratch, way))
                finally:
                    discard(scratch)
                s = starts[way][-1]
                print(f"  N={finished:,} round {r}: {way:<11} Popen->reply "
                      f"{s['popen_to_probe_reply_s']:.3f} s, RSS {s['rss_mb_after_start']} MB",
                      flush=True)
    finally:
        for source in sources.values():
            discard(source)
    return {"fixture": built, "rss_mb_settled": rss, "starts": starts, "empty_starts": empty,
            "median_rss_mb_settled": statistics.median(rss),
            "median_empty_reply_s": statistics.median(empty),
            **{f"median_{way}_reply_s": statistics.median(
                s["popen_to_probe_reply_s"] for s in starts[way]) for way in ways}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=float, default=2.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--ways", default=",".join(WAYS),
                        help="which starts to time (default: all three)")
    parser.add_argument("--fixtures", type=Path,
                        help="keep each level's built run in FIXTURES/<N> and reuse it")
    args = parser.parse_args(argv)
    results = {"machine": machine(), "levels": {}}
    for level in map(int, args.levels.split(",")):
        print(f"building a run with {level:,} finished jobs ...", flush=True)
        results["levels"][str(level)] = measure_level(level, args.rounds, args.settle,
                                                        args.fixtures,
                                                        tuple(args.ways.split(",")))
    print("\n| finished | RSS settled | clean stop | crash | uncompacted | empty run | target |")
    print("|---|---|---|---|---|---|---|")
    for level, r in results["levels"].items():
        cells = [f"{r[f'median_{way}_reply_s']:.3f} s" if f"median_{way}_reply_s" in r
                 else "-" for way in WAYS]
        print(f"| {int(level):,} | {r['median_rss_mb_settled']:.1f} MB | {' | '.join(cells)} "
              f"| {r['median_empty_reply_s']:.3f} s | <= 60 MB, <= 1 s |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
