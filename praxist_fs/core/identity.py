"""Semantic identity: the tag names the science, the fingerprint the request.

The job id is derived from the tag (never random), within the uid that submits
it (core/tenancy.py), so every submission of one experiment lands on one job. The fingerprint covers what changes the
computation (command, resolved profile, cwd, env) and tells an identical
retransmission from a changed request (R-SUB-2); ``differences`` names, for the
peer whose request conflicts, which of those parts changed.
"""

from __future__ import annotations

import hashlib
import json

from .request import Request

NAMES_SHOWN = 8  # env keys listed per kind of change; a conflict reply stays short


def job_id_for(tag: str, uid: int | None = None) -> str:
    """A readable, path-safe job id: a tag prefix plus a short hash of the whole tag, and
    of the uid whose tag it is unless that is the coordinator's own (``uid`` None: core/
    tenancy.py's namespace). '/' never occurs in a tag, so no tag alone hashes as one of
    another uid's."""
    key = tag if uid is None else f"{uid}/{tag}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{tag[:64]}-{digest}"


def fingerprint(request: Request, profile: str) -> str:
    canonical = json.dumps(
        {
            "argv": list(request.argv) if request.argv is not None else None,
            "command": request.command,
            "profile": profile,
            "cwd": request.cwd,
            "env": request.env,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def differences(job: Request, job_profile: str, request: Request, profile: str) -> str:
    """What a request changes of the job its tag names, as in "command, cwd and env (this
    request adds SEED)": the command, the profile, the cwd and the env keys it adds,
    removes or changes. Key names only, never values: a value may be a secret (compared
    as the keyed hash that stands for it in both requests)."""
    found = []
    if (job.argv, job.command) != (request.argv, request.command):
        found.append("command")
    if job_profile != profile:
        found.append("profile")
    if job.cwd != request.cwd:
        found.append("cwd")
    changes = [f"{verb} {_names(keys)}" for verb, keys in (
        ("adds", request.env.keys() - job.env.keys()),
        ("removes", job.env.keys() - request.env.keys()),
        ("changes", {k for k in job.env.keys() & request.env.keys()
                     if job.env[k] != request.env[k]})) if keys]
    if changes:
        found.append(f"env (this request {'; '.join(changes)})")
    if not found:  # only a fingerprint kept by another version can differ then
        return "fingerprint"
    return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"


def _names(keys: set[str]) -> str:
    shown = sorted(keys)[:NAMES_SHOWN]
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")
