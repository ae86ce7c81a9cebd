"""The core decides from what the run's backend can do, never from its name (R-DIST-1):
who places GPUs, whether this host's pressure holds work back and sizes the concurrency,
and what a journal written before capabilities were journaled meant."""

from __future__ import annotations

from dataclasses import replace

import pytest

from praxist_fs.core.capabilities import BEFORE_CAPABILITIES, ON_THIS_HOST, Capabilities
from praxist_fs.core.policy import Policy
from tests.core.helpers import CPU, GPU, Harness, make_policy

ELSEWHERE = Capabilities(can_suspend=False, places_gpus=True, on_this_host=False)


def test_gpu_work_waits_for_the_cores_placement_unless_the_backend_places_it():
    """A backend on this host gets GPU work only once the core has placed it on devices it
    sampled; one that places GPUs itself (a cluster's scheduler) gets it at once, with no
    devices of this host, whatever it is called."""
    for can, placed_here in ((ON_THIS_HOST, True), (ELSEWHERE, False)):
        h = Harness(make_policy(backend="toy", capabilities=can, max_concurrent_experiments=2,
                                initial_concurrent_experiments=2))
        job_id = h.submit("t1", profile="gpu")["job_id"]
        launched = [job for job, _ in h.launch_all()]
        if placed_here:
            assert launched == []
            assert "gpu placement: no GPU inventory" in h.sched.pending[job_id]
        else:
            assert launched == [job_id]
            assert h.sched.jobs[job_id].current.gpus == ()


def test_the_concurrency_is_the_configured_maximum_off_this_host():
    """This host's pressure sizes how many run only where the attempts run on it."""
    here = Harness(make_policy(capabilities=ON_THIS_HOST, max_concurrent_experiments=6,
                               initial_concurrent_experiments=2))
    away = Harness(make_policy(backend="toy", capabilities=ELSEWHERE,
                               max_concurrent_experiments=6, initial_concurrent_experiments=2))
    assert (here.sched.concurrency_target(), away.sched.concurrency_target()) == (2, 6)


def test_a_policy_journaled_before_capabilities_replays_as_its_backend_then_could():
    """A journal's policy without ``capabilities`` names only its backend: Slurm's then
    placed GPUs and did not run on this host; the local one the opposite."""
    for name, expected in (("slurm", BEFORE_CAPABILITIES["slurm"]), ("local", ON_THIS_HOST)):
        old = Policy(backend=name, capabilities=expected).to_dict()
        del old["capabilities"]
        assert Policy.from_dict(old).capabilities == expected
    assert not BEFORE_CAPABILITIES["slurm"].on_this_host
    assert BEFORE_CAPABILITIES["slurm"].places_gpus
    journaled = Policy(backend="toy", capabilities=ELSEWHERE).to_dict()
    assert Policy.from_dict(journaled).capabilities == ELSEWHERE


def test_each_profile_is_decided_with_the_capabilities_of_the_backend_it_routes_to():
    """One run, two backends (issue 28): GPU work routed to a cluster starts at once with
    no device of this host, while GPU work that stays here waits for this host's
    placement, and CPU work here is held by this host's pressure."""
    routed = replace(GPU, name="big", backend="toy")
    h = Harness(make_policy(backends={"toy": ELSEWHERE}, max_concurrent_experiments=4,
                            initial_concurrent_experiments=4,
                            profiles={"cpu": CPU, "gpu": GPU, "big": routed}))
    assert h.sched.policy.capabilities_of(routed) == ELSEWHERE
    assert h.sched.policy.capabilities_of(GPU) == ON_THIS_HOST
    big = h.submit("t1", profile="big")["job_id"]
    here = h.submit("t2", profile="gpu")["job_id"]
    assert [job for job, _ in h.launch_all()] == [big]
    assert h.sched.jobs[big].current.gpus == ()
    assert "gpu placement: no GPU inventory" in h.sched.pending[here]


def test_a_profile_may_route_only_to_a_backend_the_run_uses():
    with pytest.raises(ValueError, match="which the run does not use"):
        make_policy(profiles={"cpu": CPU, "big": replace(GPU, name="big", backend="toy")})


def test_the_routes_travel_in_the_journal_and_older_journals_route_nothing():
    routed = replace(GPU, name="big", backend="toy")
    policy = make_policy(backends={"toy": ELSEWHERE}, profiles={"cpu": CPU, "big": routed})
    journaled = policy.to_dict()
    assert journaled["backends"] == {"toy": ELSEWHERE.to_dict()}
    assert journaled["profiles"]["big"]["backend"] == "toy"
    assert Policy.from_dict(journaled) == policy
    del journaled["backends"]
    del journaled["profiles"]["big"]["backend"]
    old = Policy.from_dict(journaled)
    assert old.backends == {} and old.capabilities_of(old.profiles["big"]) == ON_THIS_HOST
