#!/usr/bin/env python3
"""Acceptance as the queue grows (SPEC R-PERF-3: nothing on the loop proportional to
what waits): one coordinator whose only slot a blocker holds and never raises
(``max_concurrent_experiments: 1``), so every request it accepts stays queued; at each
depth, requests one at a time (rename -> reply, each), then a batch that fills the
queue to the next depth.

With no slot free, an accepted job's reason is its own (``PassDesk.reasons_of``); until
that, each acceptance walked the whole queue to say why the new job waits: p50 2.0 ms
at 250 queued, 7.5 ms at 2,000 (this machine, 2026-12-07).

Usage: .venv/bin/python bench/bench_queue_depth.py [--depths 0,2000,5000] [--seq N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_coordinator import TASK_YAML, Blocker, Coordinator  # noqa: E402
from side_by_side import accept_batch, accept_sequential  # noqa: E402

RATIO = 1.5  # the deepest queue's p50 against the empty one's: the history rows' bound


def measure(depths: list[int], seq: int) -> dict:
    """``seq`` requests one at a time at each of ``depths`` (ascending) queued jobs."""
    scratch = Path(tempfile.mkdtemp(prefix="praxist-queue-depth-"))
    (scratch / "task.yaml").write_text(TASK_YAML.format(concurrency=1, maximum=1))
    found: dict[str, dict] = {}
    queued = 0
    with Coordinator("queue-depth", concurrency=1, scratch=scratch) as co:
        blocker = Blocker(co)
        try:
            for depth in sorted(depths):
                if depth > queued:
                    filled = accept_batch(co, depth - queued, f"fill{depth}")
                    if filled["outcomes"].get("accepted") != depth - queued:
                        raise RuntimeError(f"filling to {depth}: {filled['outcomes']}")
                    queued = depth
                one = accept_sequential(co, seq, f"depth{depth}")
                found[str(depth)] = {"queued": queued, **one}
                queued += seq
        finally:
            co.stop()  # queued jobs stay queued; then the blocker's shim may end
            blocker.release()
    first, last = found[str(min(depths))], found[str(max(depths))]
    return {"depths": found, "seq": seq,
            "ratio_p50": round(last["rename_to_reply"]["p50_ms"] /
                               first["rename_to_reply"]["p50_ms"], 3)}


def rows(result: dict, row) -> list[dict]:
    """The table's rows (``row`` is bench_table's) of what ``measure`` found."""
    depths = sorted(result["depths"].items(), key=lambda kv: int(kv[0]))
    base = depths[0][1]["rename_to_reply"]["p50_ms"]
    found = []
    for depth, entry in depths:
        p50 = entry["rename_to_reply"]["p50_ms"]
        deepest = depth == depths[-1][0]
        found.append(row(f"acceptance one at a time p50, {int(depth):,} queued (no slot)",
                         p50, None, round(p50 / base, 3) if int(depth) else None,
                         f"<= {RATIO}x vs {int(depths[0][0]):,}" if deepest else "",
                         p50 / base <= RATIO if deepest else None, "ms"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="0,2000,5000",
                        help="queued jobs at which to measure, comma-separated")
    parser.add_argument("--seq", type=int, default=100, help="requests one at a time per depth")
    args = parser.parse_args(argv)
    print(json.dumps(measure([int(d) for d in args.depths.split(",")], args.seq), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
