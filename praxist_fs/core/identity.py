"""Semantic identity: the tag names the science, the fingerprint the request.

The job id is derived from the tag (never random), within the uid that submits it
(core/tenancy.py), so every submission of one experiment lands on one job: the tag
identifies the science, not execution syntax (seed 000), and a repeated submission
shares its job whatever its cwd, environment or spelling (R-SUB-7). The fingerprint
covers what the command runs with (command, resolved profile, cwd, env): it tells an
identical retransmission from a changed request (R-SUB-2); ``differing`` names what
changed, for the reply; a changed request with ``retry_terminal``, or any changed
request where the task asks for it (``same_tag_different_request: reject``), is
rejected with ``differences``.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:  # job_id_for alone is every CLI call's: the request model is not
    from .request import Request

NAMES_SHOWN = 8  # env keys listed per kind of change; a conflict reply stays short


def job_id_for(tag: str, uid: int | None = None) -> str:
    """A readable, path-safe job id: a tag prefix plus a short hash of the whole tag, and
    of the uid whose tag it is unless that is the coordinator's own (``uid`` None: core/
    tenancy.py's namespace). '/' never occurs in a tag, so no tag alone hashes as one of
    another uid's."""
    import hashlib  # here: status and jobs never name a job, and it loads OpenSSL

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
    import hashlib

    return hashlib.sha256(canonical.encode()).hexdigest()


def differing(job: Request, job_profile: str, request: Request, profile: str
              ) -> tuple[str, ...]:
    """What a request changes of the job its tag names, for its reply's ``differs``:
    ``argv``, ``command``, ``profile``, ``cwd``, and ``env:NAME`` for each variable it
    adds, removes or changes. Names only, never values: a value may be a secret
    (compared as the keyed hash that stands for it in both requests)."""
    parts = tuple(name for name, differs in (
        ("argv", job.argv != request.argv), ("command", job.command != request.command),
        ("profile", job_profile != profile), ("cwd", job.cwd != request.cwd)) if differs)
    added, removed, changed = _env_changes(job.env, request.env)
    return parts + tuple(f"env:{name}" for name in sorted(added | removed | changed))


def differences(job: Request, job_profile: str, request: Request, profile: str) -> str:
    """What a request changes of the job its tag names, as in "command, cwd and env (this
    request adds SEED)": the command, the profile, the cwd and the env keys it adds,
    removes or changes, for the message that rejects it."""
    parts = differing(job, job_profile, request, profile)
    found = [part for part in ("command", "profile", "cwd")
             if part in parts or (part == "command" and "argv" in parts)]
    changes = [f"{verb} {_names(keys)}" for verb, keys in zip(
        ("adds", "removes", "changes"), _env_changes(job.env, request.env)) if keys]
    if changes:
        found.append(f"env (this request {'; '.join(changes)})")
    if not found:  # only a fingerprint kept by another version can differ then
        return "fingerprint"
    return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} and {found[-1]}"


def _env_changes(job_env: dict[str, str], env: dict[str, str]
                 ) -> tuple[set[str], set[str], set[str]]:
    """The variables ``env`` adds to, removes from and changes of ``job_env``."""
    return (env.keys() - job_env.keys(), job_env.keys() - env.keys(),
            {k for k in job_env.keys() & env.keys() if job_env[k] != env[k]})


def _names(keys: set[str]) -> str:
    shown = sorted(keys)[:NAMES_SHOWN]
    more = len(keys) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")
