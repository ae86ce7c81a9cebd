"""What a run's execution backend can do: the facts the core decides with, as plain data.

The core never asks which backend a run uses, only what it can do: whether this host's
pressure governs its attempts (``on_this_host``), whether the core places GPUs or the
backend does (``places_gpus``), whether preemption may stop an attempt in place
(``can_suspend``), whether an admitted attempt may wait in the backend's own queue
(``queues_attempts``) and whether a request's per-job ``slurm`` options mean anything
to it (``takes_slurm_options``). The core has no branch on a backend's name
(tests/core/test_capabilities.py reads the core's source for one). A backend declares them (backends/base.py, ``capabilities``); the
task file's resolution (config.py) copies the chosen backend's into the ``Policy``, so
they travel in the journal with the rest of it and a replay decides as the run did.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """What a backend can do, which the core and the task file's checks need to know."""

    # SIGTSTP/SIGSTOP preemption (R-POL-3, ``preempt: suspend``); else only requeue exists
    can_suspend: bool
    # the backend chooses the devices (a cluster's scheduler); else the core's placement,
    # from this host's GPU inventory, claimed against other coordinators on the host
    places_gpus: bool
    # attempts run on this host: its pressure holds profiles back and sizes how many run
    # (the concurrency controller, ``max_concurrent_experiments: auto``); else they run
    # where another scheduler puts them, and the configured maximum is the target
    on_this_host: bool = True
    # an admitted attempt may wait in the backend's own scheduler's queue before its
    # command starts (a cluster's): its handle says ``started_at`` once the command runs,
    # and status.json counts those without as waiting there (``pending_in_slurm``)
    queues_attempts: bool = False
    # it turns a request's ``slurm`` object (R-DIST-2: sbatch's per-job options) into its
    # job's; a request with one is rejected where its job would not run on such a backend
    takes_slurm_options: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], backend: str) -> Capabilities:
        """As journaled for the backend named ``backend``; a capability journaled before
        it existed is what that backend could then do (``BEFORE_CAPABILITIES``)."""
        before = BEFORE_CAPABILITIES.get(backend)
        return replace(before, **data) if before is not None else cls(**data)


# This host's processes: the local backend's, and a Policy's made without a task file
ON_THIS_HOST = Capabilities(can_suspend=True, places_gpus=False, on_this_host=True)

# A journal written before capabilities were journaled names only its backend, and one
# written before a capability existed lacks it; these are what each of the two backends
# of that time could do (the local one, and Slurm).
BEFORE_CAPABILITIES = {
    "local": ON_THIS_HOST,
    "slurm": Capabilities(can_suspend=False, places_gpus=True, on_this_host=False,
                          queues_attempts=True, takes_slurm_options=True),
}
