"""Whose is what on a shared box (R-SEC-5). Pure: uids are inputs.

The kernel says who wrote a file (its owner, core/trust.py); a name in the file is a
label within that uid, never an identity:

- A job's identity is (uid, tag). The coordinator's own uid (and records from before
  uids were observed) keeps the job ids it always had, derived from the tag alone;
  another uid's tag is hashed with its uid, so equal tags of two uids name two jobs:
  neither can squat the other's tag, wait on it or read its logs by naming it.
- A request or control id belongs to the uid whose file first used it. Another uid's
  file naming it is set aside without touching the first one's request or reply.
- A peer, for its caps, is (uid, peer name): a name borrowed from another uid counts
  against the borrower's own.
- Each uid's requests waiting in the spool are bounded (``spool_quota_requests``,
  ``spool_quota_bytes``): beyond that a request is rejected, so that one uid's flood
  cannot grow the coordinator without end; the spool reader takes the uids' files in
  turn (adapters/spool.py), so that a flood cannot delay another uid's request.
"""

from __future__ import annotations

from . import trust


def namespace(uid: int | None, coordinator: int | None) -> int | None:
    """The uid whose tags a file of ``uid`` names: None for the coordinator's own (and for
    records without a uid), whose job ids come from the tag alone."""
    owner = trust.owner(uid, coordinator)
    return None if owner is None or owner == coordinator else owner


def peer_key(uid: int | None, peer: str) -> tuple[int | None, str]:
    """Who a cap counts: a peer is a name within a uid."""
    return uid, peer


def peer_label(uid: int | None, peer: str, coordinator: int | None) -> str:
    """A peer as a reason names it: its name, and its uid where that is not ours."""
    theirs = namespace(uid, coordinator)
    return peer if theirs is None else f"{peer} (uid {theirs})"


def foreign_id(first: int | None, now: int | None, coordinator: int | None,
               what: str = "request") -> str | None:
    """Why a file of uid ``now`` may not use an id that a file of uid ``first`` used
    first, or None when both are one uid's."""
    if trust.owner(first, coordinator) == trust.owner(now, coordinator):
        return None
    return (f"already used by another uid's {what}; this file is owned by uid "
            f"{trust.owner(now, coordinator)}: use a request_id of your own (the CLI makes "
            "unique ones)")


def over_quota(position: tuple[int, int] | None, requests: int | None, size: int | None,
               uid: int | None) -> str | None:
    """Why a request that stands ``position`` = (n, bytes) among its uid's files waiting in
    the spool (the n-th oldest; bytes: its own and the older ones') is over the quota, or
    None. Records from before the spool was counted carry no position."""
    if position is None:
        return None
    count, used = position
    if requests is not None and count > requests:
        return (f"uid {uid} has {count} requests waiting in the spool, over the task's "
                f"spool_quota_requests ({requests}); nothing of it was queued: submit it "
                "again once the spool has drained")
    if size is not None and used > size:
        return (f"uid {uid} has {used} bytes of requests waiting in the spool, over the "
                f"task's spool_quota_bytes ({size}); nothing of it was queued: submit it "
                "again once the spool has drained")
    return None
