"""praxist-fs jobs through a real coordinator: the table, --json, filters, the order,
and the job index repaired at start or bypassed when it cannot be trusted."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime
from pathlib import Path

from .conftest import JOBS, TASK, accepted, jobs, listed, read_json, request, wait_for


def states(run, *args: str) -> dict[str, str]:
    return {row["tag"]: row["state"] for row in listed(run, *args)["jobs"]}


def test_jobs_lists_the_held_jobs(run):
    """Issue 29: 'jobs --state held' was refused; held is a queued job with a hold."""
    held = accepted(run, request("held-1", ["true"], hold=True))
    free = accepted(run, request("free-2", ["sh", "-c", "sleep 30"]))
    run.wait_state(free, "running")
    wait_for(lambda: states(run) == {"held-1": "queued", "free-2": "running"},
             message="the index to show both jobs")
    assert [row["job_id"] for row in listed(run, "--state", "held")["jobs"]] == [held]
    assert list(states(run, "--state", "held,running")) == ["free-2", "held-1"]
    run.stop()
    (run.sched / "index" / "jobs.sqlite").unlink()  # the job files, read instead
    without = listed(run, "--state", "held")
    assert without["source"] == "job files" and [r["job_id"] for r in without["jobs"]] == [held]


def test_jobs_lists_every_state_newest_first_and_filters(make_run, tmp_path):
    # one slot for good: a controller that steps concurrency up on a slow box would
    # start wait-4, which must stay queued while the listing is read
    run = make_run(task_text=TASK.format(slots=1, retries=1).replace(
        "max_concurrent_experiments: 8", "max_concurrent_experiments: 1"))
    run.start()
    gate = tmp_path / "gate"
    ok = accepted(run, request("ok-1", ["sh", "-c", "echo fine"], peer="alice"))
    bad = accepted(run, request("bad-2", ["sh", "-c", "exit 3"], peer="bob"))
    run.wait_state(ok, "completed")
    ended = run.wait_state(bad, "failed")["attempts"][-1]["ended_at"]
    hold = accepted(run, request("hold-3", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; "
                                                        "done"], peer="alice"))
    run.wait_state(hold, "running")
    wait = accepted(run, request("wait-4", ["true"], peer="bob"))
    expected = {"wait-4": "queued", "hold-3": "running", "bad-2": "failed", "ok-1": "completed"}
    wait_for(lambda: states(run) == expected, message="the index to show all four jobs")

    everything = listed(run)
    assert everything["matched"] == 4 and everything["source"] == "index"
    assert [row["job_id"] for row in everything["jobs"]] == [wait, hold, bad, ok]
    rows = {row["tag"]: row for row in everything["jobs"]}
    assert rows["bad-2"]["exit_code"] == 3 and rows["bad-2"]["attempt_count"] == 1
    assert rows["bad-2"]["ended_at"] == ended and rows["bad-2"]["wall_s"] >= 0
    assert rows["bad-2"]["argv"] == ["sh", "-c", "exit 3"]  # the job file's fields too
    assert rows["bad-2"]["fingerprint"] == run.job(bad)["fingerprint"]
    assert rows["hold-3"]["started_at"] is not None and rows["hold-3"]["ended_at"] is None
    assert rows["wait-4"]["started_at"] is None and rows["wait-4"]["attempt_count"] == 0

    table = jobs(run).stdout.splitlines()
    assert table[0].split() == ["JOB", "TAG", "PEER", "STATE", "EXIT", "ATT", "SUBMITTED",
                                "STARTED", "ENDED", "WALL", "REASON"]
    assert [line.split()[0] for line in table[1:]] == [wait, hold, bad, ok]
    assert table[3].split()[1:6] == ["bad-2", "bob", "failed", "3", "1"]
    assert table[3].endswith("exit code 3")

    assert states(run, "--state", "failed") == {"bad-2": "failed"}
    assert list(states(run, "--state", "queued,running")) == ["wait-4", "hold-3"]
    assert list(states(run, "--peer", "bob")) == ["wait-4", "bad-2"]
    assert list(states(run, "--tag", "*-[12]")) == ["bad-2", "ok-1"]
    since = datetime.fromtimestamp(ended + 0.001).isoformat()  # local time, as people type it
    assert list(states(run, "--since", since)) == ["wait-4", "hold-3"]
    assert list(states(run, "--since", "1h")) == ["wait-4", "hold-3", "bad-2", "ok-1"]
    limited = listed(run, "--limit", "2")
    assert [row["tag"] for row in limited["jobs"]] == ["wait-4", "hold-3"]
    assert limited["matched"] == 4
    assert jobs(run, "--limit", "2").stdout.splitlines()[-1].startswith("... 2 more")
    gate.touch()
    run.wait_state(wait, "completed")


def test_jobs_rejects_bad_filters(run):
    for args in (["--state", "finished"], ["--since", "yesterday"], ["--limit", "-1"]):
        result = subprocess.run([*JOBS, "--run-dir", str(run.root), *args],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2 and args[0] in result.stderr


def index_of_one_job(run, tag: str) -> tuple[Path, Path]:
    """Run ``tag`` to completion and stop: the run's index, and a copy of it as it is now
    (what it says of one job)."""
    run.wait_state(accepted(run, request(tag)), "completed")
    run.stop()
    index = run.sched / "index" / "jobs.sqlite"
    then = index.with_name("then.sqlite")
    shutil.copy(index, then)
    return index, then


def test_the_index_is_rebuilt_at_start_when_missing_stale_or_damaged(run):
    index, early = index_of_one_job(run, "early-1")
    run.start()
    later = [accepted(run, request(f"later-{n}")) for n in (2, 3)]
    for job_id in later:
        run.wait_state(job_id, "completed")
    run.stop()
    all_three = ["later-3", "later-2", "early-1"]
    for damage in ("stale", "damaged", "missing"):
        if damage == "stale":
            shutil.copy(early, index)
        elif damage == "damaged":
            index.write_bytes(b"\0not sqlite" * 4096)
        else:
            index.unlink()
        run.start()  # serving: the history's part of the index is rebuilt meanwhile
        listing = listed(run)  # from the job files until the index is whole
        assert [row["tag"] for row in listing["jobs"]] == all_three, damage
        listing = wait_for(lambda: (found := listed(run))["source"] == "index" and found,
                           message="the rebuilt index")
        assert [row["tag"] for row in listing["jobs"]] == all_three, damage
        run.stop()
    run.start()
    last = accepted(run, request("crash-4"))
    run.wait_state(last, "completed")
    run.kill()  # kept if its last commit reflects the whole journal, else rebuilt
    run.start()
    listing = listed(run)
    assert [(row["tag"], row["state"]) for row in listing["jobs"]] == [
        ("crash-4", "completed"), *((tag, "completed") for tag in all_three)]
    assert listing["source"] == "index"


def test_an_index_another_coordinator_left_behind_is_not_trusted(run):
    index, left = index_of_one_job(run, "seen-1")
    run.start()
    second = accepted(run, request("unseen-2"))
    run.wait_state(second, "completed")
    run.stop()
    shutil.copy(left, index)  # as if this coordinator had not kept it (an older version)
    result = jobs(run, "--json")
    assert [row["tag"] for row in json.loads(result.stdout)["jobs"]] == ["unseen-2", "seen-1"]
    assert json.loads(result.stdout)["source"] == "job files"
    assert "not kept by the coordinator that last served the run" in result.stderr


def test_a_run_without_an_index_is_listed_from_its_job_files(run):
    job_id = accepted(run, request("old-1", ["sh", "-c", "exit 4"]))
    run.wait_state(job_id, "failed")
    queued_id = accepted(run, request("old-2", ["true"], profile="gpu_work"))  # no GPUs: waits
    run.wait_state(queued_id, "queued")
    run.stop()
    (run.sched / "index" / "jobs.sqlite").unlink()  # as a run made before the index
    path = run.sched / "jobs" / "done" / f"{job_id}.json"
    newer = {**read_json(path), "priority": 5}  # a field this version does not know
    path.write_text(json.dumps(newer))
    result = jobs(run, "--json")
    listing = json.loads(result.stdout)
    assert listing["source"] == "job files" and result.stderr == ""
    assert [(row["tag"], row["state"]) for row in listing["jobs"]] == [
        ("old-2", "queued"), ("old-1", "failed")]
    assert listing["jobs"][1]["priority"] == 5 and listing["jobs"][1]["exit_code"] == 4
