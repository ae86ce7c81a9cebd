#!/usr/bin/env python3
"""A peer's reply while another uid floods the spool (R-SEC-5; issue 27's target: under 5 s
with a flood of 30,000 requests).

As root (files of two other uids are made by chown; neither needs an account, since
no job of theirs is run: the flood's requests are held, and the measured request's
reply is what counts): a coordinator serves a fresh run with the default task quotas;
uid A renames ``--flood`` requests into spool/incoming/ as fast as files can be made,
then uid B renames one request in. Reported: B's rename -> reply, the time until every
request of the flood is answered, how the flood was answered (accepted, rejected over
the quota), and the coordinator's peak RSS. ``--during`` submits B's request when half
of the flood is in instead.

Usage: sudo .venv/bin/python bench/bench_flood.py [--flood 30000] [--during] [--json P]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_coordinator import Coordinator, read_json, wait_until  # noqa: E402

FLOODER, OTHER = 60001, 60002  # uids without accounts: nothing of theirs runs


def drop_as(co: Coordinator, uid: int, request_id: str, tag: str, hold: bool) -> None:
    name = f"{request_id}.json"
    path = co.tmp / name
    path.write_text(json.dumps({"request_id": request_id, "peer": f"uid{uid}", "tag": tag,
                                "argv": ["true"], "hold": hold}))
    os.chown(path, uid, -1)
    os.rename(path, co.incoming / name)


def peak_rss(co: Coordinator, stop: threading.Event, seen: list[int]) -> None:
    while not stop.is_set():
        try:
            seen.append(co.ps.memory_info().rss)
        except psutil.Error:
            return
        stop.wait(0.05)


def measure(flood: int, during: bool) -> dict:
    with Coordinator("flood", 2) as co:
        rss: list[int] = []
        stop = threading.Event()
        sampler = threading.Thread(target=peak_rss, args=(co, stop, rss), daemon=True)
        sampler.start()
        began = time.monotonic()
        submitted_at = None
        for i in range(flood):
            drop_as(co, FLOODER, f"flood-{i:06d}", f"flood-{i}", hold=True)
            if during and i == flood // 2:
                submitted_at = time.monotonic()
                drop_as(co, OTHER, "other-1", "other", hold=True)
        flooded = time.monotonic() - began
        if submitted_at is None:
            submitted_at = time.monotonic()
            drop_as(co, OTHER, "other-1", "other", hold=True)
        reply = co.wait_reply("other-1", timeout=600)
        latency = time.monotonic() - submitted_at
        wait_until(lambda: sum(1 for n in os.listdir(co.replies) if n.startswith("flood-"))
                   >= flood, 1800, 0.1, "every request of the flood answered")
        drained = time.monotonic() - began
        stop.set()
        sampler.join()
        outcomes: dict[str, int] = {}
        for name in os.listdir(co.replies):
            if name.startswith("flood-"):
                doc = read_json(co.replies / name) or {}
                key = doc.get("outcome", "?") + (f" ({doc['field']})" if doc.get("field") else "")
                outcomes[key] = outcomes.get(key, 0) + 1
        return {"flood": flood, "during": during, "flood_written_s": round(flooded, 2),
                "other_reply_s": round(latency, 3), "other_outcome": reply.get("outcome"),
                "flood_answered_s": round(drained, 2), "flood_outcomes": outcomes,
                "peak_rss_mb": round(max(rss) / 1e6, 1) if rss else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flood", type=int, default=30_000)
    parser.add_argument("--during", action="store_true",
                        help="submit the other uid's request halfway through the flood")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_flood: needs root (files of other uids are made by chown)", file=sys.stderr)
        return 2
    result = measure(args.flood, args.during)
    print(f"a peer's reply during another uid's flood of {args.flood:,} requests "
          f"({'submitted halfway' if args.during else 'submitted after it'}): "
          f"{result['other_reply_s']:.3f} s (target < 5 s); the flood written in "
          f"{result['flood_written_s']} s, answered in {result['flood_answered_s']} s: "
          f"{result['flood_outcomes']}; coordinator peak RSS {result['peak_rss_mb']} MB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
