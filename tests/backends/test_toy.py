"""Issue 30: a backend is one module (tests/backends/toy.py) and one registry line.

Registered, the toy is a ``backend:`` the task file may name, its capabilities are what
the core reads (they travel in the Policy), and the registry makes it as the daemon
makes a run's backend; the contract suite runs it as the ``toy`` entry of RIGS.
Unregistered, the task file refuses the name, listing the registered ones."""

from __future__ import annotations

import selectors
from pathlib import Path

import pytest

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends import registry
from praxist_fs.backends.base import RunContext
from tests.backends.conftest import rig_environment
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.core.nodes import NodeRegistry
from praxist_fs.errors import PolicyError
from tests.backends.toy import ToyBackend

TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    backend: {backend}
    max_concurrent_experiments: auto
    default_profile: cpu
    profiles:
      cpu: {{accelerator: cpu}}
"""


def resolved(backend: str, extra: str = ""):
    return policy_from_mapping(parse_task_text(TASK.format(backend=backend) + extra, "t.yaml"))


@pytest.fixture
def toy_registered():
    registry.register(ToyBackend)  # the one line a backend adds
    yield
    del registry.BACKENDS[ToyBackend.name]


def test_an_unregistered_backend_is_refused_by_name():
    with pytest.raises(PolicyError) as caught:
        resolved("toy")
    message = str(caught.value)
    assert "compute_budget.resource_scheduler.backend" in message
    assert "one of local, slurm" in message


def test_a_registered_backend_is_accepted_with_its_capabilities(toy_registered):
    """``max_concurrent_experiments: auto`` sizes from this host, which the toy runs on;
    another backend's mapping is refused beside it."""
    policy = resolved("toy")
    assert (policy.backend, policy.capabilities) == ("toy", ToyBackend.capabilities)
    assert policy.to_dict()["capabilities"] == ToyBackend.capabilities.to_dict()
    with pytest.raises(PolicyError, match="no slurm mapping unless backend: slurm"):
        resolved("toy", "    slurm: {partition: gpu}\n")


def test_the_registry_makes_the_runs_backend_as_the_daemon_does(toy_registered,
                                                                 tmp_path: Path):
    policy = resolved("toy")
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    with selectors.DefaultSelector() as selector:
        backend = registry.make(RunContext(layout, selector, lambda job_id: None, policy,
                                           NodeRegistry, frozenset(), rig_environment))
        assert isinstance(backend, ToyBackend)
        assert backend.root == layout.root / "toy"
        backend.close()
    assert registry.preflight(policy, layout.root) == []  # nothing to ask before serve


def test_a_name_is_registered_once(toy_registered):
    with pytest.raises(ValueError, match="'toy' is registered already"):
        registry.register(ToyBackend)
