"""What the memory backend promises beyond the contract: the simulator's and the core
tests' clock (a suspended attempt's run time waits, the ends due together come back in
one order, an end made void by a suspension wakes nothing up), and the shims the core
simulation scripts (a start that fails, a look at files and process)."""

from __future__ import annotations

from dataclasses import replace

from praxist_fs.backends.memory import MemoryBackend, Run, VirtualHost
from praxist_fs.core.effects import SpawnAttempt

from .conftest import core_view


def launch(job_id: str) -> SpawnAttempt:
    return SpawnAttempt(job_id=job_id, attempt_id="a1", argv=("true",), command=None,
                        cwd=None, profile="cpu")


def released(backend: MemoryBackend, *job_ids: str) -> None:
    for job_id in job_ids:
        backend.start(launch(job_id))
        backend.go((job_id, "a1"))


def test_suspension_stops_the_attempts_clock():
    """R-POL-3 "a suspended job's remaining run time is frozen until it resumes": 10 s of
    run time, suspended from t=3 to t=8, ends at t=15 with the plan's exit code."""
    backend = MemoryBackend(lambda _: Run(10.0, exit_code=3))
    released(backend, "j")
    assert backend.on_timer(3.0) == []
    backend.suspend(("j", "a1"), "other")
    assert backend.on_timer(8.0) == []
    backend.resume(("j", "a1"))
    assert backend.on_timer(14.999) == []
    [end] = backend.on_timer(20.0)
    assert (end.at, end.ended_at, end.exit_code, end.go) == (15.0, 15.0, 3, True)


def test_ends_due_together_come_back_in_the_order_they_were_released():
    """The replay's determinism: ends at one instant, by when each was set running (a
    resumed attempt counts from its resume); earlier ends first."""
    durations = {"a": 5.0, "b": 5.0, "c": 2.0, "d": 3.0}
    backend = MemoryBackend(lambda spawn: Run(durations[spawn.job_id]))
    released(backend, "a", "b", "d")
    backend.suspend(("a", "a1"), "x")
    backend.on_timer(2.0)
    released(backend, "c")          # ends at 4
    backend.resume(("a", "a1"))     # 5 s left from 2: ends at 7, after b
    order = [(e.job_id, e.ended_at) for e in backend.on_timer(10.0)]
    assert order == [("d", 3.0), ("c", 4.0), ("b", 5.0), ("a", 7.0)]


def test_a_void_end_reports_nothing_and_the_clock_moves_on():
    """A suspension leaves its old end in the queue: ``next_timer`` may name it, and
    waking at it reports nothing; the attempt ends at its own time once resumed."""
    backend = MemoryBackend(lambda _: Run(5.0))
    released(backend, "j")
    backend.suspend(("j", "a1"), "x")
    assert backend.next_timer() == 5.0
    assert backend.on_timer(5.0) == []
    assert backend.host.now == 5.0
    backend.resume(("j", "a1"))
    [end] = backend.on_timer(backend.next_timer())
    assert end.ended_at == 10.0


def test_a_backend_reports_only_the_attempts_it_started_or_adopted():
    """Two coordinators' backends on one host: each hears of its own attempts' ends only,
    once, whichever of them moved the clock."""
    host = VirtualHost()
    first = MemoryBackend(lambda _: Run(1.0), host)
    second = MemoryBackend(lambda _: Run(1.0), host)
    [handle] = first.start(launch("j"))
    first.go(("j", "a1"))
    assert handle.alive and (handle.handle["pid"], handle.handle["boot_id"]) == (
        1, host.boot_id)
    assert second.on_timer(2.0) == []
    assert [(e.job_id, e.exit_code) for e in first.on_timer(2.0)] == [("j", 0)]
    assert first.on_timer(3.0) == []


def test_a_shim_that_cannot_start_is_an_exit_127_with_its_error():
    """The contract's "or that it could not be started (an exit with the reason in
    ``error``)": no handle, nothing on the host to adopt later."""
    backend = MemoryBackend(lambda _: Run(1.0, start_error="could not start the shim"))
    [event] = backend.start(launch("j"))
    assert (event.alive, event.exited, event.exit_code, event.error, event.handle) == (
        False, True, 127, "could not start the shim", None)
    assert ("j", "a1") not in backend.host.attempts


def test_observe_looks_at_the_files_and_at_the_process_its_handle_names():
    """As the local backend's look at the attempt directory and /proc: READY, GO and the
    exit record are there for anyone; the process only for the journal's handle, or,
    with none journaled (a crash before it was), for the pid READY names. A shim that
    died after GO leaves GO and no exit record."""
    host = VirtualHost()
    backend = MemoryBackend(lambda _: Run(float("inf"), ready=False), host)
    spawn = launch("j")
    [handle] = backend.start(spawn)
    job, attempt = core_view(spawn, handle)
    unjournaled = replace(attempt, handle=None)
    assert not backend.observe(job, unjournaled).alive  # no handle, no READY: not found
    host.ready(("j", "a1"))
    assert backend.observe(job, unjournaled).handle == handle.handle  # READY names it
    another = {**handle.handle, "pid": handle.handle["pid"] + 1}
    assert not backend.observe(job, replace(attempt, handle=another)).alive
    backend.go(("j", "a1"))
    host.die(("j", "a1"))
    gone = backend.observe(job, attempt)
    assert (gone.alive, gone.ready, gone.go, gone.exited) == (False, True, True, False)
