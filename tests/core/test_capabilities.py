"""The core decides from what the run's backend can do, never from its name (R-DIST-1):
who places GPUs, whether this host's pressure holds work back and sizes the concurrency,
and what a journal written before capabilities were journaled meant."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import praxist_fs.core
from praxist_fs.backends.registry import BACKENDS
from praxist_fs.core.capabilities import BEFORE_CAPABILITIES, ON_THIS_HOST, Capabilities
from praxist_fs.core.events import HostSampled, NodeOutcome
from praxist_fs.core.observations import PressureSample
from praxist_fs.core.policy import Policy
from praxist_fs.core.status import render_status
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


def test_work_elsewhere_takes_none_of_this_hosts_slots_and_this_host_none_of_the_pool():
    """One run, this host and a cluster (issue 28, seed 003's implicit local node): this
    host's jobs are held to its own target (the controller's, 1 here), while the
    cluster's start beside them up to the run's pool (max_concurrent_experiments, 4)."""
    routed = replace(CPU, name="big", backend="toy")
    h = Harness(make_policy(backends={"toy": ELSEWHERE}, max_concurrent_experiments=4,
                            initial_concurrent_experiments=1,
                            profiles={"cpu": CPU, "big": routed}))
    here = [h.submit(f"here{n}", profile="cpu")["job_id"] for n in (1, 2)]
    away = [h.submit(f"away{n}", profile="big")["job_id"] for n in (1, 2, 3, 4)]
    assert sorted(job for job, _ in h.launch_all()) == sorted([here[0], *away[:3]])
    assert h.sched.pending[here[1]] == "waiting for a slot on this host: all 1 of its taken"
    assert h.sched.concurrency_target() == 4


def test_a_run_of_this_host_and_a_cluster_shows_this_host_first_among_the_nodes():
    """Seed 003's implicit local node: this host first, with its running jobs and labels,
    beside the cluster's nodes, each with the jobs running on it and when it was last
    heard of; a run of this host alone shows no nodes (as before)."""
    routed = replace(CPU, name="big", backend="toy")
    h = Harness(make_policy(backends={"toy": ELSEWHERE}, max_concurrent_experiments=4,
                            initial_concurrent_experiments=2,
                            profiles={"cpu": CPU, "big": routed}))
    here = h.submit("here", profile="cpu")["job_id"]
    away = h.submit("away", profile="big")["job_id"]
    h.launch_all()
    h.spawn(here, "a1")
    h.observe(away, "a1", handle={"backend": "toy", "node": "n7"})
    h.handle(NodeOutcome(at=h.tick(), node="n7", partition="main", infrastructure=False,
                         reason="exit 0"))
    seen_at = h.now
    nodes = render_status(h.sched, h.tick(), {})["nodes"]
    assert [(n["node"], n["kind"], n["running"]) for n in nodes] == [
        ("local", "local", 1), ("n7", "cluster", 1)]
    assert nodes[1]["last_seen"] == seen_at and nodes[1]["labels"] == {"partitions": ["main"]}
    assert nodes[0]["state"] == "online" and "host" in nodes[0]["labels"]
    alone = Harness(make_policy())
    assert render_status(alone.sched, alone.tick(), {})["nodes"] == []


def test_this_hosts_target_rises_for_work_waiting_here_not_for_work_waiting_elsewhere():
    """Calm samples raise this host's target (the concurrency controller's) only while
    work for this host waits for one of its slots: a full pool of cluster jobs with
    more queued leaves it where it was, so this host's share never drifts to the pool."""
    for queued_here, rises in ((False, False), (True, True)):
        routed = replace(CPU, name="big", backend="toy")
        h = Harness(make_policy(backends={"toy": ELSEWHERE}, max_concurrent_experiments=3,
                                initial_concurrent_experiments=1, calm_samples=1,
                                profiles={"cpu": CPU, "big": routed}))
        h.submit("here", profile="cpu")
        for n in range(3):
            h.submit(f"away{n}", profile="big")
        if queued_here:
            h.submit("here2", profile="cpu")
        h.launch_all()  # here, away0, away1: the pool of 3 is full
        for _ in range(3):
            h.handle(HostSampled(at=h.tick(), pressure=PressureSample(
                source="psi", cpu=0.0, memory=0.0, io=0.0)))
        assert (h.sched.controller.target > 1) is rises, queued_here


def backend_name_comparisons(tree: ast.AST, names: set[str]) -> list[str]:
    """Each comparison with a backend's name in ``tree`` (``x == "slurm"``, ``"slurm" in
    names``, ``x in ("local", ...)``, a ``case "slurm":``), as its source."""
    def named(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(map(named, node.elts))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(named, [node.left, *node.comparators])):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.MatchValue) and named(node.value):
            found.append(f"case {ast.unparse(node.value)}")
    return found


def test_the_core_has_no_branch_on_a_backends_name():
    """What the core decides for an attempt comes from its backend's ``Capabilities``: a
    comparison with a registered backend's name anywhere under core/ is a branch a new
    backend could not take part in (issue 30)."""
    names = set(BACKENDS) | {"toy"}
    assert backend_name_comparisons(ast.parse('x == "slurm" or "local" in y\n'
                                              'match x:\n    case "slurm": pass'), names) == [
        "x == 'slurm'", "'local' in y", "case 'slurm'"]
    core = Path(praxist_fs.core.__file__).parent
    found = {str(path.relative_to(core)): hits for path in sorted(core.rglob("*.py"))
             if (hits := backend_name_comparisons(ast.parse(path.read_text("utf-8")), names))}
    assert found == {}


def test_slurm_options_and_slurms_queue_are_capabilities_of_whatever_backend_has_them():
    """A request's ``slurm`` options are taken where its job runs on a backend that takes
    them, whatever its name, and refused elsewhere; status.json counts an attempt whose
    backend queues it and whose command has not started as waiting in that queue."""
    queuing = replace(ELSEWHERE, queues_attempts=True, takes_slurm_options=True)
    h = Harness(make_policy(backend="toy", capabilities=queuing, max_concurrent_experiments=2,
                            initial_concurrent_experiments=2))
    taken = h.submit("t1", profile="cpu", slurm={"time_limit_minutes": 5})
    assert taken["outcome"] == "accepted", taken
    refused = Harness(make_policy(backend="toy", capabilities=ELSEWHERE)).submit(
        "t1", profile="cpu", slurm={"time_limit_minutes": 5})
    assert (refused["outcome"], refused["field"]) == ("rejected", "slurm")
    [(job_id, attempt_id)] = h.launch_all()
    h.observe(job_id, attempt_id, handle={"job_id": "7"})
    assert render_status(h.sched, h.tick(), {})["pending_in_slurm"] == 1
    h.observe(job_id, attempt_id, handle={"job_id": "7", "started_at": h.tick()})
    assert render_status(h.sched, h.tick(), {})["pending_in_slurm"] == 0


def test_a_capability_journaled_before_it_existed_is_what_its_backend_then_could():
    """A run journaled with its capabilities, but before ``queues_attempts`` and
    ``takes_slurm_options`` existed, replays with what its backend did then: a Slurm run
    took per-job options, a local one did not."""
    for name in ("slurm", "local"):
        journaled = Policy(backend=name, capabilities=BEFORE_CAPABILITIES[name]).to_dict()
        for key in ("queues_attempts", "takes_slurm_options"):
            del journaled["capabilities"][key]
        assert Policy.from_dict(journaled).capabilities == BEFORE_CAPABILITIES[name]
    assert BEFORE_CAPABILITIES["slurm"].takes_slurm_options
    assert not BEFORE_CAPABILITIES["local"].takes_slurm_options
