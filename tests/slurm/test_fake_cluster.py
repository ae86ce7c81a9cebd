"""The Slurm backend on the fake cluster of tests/slurm/fake/cluster where a real Slurm
cannot show it on demand: a job Slurm has already forgotten (purged after MinJobAge)
still ends with its true exit code, read from exit.json (SPEC R-DIST-1)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from praxist_fs.backends.slurm.backend import SlurmBackend
from tests.backends.conftest import rig_environment
from praxist_fs.core.nodes import NodeRegistry
from praxist_fs.core.policy import Policy, Profile
from tests.backends.conftest import RealRig

TIMEOUT_S = 30.0


def slurm_rig(root, poll_pending_s: float, poll_running_s: float) -> RealRig:
    policy = Policy(backend="slurm", capabilities=SlurmBackend.capabilities,
                    max_concurrent_experiments=2, default_profile="cpu",
                    profiles={"cpu": Profile(name="cpu", accelerator="cpu")},
                    slurm={"default_resources": {"cpus": 1, "mem_mb": 64},
                           "poll_pending_s": poll_pending_s, "poll_running_s": poll_running_s})
    return RealRig(root, lambda rig: SlurmBackend(
        rig.layout, rig.selector, rig.lookup, policy, lambda: NodeRegistry(), rig_environment))


@pytest.fixture
def rig(fake_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_MIN_JOB_AGE", "0")  # an ended job is gone at once
    rig = slurm_rig(tmp_path / "run", 0.2, 1.0)
    yield rig
    rig.close()


def test_a_job_slurm_has_purged_ends_with_the_exit_code_of_its_exit_json(rig):
    """Slurm's squeue no longer knows the job by the time it is asked: the attempt is
    not lost, it exited 3 as its exit.json says, on the node its READY names."""
    launch = rig.launch("j1", rig.command(3, 0.0))
    rig.seen.add(rig.backend.start(launch))
    key = ("j1", "a1")
    rig.settle(lambda: key in rig.seen.last, TIMEOUT_S)
    rig.backend.go(key)
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT_S)
    [end] = rig.seen.exits[key]
    assert (end.exit_code, end.signal, end.alive) == (3, None, False)
    slurm_id = end.handle["job_id"]
    assert rig.backend.client.poll([slurm_id]) == {}  # gone from Slurm's queue
    ready = json.loads((rig.layout.attempt_dir(*key) / "READY").read_text())
    assert (ready["slurm_job_id"], ready["slurm_node"]) == (slurm_id, "fake0")
    assert end.handle["node"] == "fake0"


def test_a_shim_rings_the_doorbell_once_ready_and_once_ended(fake_cluster, tmp_path):
    """Issue 28, item 6: the command's end is seen from its exit.json as soon as the shim
    wrote it, not at the next squeue poll or reconcile: the shim's datagram wakes the
    loop (the backend's doorbell becomes readable), and the backend's answer to it is
    the attempt's end. Polls are an hour apart here, and nothing but the doorbell is
    served."""
    rig = slurm_rig(tmp_path / "run", 60, 600)
    try:
        launch = rig.launch("j1", rig.command(0, 0.0))
        rig.seen.add(rig.backend.start(launch))
        key = ("j1", "a1")
        rig.settle(lambda: key in rig.seen.last, TIMEOUT_S)  # submitted: tracked
        rig.backend.go(key)
        deadline, rung = time.monotonic() + TIMEOUT_S, []
        while not rung and time.monotonic() < deadline:  # the submission's own wake-up
            rung = [key.data for key, _ in rig.selector.select(deadline - time.monotonic())
                    if key.data == ("backend", ("rung",))]  # (poll) may come first
        assert rung, "no ring within the timeout"
        deadline = time.monotonic() + TIMEOUT_S
        while not rig.seen.ended(key) and time.monotonic() < deadline:  # READY, then exit
            ready = [k for k, _ in rig.selector.select(1.0) if k.data[1] == ("rung",)]
            rig.seen.add(rig.backend.on_ready(("rung",)) if ready or rung else [])
            rung = []
        [end] = rig.seen.exits[key]
        assert (end.exit_code, end.go) == (0, True)
        assert rig.backend.tracked[key].polled is False  # no squeue answered meanwhile
        assert rig.backend.doorbell.rung() == set()  # drained
        forged = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        forged.sendto(b"nosuch/a1", tuple(rig.backend.doorbell.address))
        forged.close()
        rig.selector.select(TIMEOUT_S)
        assert rig.backend.on_ready(("rung",)) == []  # not an attempt of ours: ignored
    finally:
        rig.close()
