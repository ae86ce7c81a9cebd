"""Job control through a real coordinator (R-CTL-1, R-CTL-2, R-CTL-5): cancel, hold,
release, update, dependencies, and launch's srun-like signals, from the CLI and from a
control file a shell drops with printf and mv."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from praxist_fs.core.identity import job_id_for

from .conftest import TASK, read_json, request, wait_for

CLI = [sys.executable, "-m", "praxist_fs"]


def cli(run, *args, timeout=60):
    return subprocess.run([*CLI, *args, "--run-dir", str(run.root)], capture_output=True,
                          text=True, timeout=timeout)


def running_pid(run, job_id):
    """The shim's pid, once the job file records it (it is written before the pid is)."""
    return wait_for(lambda: (((doc := run.job(job_id)) or {}).get("state") == "running"
                             and doc["attempts"][-1]["pid"]), message=f"the pid of {job_id}")


def group_alive(pgid, leader_aside=False):
    """Whether a live process is in the group; with ``leader_aside``, one other than its
    leader (a supervisor, which stays, idle, once its attempt is over)."""
    return any(p.info["status"] != psutil.STATUS_ZOMBIE
               for p in psutil.process_iter(["pid", "status"])
               if _pgid(p.info["pid"]) == pgid and not (leader_aside and p.info["pid"] == pgid))


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_cancel_a_running_job_terminates_its_whole_group(make_run, tmp_path):
    run = make_run()
    run.start()
    marker = tmp_path / "child-started"
    # a child that ignores nothing and a shell that traps TERM to show it was asked
    run.submit(request("cancel-me", ["sh", "-c",
                                     f"sleep 300 & touch {marker}; trap 'exit 143' TERM; wait"]))
    job_id = job_id_for("cancel-me")
    pid = running_pid(run, job_id)
    wait_for(marker.exists, message="the command's child")
    result = cli(run, "cancel", "cancel-me", "--reason", "wrong lr", "--by", "alice")
    assert result.returncode == 0, result.stderr
    assert f"{job_id}" in result.stdout and "cancelling" in result.stdout
    doc = run.wait_state(job_id, "cancelled")
    assert doc["exit_code"] == 143
    assert doc["reason"].startswith("cancelled by alice: wrong lr")
    assert doc["attempts"][-1]["outcome"] == "cancelled"
    wait_for(lambda: not group_alive(pid, leader_aside=True),
             message="the group gone")  # the sleep child too


def test_cancel_reaches_a_descendant_that_called_setsid(run, tmp_path):
    """The shim waits for every descendant (it is their subreaper), so one that left the
    group must get TERM too, or the attempt would never end."""
    escaped = tmp_path / "escaped"
    run.submit(request("escaping", ["sh", "-c", f"setsid sleep 300 & echo $! > {escaped}; wait"]))
    job_id = job_id_for("escaping")
    shim = running_pid(run, job_id)
    pid = int(wait_for(lambda: escaped.exists() and escaped.read_text().strip()))
    # it left the attempt's session (setsid runs just after its pid is written)
    wait_for(lambda: os.getsid(pid) == pid != shim, message="the sleep's own session")
    assert cli(run, "cancel", job_id, "--grace", "60").returncode == 0
    doc = run.wait_state(job_id, "cancelled")
    assert doc["attempts"][-1]["signal"] == 15
    assert not psutil.pid_exists(pid)  # the shim reaped it before it recorded the end


def test_cancel_kills_after_the_grace_when_term_is_ignored(run):
    run.submit(request("stubborn", ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"]))
    job_id = job_id_for("stubborn")
    running_pid(run, job_id)
    started = time.monotonic()
    assert cli(run, "cancel", job_id, "--grace", "1").returncode == 0
    doc = run.wait_state(job_id, "cancelled", timeout=20)
    assert doc["attempts"][-1]["signal"] == 9
    assert time.monotonic() - started >= 1.0


def test_a_shell_cancels_a_queued_job_with_printf_and_mv(make_run):
    run = make_run(slots=1, max_slots=1)
    run.start()
    run.submit(request("blocker", ["sleep", "30"]))
    rid = run.submit(request("waiting", ["true"]))
    job_id = run.reply(rid)["job_id"]
    control = run.sched / "control"
    script = (f'printf \'{{"action":"cancel","jobs":["waiting"],"by":"sh"}}\' '
              f'> {control}/tmp/c1.json && mv {control}/tmp/c1.json {control}/')
    subprocess.run(["sh", "-c", script], check=True)
    reply = wait_for(lambda: read_json(control / "replies" / "c1.json"), message="reply")
    assert reply["outcome"] == "ok"
    assert reply["jobs"][0]["result"] == "cancelled"
    assert run.wait_state(job_id, "cancelled")["reason"] == "cancelled by sh"


def test_cancel_by_peer_alone_asks_for_yes(make_run):
    run = make_run(slots=1, max_slots=1)
    run.start()
    run.submit(request("blocker", ["sleep", "30"]))
    ids = [run.reply(run.submit(request(f"q{i}", ["true"])))["job_id"] for i in range(2)]
    refused = cli(run, "cancel", "--peer", "tester", "--state", "queued")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert all(run.job(j)["state"] == "queued" for j in ids)
    done = cli(run, "cancel", "--peer", "tester", "--state", "queued", "--yes", "--json")
    assert done.returncode == 0
    assert sorted(r["job_id"] for r in json.loads(done.stdout)["jobs"]) == sorted(ids)


def test_cancel_of_a_finished_or_unknown_job(run):
    job_id = run.reply(run.submit(request("quick", ["true"])))["job_id"]
    run.wait_state(job_id, "completed")
    result = cli(run, "cancel", "quick")
    assert result.returncode == 0 and "unchanged" in result.stdout and "already completed" \
        in result.stdout
    unknown = cli(run, "cancel", "no-such-job")
    assert unknown.returncode == 2 and "no-such-job" in unknown.stdout


def test_hold_release_and_priority_from_the_cli(make_run, tmp_path):
    run = make_run(slots=1, max_slots=1)
    run.start()
    gate = tmp_path / "gate"
    blocker = run.reply(run.submit(request("blocker", ["sh", "-c", f"while [ ! -e {gate} ];"
                                                       " do sleep 0.05; done"])))["job_id"]
    run.wait_state(blocker, "running")
    order = tmp_path / "order"
    ids = {tag: run.reply(run.submit(request(tag, ["sh", "-c", f"echo {tag} >> {order}"],
                                             **extra)))["job_id"]
           for tag, extra in (("low", {}), ("held", {"hold": True}), ("late", {}))}
    assert "held by tester since" in run.job(ids["held"])["reason"]
    assert cli(run, "update", "late", "--priority", "7").returncode == 0
    assert run.job(ids["late"])["priority"] == 7
    gate.touch()
    run.wait_state(ids["low"], "completed")
    assert order.read_text().split() == ["late", "low"]
    assert run.job(ids["held"])["state"] == "queued"
    assert cli(run, "release", "held").returncode == 0
    run.wait_state(ids["held"], "completed")


def test_a_chain_runs_after_success_and_is_cancelled_after_failure(run, tmp_path):
    ok = run.reply(run.submit(request("train-ok", ["sh", "-c", "sleep 0.3"])))["job_id"]
    bad = run.reply(run.submit(request("train-bad", ["sh", "-c", "sleep 0.3; exit 3"])))
    evaluate = run.reply(run.submit(request("eval-ok", ["true"], after=["train-ok"])))
    orphan = run.reply(run.submit(request("eval-bad", ["true"], after=[bad["job_id"]])))
    assert evaluate["outcome"] == "accepted"
    reason = run.job(evaluate["job_id"])["reason"]
    assert reason.startswith(f"dependency: waiting for {ok}")
    run.wait_state(evaluate["job_id"], "completed")
    doc = run.wait_state(orphan["job_id"], "cancelled")
    assert doc["reason"] == f"dependency {bad['job_id']} ended failed"
    unknown = run.reply(run.submit(request("eval-x", ["true"], after=["nope"])))
    assert unknown["outcome"] == "rejected" and unknown["field"] == "after"


def test_dependencies_survive_a_coordinator_restart(make_run, tmp_path):
    run = make_run()
    run.start()
    gate = tmp_path / "gate"
    train = run.reply(run.submit(request("train", ["sh", "-c", f"while [ ! -e {gate} ];"
                                                   " do sleep 0.05; done"])))["job_id"]
    evaluate = run.reply(run.submit(request("eval", ["true"], after=["train"])))["job_id"]
    run.wait_state(train, "running")
    run.kill()
    run.start()
    assert run.job(evaluate)["state"] == "queued"
    gate.touch()
    run.wait_state(evaluate, "completed")


def test_launch_prints_the_pending_reason_and_two_interrupts_cancel(make_run, tmp_path):
    # one slot for good: concurrency stepped up on calm samples (a slow box's interrupts
    # take seconds) would start the job, which then completes instead of being cancelled
    run = make_run(task_text=TASK.format(slots=1, retries=1).replace(
        "max_concurrent_experiments: 8", "max_concurrent_experiments: 1"))
    run.start()
    run.submit(request("blocker", ["sleep", "60"]))
    with subprocess.Popen([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                           "--tag=interrupted", "--", "true"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        lines = []
        wait_for(lambda: _read_until(proc, lines, "queued: waiting for a slot"), timeout=20,
                 message="the pending reason")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: _read_until(proc, lines, "interrupt again"), message="the first answer")
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        rest = proc.stderr.read()
        assert "Traceback" not in rest + "".join(lines)
        assert run.job(job_id_for("interrupted"))["state"] == "cancelled"


def test_launch_sigterm_cancels_a_running_job(run, tmp_path):
    marker = tmp_path / "started"
    with subprocess.Popen([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                           "--tag=terminated", "--", "sh", "-c", f"touch {marker}; sleep 60"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_for(marker.exists, message="the command running")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert "Traceback" not in proc.stderr.read()
        doc = run.job(job_id_for("terminated"))
        assert doc["state"] == "cancelled" and doc["reason"].startswith("cancelled by cli")


def test_a_launch_that_shares_a_job_leaves_it_on_a_signal_unless_cancel_shared(run, tmp_path):
    """Issue 29: a launch answered duplicate cancelled the existing job on a double
    Ctrl-C, though an earlier detached submission made it and others may wait on it."""
    marker = tmp_path / "started"
    argv = ["sh", "-c", f"touch {marker}; sleep 60"]
    made = subprocess.run([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                           "--tag=shared", "--detach", "--", *argv],
                          capture_output=True, text=True, timeout=30)
    job_id = made.stdout.strip()
    wait_for(marker.exists, message="the command running")
    for signum, flags, ends in ((signal.SIGTERM, [], "running"),
                                (signal.SIGINT, [], "running"),
                                (signal.SIGTERM, ["--cancel-shared"], "cancelled")):
        with subprocess.Popen([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                               "--tag=shared", *flags, "--", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as proc:
            lines: list[str] = []
            wait_for(lambda: _read_until(proc, lines, f"duplicate: job {job_id}"),
                     message="the shared job's reply")
            if signum == signal.SIGINT:  # the first one says what a second would do
                proc.send_signal(signum)
                wait_for(lambda: _read_until(proc, lines, "interrupt again"),
                         message="the first answer")
            proc.send_signal(signum)
            assert proc.wait(timeout=30) == 128 + signum
            said = "".join(lines) + proc.stderr.read()
        assert "Traceback" not in said
        if ends == "running":
            if signum == signal.SIGINT:
                assert "to leave it (shared: it goes on)" in said
            assert f"leaving job {job_id} (running) to go on" in said
            assert run.job(job_id)["state"] == "running"
        else:
            assert run.wait_state(job_id, "cancelled")["state"] == "cancelled"


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (SigCgt of /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signum - 1) & 1)


def test_a_sigterm_before_the_reply_still_cancels_the_job(run, tmp_path):
    """launch is told to end while it waits for the coordinator (here: none yet), before
    it knows its job: the request still goes in, and once the job is known launch
    cancels it and exits 128 + 15, instead of dying and leaving it to run."""
    run.kill()
    marker = tmp_path / "ran"
    with subprocess.Popen([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                           "--tag=early", "--wait-coordinator=60", "--", "sh", "-c",
                           f"sleep 600; touch {marker}"],  # only the cancel ends it
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_for(lambda: catches(proc.pid, signal.SIGTERM), message="launch's handler")
        proc.send_signal(signal.SIGTERM)
        run.start()
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert "Traceback" not in proc.stderr.read()
    doc = run.wait_state(job_id_for("early"), "cancelled")
    assert doc["reason"].startswith("cancelled by cli") and not marker.exists()


def test_status_and_launch_say_when_the_coordinator_or_run_is_gone(run):
    run.kill()
    status = cli(run, "status")
    assert status.returncode == 0 and "NOT RUNNING" in status.stdout
    run.start()
    assert subprocess.run([*CLI, "stop", str(run.root)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PRAXIST_HOST_REGISTRY":
                                           str(run.root.parent / "host-registry")}
                          ).returncode == 0
    wait_for(lambda: run.proc.poll() is not None, message="the coordinator to exit")
    launched = subprocess.run([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                               "--tag=after-stop", "--", "true"], capture_output=True,
                              text=True, timeout=30)
    assert launched.returncode == 69
    assert "is stopped" in launched.stderr and "serve" not in launched.stderr


def test_a_control_verb_waits_for_a_restarting_coordinator(make_run):
    """Issue 28: ``release`` while the coordinator restarts (none live) waits for it, up
    to ``--timeout``, as ``launch --wait-coordinator`` does, instead of exiting 69 at
    once; with none coming, 69 once the timeout is over."""
    run = make_run()
    run.start()
    held = run.reply(run.submit(request("held", ["true"], hold=True)))["job_id"]
    run.stop()
    release = subprocess.Popen([*CLI, "release", "held", "--timeout", "60", "--run-dir",
                                str(run.root)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    run.start()  # a coordinator's start takes far longer than a command's refusal
    out, err = release.communicate(timeout=90)
    assert release.returncode == 0, err
    assert "released" in out
    run.wait_state(held, "completed")
    run.stop()
    started = time.monotonic()
    gone = cli(run, "cancel", "held", "--timeout", "1")
    assert gone.returncode == 69 and time.monotonic() - started >= 1, gone.stderr


def _read_until(proc, lines, needle):
    line = proc.stderr.readline()
    lines.append(line)
    return needle in line




def test_a_coordinator_killed_between_the_cancel_record_and_its_signal_cancels_on_restart(
        make_run, tmp_path):
    """A crash point right after the cancel is journaled, before its TERM (R-CTL-1)."""
    run = make_run()
    run.start_raw(env={"PRAXIST_CRASH_AT": "effect.CancelAttempt.before"})
    wait_for(lambda: (read_json(run.sched / "endpoint.json") or {}).get("pid") == run.proc.pid,
             message="the crashing coordinator serving")
    marker = tmp_path / "started"
    run.submit(request("doomed", ["sh", "-c", f"touch {marker}; sleep 300"]))
    job_id = job_id_for("doomed")
    pid = running_pid(run, job_id)
    wait_for(marker.exists, message="the command running")
    control = run.sched / "control"
    (control / "tmp").mkdir(exist_ok=True)
    (control / "tmp" / "c1.json").write_text(json.dumps({"action": "cancel",
                                                          "jobs": ["doomed"]}))
    os.rename(control / "tmp" / "c1.json", control / "c1.json")
    assert run.proc.wait(timeout=30) == 86  # died at the crash point: no TERM was sent
    assert group_alive(pid) and run.job(job_id)["state"] == "running"
    run.proc = None
    run.start()
    doc = run.wait_state(job_id, "cancelled")
    assert doc["attempts"][-1]["exit_code"] == 143
    assert len(doc["attempts"]) == 1
    wait_for(lambda: not group_alive(pid), message="the group gone")
