"""The job index rebuilt while the coordinator serves: a start with a long history (the
finished jobs of a snapshot, built by bench/fixture.py as a coordinator leaves them)
answers before the index is whole, ``praxist-fs jobs`` lists every job rightly before,
during and after, and a kill -9 mid-rebuild leaves what the next start rebuilds."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from praxist_fs.adapters.jobindex import JobQuery, list_jobs
from praxist_fs.adapters.layout import RunLayout

from .conftest import listed, read_json, request, wait_for

FIXTURE = Path(__file__).resolve().parents[2] / "bench" / "fixture.py"
HISTORY = 2_500  # finished jobs: three slices of the rebuild at least (INDEX_SLICE)
CRASH_EXIT = 86
TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 1
    max_concurrent_experiments: 1
    default_profile: cpu_light
    profiles:
      cpu_light: {accelerator: cpu}
      gpu_work: {accelerator: gpu, gpu_count: 1}
"""


def history(make_run):
    """A run whose snapshot holds HISTORY finished jobs, stopped cleanly, and no index
    (as after a reboot, or a run made before the index)."""
    run = make_run(task_text=TASK)
    for args in (["--finished", str(HISTORY), "--prefix", "h"], ["--compact"]):
        subprocess.run([sys.executable, str(FIXTURE), str(run.root), str(run.task), *args],
                       check=True, capture_output=True, timeout=300)
    assert not (run.sched / "index" / "jobs.sqlite").exists()
    return run


def job_files(run) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text())
            for directory in ("queued", "running", "done")
            for path in (run.sched / "jobs" / directory).glob("*.json")}


def indexed(run) -> dict[str, dict] | None:
    """Every document the index holds, or None while it cannot be used."""
    listing = list_jobs(RunLayout.at(run.root), JobQuery(),
                        read_json(run.sched / "status.json")["coordinator"]["since"])
    if listing.source != "index":
        return None
    index = sqlite3.connect(f"{(run.sched / 'index' / 'jobs.sqlite').as_uri()}?mode=ro", uri=True)
    try:  # the rows themselves: a listing shows job files written since in their place
        return {doc["job_id"]: doc for doc in (json.loads(text) for text, in index.execute(
            "SELECT document FROM jobs"))}
    finally:
        index.close()


def index_files(run) -> list[str]:
    return sorted(path.name for path in (run.sched / "index").iterdir())


def test_a_start_serves_before_its_history_is_indexed_and_a_kill_mid_rebuild_is_repaired(
        make_run):
    run = history(make_run)
    waiting = run.submit(request("waits-1", profile="gpu_work"))  # no GPUs: stays queued
    run.start_raw(env={"PRAXIST_CRASH_AT": "index.after_slice:2"})
    assert run.proc.wait(timeout=120) == CRASH_EXIT  # killed with slices to go
    run.proc = None
    reply = read_json(run.sched / "spool" / "replies" / f"{waiting}.json")
    assert reply["outcome"] == "accepted"  # answered before the index was whole
    assert read_json(run.sched / "status.json")["coordinator"]["job_index_rebuilding"]
    leftover = index_files(run)  # the rebuild's temp file, no index to trust
    assert len(leftover) == 1 and leftover[0].startswith(".jobs.sqlite.")
    listing = listed(run)  # what praxist-fs jobs shows meanwhile: the job files
    assert listing["source"] == "job files" and listing["matched"] == HISTORY + 1
    assert [row["tag"] for row in listing["jobs"]][:2] == ["waits-1", f"h-done-{HISTORY - 1:06d}"]
    assert {row["state"] for row in listing["jobs"][1:]} == {"completed"}

    truth = job_files(run)
    forged = sorted(truth)[7]  # a file changed by hand since: not what the index shows
    path = run.sched / "jobs" / "done" / f"{forged}.json"
    path.write_text(json.dumps({**truth[forged], "reason": "edited by hand", "exit_code": 1}))
    run.start()
    first = listed(run)  # at once: from the job files or the index, right either way
    assert first["matched"] == HISTORY + 1
    assert [row["tag"] for row in first["jobs"]][0] == "waits-1"
    def whole():  # the queued job's reason may change once the host is sampled: as it is
        index = indexed(run)
        return index and index == job_files(run) and index
    found = wait_for(whole, timeout=60, message="the rebuilt index, as the job files are")
    ended = {job_id for job_id, doc in truth.items() if doc["state"] != "queued"}
    # every ended job, byte for byte its file as the coordinator wrote it (the edit repaired)
    assert {job_id: found[job_id] for job_id in ended} == {job_id: truth[job_id]
                                                            for job_id in ended}
    assert forged in ended and len(found) == len(truth)
    assert [name for name in index_files(run) if name.startswith(".")] == []  # no temp file
    assert listed(run)["source"] == "index"
    wait_for(lambda: not read_json(run.sched / "status.json")["coordinator"][
        "job_index_rebuilding"], message="status.json to say the index is whole")
    later = run.reply(run.submit(request("later-2", profile="gpu_work")))["job_id"]
    # indexed at the status cadence, which a loaded machine stretches (as the rebuild above)
    wait_for(lambda: later in (indexed(run) or {}), timeout=60,
             message="a job after the rebuild, indexed")
    run.stop()


def test_jobs_that_change_and_compactions_during_the_rebuild_end_up_indexed_as_their_files(
        make_run):
    """Jobs submitted, run and finished while the history is indexed, finished jobs of
    the history looked up again (a resubmission brings one back into memory, unchanged),
    the journal compacted after every record meanwhile (the walk goes on over each new
    shelf): the whole index is the job files."""
    run = history(make_run)
    ids = [run.submit(request(f"new-{n}")) for n in range(3)]
    again = [f"h-done-{n:06d}" for n in (HISTORY - 3, 5)]  # after and before the first slice
    ids += [run.submit({**request(tag, ["/bin/true"], profile="cpu_light"), "peer": "bench",
                        "cwd": str(run.root.parent), "env": {"PATH": "/usr/local/bin:/usr/bin:/bin"}})
            for tag in again]
    run.start(env={"PRAXIST_COMPACT_AFTER": "1"})
    replies = [run.reply(request_id) for request_id in ids]
    assert [reply["outcome"] for reply in replies[3:]] == ["duplicate", "duplicate"], replies
    for reply in replies[:3]:
        run.wait_state(reply["job_id"], "completed", timeout=60)
    # the index may lag the job files by one commit (every 5 s at most: PROTOCOL section 5)
    wait_for(lambda: indexed(run) == job_files(run), timeout=60,
             message="the rebuilt index, holding the job files as they are")
    assert len(indexed(run)) == HISTORY + 3
    run.stop()
