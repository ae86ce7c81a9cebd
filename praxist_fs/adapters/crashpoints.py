"""Named crash points for the crash-point matrix tests (issue: crash-proof by construction).

``PRAXIST_CRASH_AT=NAME`` (or ``NAME:N`` for the N-th time) makes the coordinator
``os._exit`` the moment it reaches that point, like a ``kill -9`` at exactly that
line. ``NAME@MOMENT`` crashes at the first pass of ``NAME`` while the batch that journals
``MOMENT`` is committed and carried out (``driver.moments``: ``request:<file>``,
``launched:<tag>[/<attempt>]``, ``ended:<tag>[/<attempt>]``, ``done:<tag>``): the same
moment of a job's life however many commits the loop made before it, where the N-th
commit moves whenever batching changes. Unset, ``reach`` is a string comparison and
nothing else, and no batch's moments are named.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

CRASH_EXIT_CODE = 86
_spec = os.environ.get("PRAXIST_CRASH_AT", "")
_name, _, _moment = _spec.partition("@")
if not _moment:
    _name, _, _nth = _name.partition(":")
_remaining = 1 if _moment else int(_nth or 1)
# Whether the driver must name each batch's moments (``within``): a crash waits on one.
WANTS_MOMENTS = bool(_moment)
_within: frozenset[str] = frozenset()


def within(moments: Iterable[str]) -> None:
    """The moments of the batch being committed and carried out from now on (none once it
    is done): a point named ``NAME@MOMENT`` crashes only inside the batch that has it."""
    global _within
    _within = frozenset(moments)


def reach(point: str) -> None:
    if due(point):
        os._exit(CRASH_EXIT_CODE)


def due(point: str) -> bool:
    """Count a pass of ``point`` as ``reach`` does, and say whether the crash is due then,
    without crashing: for a point a forked child passes (its counts are its own copy), which
    crashes there with ``crash`` and makes its parent crash too on seeing that."""
    global _remaining
    if point != _name or (_moment and _moment not in _within):
        return False
    _remaining -= 1
    return _remaining <= 0


def crash() -> None:
    os._exit(CRASH_EXIT_CODE)
