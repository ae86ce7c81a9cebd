"""praxist-fs logs, logs -f and wait through a real coordinator, from a shell that did not
submit the jobs; and launch's line between the attempts of a retried job."""

from __future__ import annotations

import re
import select
import subprocess
import sys

from .conftest import accepted, request

CLI = [sys.executable, "-m", "praxist_fs"]
HEADER = r"==> attempt {} \(started \d\d:\d\d:\d\d, {}\) <=="


def cli(run, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--run-dir", str(run.root)], capture_output=True,
                          text=True, timeout=timeout)


def popen(run, *args: str) -> subprocess.Popen:
    """Unbuffered: ``first_line`` must not read ahead of what ``finish`` collects."""
    return subprocess.Popen([*CLI, *args, "--run-dir", str(run.root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    return out.decode(), err.decode()


def first_line(proc: subprocess.Popen, timeout: float = 30.0) -> str:
    """The first line a follower prints (its first attempt's header), without hanging."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the follower printed nothing"
    return proc.stdout.readline().decode()


def retried_once(tmp_path, gate=None) -> list[str]:
    """A command that exits 75 (infrastructure: retried) the first time, 0 the second;
    with a ``gate``, its first attempt waits for that file first."""
    marker = tmp_path / "tried"
    wait = f"while [ ! -e {gate} ]; do sleep 0.05; done; " if gate else ""
    return ["sh", "-c", f"if [ -e {marker} ]; then echo second; exit 0; fi; {wait}"
                        f"touch {marker}; echo first; exit 75"]


def test_logs_prints_each_attempt_under_a_header_by_tag_or_id(run, tmp_path):
    job_id = accepted(run, request("logs-retry", retried_once(tmp_path)))
    run.wait_state(job_id, "completed")
    for name in ("logs-retry", job_id):
        result = cli(run, "logs", name)
        assert result.returncode == 0, result.stderr
        assert re.fullmatch(HEADER.format("a1", "exit 75") + "\nfirst\n\n"
                            + HEADER.format("a2", "exit 0") + "\nsecond\n", result.stdout)
    only = cli(run, "logs", "logs-retry", "--attempt", "a2")
    assert re.fullmatch(HEADER.format("a2", "exit 0") + "\nsecond\n", only.stdout)
    missing = cli(run, "logs", "logs-retry", "--attempt", "a3")
    assert missing.returncode == 2 and "no attempt a3 (attempts: a1, a2)" in missing.stderr


def test_logs_follow_goes_through_a_retry_and_exits_0(run, tmp_path):
    gate = tmp_path / "gate"
    job_id = accepted(run, request("follow-retry", retried_once(tmp_path, gate)))
    run.wait_state(job_id, "running")
    follower = popen(run, "logs", "-f", "follow-retry")
    try:
        header = first_line(follower)
        gate.touch()  # only now may the first attempt end: the follower saw it running
    finally:
        out, err = finish(follower)
    assert follower.returncode == 0, err
    assert re.fullmatch(HEADER.format("a1", "running") + "\n", header)
    assert re.fullmatch("first\n\n" + HEADER.format("a2", "(running|exit 0)") + "\nsecond\n",
                        out)
    assert run.job(job_id)["state"] == "completed"


def test_logs_follow_exits_with_the_failed_jobs_code(run, tmp_path):
    gate = tmp_path / "gate"
    job_id = accepted(run, request("follow-fail", [
        "sh", "-c", f"echo before; while [ ! -e {gate} ]; do sleep 0.05; done; exit 7"]))
    run.wait_state(job_id, "running")
    follower = popen(run, "logs", "-f", job_id)
    try:
        header = first_line(follower)
        gate.touch()
    finally:
        out, err = finish(follower)
    assert follower.returncode == 7, err
    assert re.fullmatch(HEADER.format("a1", "running") + "\n", header)
    assert out == "before\n"
    assert cli(run, "logs", "-f", job_id).returncode == 7  # ended already: at once


def test_logs_and_wait_of_an_unknown_job_exit_2(run):
    for command in (["logs", "nope"], ["logs", "-f", "nope"], ["wait", "nope"],
                    ["wait", "../jobs"]):
        result = cli(run, *command)
        assert result.returncode == 2 and "no job with id or tag" in result.stderr, command


def test_wait_blocks_until_all_ended_and_says_which_did_not_complete(run, tmp_path):
    gate = tmp_path / "gate"
    gated = accepted(run, request("wait-gated", [
        "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]))
    quick = accepted(run, request("wait-quick", ["true"]))
    run.wait_state(gated, "running")
    run.wait_state(quick, "completed")
    early = cli(run, "wait", "wait-gated", quick, "--timeout", "0.5")
    assert early.returncode == 124, early.stderr
    assert f"{gated} (running)" in early.stderr and quick not in early.stderr
    waiter = popen(run, "wait", "wait-gated", quick)
    gate.touch()
    out, err = finish(waiter)
    assert waiter.returncode == 0, err
    assert run.job(gated)["state"] == run.job(quick)["state"] == "completed"

    failed = accepted(run, request("wait-fails", ["sh", "-c", "exit 9"]))
    result = cli(run, "wait", failed, "wait-quick")
    assert result.returncode == 1
    assert result.stderr == f"praxist-fs wait: job {failed} failed: exit code 9\n"


def test_wait_takes_a_tag_glob_or_every_job_not_ended(run, tmp_path):
    """Issue 29: 'wait' needed explicit ids; a sweep is waited on by its tags."""
    gate = tmp_path / "gate"
    gated = ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]
    sweep = [accepted(run, request(f"sweep-{i}", gated)) for i in range(3)]
    other = accepted(run, request("other", ["sh", "-c", "exit 3"]))
    run.wait_state(other, "failed")
    for selection in (["--tag", "sweep-*"], ["--all"]):  # 'other' has ended: not --all's
        assert cli(run, "wait", *selection, "--timeout", "0.5").returncode == 124, selection
    waiter = popen(run, "wait", "--tag", "sweep-*")
    gate.touch()
    out, err = finish(waiter)
    assert waiter.returncode == 0, err
    assert cli(run, "wait", "--all").returncode == 0  # nothing left running
    assert all(run.job(job_id)["state"] == "completed" for job_id in sweep)
    assert cli(run, "wait", "--tag", "sweep-*", "other").returncode == 1  # other failed
    nothing = cli(run, "wait", "--tag", "nope-*")
    assert nothing.returncode == 2 and "has a tag matching 'nope-*'" in nothing.stderr


def test_launch_marks_a_retry_on_stderr_and_keeps_stdout_the_commands(run, tmp_path):
    result = subprocess.run([*CLI, "launch", f"--run-dir={run.root}", "--peer=cli",
                             "--tag=launch-retry", "--", *retried_once(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "first\nsecond\n"
    assert "--- praxist-fs: attempt a2 (retry after a1: exit 75) ---\n" in result.stderr
