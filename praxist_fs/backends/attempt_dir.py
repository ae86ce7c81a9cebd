"""The attempt directory as every backend with a shim keeps it in the run directory.

The local backend's shim and the Slurm-mode shim alike wait in ``attempts/<job>/<attempt>/``
for GO or ABORT and record exit.json there; so the barrier's patience, the description
of an attempt (attempt.json) and the fsync that keeps exit.json through a power cut are
the same for both, and live here rather than in either backend. (The local shim makes
its own directory durable before its exit.json, shim.make_durable; the local backend
uses this fsync only for a shim it re-adopted.)
"""

from __future__ import annotations

from collections.abc import Iterable

from praxist_fs.adapters.fsio import dumps, fsync_dir, write_atomic
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.core.effects import SpawnAttempt

# How long a shim whose coordinator vanished waits for the next one to give GO.
BARRIER_TIMEOUT_S = 600


def description(layout: RunLayout, effect: SpawnAttempt) -> bytes:
    """attempt.json's bytes: the attempt for people and tools, not for the shim that runs
    it (no environment)."""
    return dumps({
        **effect.metadata, "argv": list(effect.argv) if effect.argv else None,
        "command": effect.command, "cwd": effect.cwd or layout.root_str,
        "log": layout.log_str(effect.job_id, effect.attempt_id),
    })


def describe(layout: RunLayout, effect: SpawnAttempt) -> None:
    """attempt.json, written once the batch's attempts are on their way (the Slurm
    backend's; the local shim writes its own while its command runs). A description: a
    power cut ends the shim too, so no fsync."""
    write_atomic(layout.attempt_dir(effect.job_id, effect.attempt_id) / "attempt.json",
                 description(layout, effect), sync=False)


def make_durable(layout: RunLayout, attempts: Iterable[tuple[str, str]]) -> None:
    """fsync attempt directories (job id, attempt id) into their parents, every time (a
    job's directory may come from a coordinator killed before its fsync): exit.json,
    fsynced by the shim into its attempt directory, must not vanish with the directory
    after a power cut. Each parent once, however many attempts it holds; a job's
    directory removed meanwhile (by hand) holds no exit.json to keep."""
    job_ids = {job_id for job_id, _ in attempts}
    for job_id in sorted(job_ids):
        try:
            fsync_dir(layout.attempts / job_id)
        except FileNotFoundError:
            continue
    if job_ids:
        fsync_dir(layout.attempts)
