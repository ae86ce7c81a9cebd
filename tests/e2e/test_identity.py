"""R-SUB-2..4 through real files and a real coordinator: dedup, conflicts, retries."""

from __future__ import annotations

from .conftest import TASK, request, wait_for


def test_accepted_request_runs_and_records_its_history(run, tmp_path):
    out = tmp_path / "out.txt"
    rid = run.submit(request("train-a", ["sh", "-c", f"echo ran >> {out}; echo to-log"]))
    reply = run.reply(rid)
    assert reply["outcome"] == "accepted"
    assert set(reply) >= {"request_id", "outcome", "job_id", "state", "reason"}
    job = run.wait_state(reply["job_id"], "completed")
    assert job["exit_code"] == 0
    assert job["tag"] == "train-a" and job["peer"] == "tester" and job["profile"] == "cpu"
    assert job["work_class"] == "ordinary"
    [attempt] = job["attempts"]
    assert set(attempt) >= {"attempt_id", "started_at", "ended_at", "exit_code", "gpus", "outcome"}
    assert attempt["outcome"] == "completed" and attempt["gpus"] == []
    assert run.job_dirs(reply["job_id"]) == ["done"]
    log = run.root / "logs" / "experiments" / reply["job_id"] / f"{attempt['attempt_id']}.log"
    assert log.read_text() == "to-log\n"
    assert out.read_text() == "ran\n"
    assert not list((run.sched / "spool" / "incoming").iterdir())


def test_same_tag_same_request_is_a_duplicate_and_runs_once(run, tmp_path):
    marker = tmp_path / "starts"
    argv = ["sh", "-c", f"echo x >> {marker}; sleep 0.5"]
    first = run.reply(run.submit(request("dup", argv)))
    second = run.reply(run.submit(request("dup", argv)))
    assert second["outcome"] == "duplicate" and second["job_id"] == first["job_id"]
    run.wait_state(first["job_id"], "completed")
    third = run.reply(run.submit(request("dup", argv)))
    assert third["outcome"] == "duplicate" and third["state"] == "completed"
    assert marker.read_text() == "x\n"


def test_same_tag_with_a_changed_request_shares_the_job_and_says_what_differs(run, tmp_path):
    """R-SUB-7, seed 000: the tag is the identity; a changed request shares the job."""
    marker = tmp_path / "starts"
    first = run.reply(run.submit(request("conf", ["sh", "-c", f"echo x >> {marker}; sleep 5"])))
    for changed, differs in ((request("conf", ["sh", "-c", "sleep 6"]), ["argv"]),
                             (request("conf", ["sleep", "5"], env={"LR": "0.1"}),
                              ["argv", "env:LR"]),
                             (request("conf", ["sleep", "5"], profile="other_cpu"),
                              ["argv", "profile"])):
        reply = run.reply(run.submit(changed))
        assert reply["outcome"] == "duplicate" and reply["job_id"] == first["job_id"], changed
        assert reply["differs"] == differs
    run.wait_state(first["job_id"], "running")
    assert marker.read_text() == "x\n"


def test_same_tag_with_a_changed_request_is_a_conflict_with_the_flag_or_the_strict_key(
        make_run):
    run = make_run(task_text=TASK.format(slots=2, retries=1)
                   + "    same_tag_different_request: reject\n")
    run.start()
    first = run.reply(run.submit(request("conf", ["sleep", "5"])))
    for changed, named in ((request("conf", ["sleep", "6"]), "command"),
                           (request("conf", ["sleep", "5"], env={"LR": "0.1"}),
                            "env (this request adds LR)"),
                           (request("conf", ["sleep", "5"], profile="other_cpu"), "profile"),
                           (request("conf", ["sleep", "5"], retry_terminal=True, cwd="/tmp"),
                            "cwd; retry_terminal applies only")):
        reply = run.reply(run.submit(changed))
        assert reply["outcome"] == "rejected" and reply["field"] == "tag", changed
        assert reply["job_id"] == first["job_id"]
        assert f"with a different {named}" in reply["reason"]


def test_failed_job_is_a_terminal_duplicate_until_retried(run, tmp_path):
    marker = tmp_path / "starts"
    failing = ["sh", "-c", f"echo x >> {marker}; exit 3"]
    job_id = run.reply(run.submit(request("fails", failing)))["job_id"]
    job = run.wait_state(job_id, "failed")
    assert job["exit_code"] == 3 and "exit code 3" in job["reason"]

    again = run.reply(run.submit(request("fails", failing)))
    assert again["outcome"] == "terminal_duplicate" and again["state"] == "failed"

    fixed = ["sh", "-c", f"echo y >> {marker}"]
    retry = request("fails", fixed, retry_terminal=True)
    accepted = run.reply(run.submit(retry, name="retry-1.json"))
    assert accepted["outcome"] == "retry_accepted" and accepted["job_id"] == job_id
    # An identical retransmission of the accepted retry stays idempotent.
    echo = run.reply(run.submit(retry, name="retry-2.json"))
    assert echo["outcome"] == "duplicate"
    job = run.wait_state(job_id, "completed")
    assert [a["attempt_id"] for a in job["attempts"]] == ["a1", "a2"]
    assert [a["exit_code"] for a in job["attempts"]] == [3, 0]
    assert run.reply(run.submit(retry, name="retry-3.json"))["outcome"] == "duplicate"
    changed = run.reply(run.submit(request("fails", ["true"], retry_terminal=True)))
    assert changed["outcome"] == "rejected"
    assert marker.read_text() == "x\ny\n"


def test_exit_75_is_retried_under_the_same_job(make_run, tmp_path):
    run = make_run(retries=2)
    run.start()
    count = tmp_path / "count"
    # Exit 75 twice, then succeed: three attempts, one job.
    script = (f"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; "
              f"[ $n -ge 3 ] || exit 75")
    job_id = run.reply(run.submit(request("flaky", ["sh", "-c", script])))["job_id"]
    job = run.wait_state(job_id, "completed")
    assert [a["outcome"] for a in job["attempts"]] == ["infra_retry", "infra_retry", "completed"]
    assert [a["exit_code"] for a in job["attempts"]] == [75, 75, 0]


def test_exit_75_without_retries_left_fails(make_run):
    run = make_run(retries=0)
    run.start()
    job_id = run.reply(run.submit(request("infra", ["sh", "-c", "exit 75"])))["job_id"]
    job = run.wait_state(job_id, "failed")
    assert len(job["attempts"]) == 1 and job["exit_code"] == 75 and "75" in job["reason"]


def test_other_nonzero_exit_is_failed_without_retry(run):
    job_id = run.reply(run.submit(request("bad", ["sh", "-c", "exit 1"])))["job_id"]
    job = run.wait_state(job_id, "failed")
    assert len(job["attempts"]) == 1 and job["exit_code"] == 1


def test_gpu_work_waits_with_a_reason_and_never_runs_on_cpu(run, tmp_path):
    marker = tmp_path / "ran"
    gpu = run.reply(run.submit(request("gpu-job", ["touch", str(marker)], profile="gpu_work")))
    cpu = run.reply(run.submit(request("cpu-job", ["true"])))
    run.wait_state(cpu["job_id"], "completed")
    status = wait_for(lambda: (s := run.status()) and s["queue"]
                      and "gpu" in s["queue"][0]["reason"].lower() and s,
                      message="the queued job's reason")
    [held] = status["queue"]
    assert held["job_id"] == gpu["job_id"]
    assert run.job(gpu["job_id"])["state"] == "queued" and not marker.exists()


def test_unknown_profile_is_rejected_before_identity(run):
    reply = run.reply(run.submit(request("np", profile="no_such")))
    assert reply["outcome"] == "rejected" and reply["job_id"] is None
    assert "no_such" in reply["reason"]


def test_concurrency_limit_holds(make_run, tmp_path):
    run = make_run(slots=2)
    run.start()
    gate = tmp_path / "gate"
    ids = [run.reply(run.submit(request(f"c{i}", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
           for i in range(4)]
    # one status.json may show two running before the last acceptances
    wait_for(lambda: (s := run.status()) and s["running"] == 2 and s["counts"]["queued"] == 2,
             message="two running and two queued")
    gate.touch()
    for job_id in ids:
        run.wait_state(job_id, "completed")
