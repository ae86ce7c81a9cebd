"""How often a job's file is written (issue 19, fewer writes per job): once per state
change. Every write renames a whole new file into jobs/<state>/, so the renames seen
through inotify (watchdog, as a peer watching jobs/ would) are the writes."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from .conftest import TASK, request, wait_for

ONE_SLOT = TASK.format(slots=1, retries=1).replace("max_concurrent_experiments: 8",
                                                   "max_concurrent_experiments: 1")


class Landings(FileSystemEventHandler):
    """Job files renamed into jobs/<state>/, and the probe files created in jobs/."""

    def __init__(self, jobs: Path) -> None:
        self.jobs = jobs
        self.lock = threading.Lock()
        self.landed: Counter[tuple[str, str]] = Counter()
        self.probes: set[str] = set()

    def on_moved(self, event: FileSystemEvent) -> None:
        dest = Path(str(event.dest_path))
        if dest.parent.parent == self.jobs and not dest.name.startswith("."):
            with self.lock:
                self.landed[dest.parent.name, dest.stem] += 1

    def on_created(self, event: FileSystemEvent) -> None:
        path = Path(str(event.src_path))
        if path.parent == self.jobs.parent and path.name.startswith("probe-"):
            with self.lock:
                self.probes.add(path.name)

    def seen(self, job_id: str) -> dict[str, int]:
        """What landed for ``job_id``, once every event before this call is in (a probe
        file created now comes after them on the same inotify queue)."""
        probe = self.jobs.parent / f"probe-{len(self.probes)}"
        probe.touch()
        wait_for(lambda: probe.name in self.probes, message="the probe's event")
        probe.unlink()
        with self.lock:
            return {state: count for (state, job), count in self.landed.items()
                    if job == job_id}


def test_a_job_that_finds_no_slot_is_written_once_per_state_saying_why_it_waits(
        make_run, tmp_path):
    """Accepted while the only slot is taken, the job's file lands in jobs/queued/ once,
    already saying why it waits; the status written after it (which refreshes pending
    reasons) leaves it be; it then lands in running/ and done/ once each."""
    run = make_run(task_text=ONE_SLOT)
    run.start()
    gate = tmp_path / "gate"
    blocker = run.reply(run.submit(request(
        "blocker", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
    run.wait_state(blocker, "running")
    jobs = run.sched / "jobs"
    landings = Landings(jobs)
    observer = Observer()
    observer.schedule(landings, str(run.sched), recursive=True)
    observer.start()
    try:
        waiter = run.reply(run.submit(request("waiter")))["job_id"]
        assert run.wait_state(waiter, "queued")["reason"].startswith("waiting for a slot")
        wait_for(lambda: (s := run.status()) and s["counts"]["queued"] == 1,
                 message="a status showing the queued job")
        assert landings.seen(waiter) == {"queued": 1}
        gate.touch()
        run.wait_state(waiter, "completed")
        assert landings.seen(waiter) == {"queued": 1, "running": 1, "done": 1}
    finally:
        observer.stop()
        observer.join()


def test_a_jobs_old_copies_leave_by_a_rename_and_are_removed_once_the_run_is_idle(
        make_run, tmp_path):
    """A state change removed the job's old copy (in queued/, then running/) between one
    commit and the next: a removal frees an inode and its blocks, ~1 ms while the disk is
    busy. The old copy now leaves its directory by a rename into resource_scheduler/trash/
    (after the new copy is in place, as before), and the trash is emptied once nothing
    waits or runs. Every disk operation is read from the power-loss ledger."""
    ledger = tmp_path / "ledger.jsonl"
    run = make_run(task_text=ONE_SLOT)
    run.start(env={"PRAXIST_POWERLOSS_LEDGER": str(ledger)})
    gate = tmp_path / "gate"
    blocker = run.reply(run.submit(request(
        "blocker", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
    run.wait_state(blocker, "running")
    waiter = run.reply(run.submit(request("waiter")))["job_id"]
    run.wait_state(waiter, "queued")
    gate.touch()
    run.wait_state(waiter, "completed")
    trash = run.sched / "trash"
    wait_for(lambda: not os.listdir(trash), message="the trash emptied once the run is idle")
    ops = [json.loads(line) for line in ledger.read_text().splitlines()]
    jobs = str(run.sched / "jobs")
    assert [op for op in ops if op["op"] == "unlink" and op["path"].startswith(jobs)] == []
    left = [op for op in ops if op["op"] == "rename" and op["src"].startswith(jobs)
            and op["path"].startswith(str(trash))]
    assert sorted(op["src"][len(jobs):] for op in left if waiter in op["src"]) == [
        f"/queued/{waiter}.json", f"/running/{waiter}.json"]
    removed = [op["path"] for op in ops if op["op"] == "unlink"]
    assert all(op["path"] in removed for op in left)
    for op in left:  # the new copy was in place first
        state = "running" if "/queued/" in op["src"] else "done"
        landed = next(i for i, o in enumerate(ops) if o["op"] == "rename" and
                      o["path"] == op["src"].replace(op["src"].split("/")[-2], state))
        assert landed < ops.index(op)
