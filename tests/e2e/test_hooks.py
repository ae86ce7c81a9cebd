"""Completion hooks with a real coordinator and real hook processes (issue 17 item 4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil

from .conftest import accepted, request, scheduler_task, wait_for

CLI = [sys.executable, "-m", "praxist_fs"]


def task(hooks: str, timeout: float = 60) -> str:
    """A task file whose ``hooks`` block holds ``hooks`` (lines indented as in the file)."""
    return scheduler_task(f"""\
initial_concurrent_experiments: 2
max_concurrent_experiments: 4
default_profile: cpu
profiles:
  cpu: {{accelerator: cpu}}
hooks:
  timeout_seconds: {timeout}
""") + hooks


def started(make_run, hooks: str, timeout: float = 60):
    """A coordinator serving a run whose ``hooks`` block also holds ``hooks``."""
    run = make_run(task_text=task(hooks, timeout))
    run.start()
    return run


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def hook_log(run, name: str) -> str:
    path = run.root / "logs" / "hooks" / f"{name}.log"
    return path.read_text() if path.exists() else ""


def test_a_hook_gets_the_job_document_and_praxist_variables(make_run, tmp_path):
    """Issue 17 item 4: "A task-file hooks: block inside resource_scheduler (on_job_end:
    and on_generation_close:, each a list of commands given as argv lists) run when a job
    ends or a generation closes, off the event loop, with the job document on stdin and
    PRAXIST_* variables, a timeout, output under logs/hooks/"."""
    out = tmp_path / "hook-out"
    out.mkdir()
    run = started(make_run, f"""\
      on_job_end:
        - [sh, -c, 'cat > {out}/"$PRAXIST_JOB_ID".json; env | grep ^PRAXIST_ | sort > {out}/"$PRAXIST_JOB_ID".env; echo said on stdout']
      on_generation_close:
        - [sh, -c, 'cat > {out}/gen-"$PRAXIST_GENERATION".json']
""")
    job = accepted(run, request("fails", ["sh", "-c", "exit 3"]))
    run.wait_state(job, "failed")
    doc = wait_for(lambda: (p := out / f"{job}.json").exists() and p.read_text().endswith("\n")
                   and json.loads(p.read_text()), message="the hook's copy of its stdin")
    assert (doc["job_id"], doc["state"], doc["exit_code"], doc["tag"]) == (job, "failed", 3,
                                                                            "fails")
    assert doc == json.loads((run.sched / "jobs" / "done" / f"{job}.json").read_text())
    env_file = out / f"{job}.env"
    listed = wait_for(lambda: env_file.exists() and "PRAXIST_TAG" in env_file.read_text()
                      and env_file.read_text(), message="the hook's environment")
    env = dict(line.split("=", 1) for line in listed.splitlines())
    assert env["PRAXIST_HOOK"] == "job_end"
    assert env["PRAXIST_JOB_ID"] == job and env["PRAXIST_JOB_STATE"] == "failed"
    assert env["PRAXIST_EXIT_CODE"] == "3" and env["PRAXIST_PEER"] == "tester"
    assert env["PRAXIST_RUN_DIR"] == str(run.root)
    assert wait_for(lambda: "said on stdout" in hook_log(run, f"job_end-{job}-0"),
                    message="the hook's output in logs/hooks/")

    def cli(*args):
        return subprocess.run([*CLI, *args, f"--run-dir={run.root}"], capture_output=True,
                              text=True, timeout=60).returncode
    assert cli("generation", "open", "1", "--cohort", "p1") == 0
    assert cli("generation", "close", "1") == 0
    gen = wait_for(lambda: (p := out / "gen-1.json").exists() and p.read_text().endswith("\n")
                   and json.loads(p.read_text()), message="the generation close hook's stdin")
    assert (gen["number"], gen["phase"]) == (1, "closed")


def test_a_hanging_hook_is_killed_at_its_timeout_while_the_coordinator_serves(
        make_run, tmp_path):
    """Issue 17 item 4: "a failing or hanging hook never affects the job or the
    coordinator": a hook that hangs holds nothing up, and its process group (a child it
    started included) is killed at timeout_seconds."""
    pids = tmp_path / "hook-pids"
    run = started(make_run, f"""\
      on_job_end:
        - [sh, -c, 'sleep 600 & echo $$ $! >> {pids}; wait']
""", timeout=5)
    first = accepted(run, request("first", ["true"]))
    run.wait_state(first, "completed")
    shell, child = map(int, wait_for(lambda: pids.exists() and pids.read_text().split(),
                                     message="the hanging hook's pids")[:2])
    # while it hangs, the coordinator takes and runs the next job
    second = accepted(run, request("second", ["true"]))
    run.wait_state(second, "completed")
    assert alive(child) and alive(shell)  # the hook hangs still: the loop never waited on it
    wait_for(lambda: not alive(shell) and not alive(child),
             timeout=15, message="the hook's group killed at its timeout")
    assert "killed after its timeout of 5 s" in wait_for(
        lambda: hook_log(run, f"job_end-{first}-0"), message="the kill noted in the hook log")
    assert run.job(first)["state"] == "completed"
    assert run.proc.poll() is None
    assert run.stop() == 0


def test_failing_hooks_change_nothing(make_run, tmp_path):
    """Issue 17 item 4: "a failing or hanging hook never affects the job or the
    coordinator": one that exits non-zero, and one that cannot even start, are noted in
    their logs; the job keeps its state and exit code, and the next job runs."""
    run = started(make_run, f"""\
      on_job_end:
        - [sh, -c, 'echo about to fail >&2; exit 7']
        - [{tmp_path}/no-such-program]
""")
    job = accepted(run, request("ok", ["true"]))
    run.wait_state(job, "completed")
    assert "exited 7" in wait_for(lambda: hook_log(run, f"job_end-{job}-0").count("\n") >= 2
                                  and hook_log(run, f"job_end-{job}-0"),
                                  message="the failing hook's log")
    assert "about to fail" in hook_log(run, f"job_end-{job}-0")
    assert "could not start" in wait_for(lambda: hook_log(run, f"job_end-{job}-1"),
                                         message="the missing program's log")
    done = run.job(job)
    assert (done["state"], done["exit_code"]) == ("completed", 0)
    after = accepted(run, request("after", ["true"]))
    run.wait_state(after, "completed")
    assert run.stop() == 0
    assert os.path.isdir(run.root / "logs" / "hooks")


def test_a_restart_runs_no_hook_again_and_a_stop_kills_a_running_one(make_run, tmp_path):
    """Issue 17 item 4, and the choice CONFIG.md *Completion hooks* documents: at most
    once. A job that ended under the last coordinator gets no second hook from the next
    one; a hook still running when the coordinator stops has its group killed after a
    short grace instead of outliving it with no timeout."""
    ran = tmp_path / "ran"
    pids = tmp_path / "pids"
    run = started(make_run, f"""\
      on_job_end:
        - [sh, -c, 'echo "$PRAXIST_JOB_ID" >> {ran}; [ "$PRAXIST_TAG" = hang ] || exit 0; echo $$ >> {pids}; exec sleep 600']
""")
    first = accepted(run, request("first", ["true"]))
    wait_for(lambda: ran.exists() and first in ran.read_text(), message="the first hook")
    assert run.stop() == 0
    run.start()
    second = accepted(run, request("hang", ["true"]))
    hook = int(wait_for(lambda: pids.exists() and pids.read_text().strip(),
                        message="the second hook running"))
    assert ran.read_text().split() == [first, second]  # the first job's hook ran once
    assert alive(hook)
    assert run.stop() == 0
    assert not alive(hook)
    assert "killed: the coordinator stopped" in hook_log(run, f"job_end-{second}-0")
