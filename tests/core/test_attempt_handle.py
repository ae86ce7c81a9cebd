"""An attempt's identity is its backend's opaque handle (issue 30): the local backend's
is its shim's pid, start time and boot id, under the keys the core documents
(``PROCESS_KEYS``). Journals and snapshots written when those three were fields of the
attempt, beside the handle, replay into it; the job file keeps its public ``pid`` and
``pid_start`` (R-FS-5) and shows no handle for a local attempt."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from praxist_fs.core.events import AttemptObserved, CoordinatorStarted
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.core.status import render_status

from .helpers import PreemptRun, replayed, shim

PROCESS_KEYS = ("pid", "pid_start", "boot_id")


def identity_beside(attempt: dict[str, Any]) -> dict[str, Any]:
    """A record of the attempt as it was written before the identity moved into the
    handle: ``pid``, ``pid_start`` and ``boot_id`` beside a handle only other backends set."""
    handle = attempt.pop("handle", None)
    local = handle is not None and "pid" in handle
    attempt.update({key: handle[key] if local else None for key in PROCESS_KEYS})
    if not local and handle is not None:
        attempt["handle"] = handle
    return attempt


def old_journal(journal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [identity_beside(dict(record)) if record["type"] == "attempt_observed" else record
            for record in copy.deepcopy(journal)]


def started(boot: str) -> CoordinatorStarted:
    return CoordinatorStarted(at=1e9, policy=PreemptRun().sched.policy.to_dict(), pid=2,
                              host="h", boot_id=boot)


def test_a_local_attempts_job_file_shows_its_pid_and_no_handle():
    run = PreemptRun()
    job_id = run.start("t1")
    attempt = run.job(job_id)["attempts"][0]
    assert (attempt["pid"], attempt["pid_start"]) == (run.pids, 77)
    assert "handle" not in attempt and "boot_id" not in attempt
    assert run.sched.jobs[job_id].current.handle == shim(run.pids)
    [active] = render_status(run.sched, run.tick(), {})["active"]
    assert (active["pid"], active["handle"]) == (run.pids, None)  # status.json alike


@pytest.mark.parametrize("boot, outcome", [("boot", "released"), ("the next boot", "lost")])
def test_a_journal_with_the_shims_identity_beside_the_handle_replays_into_it(boot, outcome):
    """The old records' pid, start time and boot id become the handle: the same state as
    the journal written now, and the boot id still decides, after a restart, whether a
    shim found dead at its barrier may have run its command (another boot: it may have)."""
    run = PreemptRun()
    job_id = run.start("t1")
    old = old_journal(run.journal)
    assert any("pid" in record and "handle" not in record for record in old)
    sched = replayed(old)
    assert capture(sched) == capture(replayed(run.journal))
    assert sched.jobs[job_id].current.handle == shim(run.pids)
    sched.handle(started(boot))
    [launched] = sched.jobs[job_id].attempts
    assert launched.go  # GO journaled: whether it ran is the boot's to say, the READY gone
    sched.handle(AttemptObserved(at=1e9 + 1, job_id=job_id, attempt_id="a1", alive=False))
    assert sched.jobs[job_id].attempts[0].outcome == outcome


def test_a_snapshot_with_the_shims_identity_beside_the_handle_restores_into_it():
    run = PreemptRun()
    job_id = run.start("t1")
    doc = capture(run.sched)
    old = {**copy.deepcopy(doc), "format": 2}
    for job in old["jobs"]:
        job["attempts"] = [identity_beside(attempt) for attempt in job["attempts"]]
    assert "pid" in old["jobs"][0]["attempts"][0]
    restored = restore(old)
    assert capture(restored) == doc
    assert restored.jobs[job_id].current.handle == shim(run.pids)
