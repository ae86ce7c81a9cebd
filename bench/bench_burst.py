#!/usr/bin/env python3
"""A burst of invalid requests (issue 31): how long a coordinator takes to answer N
requests that are all refused (a tag outside the name alphabet), renamed into
spool/incoming/ at once, and its RSS after. Each is refused with a reply and filed in
spool/rejected/ with its error.json, as a hostile or broken peer's flood would be.

Usage: .venv/bin/python bench/bench_burst.py [--count 10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_coordinator import Coordinator, wait_until  # noqa: E402

BAD = b'{"peer": "p", "tag": "bad tag", "argv": ["true"]}'


def measure(count: int) -> dict:
    with Coordinator("burst", 2) as co:
        for i in range(count):
            (co.tmp / f"bad-{i:06d}.json").write_bytes(BAD)
        began = time.monotonic()
        for i in range(count):
            os.rename(co.tmp / f"bad-{i:06d}.json", co.incoming / f"bad-{i:06d}.json")
        wait_until(lambda: sum(1 for n in os.listdir(co.replies) if n.startswith("bad-"))
                   >= count, 1800, 0.05, "every invalid request answered")
        answered = time.monotonic() - began
        rss = co.ps.memory_info().rss
    return {"count": count, "answered_s": round(answered, 2),
            "per_request_ms": round(answered / count * 1000, 3), "rss_mb": round(rss / 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    result = measure(args.count)
    print(f"a burst of {args.count:,} invalid requests answered in {result['answered_s']} s "
          f"({result['per_request_ms']} ms each); coordinator RSS after: {result['rss_mb']} MB")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
