"""The execution-backend contract (praxist_fs/backends/base.py), one suite for every
backend registered in conftest.RIGS: start to the barrier, GO, ABORT, the end of an
attempt, the stop of several, adoption after a restart, suspension, and what a backend
declares it can do. Written against the interface and the rig only, so a backend that
passes it can sit behind the loop.

Seed 000 "Before the evaluator executes, a small local launch barrier waits until the
semantic intent, process group, resource allocation, and protected-process record are
durable. Resume rebinds that same allocation before releasing the barrier, so a crash
cannot turn one semantic experiment into duplicate work."
"""

from __future__ import annotations


import sys
from dataclasses import replace

import pytest

from praxist_fs.backends.routed import RoutedBackend

from .conftest import MemoryRig, core_view

TIMEOUT = 15.0  # seconds (virtual ones for the memory backend) for any one end to show
LONG = 600.0    # a command that would outlive the test


def started(rig, job_id, command):
    """Start ``job_id``'s attempt running ``command``: its key, job and attempt."""
    launch = rig.launch(job_id, command)
    rig.seen.add(rig.backend.start(launch))
    key = (launch.job_id, launch.attempt_id)
    rig.settle(lambda: key in rig.seen.last, TIMEOUT)  # a handle may come after start()
    assert key in rig.seen.last, "the backend reported nothing of the attempt"
    return key, *core_view(launch, rig.seen.last[key])


def running(rig, job_id, command):
    """Start it and release its barrier: the command runs."""
    key, job, attempt = started(rig, job_id, command)
    rig.backend.go(key)
    rig.wait_running(key)
    return key, job, attempt


def test_start_reports_the_handle_and_runs_nothing_before_go(backend_factory):
    """Seed 000 "Before the evaluator executes, a small local launch barrier waits until
    the semantic intent, process group, resource allocation, and protected-process record
    are durable": started, the attempt is alive and known, and its command (one that
    would exit at once) does not run until GO."""
    rig, _ = backend_factory()
    key, job, attempt = started(rig, "j1", rig.command(3, 0.0))
    handle = rig.seen.last[key]
    assert handle.alive and not handle.go and not handle.exited
    rig.settle(lambda: False, 2.0)
    assert key not in rig.seen.exits, "the command ran before GO"
    now = rig.backend.observe(job, attempt)
    assert now.alive and not now.go and not now.exited


def test_the_command_runs_in_the_environment_the_run_builds_for_its_launch(backend_factory):
    """A backend is given the run's environment builder when it is made (``RunContext``:
    the command's variables, secrets revealed) and runs each command in what it builds
    for that launch; nothing is handed over per start (issue 30)."""
    rig, _ = backend_factory()
    if isinstance(rig, MemoryRig):
        pytest.skip("the memory backend runs no command")
    launch = rig.launch("j1", rig.command(0, 0.0))
    checks = replace(launch, argv=(sys.executable, "-c", (
        "import os, sys; sys.exit(0 if os.environ.get('PRAXIST_TEST_JOB') == 'j1' else 3)")))
    rig.seen.add(rig.backend.start(checks))
    key = (launch.job_id, launch.attempt_id)
    rig.settle(lambda: key in rig.seen.last, TIMEOUT)
    rig.backend.go(key)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT)
    assert [end.exit_code for end in rig.seen.exits[key]] == [0]


@pytest.mark.parametrize("code", [0, 3, 75])
def test_go_runs_the_command_and_its_exit_code_is_observed(backend_factory, code):
    """Seed 000 "Only exit code 75 is an automatically retryable infrastructure failure":
    the core can only tell 0, a failure and 75 apart if the backend reports the command's
    own exit code."""
    rig, _ = backend_factory()
    key, job, attempt = started(rig, "j1", rig.command(code, 0.2))
    rig.backend.go(key)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT)
    [end] = rig.seen.exits[key]
    assert (end.exit_code, end.signal, end.go, end.alive) == (code, None, True, False)
    assert end.ended_at is not None
    now = rig.backend.observe(job, attempt)
    assert (now.alive, now.exited, now.exit_code) == (False, True, code)


@pytest.mark.parametrize("release", ["abort", "end"])
def test_an_attempt_released_the_other_way_never_runs(backend_factory, release):
    """Seed 000 "Pre-launch admission timeouts and transient accelerator-probe rejections
    are the exception: no experiment attempt ran": ABORT at the barrier (or ``end`` of
    an attempt still there, as a cancel does) ends it without its command ever running,
    and it is seen ended without an exit."""
    rig, _ = backend_factory()
    key, job, attempt = started(rig, "j1", rig.command(3, 0.0))
    if release == "abort":
        rig.backend.abort(key)
    else:
        rig.backend.end(key, 1.0, False)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT)
    end = rig.seen.last[key]
    assert (end.alive, end.exited, end.go) == (False, False, False)
    rig.backend.go(key)  # too late: a released barrier stays released
    rig.settle(lambda: False, 1.0)
    assert key not in rig.seen.exits, "an aborted attempt ran its command"
    now = rig.backend.observe(job, attempt)
    assert (now.alive, now.exited) == (False, False)


@pytest.mark.parametrize("ignores_term", [False, True], ids=["dies-of-TERM", "needs-KILL"])
def test_end_terms_a_running_attempt_and_kills_it_after_the_grace(backend_factory,
                                                                   ignores_term):
    """Seed 000 "praxist stop similarly freezes all new admission before discovering and
    terminating scheduler-owned process groups": ``end`` TERMs the command at once; one
    that ignores TERM is KILLed once the grace has passed, not before."""
    rig, _ = backend_factory()
    grace = 1.0
    key, job, attempt = running(rig, "j1", rig.command(0, LONG, ignores_term=ignores_term))
    sent = rig.now()
    rig.backend.end(key, grace, False)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT)
    last = rig.seen.last[key]
    if ignores_term and key not in rig.seen.exits:
        # a KILL that takes the supervisor too (Slurm's scancel --full) leaves no exit
        # record: then only its end, after the grace, is known
        assert not last.alive and last.at >= sent + grace, "KILLed before its grace was over"
        return
    [end] = rig.seen.exits[key]
    signal = 9 if ignores_term else 15
    assert (end.exit_code, end.signal) == (128 + signal, signal)
    if ignores_term:
        assert end.ended_at >= sent + grace, "KILLed before its grace was over"
    else:
        assert end.ended_at < sent + grace, "TERM did not end it at once"


def test_terminate_ends_every_attempt_it_is_given(backend_factory):
    """Seed 000 "praxist stop similarly freezes all new admission before discovering and
    terminating scheduler-owned process groups": one at its barrier (ABORTed, never run),
    one that dies of TERM and one that needs KILL are all reported ended by the time
    ``terminate`` returns."""
    rig, _ = backend_factory()
    waiting, _, _ = started(rig, "barrier", rig.command(0, 0.0))
    term, _, _ = running(rig, "term", rig.command(0, LONG))
    kill, _, _ = running(rig, "kill", rig.command(0, LONG, ignores_term=True))
    rig.seen.add(rig.backend.terminate([waiting, term, kill]))
    assert all(rig.seen.ended(key) for key in (waiting, term, kill)), rig.seen.last
    assert waiting not in rig.seen.exits and not rig.seen.last[waiting].go
    assert [(e.exit_code, e.signal) for e in rig.seen.exits[term]] == [(143, 15)]
    # KILLed after the stop's grace, with its shim: its exit is known where the backend
    # still has a record of it (memory; Slurm's completion record), else it just ended
    assert [(e.exit_code, e.signal) for e in rig.seen.exits.get(kill, [])] in ([(137, 9)], [])


def test_a_new_backend_adopts_a_running_attempt_and_sees_its_true_exit(backend_factory):
    """Seed 000 "Resume rebinds that same allocation before releasing the barrier, so a
    crash cannot turn one semantic experiment into duplicate work": the coordinator
    leaves (``close``) while the command runs; a new backend instance adopts the attempt
    from the journal's handle, finds it alive, and reports the exit code the command
    itself had, once."""
    rig, _ = backend_factory()
    key, job, attempt = running(rig, "j1", rig.command(3, 0.2, held=True))
    rig.backend.close()
    after = rig.restarted()
    after.seen.add(after.backend.adopt(job, attempt))
    assert after.seen.last[key].alive, "the running attempt was not found after the restart"
    after.release("j1")
    after.settle(lambda: after.seen.ended(key), TIMEOUT)
    assert [(e.exit_code, e.signal) for e in after.seen.exits[key]] == [(3, None)]


def test_the_backend_declares_what_it_can_do(backend_factory):
    """What the task file's checks and the core rely on: suspension (R-POL-3's
    ``preempt: suspend``) and who places GPUs."""
    rig, declared = backend_factory()
    if isinstance(rig.backend, RoutedBackend):  # each attempt's, by its profile's route
        policy = rig.backend.policy
        assert policy.capabilities_of(policy.profiles["cpu"]) == declared
        return
    assert rig.backend.capabilities == declared
    assert type(rig.backend).capabilities == declared
    assert isinstance(rig.backend.name, str) and rig.backend.name


def test_a_suspended_attempt_does_not_end_until_resumed(backend_factory):
    """R-POL-3 (preemption by suspension): a suspended command makes no progress, and
    once resumed it runs to its own exit."""
    rig, declared = backend_factory()
    if not declared.can_suspend:
        pytest.skip(f"{rig.backend.name} cannot suspend (preemption is by requeue only)")
    key, job, attempt = running(rig, "j1", rig.command(4, 1.0))
    rig.backend.suspend(key, "j2")
    rig.settle(lambda: rig.seen.ended(key), 3.0)
    assert key not in rig.seen.exits, "a suspended command ran to its end"
    assert rig.backend.observe(job, attempt).alive
    rig.backend.resume(key)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT)
    assert [(e.exit_code, e.signal) for e in rig.seen.exits[key]] == [(4, None)]
