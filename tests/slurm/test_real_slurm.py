"""The Slurm backend against a real Slurm (tests/slurm/setup.sh: node ci0, two fake
GPUs, alone in the default partition): true exit codes, distinct GPUs, Slurm's
refusals and pending reasons, a cancel from outside, and a job found again by its name
(SPEC R-DIST-1 "Tested against a real single-node Slurm started by CI")."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from praxist_fs.backends.slurm.client import (
    ENDED_STATES,
    INFRASTRUCTURE_STATES,
    FinalExit,
    SlurmClient,
    SlurmRefused,
    outcome,
    write_spec,
)
from praxist_fs.backends.slurm.config import parse_slurm_config
from tests.e2e.conftest import wait_for

CPU = {"name": "cpu_ordinary", "accelerator": "cpu", "gpu_count": 0}
GPU = {"name": "gpu_work", "accelerator": "gpu", "gpu_count": 1, "gpu_memory_gb": None,
       "gpu_utilization_pct": None}
TERMINAL = ENDED_STATES | INFRASTRUCTURE_STATES | {"CANCELLED"}
SLURM_S = 60  # a job's whole life on an idle single-node Slurm takes about a second


@pytest.fixture
def backend(real_slurm, tmp_path):
    """The client of a run of the session's Slurm; the run's jobs a test leaves (a
    command waiting for a file) are cancelled after it, so none holds ci0 for the next."""
    client = SlurmClient(parse_slurm_config({"default_resources": {"cpus": 1, "mem_mb": 256}}),
                         tmp_path / "run")
    yield client
    for slurm_id in client.jobs_of_run():
        client.cancel(slurm_id)


def submit(backend, job_id, command, profile=CPU):
    """Write the attempt's spec and submit it, as the coordinator will: (dir, Slurm id)."""
    attempt = backend.run_dir / "attempts" / job_id / "a1"
    attempt.mkdir(parents=True)
    write_spec(attempt, {"argv": None, "command": command, "cwd": str(backend.run_dir),
                         "env": {"PATH": os.defpath}, "log": str(attempt / "out.log"),
                         "barrier_timeout_s": SLURM_S})
    return attempt, backend.submit(attempt, job_id, "a1", profile, None, [])


def until_file(path):
    """A command that says it started, then waits (bounded) until ``path`` exists."""
    return (f"echo started; i=0; while [ ! -e {path} ] && [ $i -lt 600 ]; "
            "do sleep 0.1; i=$((i+1)); done")


def ended(backend, slurm_id):
    def state():
        seen = backend.poll([slurm_id]).get(slurm_id)
        return seen if seen is not None and seen.state in TERMINAL else None
    return wait_for(state, timeout=SLURM_S, message=f"Slurm job {slurm_id} to end")


def exit_json(attempt):
    return wait_for(lambda: (attempt / "exit.json").exists()
                    and json.loads((attempt / "exit.json").read_text()),
                    timeout=SLURM_S, message=f"{attempt}/exit.json")


def ready(attempt):
    return wait_for(lambda: (attempt / "READY").exists()
                    and json.loads((attempt / "READY").read_text()),
                    timeout=SLURM_S, message=f"{attempt}/READY")


def test_true_exit_codes(backend):
    """Exit 0, exit 3 and a command killed by signal 9 (137), released at the barrier:
    exit.json holds the true codes, Slurm agrees, and the mapping reads them as exits."""
    jobs = {code: submit(backend, f"exit{code}", command) for code, command in (
        (0, "exit 0"), (3, "exit 3"), (137, "kill -9 $$"))}
    for attempt, _ in jobs.values():
        backend.release(attempt, go=True)
    for code, (attempt, slurm_id) in jobs.items():
        state = ended(backend, slurm_id)
        record = exit_json(attempt)
        assert record["exit_code"] == code
        assert state.state == ("COMPLETED" if code == 0 else "FAILED")
        assert state.nodes == "ci0"
        assert outcome(state, record, None) == ("exited", f"exit {code}")
    assert jobs[137][0].joinpath("exit.json").exists()
    assert json.loads(jobs[137][0].joinpath("exit.json").read_text())["signal"] == 9
    # Slurm's job completion record, the fallback when exit.json never came:
    assert wait_for(lambda: backend.final_exit(jobs[3][1]), timeout=SLURM_S,
                    message="the jobcomp record") == FinalExit("FAILED", 3, 0)


def test_two_gpu_jobs_get_distinct_devices_and_a_third_waits(backend, tmp_path):
    """Slurm places the GPUs (``--gpus=1``): two jobs at once see different devices; a
    third waits, with Slurm's pending reason, until praxist_fs cancels it."""
    release = tmp_path / "release"
    first, second = (submit(backend, name, until_file(release), GPU) for name in ("g1", "g2"))
    for attempt, _ in (first, second):
        backend.release(attempt, go=True)
    devices = {ready(first[0])["cuda_visible_devices"], ready(second[0])["cuda_visible_devices"]}
    assert devices == {"0", "1"}
    third_dir, third = submit(backend, "g3", "exit 0", GPU)
    # Slurm says "None" until its scheduler has looked at the job, then why it waits.
    waiting = wait_for(lambda: (seen := backend.poll([third]).get(third)) is not None
                       and seen.reason != "None" and seen, timeout=SLURM_S,
                       message="the third GPU job's pending reason")
    assert (waiting.state, waiting.reason) == ("PENDING", "Resources")
    assert outcome(waiting, None, None) == ("launching", "waiting in Slurm: Resources")
    assert backend.cancel(third)
    assert outcome(ended(backend, third), None, "cancel") == ("cancelled", "cancelled (cancel)")
    release.touch()
    for attempt, slurm_id in (first, second):
        ended(backend, slurm_id)
        assert exit_json(attempt)["exit_code"] == 0
        assert (attempt / "out.log").read_text() == "started\n"
    assert not (third_dir / "READY").exists()


def test_a_request_slurm_refuses_fails_with_sbatchs_message(backend):
    """Nine GPUs on a node with two: sbatch's own message, not a guess."""
    with pytest.raises(SlurmRefused, match="Requested node configuration is not available"):
        submit(backend, "nine", "exit 0", {**GPU, "gpu_count": 9})


def test_an_external_scancel_is_cancelled_outside_praxist_fs(backend, tmp_path):
    """Somebody runs ``scancel`` on our job: the shim survives TERM to record the exit
    (143), and the attempt fails as "cancelled outside praxist_fs"."""
    attempt, slurm_id = submit(backend, "victim", until_file(tmp_path / "never"))
    backend.release(attempt, go=True)
    wait_for(lambda: (attempt / "out.log").exists(), timeout=SLURM_S, message="the command")
    subprocess.run(["scancel", slurm_id], check=True, timeout=30)
    state = ended(backend, slurm_id)
    record = exit_json(attempt)
    assert (state.state, record["exit_code"]) == ("CANCELLED", 143)
    assert outcome(state, record, None) == ("failed", "cancelled outside praxist_fs")


def test_a_stop_signals_every_process_of_the_job(backend, tmp_path):
    """praxist_fs stops a running attempt with TERM to every process of its job
    (``scancel --full``): the command ends, exit.json says 143, and since praxist_fs
    asked, the attempt is cancelled, not failed."""
    attempt, slurm_id = submit(backend, "stopped", until_file(tmp_path / "never"))
    backend.release(attempt, go=True)
    wait_for(lambda: (attempt / "out.log").exists(), timeout=SLURM_S, message="the command")
    assert backend.signal(slurm_id, signal.SIGTERM)
    state = ended(backend, slurm_id)
    record = exit_json(attempt)
    assert record["exit_code"] == 143
    assert outcome(state, record, "stop") == ("cancelled", "cancelled (stop)")


def test_a_forgotten_job_is_found_by_its_name(backend):
    """A crash between sbatch and the journal: the next coordinator knows only the
    attempt, so the job's deterministic name finds it (adopt, never submit twice)."""
    attempt, slurm_id = submit(backend, "forgotten", "exit 0")
    name = backend.job_name("forgotten", "a1")
    assert backend.find_attempt("forgotten", "a1") == (slurm_id, name)
    assert backend.find_attempt("never-submitted", "a1") is None
    assert backend.jobs_of_run()[slurm_id].name == name
    backend.release(attempt, go=False)  # not adopted here: ABORT, so nothing runs
    assert ended(backend, slurm_id).name == name
    assert backend.find(name) == (slurm_id, name)  # an ended job too, until Slurm purges it
    assert not (attempt / "exit.json").exists() and not (attempt / "out.log").exists()


def test_a_node_set_down_is_an_infrastructure_failure(backend, tmp_path):
    """A node that goes down under a running attempt: with ``--no-requeue`` Slurm ends
    the job NODE_FAIL (its processes get TERM, so exit.json says 143), which the mapping
    makes an infrastructure failure, retried and counted against the node (R-BUD-2),
    not the command's own failure."""
    attempt, slurm_id = submit(backend, "node-fail", until_file(tmp_path / "never"))
    backend.release(attempt, go=True)
    wait_for(lambda: (attempt / "out.log").exists(), timeout=SLURM_S, message="the command")
    scontrol = ["scontrol", "update", "nodename=ci0"]
    subprocess.run([*scontrol, "state=down", "reason=praxist_fs test"], check=True, timeout=30)
    try:
        state = ended(backend, slurm_id)
        assert (state.state, state.nodes) == ("NODE_FAIL", "ci0")
        assert outcome(state, exit_json(attempt), None) == ("infrastructure", "Slurm NODE_FAIL")
    finally:
        subprocess.run([*scontrol, "state=resume"], check=True, timeout=30)
        seen = []  # the node's states meanwhile. Back in service is enough: the session's
        try:  # Slurm may run another test's job on it at once (mixed, allocated)
            wait_for(lambda: seen.append(subprocess.run(
                ["sinfo", "-h", "-N", "-n", "ci0", "-p", "main", "-o", "%T"],
                capture_output=True, text=True, timeout=30).stdout.strip())
                or seen[-1] in ("idle", "mixed", "allocated"),
                timeout=3 * SLURM_S, interval=0.5, message="node ci0 in service again")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its states meanwhile: {list(dict.fromkeys(seen))}")
