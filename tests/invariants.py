"""An invariant checker for a run directory, written without the coordinator's code.

It reads only files (and /proc) as an operator or a peer would, so a bug in the
coordinator cannot hide behind a shared helper. ``check_run`` returns a list of
broken promises; an empty list means the run directory is consistent.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections import Counter
from pathlib import Path

TERMINAL = {"completed", "failed", "rejected", "cancelled", "drained_unknown", "expired"}
DIRECTORY_OF = {"queued": "queued", "suspended": "queued", "running": "running",
                **{state: "done" for state in TERMINAL}}
RAN = {"completed", "failed", "infra_retry"}  # attempts whose command started


def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _alive(pid, start) -> bool:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    fields = data[data.rfind(b")") + 2:].split()
    return int(fields[19]) == start and fields[0] not in (b"Z", b"X")


def check_journal(path: Path) -> list[str]:
    """Intact, consecutive records, starting no later than right after the snapshot beside it."""
    snapshot = path.parent / "snapshot.jsonl"  # its first line is a header naming the seq
    covered = json.loads(snapshot.read_bytes().split(b"\n", 1)[0])["journal_seq"] \
        if snapshot.exists() else 0
    problems, expected = [], None
    for line in path.read_bytes().splitlines():
        seq, crc, payload = line.split(b" ", 2)
        if expected is None and 1 <= int(seq) <= covered + 1:
            expected = int(seq)
        if int(seq) != expected:
            problems.append(f"journal: seq {int(seq)} where {expected or covered + 1} was due")
        if int(crc, 16) != zlib.crc32(seq + b" " + payload):
            problems.append(f"journal: bad checksum at seq {int(seq)}")
        json.loads(payload)
        expected = int(seq) + 1
    if expected is not None and expected - 1 < covered:
        problems.append(f"journal: ends at seq {expected - 1}, before its snapshot ({covered})")
    return problems


def check_index(path: Path, jobs: dict[str, dict]) -> list[str]:
    """The job index, read as ``praxist-fs jobs`` reads it, holds every job file as it is."""
    try:
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            rows = dict(db.execute("SELECT job_id, document FROM jobs").fetchall())
        finally:
            db.close()
    except sqlite3.Error as exc:
        return [f"job index: unreadable ({exc})"]
    problems = [f"job index: job {job_id} {'missing' if job_id not in rows else 'differs'}"
                for job_id, doc in jobs.items()
                if job_id not in rows or json.loads(rows[job_id]) != doc]
    return problems + [f"job index: job {job_id} has no job file"
                       for job_id in rows.keys() - jobs.keys()]


def check_run(root: Path, *, settled: bool = True, starts: Path | None = None,
              registry: Path | None = None, power_lost: bool = False) -> list[str]:
    """Promises that hold for any run directory; ``settled``: no work is left in flight;
    ``power_lost``: the machine went down (shims killed, what was not fsynced dropped), so
    an attempt whose end the journal holds, as its shim told it on the status pipe, may
    have no exit.json (the shim writes that file after telling the exit)."""
    sched = root / "resource_scheduler"
    problems = check_journal(sched / "journal" / "journal.log")
    jobs, places = {}, Counter()
    for directory in ("queued", "running", "done"):
        for path in (sched / "jobs" / directory).glob("*.json"):
            doc = _json(path)
            if doc is None:
                problems.append(f"jobs/{directory}/{path.name}: unreadable")
                continue
            places[doc["job_id"]] += 1
            jobs[doc["job_id"]] = doc
            if DIRECTORY_OF[doc["state"]] != directory:
                problems.append(f"job {doc['job_id']} is {doc['state']} but in jobs/{directory}")
    problems += [f"job {job_id} is in {n} state directories" for job_id, n in places.items()
                 if n > 1]
    for path in (sched / "spool" / "replies").glob("*.json"):
        reply = _json(path)
        if reply is None:
            problems.append(f"reply {path.name}: unreadable")
        elif reply["job_id"] is not None and reply["job_id"] not in jobs:
            problems.append(f"reply {path.name} names job {reply['job_id']}, which has no file")
    for job_id, job in jobs.items():
        ids = [a["attempt_id"] for a in job["attempts"]]
        if ids != [f"a{i}" for i in range(1, len(ids) + 1)]:
            problems.append(f"job {job_id}: attempt ids {ids}")
        for attempt in job["attempts"]:
            record = _json(sched / "attempts" / job_id / attempt["attempt_id"] / "exit.json")
            if attempt["outcome"] in RAN and (record is None and not power_lost or
                                              record is not None and
                                              record["exit_code"] != attempt["exit_code"]):
                problems.append(f"job {job_id} {attempt['attempt_id']}: exit code "
                                f"{attempt['exit_code']} but exit.json says {record}")
            if attempt["outcome"] == "released" and record is not None:
                problems.append(f"job {job_id} {attempt['attempt_id']}: released but it ran")
        if job["state"] == "running":
            ready = _json(sched / "attempts" / job_id / job["attempts"][-1]["attempt_id"] /
                          "READY") or {}
            if not _alive(ready.get("pid"), ready.get("start_time")):
                problems.append(f"job {job_id} is running but its shim is not alive")
    if starts is not None:
        ran = Counter(starts.read_text().split()) if starts.exists() else Counter()
        for job_id, job in jobs.items():
            least = sum(1 for a in job["attempts"] if a["outcome"] in RAN)
            # a lost attempt's command may have started (GO was given; the power went, or
            # its shim died), and so may the current one of a running job
            most = least + sum(1 for a in job["attempts"] if a["outcome"] == "lost") + \
                (job["state"] == "running")
            if not least <= ran[job_id] <= most:
                problems.append(f"job {job_id}: command started {ran[job_id]} times, "
                                f"{least} attempts ran" +
                                (f", {most - least} more may have" if most > least else ""))
    status = _json(sched / "status.json")
    if settled:
        if any((sched / "spool" / "incoming").glob("*.json")):
            problems.append("requests left unanswered in spool/incoming")
        if status is not None:
            counts = Counter(job["state"] for job in jobs.values())
            for state, count in status["counts"].items():
                if count != counts.get(state, 0):
                    problems.append(f"status says {count} {state}, job files say "
                                    f"{counts.get(state, 0)}")
        if (sched / "index" / "jobs.sqlite").exists():  # kept with status.json
            problems += check_index(sched / "index" / "jobs.sqlite", jobs)
    if registry is not None:
        running = {j for j, doc in jobs.items() if doc["state"] == "running"}
        for path in registry.glob("*.json"):
            doc = _json(path) or {}
            if doc.get("run_dir") == str(root):
                held = {a["job_id"] for a in doc.get("allocations", [])}
                problems += [f"registry: terminal job {j} still holds an allocation"
                             for j in held - running]
    for gen in sorted(root.glob("gen_*")):
        stats = _json(gen / "resource_supply" / "stats.json")
        leases = [_json(p) for p in (gen / "resource_supply" / "leases").glob("*.json")]
        if stats is not None:
            ended = sum(stats[k] for k in ("consumed", "declined", "expired", "revoked"))
            outstanding = sum(1 for lease in leases if lease and lease["state"] == "granted")
            if stats["granted"] != ended + outstanding:
                problems.append(f"{gen.name}: {stats['granted']} granted but {ended} ended and "
                                f"{outstanding} outstanding")
    return problems
