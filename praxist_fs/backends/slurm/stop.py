"""A stop of a Slurm run that no live coordinator serves (R-DIST-4): ``praxist-fs stop``
fences the run (stopper.py) and, if a Slurm-backend coordinator ever served it, ends
the run's work in Slurm itself, since a job that waits there with GO given would
otherwise start on a node nobody watches:

- ABORT in every attempt directory whose command has not started (no READY, or READY
  without GO): a shim that starts later reads it and leaves without running anything;
- scancel of every Slurm job of the run, those the job files name and any other
  found by name (``<job>-<attempt>-px<run8>``: a submission the journal never recorded), then a
  wait, up to the stop's timeout, until Slurm has ended them all.

The coordinator writes ``resource_scheduler/slurm.json`` before its first sbatch,
naming its ``SLURM_CONF``, so that the stop asks the cluster the jobs are on, whatever
the environment of the user who runs it. What was done is returned for the STOP
sentinel and the stop's output; a coordinator started later journals it with the stop
(``stopper.fenced_reason``) and records each attempt as cancelled.
"""

from __future__ import annotations

import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from praxist_fs.adapters.fsio import read_json, write_json
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends.slurm.client import (
    PENDING_STATES, RUNNING_STATES, SlurmClient, SlurmUnavailable, run_command,
)
from praxist_fs.backends.slurm.config import SlurmConfig

CLUSTER = "slurm.json"  # in resource_scheduler/: the cluster the run's jobs go to


def cluster_record(layout: RunLayout) -> Path:
    return layout.scheduler / CLUSTER


def record_cluster(layout: RunLayout, config: SlurmConfig) -> None:
    """Before the first sbatch of a coordinator: which cluster it submits to (its
    SLURM_CONF, none for the default one) and how long a Slurm command may take.
    Durable: a stop after a power cut must still find the jobs."""
    write_json(cluster_record(layout), {
        "slurm_conf": os.environ.get("SLURM_CONF"),
        "command_timeout_s": config.command_timeout_s}, durable=True)


def end_run_in_slurm(layout: RunLayout, timeout: float) -> dict[str, Any] | None:
    """ABORT for the attempts not yet started and scancel for every Slurm job of the run,
    waiting up to ``timeout`` seconds for Slurm to end them: what was done (``aborted``:
    ``job/attempt`` names, ``cancelled``: Slurm job id -> its last state), or None for a
    run no Slurm-backend coordinator served. RuntimeError when Slurm did not answer, or
    a job of the run still runs at the deadline (the run is fenced all the same: the
    stop may be run again)."""
    record = read_json(cluster_record(layout))
    if not isinstance(record, dict):
        return None
    env = dict(os.environ)
    if isinstance(record.get("slurm_conf"), str):
        env["SLURM_CONF"] = record["slurm_conf"]
    command_timeout = record.get("command_timeout_s")
    config = SlurmConfig(command_timeout_s=float(command_timeout)) if isinstance(
        command_timeout, (int, float)) and not isinstance(command_timeout, bool) else \
        SlurmConfig()
    client = SlurmClient(config, layout.root, partial(run_command, env=env))
    aborted = _abort_unstarted(layout, client)
    try:
        ids, states = client.end_run(_journaled_ids(layout), time.monotonic() + timeout)
    except SlurmUnavailable as exc:
        raise RuntimeError(f"Slurm did not answer ({exc}): the run is fenced, but its "
                           "Slurm jobs may still wait or run; run praxist-fs stop again"
                           ) from None
    if states is None:
        raise RuntimeError(f"scancel sent to Slurm jobs {', '.join(ids)}, but squeue did not "
                           "answer since: run praxist-fs stop again to see them end")
    left = [slurm_id for slurm_id, state in states.items()
            if state.state in PENDING_STATES | RUNNING_STATES]
    if left:
        raise RuntimeError(f"Slurm jobs still active {timeout:g} s after scancel: "
                           + ", ".join(left))
    return {"aborted": aborted, "cancelled": {
        slurm_id: states[slurm_id].state if slurm_id in states else "gone"
        for slurm_id in ids}}


def _abort_unstarted(layout: RunLayout, client: SlurmClient) -> list[str]:
    """ABORT in each attempt directory whose command has not started and that has no
    ABORT yet: ``job/attempt`` of each."""
    aborted = []
    for attempt in sorted(layout.attempts.glob("*/*")):
        names = set(os.listdir(attempt)) if attempt.is_dir() else {"exit.json"}
        if "exit.json" in names or "ABORT" in names or {"READY", "GO"} <= names:
            continue
        client.release(attempt, go=False)
        aborted.append(f"{attempt.parent.name}/{attempt.name}")
    return aborted


def _journaled_ids(layout: RunLayout) -> list[str]:
    """The Slurm job ids the running job files name (their attempts' handles)."""
    ids = []
    for path in sorted(layout.jobs("running").glob("*.json")):
        doc = read_json(path)
        for attempt in (doc.get("attempts") or []) if isinstance(doc, dict) else []:
            handle = attempt.get("handle") if isinstance(attempt, dict) else None
            if isinstance(handle, dict) and handle.get("backend") == "slurm" and \
                    str(handle.get("job_id", "")).isdigit() and attempt.get("ended_at") is None:
                ids.append(str(handle["job_id"]))
    return ids
