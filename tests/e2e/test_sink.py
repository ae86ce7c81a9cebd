"""A new output on a real coordinator (issue 30 item 2, the exporter seam): this file is
the whole of it. ``EndFile`` is a sink (one line per job that ended, as a site's
notifier might want), ``serve`` a coordinator with it appended to ``Coordinator.sinks``
(the list the daemon's driver hands every committed batch), and the test runs that
coordinator as a process on a real run directory, with real shims and inotify."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from praxist_fs.config import load_policy
from praxist_fs.core.effects import JobEnded
from praxist_fs.daemon import Coordinator
from praxist_fs.sinks import Commit, Sink

from .conftest import request, wait_for

ROOT = Path(__file__).resolve().parents[2]  # where ``tests`` is imported from


class EndFile(Sink):
    """Appends ``<job id> <state> <exit code>`` for each job that ended, read from the
    core it is handed, once the batch that ended it is committed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def committed(self, commit: Commit) -> None:
        for effect in commit.effects:
            if isinstance(effect, JobEnded):
                code = commit.sched.jobs[effect.job_id].current.exit_code
                with open(self.path, "a", encoding="utf-8") as out:
                    out.write(f"{effect.job_id} {effect.state} {code}\n")


def serve(run_dir: str, task: str, ended: str) -> None:
    """``praxist-fs serve``, with one more sink."""
    coordinator = Coordinator(run_dir, load_policy(task),
                              host_registry=os.environ["PRAXIST_HOST_REGISTRY"],
                              psi_root=os.environ["PRAXIST_PSI_ROOT"])
    coordinator.sinks.append(EndFile(Path(ended)))
    sys.exit(coordinator.run())


def test_a_sink_added_to_a_coordinator_is_told_each_end_once(make_run, tmp_path):
    ended = tmp_path / "ended.txt"
    run = make_run()
    run.serve_command = lambda: [sys.executable, "-c", (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
        "from tests.e2e.test_sink import serve; "
        f"serve({str(run.root)!r}, {str(run.task)!r}, {str(ended)!r})")]

    def lines() -> list[str]:
        return ended.read_text().splitlines() if ended.exists() else []

    run.start()
    ok = run.reply(run.submit(request("ok", ["true"])))["job_id"]
    failed = run.reply(run.submit(request("fails", ["sh", "-c", "exit 3"])))["job_id"]
    run.wait_state(ok, "completed")
    run.wait_state(failed, "failed")
    wait_for(lambda: len(lines()) == 2, message="both ends in the sink's file")
    assert sorted(lines()) == sorted([f"{ok} completed 0", f"{failed} failed 3"])
    assert run.stop() == 0
    run.start()  # a restart replays both ends: it tells the sink of none again
    late = run.reply(run.submit(request("late", ["true"])))["job_id"]
    run.wait_state(late, "completed")
    wait_for(lambda: len(lines()) == 3, message="the third end in the sink's file")
    assert lines()[2] == f"{late} completed 0"
    assert run.stop() == 0
