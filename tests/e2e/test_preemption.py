"""Preemption with real processes (R-POL-3): one slot, a low-priority job that counts in
a loop, and an urgent job that needs the slot. ``suspend`` stops the counter (it does not
advance while suspended, across a coordinator kill -9 too) and continues it later;
``requeue`` terminates it and runs it again under the same job, its attempt ``preempted``.
On the fake GPU inventory, a suspended job gives back its utilization and keeps its
memory. Every wait is on a condition with a timeout; a "does not advance" check polls a
bounded window once the group is seen stopped."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from praxist_fs.adapters import fence, procs

from .conftest import pid_in, request, scheduler_task, stop, wait_for

TASK = scheduler_task("""\
initial_concurrent_experiments: 1
min_concurrent_experiments: 1
max_concurrent_experiments: 1
infrastructure_retries: 1
default_profile: cpu
profiles:
  cpu: {{accelerator: cpu}}
queues:
  urgent: {{priority: 10, work_classes: [mature], preemptible_queues: [background],
           preempt: {mode}}}
  background: {{work_classes: [scout, ordinary]}}
""")
FROZEN_WINDOW = 1.0  # seconds a suspended counter is watched not to move
TWO_SLOTS = TASK.replace("initial_concurrent_experiments: 1", "initial_concurrent_experiments: 2"
                         ).replace("max_concurrent_experiments: 1", "max_concurrent_experiments: 2")


def counter_job(directory: Path) -> list[str]:
    """Counts into ``counter`` every 50 ms until ``stop`` exists (exit 0); exits 75 once
    for a ``fail`` file (an infrastructure failure, which a retry covers)."""
    body = ("i=0; while :; do [ -e stop ] && exit 0; if [ -e fail ]; then rm fail; exit 75; fi; "
            "i=$((i+1)); echo $i > counter.tmp; mv counter.tmp counter; sleep 0.05; done")
    return ["sh", "-c", f"cd {directory} && {body}"]


def waiting_job(directory: Path) -> list[str]:
    return ["sh", "-c", f"while [ ! -e {directory}/release ]; do sleep 0.05; done"]


def count(directory: Path) -> int:
    try:
        return int((directory / "counter").read_text())
    except (OSError, ValueError):
        return 0


def advances(directory: Path, by: int = 3) -> int:
    start = count(directory)
    return wait_for(lambda: count(directory) >= start + by and count(directory),
                    message="the counter to advance")


def group(leader: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == leader:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return members


def stopped(leader: int) -> bool:
    """Every live member of the attempt's process group is stopped (SIGSTOP)."""
    try:
        members = group(leader)
        return bool(members) and all(
            p.status() in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE) for p in members)
    except psutil.NoSuchProcess:
        return False


def suspend(leader: fence.Shim, grace: float) -> None:
    """Drive a suspension to its end, as the coordinator's loop does with its timers."""
    suspension = fence.Suspension(leader, grace, time.monotonic())
    while not suspension.done:
        time.sleep(max(0.0, suspension.next_at - time.monotonic()))
        suspension.step(time.monotonic())


def assert_frozen(directory: Path, leader: int) -> int:
    wait_for(lambda: stopped(leader), message="the suspended group to be stopped")
    value = count(directory)
    deadline = time.monotonic() + FROZEN_WINDOW
    while time.monotonic() < deadline:
        assert count(directory) == value, "a suspended job advanced"
        assert stopped(leader)
        time.sleep(0.05)
    return value


def setup(make_run, tmp_path, mode):
    run = make_run(task_text=TASK.format(mode=mode))
    run.start()
    work = tmp_path / "work"
    work.mkdir()
    low = run.reply(run.submit(request("counter", counter_job(work))))["job_id"]
    run.wait_state(low, "running")
    advances(work)
    high = run.reply(run.submit(request("urgent", waiting_job(work),
                                        work_class="mature")))["job_id"]
    return run, work, low, high


def test_suspend_stops_the_counter_and_resume_continues_it_across_a_restart(make_run, tmp_path):
    run, work, low, high = setup(make_run, tmp_path, "suspend")
    doc = run.wait_state(low, "suspended")
    assert run.job_dirs(low) == ["queued"]
    assert doc["reason"].startswith(f"suspended: preempted by job {high} (queue urgent: "
                                    "waiting for a slot: 1 of 1 running")
    leader = run.wait_attempt_field(low, "pid")
    run.wait_state(high, "running")  # it took the slot in the same pass
    frozen = assert_frozen(work, leader)
    status = wait_for(lambda: (s := run.status()) and s["suspended"] and s)
    assert status["suspended"][0]["job_id"] == low and status["suspended"][0]["by"] == high
    assert status["counts"]["suspended"] == 1 and status["preemptions"]["suspended"] == 1

    run.kill()  # kill -9: the suspended attempt stays stopped and is re-adopted
    run.start()
    assert run.job(low)["state"] == "suspended"
    assert assert_frozen(work, leader) == frozen

    (work / "release").touch()
    run.wait_state(high, "completed")
    doc = run.wait_state(low, "running")
    assert doc["reason"] == "attempt a1 running (resumed)"
    assert advances(work) > frozen  # the same attempt goes on counting from where it was
    (work / "stop").touch()
    doc = run.wait_state(low, "completed")
    [attempt] = doc["attempts"]
    assert attempt["outcome"] == "completed" and attempt["exit_code"] == 0
    [suspension] = attempt["preemptions"]
    assert suspension["mode"] == "suspend" and suspension["by"] == high
    assert suspension["resumed_at"] > suspension["at"]
    status = wait_for(lambda: (s := run.status()) and s["preemptions"]["resumed"] == 1 and s)
    assert status["suspended"] == [] and status["counts"]["suspended"] == 0


def test_requeue_terminates_the_counter_and_runs_it_again_without_a_retry(make_run, tmp_path):
    run, work, low, high = setup(make_run, tmp_path, "requeue")
    run.wait_state(high, "running")
    doc = run.job(low)
    first = doc["attempts"][0]
    assert first["outcome"] == "preempted" and first["signal"] == 15
    assert first["preemptions"][0]["mode"] == "requeue" and first["preemptions"][0]["by"] == high
    assert doc["state"] == "queued"
    (work / "counter").unlink()
    (work / "release").touch()
    run.wait_state(high, "completed")
    doc = wait_for(lambda: (d := run.job(low)) and len(d["attempts"]) == 2
                   and d["state"] == "running" and d, message="the second attempt")
    assert advances(work) >= 3  # counting again, from zero
    # the task allows one infrastructure retry, and preemption used none: 75 is retried
    (work / "fail").touch()
    wait_for(lambda: (d := run.job(low)) and len(d["attempts"]) == 3
             and d["state"] == "running", message="the retry after exit 75")
    (work / "stop").touch()
    doc = run.wait_state(low, "completed")
    assert [a["outcome"] for a in doc["attempts"]] == ["preempted", "infra_retry", "completed"]
    status = wait_for(lambda: (s := run.status()) and s["counts"]["completed"] == 2 and s)
    assert status["preemptions"]["requeued"] == 1


def test_stopping_the_run_ends_suspended_work_with_term(make_run, tmp_path):
    run, work, low, high = setup(make_run, tmp_path, "suspend")
    run.wait_state(low, "suspended")
    leader = run.wait_attempt_field(low, "pid")
    wait_for(lambda: stopped(leader), message="the suspended group to be stopped")
    code, _ = stop(run)
    assert code == 0
    doc = run.wait_state(low, "cancelled")
    assert doc["attempts"][0]["signal"] == 15  # continued with the TERM, not left to KILL
    assert run.wait_state(high, "cancelled")
    wait_for(lambda: not group(leader), message="the suspended group to be gone")


GPU_TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 4
    min_concurrent_experiments: 1
    max_concurrent_experiments: 4
    default_profile: gpu60
    profiles:
      gpu60: {accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 60}
      gpu_big: {accelerator: gpu, gpu_count: 1, gpu_memory_gb: 110, gpu_utilization_pct: 10}
    queues:
      urgent: {priority: 10, work_classes: [mature], preemptible_queues: [background]}
      background: {work_classes: [scout, ordinary]}
"""


def test_a_suspended_gpu_job_gives_back_utilization_and_keeps_its_memory(make_run, tmp_path):
    gpus = tmp_path / "gpus.json"
    gpus.write_text(json.dumps({"devices": [{
        "uuid": "GPU-fake-0", "index": 0, "name": "NVIDIA H200 (fake)",
        "memory_total_mib": 143771, "memory_used_mib": 0, "utilization_pct": 0}]}))
    run = make_run(task_text=GPU_TASK)
    run.start(env={"PRAXIST_FAKE_GPUS": str(gpus)})
    work = tmp_path / "work"
    work.mkdir()
    low = run.reply(run.submit(request("counter", counter_job(work))))["job_id"]
    run.wait_state(low, "running")
    advances(work)
    high = run.reply(run.submit(request("urgent", waiting_job(work), work_class="mature")))[
        "job_id"]
    run.wait_state(low, "suspended")
    leader = run.wait_attempt_field(low, "pid")
    assert run.wait_state(high, "running")["attempts"][0]["gpus"] == ["GPU-fake-0"]
    assert_frozen(work, leader)
    device = wait_for(lambda: (s := run.status()) and s["counts"]["running"] == 1
                      and s["gpus"]["devices"][0])
    assert (device["declared_utilization_pct"], device["declared_memory_mib"]) == \
        (60.0, 40 * 1024.0)  # only the high job's utilization; both jobs' memory
    assert sorted(device["jobs"]) == sorted([low, high])
    # memory is what suspension never frees: a job that needs it waits, nobody is stopped
    big = run.reply(run.submit(request("big", ["true"], work_class="mature",
                                       profile="gpu_big")))["job_id"]
    wait_for(lambda: (s := run.status()) and any(
        q["job_id"] == big and q["reason"].startswith("gpu memory") for q in s["queue"]),
        message="the big job held by gpu memory")
    assert run.job(high)["state"] == "running" and run.job(low)["state"] == "suspended"
    (work / "release").touch()
    run.wait_state(low, "running")
    (work / "stop").touch()
    run.wait_state(low, "completed")


def test_suspend_lets_a_sigtstp_handler_run_before_sigstop(tmp_path):
    """A task that handles SIGTSTP (to save its state) runs its handler before it is
    stopped; a task that does not is stopped by SIGSTOP (R-POL-3)."""
    saved = tmp_path / "saved"
    handler = (f"import os, signal, time\n"
               f"def save(*_):\n"
               f"    time.sleep(0.3)\n"
               f"    open({str(saved)!r}, 'w').write('saved')\n"
               f"    os.kill(os.getpid(), signal.SIGSTOP)\n"
               f"signal.signal(signal.SIGTSTP, save)\n"
               f"print('ready', flush=True)\n"
               f"while True: time.sleep(1)\n")
    for argv, handles in (([sys.executable, "-c", handler], True), (["sleep", "60"], False)):
        saved.unlink(missing_ok=True)
        proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
        try:
            if handles:
                assert proc.stdout.readline() == b"ready\n"
            leader = (proc.pid, procs.start_time(proc.pid), procs.boot_id())
            suspend(leader, grace=5.0)
            assert saved.exists() is handles
            wait_for(lambda: stopped(proc.pid), message="the group to be stopped")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()  # reaped, its pipe closed


def test_a_suspended_group_is_wholly_stopped_when_suspend_returns():
    """A group that keeps forking short-lived children (a shell loop): when a suspension
    is done, no member is left running, not one signalled but not yet stopped, nor a
    child forked while the group was being signalled. The preempting job starts then."""
    proc = subprocess.Popen(["sh", "-c", "while :; do sleep 0.01; done"],
                            start_new_session=True)
    try:
        leader = (proc.pid, procs.start_time(proc.pid), procs.boot_id())
        for _ in range(20):
            suspend(leader, grace=1.0)
            running = [(p.pid, info[2]) for p in group(proc.pid)
                       if (info := procs.group_and_session(p.pid)) and info[2] not in "TtZ"
                       and not (info[2] == "D" and procs.pending(p.pid, signal.SIGSTOP))]
            assert not running  # D with SIGSTOP pending: a vfork parent, stopped in effect
            fence.signal_group(leader, signal.SIGCONT)
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_job_that_preempts_starts_only_once_its_victim_is_stopped(make_run, tmp_path):
    """Its command and its victim's never run at once (on a GPU they would share its
    memory): the victim here catches SIGTSTP and does nothing, so it stops only at
    SIGSTOP, after the grace, and the urgent command looks at the victim's process group
    when it starts."""
    run = make_run(task_text=TASK.format(mode="suspend"))
    run.start()
    work = tmp_path / "work"
    work.mkdir()
    low = run.reply(run.submit(request("stubborn", ["sh", "-c", "trap : TSTP; " +
                                                    counter_job(work)[2]])))["job_id"]
    leader = run.wait_attempt_field(low, "pid")  # recorded a moment after "running"
    advances(work)
    seen = tmp_path / "seen"
    high = run.reply(run.submit(request("urgent", ["sh", "-c", f"ps -o stat= -g {leader} > {seen}"],
                                        work_class="mature")))["job_id"]
    run.wait_state(high, "completed", timeout=30)
    states = seen.read_text().split()
    # Z: a child that exited on its own just as its group was being stopped; it runs no more
    assert states and all(state[0] in "TZ" for state in states), states


def test_suspend_and_resume_reach_a_descendant_that_called_setsid(make_run, tmp_path):
    """The counter runs in a session of its own, outside the attempt's group: the shim is
    its subreaper, so it is still the attempt's, and is stopped and continued with it."""
    run = make_run(task_text=TASK.format(mode="suspend"))
    run.start()
    work = tmp_path / "work"
    work.mkdir()
    escaping = f"setsid {shlex.join(counter_job(work))} & echo $! > {work}/escaped; wait"
    low = run.reply(run.submit(request("escaping", ["sh", "-c", escaping])))["job_id"]
    advances(work)
    counter = pid_in(work / "escaped")
    assert os.getsid(counter) == counter != run.wait_attempt_field(low, "pid")
    high = run.reply(run.submit(request("urgent", waiting_job(work),
                                        work_class="mature")))["job_id"]
    run.wait_state(low, "suspended")
    frozen = assert_frozen(work, counter)  # its own group (setsid) is stopped
    (work / "release").touch()
    run.wait_state(high, "completed")
    run.wait_state(low, "running")
    assert advances(work) > frozen
    (work / "stop").touch()
    assert run.wait_state(low, "completed")["exit_code"] == 0


def test_a_slow_sigtstp_handler_holds_up_only_the_job_it_makes_room_for(make_run, tmp_path):
    """The SIGTSTP grace is a timer of the coordinator's loop, not a wait in it: while a
    victim that catches SIGTSTP and never stops itself has its 2 s, a job that finds a
    slot free starts and sees the victim still running; the job that preempted it sees
    it stopped. The grace is lengthened to 10 s, so that a loaded machine's slow launch of
    the other job cannot pass for a loop that waited."""
    run = make_run(task_text=TWO_SLOTS.format(mode="suspend"))
    run.start({"PRAXIST_TSTP_GRACE_SECONDS": "10"})
    work = tmp_path / "work"
    work.mkdir()
    low = run.reply(run.submit(request("stubborn", ["sh", "-c", "trap : TSTP; " +
                                                    counter_job(work)[2]])))["job_id"]
    leader = run.wait_attempt_field(low, "pid")
    advances(work)  # its trap is set: a shim suspended before it spawned has no handler
    gate = tmp_path / "gate"
    holder = run.reply(run.submit(request(
        "holder", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
        work_class="mature")))["job_id"]
    run.wait_state(holder, "running")

    def looking(name: str, then: str = "") -> list[str]:
        seen = tmp_path / name
        return ["sh", "-c", f"ps -o stat= -g {leader} > {seen}.tmp && mv {seen}.tmp {seen}"
                            f"{then}"]

    high = run.reply(run.submit(request("urgent", looking("urgent"),
                                        work_class="mature")))["job_id"]
    # it keeps its slot until the end: a slot it gave back would resume the victim
    other = run.reply(run.submit(request(
        "other", looking("other", f"; while [ ! -e {gate}2 ]; do sleep 0.05; done"),
        work_class="mature")))["job_id"]
    run.wait_state(low, "suspended")
    gate.touch()  # a slot frees up for the other job
    seen = wait_for(lambda: (path := tmp_path / "other").exists() and path.read_text().split(),
                    message="the other job's look")
    assert any(state[0] not in "TZ" for state in seen), seen  # it did not wait for the stop
    run.wait_state(high, "completed", timeout=30)
    urgent = (tmp_path / "urgent").read_text().split()
    # D: in uninterruptible sleep (a loaded disk) with SIGSTOP pending, which the
    # coordinator counts as stopped: it stops before it runs another instruction
    assert urgent and all(state[0] in "TZD" for state in urgent), urgent
    (tmp_path / "gate2").touch()
    (work / "stop").touch()
    run.wait_state(other, "completed")
    run.wait_state(low, "completed")
