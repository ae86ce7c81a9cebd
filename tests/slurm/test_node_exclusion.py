"""R-BUD-2: a pending attempt's ``--exclude`` follows the node registry. An attempt
submitted while its node was offline must not wait for ever once the node is back:
the Slurm backend on the fake cluster of tests/slurm/fake/cluster (one node, fake0),
where a job that excludes fake0 stays PENDING (ReqNodeNotAvail) as on a real one."""

from __future__ import annotations

import json
import time

import pytest

from praxist_fs.backends.slurm.backend import SlurmBackend
from tests.backends.conftest import rig_environment
from praxist_fs.core.events import NodeOutcome
from praxist_fs.core.nodes import NodeRegistry
from praxist_fs.core.policy import Policy, Profile
from tests.backends.conftest import RealRig

TIMEOUT_S = 30.0


@pytest.fixture
def rig(fake_cluster, tmp_path):
    """The backend on the fake cluster, with fake0 offline: two failures in a row there,
    while another node of its partition ran work, just now (its probe is not due)."""
    registry, now = NodeRegistry(), time.time()
    for at, node, failed in ((now, "other", False), (now, "fake0", True),
                             (now, "fake0", True)):
        registry.handle(NodeOutcome(at=at, node=node, partition="default",
                                    infrastructure=failed, reason="NODE_FAIL"))
    assert registry.excluded() == ["fake0"]
    policy = Policy(backend="slurm", capabilities=SlurmBackend.capabilities,
                    max_concurrent_experiments=2, default_profile="cpu",
                    profiles={"cpu": Profile(name="cpu", accelerator="cpu")},
                    slurm={"default_resources": {"cpus": 1, "mem_mb": 64},
                           "poll_pending_s": 0.2, "poll_running_s": 1.0})
    rig = RealRig(tmp_path / "run", lambda rig: SlurmBackend(
        rig.layout, rig.selector, rig.lookup, policy, lambda: registry, rig_environment))
    rig.registry = registry
    yield rig
    rig.close()


def calls(fake_cluster, tool):
    lines = (fake_cluster / "calls.jsonl").read_text().splitlines()
    return [call["argv"] for call in map(json.loads, lines) if call["tool"] == tool]


def test_a_pending_attempt_runs_once_its_excluded_node_is_back(rig, fake_cluster):
    """Submitted with ``--exclude=fake0`` while fake0 was offline, the attempt waits in
    Slurm; once fake0 is back online (its probe succeeded) the backend clears the pending
    job's exclusion (``scontrol update jobid=N ExcNodeList=``), and it runs there to its
    own exit, as the same Slurm job."""
    launch = rig.launch("j1", rig.command(0, 0.0))
    rig.seen.add(rig.backend.start(launch))
    key = ("j1", "a1")
    rig.settle(lambda: key in rig.seen.last, TIMEOUT_S)
    rig.backend.go(key)
    [sbatch] = calls(fake_cluster, "sbatch")
    assert "--exclude=fake0" in sbatch
    rig.settle(lambda: "ReqNodeNotAvail" in (rig.seen.last[key].note or ""), TIMEOUT_S)
    assert "waiting in Slurm: ReqNodeNotAvail" in rig.seen.last[key].note
    slurm_id = rig.seen.last[key].handle["job_id"]

    rig.registry.handle(NodeOutcome(at=time.time(), node="fake0", partition="default",
                                    infrastructure=False, reason="probe: Slurm COMPLETED",
                                    probe=True))
    assert rig.registry.excluded() == []
    rig.settle(lambda: rig.seen.ended(key), TIMEOUT_S)
    [end] = rig.seen.exits[key]
    assert (end.exit_code, end.handle["job_id"], end.handle["node"]) == (0, slurm_id, "fake0")
    assert calls(fake_cluster, "scontrol") == [
        ["update", f"jobid={slurm_id}", "ExcNodeList="]]
    assert len(calls(fake_cluster, "sbatch")) == 1
