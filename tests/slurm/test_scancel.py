"""scancel off the event loop: a down slurmctld blocks every client command for about
9 s, and a coordinator that waited on it would stop serving. The Slurm backend on the
fake cluster of tests/slurm/fake/cluster, with a runner that holds each scancel until
the test lets it through, as an unanswering slurmctld would."""

from __future__ import annotations

import threading

from praxist_fs.backends.slurm.backend import SlurmBackend
from praxist_fs.backends.slurm.client import SlurmClient, run_command
from praxist_fs.backends.slurm.config import parse_slurm_config
from tests.backends.conftest import rig_environment
from praxist_fs.core.nodes import NodeRegistry
from praxist_fs.core.policy import Policy, Profile
from tests.backends.conftest import RealRig

TIMEOUT_S = 60.0


def test_a_cancel_whose_scancel_hangs_holds_up_nothing(fake_cluster, tmp_path):
    """``end`` returns while its scancel still waits for Slurm; once Slurm answers, the
    TERM reaches the job and the attempt ends of it, as with a prompt scancel."""
    release = threading.Event()
    asked, answered = [], []

    def unanswering(argv: list[str], timeout: float):
        if argv[0] == "scancel":
            asked.append(argv)
            release.wait(TIMEOUT_S)
            answered.append(argv)
        return run_command(argv, timeout)

    policy = Policy(backend="slurm", capabilities=SlurmBackend.capabilities,
                    max_concurrent_experiments=1, default_profile="cpu",
                    profiles={"cpu": Profile(name="cpu", accelerator="cpu")},
                    slurm={"default_resources": {"cpus": 1, "mem_mb": 64},
                           "poll_pending_s": 0.2, "poll_running_s": 1.0})
    config = parse_slurm_config(policy.slurm, tuple(policy.profiles))
    rig = RealRig(tmp_path / "run", lambda rig: SlurmBackend(
        rig.layout, rig.selector, rig.lookup, policy, NodeRegistry, rig_environment,
        client=SlurmClient(config, rig.layout.root, unanswering)))
    try:
        launch = rig.launch("j1", rig.command(0, 600.0))
        rig.seen.add(rig.backend.start(launch))
        key = ("j1", "a1")
        rig.settle(lambda: key in rig.seen.last, TIMEOUT_S)
        rig.backend.go(key)
        rig.wait_running(key)

        rig.backend.end(key, TIMEOUT_S, False)
        assert not answered, "end waited for scancel"
        rig.settle(lambda: bool(asked), TIMEOUT_S)
        assert asked == [["scancel", "--full", "--signal=TERM", rig.seen.last[key].handle[
            "job_id"]]]
        assert not rig.seen.ended(key)
        release.set()
        rig.settle(lambda: rig.seen.ended(key), TIMEOUT_S)
        [end] = rig.seen.exits[key]
        assert (end.exit_code, end.signal) == (143, 15)
    finally:
        release.set()
        rig.close()
