"""A warm shim told its attempt before the commit that journals it with its GO
(launcher.tell): it prepares while the commit is on its way, then GO is followed by the
spawn alone; a coordinator that died before GO leaves it nothing to wait for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from praxist_fs.backends import shim, shim_command
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt
from tests.backends.conftest import local_rig
from tests.backends.local.conftest import finish
from tests.e2e.conftest import gone, read_json, wait_for


def tell(layout, tmp_path, warm):
    """Tell ``warm`` the attempt job-1/a1, whose command adds a line to ``runs``."""
    runs = tmp_path / "runs"
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None,
                          command=f"echo ran >> {runs}", cwd=str(tmp_path),
                          env={"PATH": "/usr/bin:/bin"}, profile="cpu", gpus=(),
                          metadata={"peer": "p"})
    handle = launcher.tell(layout, effect, attempt_environment(layout, effect), warm)
    assert handle is not None  # the spec fits the pipe
    return handle, layout.attempt_dir("job-1", "a1"), runs


def test_a_shim_told_ahead_of_its_go_prepares_the_start_and_runs_on_go(layout, tmp_path,
                                                                        prestart):
    handle, attempt_dir, runs = tell(layout, tmp_path, prestart())
    log = layout.log("job-1", "a1")
    # READY and the command's log are there before any GO: done while the commit runs
    ready = wait_for(lambda: log.exists() and read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid and not runs.exists()
    assert not (attempt_dir / "GO").exists() and not (attempt_dir / "spec.marshal").exists()
    handle.release_barrier(b"G")  # the commit is durable
    assert finish(handle) == b"X"  # no R: GO was coming with the commit, nobody waits on it
    assert runs.read_text() == "ran\n" and (attempt_dir / "GO").exists()
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 0
    assert read_json(attempt_dir / "attempt.json")["log"] == str(log)
    handle.close()


def test_a_warm_shim_stands_aside_until_told_its_attempt_and_its_command_runs_as_usual(
        layout, tmp_path, prestart):
    """Waiting for its attempt, a warm shim runs as SCHED_BATCH (``ps -o cls``: B), so
    that the tell's wake-up never puts it before the coordinator on the way to that
    commit's fsync; it prepares the attempt as SCHED_OTHER and, prepared, waits for GO
    as SCHED_BATCH again, so that a GO does not take the coordinator's CPU before the
    batch's next GO; its command runs as SCHED_OTHER, as every process the coordinator
    starts does; once it told the exit, what is left to it is on no job's path, and a
    supervisor goes idle standing aside (shim_command.stand_aside)."""
    warm = prestart()
    pid = warm.handle.popen.pid
    wait_for(lambda: os.sched_getscheduler(pid) == os.SCHED_BATCH, message="SCHED_BATCH")
    policy = tmp_path / "policy"
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None,
                          command=f"cut -d' ' -f41 /proc/self/stat > {policy}",
                          cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), metadata={"peer": "p"})
    handle = launcher.tell(layout, effect, attempt_environment(layout, effect), warm)
    wait_for(lambda: layout.log("job-1", "a1").exists(), message="the log")  # prepared
    wait_for(lambda: os.sched_getscheduler(pid) == os.SCHED_BATCH,
             message="SCHED_BATCH, waiting for GO")
    handle.release_barrier(b"G")
    assert finish(handle) == b"X"
    assert int(policy.read_text()) == os.SCHED_OTHER == os.sched_getscheduler(0)
    if isinstance(handle.popen, launcher.Supervisor):  # idle, having said D
        assert os.sched_getscheduler(pid) == os.SCHED_BATCH
    handle.close()


def test_a_shim_told_ahead_of_a_commit_that_failed_runs_nothing_on_abort(layout, tmp_path,
                                                                          prestart):
    handle, attempt_dir, runs = tell(layout, tmp_path, prestart())
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"A")  # the coordinator carries on without that commit
    assert finish(handle) == b""
    assert not runs.exists() and not (attempt_dir / "exit.json").exists()
    assert not layout.log("job-1", "a1").exists()  # made ahead of GO, taken back
    handle.close()


def test_a_shim_told_ahead_whose_coordinator_died_before_go_takes_ready_back_and_ends(
        layout, tmp_path, prestart):
    """Its coordinator died before it sent GO, maybe before the commit: nothing ran, and
    with READY taken back the next coordinator releases the attempt (if it was journaled)
    or launches it anew (if not); no shim is left waiting for a GO file meant for
    another."""
    handle, attempt_dir, runs = tell(layout, tmp_path, prestart())
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"")  # the pipe closes as the coordinator dies
    assert finish(handle) == b""
    assert not (attempt_dir / "READY").exists() and not (attempt_dir / "GO").exists()
    assert not runs.exists() and not (attempt_dir / "exit.json").exists()
    assert not layout.log("job-1", "a1").exists()  # no log of a command that never ran
    handle.close()


def test_shims_told_in_a_batch_whose_commit_failed_hear_abort_and_run_nothing(tmp_path):
    """The coordinator's commit failed (a full disk): the batch never happened, and the
    shims ``bind`` told their attempts ahead of it are told ABORT and let go; the
    command never runs."""
    rig = local_rig(tmp_path)
    try:
        backend = rig.backend
        backend.prepare(False)
        rig.settle(lambda: len(backend.warm) >= 2, 30)
        launch = rig.launch("job-1", rig.command(0, 0))
        bound = backend.bind([launch])
        assert [event.job_id for event in bound] == ["job-1"] and bound[0].ready
        shim = psutil.Process(bound[0].handle["pid"])
        backend.roll_back()
        wait_for(lambda: gone(shim), message="the told shim to end")
        assert not (tmp_path / "run" / "job-1.running").exists()
        assert not (rig.layout.attempt_dir("job-1", "a1") / "exit.json").exists()
    finally:
        rig.close()


def test_a_shim_told_ahead_finds_abort_where_its_attempt_directory_was_made_before(
        layout, tmp_path, prestart):
    """An attempt directory made before the warm shim was told (an earlier coordinator's,
    which aborted the attempt) is looked into: its ABORT ends the shim before READY, and
    the command never runs, though nothing is said on the GO pipe."""
    attempt_dir = layout.attempt_dir("job-1", "a1")
    attempt_dir.mkdir(parents=True)
    (attempt_dir / "ABORT").write_bytes(b"")
    handle, _, runs = tell(layout, tmp_path, prestart())
    assert finish(handle) == b""  # over before READY: no R, no X (``D`` aside)
    assert not (attempt_dir / "READY").exists() and not runs.exists()
    assert not (attempt_dir / "exit.json").exists()
    handle.close()


def test_a_shim_that_made_its_attempt_directory_does_not_look_in_it_for_abort(
        layout, tmp_path, monkeypatch):
    """A directory the told shim made a moment ago holds no ABORT (a coordinator that
    aborts it afterwards says so on its pipe as well), so the shim does not look: a cold
    stat, ~17 us of the ~0.28 ms between the tell and the wait for GO (p50, 450 jobs)."""
    looked = []
    real_exists = shim_command.exists
    monkeypatch.setattr(shim_command, "exists",
                        lambda path, dir_fd=None: looked.append(path) or real_exists(path, dir_fd))
    monkeypatch.chdir(tmp_path)  # the shim enters the command's cwd as it prepares
    # and keeps, module-wide, the attempt directory's fd for shim.log and that the attempt
    # is over: this process's, not the next test's
    monkeypatch.setattr(shim_command, "_unmade_log", [None])
    monkeypatch.setattr(shim, "_attempt_over", [False])
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None, command="true",
                          cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), metadata={})
    spec = launcher.spec_of(layout, effect, {"PATH": "/usr/bin:/bin"}, go_coming=True)
    go_read, go_write = os.pipe()
    status_read, status_write = os.pipe()
    os.write(go_write, b"A")  # the commit failed: the shim runs nothing
    os.close(go_write)
    stdout, stderr = os.dup(1), os.dup(2)  # the shim makes its output shim.log's if it complains
    try:
        shim.serve(str(layout.attempt_dir("job-1", "a1")), go_read, status_write,
                   shim.identity_of_ours(), spec)
    finally:
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        os.close(stdout)
        os.close(stderr)
    assert os.read(status_read, 64) == b"D"
    os.close(status_read)
    assert (layout.attempt_dir("job-1", "a1") / "READY").exists()
    assert "ABORT" not in looked


@pytest.fixture
def idle_machine(monkeypatch):
    """The coordinator alone runnable, as keep_off_our_cpu reads the kernel's count: the
    suite's other tests make it what it may be."""
    monkeypatch.setattr(launcher, "runnable_now", lambda: 1)


def test_a_told_shims_command_gets_every_cpu_the_shim_had(layout, tmp_path, prestart,
                                                         idle_machine):
    """The coordinator keeps a shim it tells ahead of its commit off its own CPU
    (launcher.keep_off_our_cpu), and gives it every CPU back before its GO: the command,
    which inherits them, may run on every CPU its coordinator may."""
    cpus = tmp_path / "cpus"
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=None,
                          command=f"grep Cpus_allowed_list /proc/self/status > {cpus}",
                          cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), metadata={"peer": "p"})
    handle = launcher.tell(layout, effect, attempt_environment(layout, effect), prestart())
    wait_for(lambda: layout.log("job-1", "a1").exists(), message="the log")  # prepared
    handle.release_barrier(b"G")
    assert finish(handle) == b"X"
    ours = next(line + "\n" for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("Cpus_allowed_list"))
    assert cpus.read_text() == ours
    handle.close()


def kept_off(runnable, monkeypatch):
    """What keep_off_our_cpu gives back for a process started with our CPUs, and the CPUs
    it leaves that process, with ``runnable`` tasks runnable as the kernel counts them."""
    monkeypatch.setattr(launcher, "runnable_now", lambda: runnable)
    shim_like = subprocess.Popen(["sleep", "60"])
    try:
        return launcher.keep_off_our_cpu(shim_like.pid), os.sched_getaffinity(shim_like.pid)
    finally:
        shim_like.kill()
        shim_like.wait()


def test_a_shim_told_ahead_may_run_anywhere_but_on_its_coordinators_cpu(monkeypatch):
    """Told on a pipe, a shim is queued on the coordinator's CPU (a sync wakeup) and
    would prepare there as the coordinator sleeps in its commit's fsync, holding the CPU
    the coordinator's wake-up comes back to: the coordinator leaves it every other CPU."""
    ours = os.sched_getaffinity(0)
    if len(ours) < 2:
        pytest.skip("one CPU: there is nowhere else for the shim to prepare")
    given_back, left = kept_off(1, monkeypatch)
    assert left < ours and len(ours - left) == 1  # one of ours: the one we ran on then
    assert given_back == ours


def test_a_shim_told_ahead_keeps_every_cpu_where_other_work_keeps_the_others_busy(
        monkeypatch):
    """With a task runnable for every CPU (the coordinator one of them), the CPU the
    coordinator sleeps on in its fsync is the one likely free: the shim keeps it."""
    ours = os.sched_getaffinity(0)
    assert kept_off(len(ours), monkeypatch) == (None, ours)


def test_a_machine_whose_runnable_count_cannot_be_read_counts_as_busy(monkeypatch):
    """Without /proc/loadavg neither the keep-off nor the yield after GO is made: both
    need an idle CPU, and a guess of one would be wrong on a loaded machine."""
    monkeypatch.setattr(launcher, "_probes", [launcher._sched_getcpu(), None])
    assert launcher.runnable_now() > (os.cpu_count() or 1)
    shim_like = subprocess.Popen(["sleep", "60"])
    try:
        assert launcher.keep_off_our_cpu(shim_like.pid) is None
        assert os.sched_getaffinity(shim_like.pid) == os.sched_getaffinity(0)
    finally:
        shim_like.kill()
        shim_like.wait()
