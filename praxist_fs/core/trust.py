"""Who a request comes from, and what that uid may do (R-SEC-3). Pure: uids are inputs.

The daemon observes the uid that owns each request and control file as it reads it
(the kernel attests it, and in the sticky spool no one renames another's file in);
the coordinator's own uid comes with ``CoordinatorStarted``. ``None`` is a record from
before uids were observed: it counts as the coordinator's own (docs/OPERATIONS.md).

As at(1), cron and Slurm: a coordinator running as root runs each command as the
uid that submitted it; one running as an ordinary user cannot switch uids, so it
runs commands only for its own uid and the uids its task lists in ``trusted_uids``
(which then run as the coordinator: a trust decision). A job belongs to the uid that
created it. Job actions of other uids' jobs, generation actions and run stop are
for operators: root, the coordinator's uid and the task's ``operators``.
"""

from __future__ import annotations

from collections.abc import Collection

ROOT = 0


def owner(uid: int | None, coordinator: int | None) -> int | None:
    """The uid a file or job counts as: a record without one is the coordinator's."""
    return coordinator if uid is None else uid


def refusal(uid: int | None, coordinator: int | None, trusted: Collection[int]) -> str | None:
    """Why this coordinator does not run commands for ``uid``, or None if it does."""
    if uid is None or coordinator in (None, ROOT) or uid == coordinator or uid in trusted:
        return None
    return (f"the request file is owned by uid {uid}; this coordinator runs as uid "
            f"{coordinator}, not root, so it runs commands only for its own uid and the "
            "uids the task lists in trusted_uids")


def run_as(uid: int | None, coordinator: int | None, trusted: Collection[int]) -> int | None:
    """The uid an attempt's command switches to; None: the coordinator's own. A job
    accepted by a root coordinator and launched by a later, unprivileged one keeps its
    uid, so the switch fails (the attempt cannot start) rather than run it as another."""
    if uid is None or uid == coordinator or coordinator is None or \
            (coordinator != ROOT and uid in trusted):
        return None
    return uid


def is_operator(uid: int | None, coordinator: int | None, operators: Collection[int]) -> bool:
    """May act on any job, on generations and on the run: root, the coordinator's uid
    (both could rewrite the journal anyway) and the task's ``operators``."""
    return uid is None or uid in (ROOT, coordinator) or uid in operators
