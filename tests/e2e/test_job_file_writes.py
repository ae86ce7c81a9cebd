"""How often a job's file is written (issue 19, fewer writes per job): once per state
change. Every write renames a whole new file into jobs/<state>/, so the renames seen
through inotify (watchdog, as a peer watching jobs/ would) are the writes."""

from __future__ import annotations

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
