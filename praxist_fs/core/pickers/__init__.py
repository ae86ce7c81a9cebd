"""The scheduling loop's pickers (R-POL-1, seed 002): project -> queue -> job.

Every level is a picker with seed 002's contract: ``init(ctx, scope)`` once per
pass, ``next()`` until it returns None, ``fini()`` once. A project picker gets
no scope and yields ``Project``s; a queue picker gets a project and yields
tiers of its queues, tuples of queues served as one (queues of equal priority,
in submit order, as LSF does); a job picker gets a ``JobScope`` and yields its
jobs. A preempt policy (seed 002's level 3) gets a ``VictimScope`` and yields the
candidates to preempt for one job, in the order they are to be taken.
Pickers only order. Holds, allocation and launches are the loop's
(``PassDesk._pass``), which tells the job picker through ``blocked(job)``
when the first job of a demand it picked could not be placed: EASY backfill
reserves there. Preemption (R-POL-3, ``core/preemption.py``) chooses its victims
at the same point, and resumes suspended work at its queue's turn.

A job picker is chosen per queue, with precedence queue -> project -> global
(``Queue.picker``, ``Project.picker``, ``Policy.job_picker``); the queues of a
tier that resolve to the same picker share one instance. A preempt policy is
chosen by the preempting job's queue, else globally (``Queue.preempt_policy``,
``Policy.preempt_policy``). Pickers are found by name in ``PICKERS``;
``register_picker`` adds one, and ``praxist_fs.config`` also registers those
installed under the ``praxist_fs.pickers`` entry points.

The package, one module per part: ``base`` (the contract, the scopes and the registry),
one module per family of builtins (``project``, ``queue``, ``job``, ``preempt``; each
registers its own), ``context`` (``Pass``: what a pass knows and has decided so far,
built from journaled state and the current host sample only, so a pass is a pure
function of both and replay never needs to re-run one), ``walk`` (EASY backfill's
reservation and the openings that end a walk early) and ``ledger`` (fair share's usage).
A new picker is a class and one ``register_picker`` line; importing this package
registers the builtins.
"""

from .base import (
    KINDS, PICKERS, JobPicker, JobScope, Picker, PreemptPolicy, ProjectPicker, QueuePicker,
    VictimScope, picker_class, register_picker,
)
from .context import Pass
from .ledger import Usage
from . import project, queue, job, preempt  # noqa: F401  (the builtins register themselves)

# what a picker's author (docs/CONFIG.md, *Writing a picker*) and config need
__all__ = [
    "KINDS", "PICKERS", "JobPicker", "JobScope", "Pass", "Picker", "PreemptPolicy",
    "ProjectPicker", "QueuePicker", "Usage", "VictimScope", "picker_class", "register_picker",
]
