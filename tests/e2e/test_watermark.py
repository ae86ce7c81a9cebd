"""A compaction's watermark vouches only for what it made durable, and it makes durable
only the derived files written since the last one: never the whole machine (sync(2)),
whose unrelated writeback a reply's journal fsync would wait behind.

The coordinator records its disk operations in a power-loss ledger (tests/powerloss.py);
the ledger is read back up to the moment each compaction's snapshot is durable (its
rename and the journal directory's fsync), and every job file and reply the watermark
vouches for (there now, untouched since the watermark: what a start after a power cut
takes as it is, ``Views.repair``) must have survived a power cut at that moment with
the bytes it has. A file written within a clock tick of the watermark may carry an
mtime before it while its write came after the fork: those are left out (``TICK_NS``).
"""

from __future__ import annotations

import base64
import json
import os

from .. import powerloss
from .conftest import request, wait_for

TICK_NS = 50_000_000  # well over the kernel's file-time granularity (a jiffy, 1-10 ms)
JOBS = 14


def test_a_compactions_watermark_vouches_for_files_it_made_durable_not_the_machines(
        make_run, tmp_path):
    run = make_run()
    ledger = tmp_path / "ledger.jsonl"
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger), "PRAXIST_COMPACT_AFTER": "6"})
    snapshot = run.sched / "journal" / "snapshot.jsonl"
    n = 0
    # One at a time, so that compactions come between the jobs' files, until the last
    # compaction vouches for JOBS files: how many it has by then depends on how fast
    # the compaction child runs beside the jobs (a loaded box gave 5 after 14 jobs).
    while _vouched_by_the_last_compaction(ledger, run.sched, str(snapshot)) < JOBS:
        assert n < 10 * JOBS, "the compactions never caught up with the jobs"
        run.reply(run.submit(request(f"w{n}", request_id=f"w{n}")))
        wait_for(lambda: len(list((run.sched / "jobs" / "done").glob("*.json"))) > n,
                 message=f"job w{n} to end")
        n += 1
    run.kill()  # no clean stop: its sync would vouch for everything

    records = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert "sync" not in {record["op"] for record in records}, \
        "a compaction of a run that started afresh synced the whole machine"
    vouched_checked = 0
    for end, watermark in _compactions(records, str(snapshot)):
        model = powerloss.Model()
        for record in records[:end]:
            model.step(record)
        for path in _derived_files(run.sched):
            info = os.stat(path)
            if info.st_mtime_ns > watermark - TICK_NS:
                continue  # written since (or within a tick of) the watermark
            node = model.durable.get(str(path))
            assert node is not None and node.synced == path.read_bytes(), \
                f"{path}: vouched for by the watermark at ledger line {end}, not durable"
            vouched_checked += 1
    assert vouched_checked >= JOBS  # the check saw files, not an empty run


def _vouched_by_the_last_compaction(ledger, sched, snapshot: str) -> int:
    """How many derived files the last durable compaction's watermark vouches for (those
    the test's check will read), as the ledger has it so far."""
    if not ledger.exists():
        return 0
    records = [json.loads(line) for line in ledger.read_text().splitlines()
               if line.endswith("}")]  # a line being written is not one yet
    compactions = _compactions(records, snapshot, expected=False)
    if not compactions:
        return 0
    watermark = compactions[-1][1]
    vouched = 0
    for path in _derived_files(sched):
        try:
            vouched += os.stat(path).st_mtime_ns <= watermark - TICK_NS
        except FileNotFoundError:  # moved on (queued, running, done) since the listing
            pass
    return vouched


def _compactions(records: list[dict], snapshot: str,
                 expected: bool = True) -> list[tuple[int, int]]:
    """(ledger lines up to where the snapshot is durable, its watermark), per compaction:
    its temp file's creation carries the header, its rename puts it in place, and the
    journal directory's next fsync makes that durable."""
    created = {r["path"]: r["data"] for r in records if r["op"] == "create"}
    found, pending = [], None
    for line, record in enumerate(records, 1):
        if record["op"] == "rename" and record["path"] == snapshot:
            data = base64.b64decode(created[record["src"]])
            pending = json.loads(data.split(b"\n", 1)[0])["views_durable_ns"]
        elif record["op"] == "fsync_dir" and pending is not None and \
                record["path"] == os.path.dirname(snapshot):
            found.append((line, pending))
            pending = None
    assert found or not expected, "no compaction in the ledger"
    return found


def _derived_files(sched):
    for directory in ("jobs/queued", "jobs/running", "jobs/done", "spool/replies"):
        yield from (sched / directory).glob("*.json")


def test_after_a_crash_only_the_first_compaction_syncs_everything(make_run, tmp_path):
    """What the coordinator before a crash wrote without fsync is known by name to no one:
    the first compaction of the next start syncs the machine (``sync(2)``), once; every
    later one only the files it vouches for."""
    run = make_run()
    run.start()
    run.reply(run.submit(request("before", request_id="before")))
    run.kill()  # its job file and reply may be unsynced still
    ledger = tmp_path / "ledger.jsonl"
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger), "PRAXIST_COMPACT_AFTER": "6"})
    snapshot = str(run.sched / "journal" / "snapshot.jsonl")

    def records() -> list[dict]:
        return [json.loads(line) for line in ledger.read_text().splitlines()
                if line.endswith("}")]  # a line being written is not one yet

    def compactions() -> list[int]:
        return [n for n, r in enumerate(records()) if r["op"] == "rename" and
                r["path"] == snapshot]
    for n in range(JOBS):
        run.reply(run.submit(request(f"c{n}", request_id=f"c{n}")))
        if len(compactions()) >= 3:
            break
    wait_for(lambda: len(compactions()) >= 3, message="three compactions")
    run.kill()
    done = records()
    first = compactions()[0]
    syncs = [n for n, record in enumerate(done) if record["op"] == "sync"]
    assert syncs and max(syncs) < first, (syncs, compactions())


def test_a_clean_stop_makes_durable_by_name_what_it_vouches_for_not_the_machine(
        make_run, tmp_path):
    """A clean stop vouches for every derived file (``journal/clean_stop.json``: the next
    start takes them as they are) and for the job index. It makes them durable by name,
    as a compaction does, never the whole machine (``sync(2)``), whose other writers'
    unwritten data a stop would otherwise wait for; every job file and reply there
    survives a power cut right after the marker, with the bytes it has."""
    run = make_run()
    ledger = tmp_path / "ledger.jsonl"
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger)})
    for n in range(4):
        run.reply(run.submit(request(f"s{n}", request_id=f"s{n}")))
    wait_for(lambda: len(list((run.sched / "jobs" / "done").glob("*.json"))) >= 4,
             message="the four jobs to end")
    assert run.stop() == 0
    assert (run.sched / "journal" / "clean_stop.json").exists()

    records = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert "sync" not in {record["op"] for record in records}, \
        "a clean stop of a run that started afresh synced the whole machine"
    synced = {record["path"] for record in records if record["op"] == "fsync"}
    assert str(run.sched / "index" / "jobs.sqlite") in synced  # the index, by name
    model = powerloss.Model()
    for record in records:
        model.step(record)
    vouched = list(_derived_files(run.sched))
    for path in vouched:
        node = model.durable.get(str(path))
        assert node is not None and node.synced == path.read_bytes(), \
            f"{path}: vouched for by the clean stop, not durable"
    assert len(vouched) >= 8  # four job files and four replies
