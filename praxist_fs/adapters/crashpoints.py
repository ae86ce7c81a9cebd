"""Named crash points for the crash-point matrix tests (issue: crash-proof by construction).

``PRAXIST_CRASH_AT=NAME`` (or ``NAME:N`` for the N-th time) makes the coordinator
``os._exit`` the moment it reaches that point, like a ``kill -9`` at exactly that
line. Unset, ``reach`` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os

CRASH_EXIT_CODE = 86
_name, _, _nth = os.environ.get("PRAXIST_CRASH_AT", "").partition(":")
_remaining = int(_nth or 1)


def reach(point: str) -> None:
    global _remaining
    if point != _name:
        return
    _remaining -= 1
    if _remaining <= 0:
        os._exit(CRASH_EXIT_CODE)


def due(point: str) -> bool:
    """Count a pass of ``point`` as ``reach`` does, and say whether the crash is due then,
    without crashing: for a point a forked child passes (its counts are its own copy), which
    crashes there with ``crash`` and makes its parent crash too on seeing that."""
    global _remaining
    if point != _name:
        return False
    _remaining -= 1
    return _remaining <= 0


def crash() -> None:
    os._exit(CRASH_EXIT_CODE)
