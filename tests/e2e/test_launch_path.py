"""The fast launch path: shims forked by the shim server, bound in the decision's commit."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import signal
import struct
import termios
from pathlib import Path

import psutil

from .conftest import (
    CPU_ONLY, counting, forked_at_start, gone, held_start, read_json, request, shim_server,
    starts, wait_for,
)
from .crashes import CRASH_EXIT, start_crashing


def test_an_attempts_shim_is_forked_by_the_shim_server_and_leads_its_session(run, tmp_path):
    server = shim_server(run)
    wait_for(lambda: len(server.children()) >= 2, message="two warm shims")
    run.wait_state(run.reply(run.submit(request("first")))["job_id"], "completed")
    out = tmp_path / "ids"
    # the command's parent is its shim: its pid, process group and session, and its parent
    rid = run.submit(request("ids", ["sh", "-c", f"ps -o pid=,pgid=,sid=,ppid= -p $PPID > {out}"]))
    run.wait_state(run.reply(rid)["job_id"], "completed")
    pid, pgid, sid, ppid = map(int, out.read_text().split())
    assert pid == pgid == sid and ppid == server.pid
    assert os.getsid(server.pid) == server.pid  # the server too is in a session of its own


def journal_batches(ledger) -> list[list[dict]]:
    """The journal's records as the power-loss ledger saw them appended: one list a commit."""
    appends = [json.loads(line) for line in ledger.read_text().splitlines()]
    return [[json.loads(record.split(b" ", 2)[2])
             for record in base64.b64decode(op["data"]).splitlines()]
            for op in appends if op["op"] == "append" and op["path"].endswith("journal.log")]


def test_the_launch_decision_the_shims_pid_and_go_share_one_commit(make_run, tmp_path):
    # (with GPU profiles the pass runs under the host registry's lock, in a commit of its
    # own after the acceptance's; the pid and GO still share the decision's)
    run = make_run(task_text=CPU_ONLY)
    ledger = tmp_path / "ledger.jsonl"
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger)})
    server = shim_server(run)
    wait_for(lambda: len(server.children()) >= 2, message="two warm shims")
    run.wait_state(run.reply(run.submit(request("first")))["job_id"], "completed")
    # by now the coordinator holds warm shims whatever the timing of the first launch
    job_id = run.reply(run.submit(request("second")))["job_id"]
    run.wait_state(job_id, "completed")
    launch = next(batch for batch in journal_batches(ledger)
                  if any(r["type"] == "attempt_launched" and r["job_id"] == job_id
                         for r in batch))
    bound = [r for r in launch if r["type"] == "attempt_observed" and r["job_id"] == job_id]
    assert bound and bound[0]["handle"]["pid"] and bound[0]["ready"], launch  # GO decided with them
    assert any(r["type"] == "request_seen" for r in launch)  # and the acceptance too


def test_a_killed_shim_server_does_not_stop_launches(run, tmp_path):
    server = shim_server(run)
    server.kill()
    wait_for(lambda: gone(server), message="the shim server to die")
    for tag in ("after-1", "after-2", "after-3"):
        rid = run.submit(request(tag, ["sh", "-c", f"echo {tag} >> {tmp_path / 'ran'}"]))
        run.wait_state(run.reply(rid)["job_id"], "completed")
    assert (tmp_path / "ran").read_text().split() == ["after-1", "after-2", "after-3"]


def test_a_clean_stop_ends_the_server_and_leaves_running_attempts_running(run, tmp_path):
    server = shim_server(run)
    gate = tmp_path / "gate"
    rid = run.submit(request("long", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]))
    job_id = run.reply(rid)["job_id"]
    run.wait_state(job_id, "running")
    shim = wait_for(lambda: (read_json(run.sched / "attempts" / job_id / "a1" / "READY") or {})
                    .get("pid"), message="READY")
    assert run.stop(signal.SIGTERM) == 0
    wait_for(lambda: gone(server), message="the shim server to exit")
    assert psutil.pid_exists(shim)
    run.start()
    gate.touch()
    assert run.wait_state(job_id, "completed")["exit_code"] == 0


def served_by(run, job_id: str, server: psutil.Process) -> bool:
    """Whether the job's attempt ran on a supervisor that ``server`` forked: a shim the
    coordinator started itself is its child, and gone once its attempt is over."""
    shim = read_json(run.sched / "attempts" / job_id / "a1" / "READY")["pid"]
    try:
        return psutil.Process(shim).ppid() == server.pid
    except psutil.NoSuchProcess:
        return False


def test_the_first_jobs_after_a_start_run_on_forked_supervisors(make_run):
    # the server starts with the coordinator, before the replay; a launch that finds no
    # shim warm waits for the fork on its way instead of starting a shim of its own
    run = make_run()
    waiting = run.submit(request("waiting"))  # read by the start itself
    for start in range(2):  # a fresh run, then a restart
        run.start()
        right_after = run.submit(request(f"right-after-{start}"))
        server = shim_server(run)
        for rid in (waiting, right_after):
            job_id = run.reply(rid)["job_id"]
            assert run.wait_state(job_id, "completed")["exit_code"] == 0
            assert served_by(run, job_id, server), f"{rid} ran on a shim of its own"
        assert run.stop(signal.SIGTERM) == 0
        waiting = run.submit(request(f"waiting-{start}"))


def test_a_pass_that_launches_more_than_the_warm_shims_runs_each_on_a_forked_supervisor(
        make_run):
    # the jobs waiting at a start launch in its first passes, more of them than shims are
    # kept warm (as in a busy run, whose ends come several to a loop turn while their
    # supervisors still write exit.json): the rest are forked for them, not started as
    # shims of their own (an interpreter each)
    run = make_run(slots=6, max_slots=6)
    waiting = [run.submit(request(f"waiting-{number}")) for number in range(6)]
    run.start()
    server = shim_server(run)
    for rid in waiting:
        job_id = run.reply(rid)["job_id"]
        assert run.wait_state(job_id, "completed")["exit_code"] == 0
        assert served_by(run, job_id, server), f"{rid} ran on a shim of its own"


def attempt_processes(run) -> list[psutil.Process]:
    """The run's shim server and supervisors (forks of it) and shims: their command line
    names the run's attempts directory."""
    attempts = str(run.sched / "attempts")
    return [proc for proc in psutil.process_iter(["cmdline", "status"])
            if attempts in (proc.info["cmdline"] or [])
            and proc.info["status"] != psutil.STATUS_ZOMBIE]


def test_a_coordinator_killed_during_its_start_leaves_no_server_or_supervisor(
        make_run, tmp_path):
    run = make_run()
    run.start_raw(held_start(tmp_path)[0])
    server, supervisors = forked_at_start(run)
    assert not (run.sched / "endpoint.json").exists()  # still starting
    run.kill()
    for process in (server, *supervisors):
        wait_for(lambda: gone(process), message=f"{process.pid} to exit with the coordinator")
    assert attempt_processes(run) == []
    run.start()  # and the run starts as usual
    job_id = run.reply(run.submit(request("after")))["job_id"]
    assert run.wait_state(job_id, "completed")["exit_code"] == 0


def test_a_coordinator_killed_before_a_launchs_commit_runs_it_once_and_leaves_no_shim(
        make_run, tmp_path):
    """The warm shim is told its attempt before the commit that journals the launch with
    its GO: it makes the directory, READY and the command's log while the fsync runs.
    Killed right before that commit, the coordinator leaves that shim without GO: it
    takes READY and the log back and ends, and the next coordinator, which never heard
    of the attempt, launches it again: the command runs once."""
    run = make_run(task_text=CPU_ONLY)
    proc = start_crashing(run, "journal.before_commit@launched:x")
    server = shim_server(run)
    wait_for(lambda: len(server.children()) >= 2, message="two warm shims")
    warm = server.children()
    marker = tmp_path / "starts"
    rid = run.submit(request("x", counting(marker, "exit 0")))
    assert proc.wait(timeout=30) == CRASH_EXIT
    made = wait_for(lambda: list(run.sched.glob("attempts/*/a1")))  # by the shim, told ahead
    for shim in warm:
        wait_for(lambda: gone(shim), message=f"warm shim {shim.pid} to end")
    assert not list(run.sched.glob("attempts/*/a1/READY"))  # taken back
    assert not list(run.root.glob("logs/experiments/*/a1.log"))  # made ahead, taken back
    run.start()
    job_id = run.reply(rid)["job_id"]
    done = run.wait_state(job_id, "completed")
    assert starts(marker) == [job_id] and made[0].parent.name == job_id
    assert [attempt["attempt_id"] for attempt in done["attempts"]] == ["a1"]


ENDS = {"x": 0, "y": 3}  # tag -> exit code


def end_both_while_the_coordinator_is_stopped(run, tmp_path) -> list[str]:
    """Two running jobs (``ENDS``) whose commands end while the coordinator is stopped
    (SIGSTOP), so that it sees both ends in its next loop turn; their job ids. Each marks
    its start in ``tmp_path / "starts"``."""
    gate, marker = tmp_path / "gate", tmp_path / "starts"
    jobs = [run.reply(run.submit(request(tag, counting(marker, (
        f"while [ ! -e {gate} ]; do sleep 0.02; done; exit {code}")))))["job_id"]
        for tag, code in ENDS.items()]
    wait_for(lambda: sorted(starts(marker)) == sorted(jobs), message="both commands to start")
    # exit.json is written once the exit is told on the shim's pipe (shim.serve)
    ended = [run.sched / "attempts" / job_id / "a1" / "exit.json" for job_id in jobs]
    stop_between_turns(run.proc.pid)
    try:
        gate.touch()
        wait_for(lambda: all(map(os.path.exists, ended)), message="both commands over and told")
    finally:
        os.kill(run.proc.pid, signal.SIGCONT)
    return jobs


def stop_between_turns(pid: int) -> None:
    """SIGSTOP the coordinator ``pid`` at a moment none of the pipes it reads holds a word
    it has not read, stopping it again until one is found. Stopped midway through a loop
    turn whose selector had found a shim's pipe ready (a late READY, say), it would go
    on, once continued, to read that pipe alone, the exit behind the word included, and
    hear the other shim's exit in the next turn: two commits, not one."""
    def stopped_with_nothing_unread() -> bool:
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: state(pid) == "T", message=f"{pid} to stop")
        if not unread_words(pid):
            return True
        os.kill(pid, signal.SIGCONT)
        return False
    wait_for(stopped_with_nothing_unread, message=f"{pid} stopped between turns")


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def unread_words(pid: int) -> int:
    """Bytes waiting in the pipes ``pid`` reads (FIONREAD of each read end, opened
    anew through /proc: it opens the same pipe)."""
    unread = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:") or \
                    int(Path(f"/proc/{pid}/fdinfo/{fd}").read_text().split()[3], 8) & 3:
                continue  # not a pipe, or its write end
            handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:  # closed meanwhile
            continue
        try:
            unread += struct.unpack("i", fcntl.ioctl(handle, termios.FIONREAD, bytes(4)))[0]
        finally:
            os.close(handle)
    return unread


def test_jobs_that_end_in_one_loop_turn_share_one_commit(make_run, tmp_path):
    """Issue 31: the ends the coordinator sees in one loop turn are journaled in one commit
    (one fsync), with the launches they allow, not one commit each."""
    run = make_run(task_text=CPU_ONLY)
    ledger = tmp_path / "ledger.jsonl"
    run.start({"PRAXIST_POWERLOSS_LEDGER": str(ledger)})
    jobs = end_both_while_the_coordinator_is_stopped(run, tmp_path)
    for job_id in jobs:
        run.wait_state(job_id, "completed", "failed")
    ends = [{r["job_id"] for r in batch if r["type"] == "attempt_observed" and r["exited"]}
            for batch in journal_batches(ledger)]
    assert [found for found in ends if found] == [set(jobs)]


def test_a_crash_after_the_commit_of_ends_seen_together_loses_neither(make_run, tmp_path):
    """A crash keyed to a moment (``journal.after_commit@done:x``) is reached whatever the
    batching: here right after the one commit of both ends, before anything was done
    about them. The next coordinator finds both ended with their own exit codes and runs
    neither again."""
    run = make_run(task_text=CPU_ONLY)
    run.start({"PRAXIST_CRASH_AT": "journal.after_commit@done:x"})
    jobs = end_both_while_the_coordinator_is_stopped(run, tmp_path)
    assert run.proc.wait(timeout=30) == CRASH_EXIT, "journal.after_commit@done:x never reached"
    run.start()
    docs = [run.wait_state(job_id, "completed", "failed") for job_id in jobs]
    assert [(d["state"], d["exit_code"], len(d["attempts"])) for d in docs] == \
        [("completed", 0, 1), ("failed", 3, 1)]
    assert sorted(starts(tmp_path / "starts")) == sorted(jobs)
