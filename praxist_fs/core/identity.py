"""Semantic identity: the tag names the science, the fingerprint the request.

The job id is derived from the tag alone (never random), so every submission
of one experiment lands on one job. The fingerprint covers what changes the
computation (command, resolved profile, cwd, env) and tells an identical
retransmission from a changed request (R-SUB-2).
"""

from __future__ import annotations

import hashlib
import json

from .request import Request


def job_id_for(tag: str) -> str:
    """A readable, path-safe job id: a tag prefix plus a short hash of the whole tag."""
    digest = hashlib.sha256(tag.encode()).hexdigest()[:8]
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
