"""One error hierarchy, so callers can tell our bug from a peer's bad input.

- ``InvalidTransition``: a bug in the scheduler (an event that the state table
  does not allow). Never caused by what a peer writes.
- ``BadRequest``: a peer's request is malformed; becomes a rejected reply.
- ``SpoolClash``: another process raced us on a spool file.
- ``JournalCorrupt``: the journal is damaged beyond a torn tail.
- ``PolicyError``: the task file asks for something we cannot honour.
- ``OwnerBusy``: another live coordinator owns the run.
- ``NoProcfs``: this host shows no procfs, so no process identity (Linux only).
- ``NoRoomToStart``: the run's disk is full (or over quota, or failing) as a coordinator starts.
- ``UnsafeLayout``: a directory of the run (or above it) could be swapped by another uid.
"""

from __future__ import annotations


class PraxistError(Exception):
    """Base of every error praxist_fs raises on purpose."""


class InvalidTransition(PraxistError):
    """The core was asked to make a transition its table does not allow."""


class BadRequest(PraxistError):
    """A peer's request is invalid; ``field`` names where, ``problem`` says what."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class SpoolClash(PraxistError):
    """Another process changed a spool file under us (a race, not a bug)."""


class JournalCorrupt(PraxistError):
    """The journal has a damaged record that is not a torn tail."""


class PolicyError(PraxistError):
    """The task file is invalid at ``key_path``: got ``value``, expected ``expected``."""

    def __init__(self, key_path: str, value: object, expected: str) -> None:
        super().__init__(f"{key_path}: got {value!r}, expected {expected}")
        self.key_path = key_path
        self.value = value
        self.expected = expected


class OwnerBusy(PraxistError):
    """A live coordinator already owns the run directory."""


class NoProcfs(PraxistError):
    """No procfs here: processes cannot be identified, so nothing may be run or stopped."""


class NoRoomToStart(PraxistError):
    """A start that cannot write its files: refused with the cause, not a traceback."""


class UnsafeLayout(PraxistError):
    """A directory the coordinator would write into (or one above the run directory) is
    not safe from other uids (R-SEC-4): ``path`` and what is wrong with it, and the fix."""

    def __init__(self, path: str, problem: str, fix: str = "") -> None:
        super().__init__(f"{path}: {problem}" + (f"; {fix}" if fix else ""))
        self.path = path
        self.problem = problem
