"""A host without procfs is refused, not misread (issue 15 item 7, R-RUN-3): praxist_fs
identifies processes only through Linux procfs, which ``PRAXIST_PROC_ROOT`` moves so that a
real process can be run as if on such a host (an empty directory shows no process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from praxist_fs.cli import EXIT_NO_PROCFS

from .conftest import request

CLI = [sys.executable, "-m", "praxist_fs"]


def praxist(*args: str, proc_root: Path | str, run=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRAXIST_PROC_ROOT": str(proc_root)}
    if run is not None:
        env["PRAXIST_HOST_REGISTRY"] = str(run.root.parent / "host-registry")
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_coordinator_refuses_a_host_without_procfs_before_touching_the_run(make_run, tmp_path):
    """seed 000 "Process identities are revalidated before every signal, using the portable
    ps start identity when procfs is unavailable": praxist_fs does not implement the ps
    fallback; it refuses to start instead, saying why, so no attempt is ever taken for dead."""
    run = make_run()
    empty = tmp_path / "no-procfs"
    empty.mkdir()
    before = sorted(p.relative_to(run.root) for p in run.root.rglob("*"))
    result = praxist("serve", "--run-dir", str(run.root), "--config", str(run.task),
                     proc_root=empty, run=run)
    assert result.returncode == EXIT_NO_PROCFS
    assert result.stderr.startswith(f"praxist-fs serve: cannot read this process's identity "
                                    f"from {empty}/")
    assert "Linux procfs" in result.stderr and "OPERATIONS.md *Linux only*" in result.stderr
    assert sorted(p.relative_to(run.root) for p in run.root.rglob("*")) == before  # no lock,
    # no journal, no endpoint.json: nothing of a coordinator was started


def test_without_procfs_clients_refuse_and_running_work_is_left_alone(run, tmp_path):
    """seed 000 "platforms without procfs retain the portable process-group check": here a
    `stop`, `status` or `launch` on a host without procfs refuses (it could not tell a live
    attempt from a dead one) and the running experiment goes on untouched; the file-only
    readers (`jobs`) still answer. The same commands with the real procfs named work."""
    gate = tmp_path / "gate"
    job_id = run.reply(run.submit(request(
        "long", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"])))["job_id"]
    run.wait_state(job_id, "running")
    empty = tmp_path / "no-procfs"
    empty.mkdir()
    for verb, *args in (("stop", str(run.root), "--yes"),
                        ("status", "--run-dir", str(run.root)),
                        ("launch", "--run-dir", str(run.root), "--peer=p", "--tag=t", "--",
                         "true")):
        refused = praxist(verb, *args, proc_root=empty, run=run)
        assert refused.returncode == EXIT_NO_PROCFS, (verb, refused.stderr)
        assert refused.stderr.startswith(f"praxist-fs {verb}: cannot read this process's "
                                         f"identity from {empty}/"), refused.stderr
    listed = praxist("jobs", "--run-dir", str(run.root), "--json", proc_root=empty)
    assert listed.returncode == 0 and job_id in listed.stdout
    assert run.job(job_id)["state"] == "running" and run.proc.poll() is None
    assert not (run.sched / "STOP").exists()
    assert not list((run.sched / "spool" / "incoming").iterdir())  # launch submitted nothing

    shown = praxist("status", "--run-dir", str(run.root), "--json", proc_root="/proc", run=run)
    assert shown.returncode == 0 and json.loads(shown.stdout)["coordinator_alive"] is True
    gate.touch()
    run.wait_state(job_id, "completed")
