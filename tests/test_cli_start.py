"""The read and control verbs start in a blink (issue 31 item 2, R-PERF-3): each imports
what it reads and writes, never the coordinator's libraries (yaml for task files, psutil
for process trees, watchdog for inotify) nor the standard library's slow imports that a
verb's module can do without (dataclasses and the inspect/ast/dis it loads, typing, shutil
and the compressors it loads): together tens of milliseconds of every call.

A behaviour check, not a timing (bench/bench_cli.py times them): each verb runs in a
fresh interpreter against a real run (the verbs that talk to a coordinator: one it
serves), and the test reads ``sys.modules`` after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from praxist_fs.cli import VERBS as VERB_MODULES

ROOT = Path(__file__).resolve().parents[1]
NEVER = {"yaml", "psutil", "watchdog", "dataclasses", "inspect", "typing", "shutil"}

# Each verb as a user types it (JOB: a finished job of the run), with what it must have
# done to count: read the run (its module and the client loaded) and answered.
VERBS = [["status"], ["status", "--json"], ["jobs", "--limit", "20"],
         ["jobs", "--state", "failed"], ["logs", "JOB"], ["logs", "TAG"], ["wait", "JOB"],
         ["cancel", "JOB", "--timeout", "0"], ["hold", "JOB", "--timeout", "0"],
         ["release", "JOB", "--timeout", "0"],
         ["update", "JOB", "--priority", "1", "--timeout", "0"],
         ["raise-budget", "--gpu-hours", "1", "--timeout", "0"], ["top"]]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    """A run with three finished jobs as a coordinator that served it and stopped leaves
    it (status.json, the job index), registered in a host registry of its own."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_compaction import served_fixture

    scratch = tmp_path_factory.mktemp("cli-start")
    registry = os.environ.get("PRAXIST_HOST_REGISTRY")
    os.environ["PRAXIST_HOST_REGISTRY"] = str(scratch / "hosts")
    try:
        run_dir = served_fixture(scratch / "served", 3) / "run"
    finally:
        if registry is None:
            del os.environ["PRAXIST_HOST_REGISTRY"]
        else:
            os.environ["PRAXIST_HOST_REGISTRY"] = registry
        sys.path.remove(str(ROOT / "bench"))
    done = sorted((run_dir / "resource_scheduler" / "jobs" / "done").glob("*.json"))
    return run_dir, json.loads(done[0].read_text())


def loaded_by(argv: list[str]) -> tuple[int, str, set[str]]:
    """(exit status, stdout, the modules loaded) of ``praxist-fs ARGV`` in a fresh
    interpreter, as the console script runs it."""
    code = ("import contextlib, io, json, sys\nfrom praxist_fs.cli import main\n"
            "out = io.TextIOWrapper(io.BytesIO())\n"  # logs writes to sys.stdout.buffer
            "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    status = main({argv!r})\n"
            "out.flush()\n"
            "print(json.dumps([status, out.buffer.getvalue().decode(), sorted(sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    status, out, modules = json.loads(done.stdout.strip().splitlines()[-1])
    return status, out, set(modules)


@pytest.mark.parametrize("verb", VERBS, ids=" ".join)
def test_a_read_or_control_verb_imports_none_of_the_heavy_modules(verb, run):
    run_dir, job_file = run
    job = job_file["job_id"]
    names = {"JOB": job, "TAG": job_file["tag"]}
    argv = [names.get(word, word) for word in verb] + ["--run-dir", str(run_dir)]
    status, out, modules = loaded_by(argv)
    assert {"praxist_fs.client", f"praxist_fs.commands.{VERB_MODULES[verb[0]]}"} <= modules
    assert {m.partition(".")[0] for m in modules} & NEVER == set()
    if verb[0] in ("status", "jobs", "logs"):  # they read the run and printed it
        assert status == 0 and out.strip()
    if verb[0] == "jobs" and "--limit" in verb:
        assert job in out


@pytest.fixture
def live(tmp_path, monkeypatch) -> Path:
    """A fresh run its coordinator serves (its own host registry), stopped at the end if
    the test did not stop it."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from bench_coordinator import Coordinator
    finally:
        sys.path.remove(str(ROOT / "bench"))
    monkeypatch.setenv("PRAXIST_HOST_REGISTRY", str(tmp_path / "hosts"))
    (tmp_path / "live").mkdir()
    with Coordinator("cli-start", 1, scratch=tmp_path / "live", keep=True) as coordinator:
        yield coordinator.run_dir


def test_stop_through_a_live_coordinator_loads_no_process_table_slurm_or_policy(live):
    """The common stop: a local run whose coordinator is alive. It writes the stop request
    and waits for the coordinator to go; psutil, the Slurm backend (a stop without a
    coordinator's own), the run registry (--all's) and the policy are not its to load."""
    status, out, modules = loaded_by(["stop", str(live)])
    assert status == 0 and json.loads(out)["stopped_run_ids"] == [str(live)]
    assert {m.partition(".")[0] for m in modules} & NEVER == set()
    assert not {m for m in modules if m.startswith(("praxist_fs.backends",
                                                    "praxist_fs.adapters.runs",
                                                    "praxist_fs.core.policy"))}


def test_a_generation_request_and_a_lease_decline_load_no_watchdog(live):
    """``generation`` sends a control request and reads its reply; ``lease decline``
    writes one file: neither waits on inotify, so neither loads watchdog (nor the
    request validator's core modules: a name is checked by core.bounds)."""
    status, out, modules = loaded_by(["generation", "open", "1", "--run-dir", str(live)])
    assert status == 0 and json.loads(out)["outcome"] == "ok"
    assert {m.partition(".")[0] for m in modules} & NEVER == set()
    assert "praxist_fs.core.request" not in modules
    status, out, modules = loaded_by(["lease", "decline", "--peer", "p1", "--lease", "L1",
                                      "--run-dir", str(live)])
    assert status == 0 and json.loads(out) == {"peer": "p1", "generation": 1,
                                               "lease_id": "L1"}
    assert {m.partition(".")[0] for m in modules} & NEVER == set()


def test_a_lease_wait_that_ends_at_once_loads_no_watchdog(live):
    """``lease wait`` arms its inotify doorbell only once it has registered the peer as
    idle and found no lease yet: the registration, what the coordinator waits for, is not
    delayed by watchdog's import, and a wait that ends at once (``--timeout 0``) never
    loads it."""
    status, _, modules = loaded_by(["lease", "wait", "--peer", "p1", "--generation", "1",
                                    "--timeout", "0", "--run-dir", str(live)])
    assert status == 1  # no lease within 0 s; the registration withdrawn
    assert {m.partition(".")[0] for m in modules} & NEVER == set()
    assert not (live / "gen_1" / "resource_supply" / "idle" / "p1.json").exists()


def test_a_launch_to_a_live_coordinator_loads_no_request_model_or_policy(live):
    """A launch that a live coordinator serves writes the request and reads its reply:
    the request model, the policy and the admission model (dataclasses, typing) are the
    coordinator's; the CLI checks names and the size against core.bounds."""
    status, out, modules = loaded_by(["launch", "--detach", "--peer", "p1", "--tag", "t1",
                                      "--run-dir", str(live), "--", "true"])
    assert status == 0 and out.strip().startswith("t1-")  # the job id it was given
    assert {m.partition(".")[0] for m in modules} & NEVER == set()
    assert not {"praxist_fs.core.request", "praxist_fs.core.policy",
                "praxist_fs.core.admission", "praxist_fs.legacy"} & modules


def test_the_help_keeps_the_terminals_width():
    """argparse's formatters take their width from cli (not shutil): $COLUMNS still sets
    it, as argparse's own default does."""
    widths = {}
    for columns in ("50", "120"):
        done = subprocess.run([sys.executable, "-m", "praxist_fs", "jobs", "--help"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "COLUMNS": columns})
        widths[columns] = max(len(line) for line in done.stdout.splitlines())
    assert widths["50"] <= 55 < 80 < widths["120"], widths


def test_a_verb_run_as_its_own_process_collects_garbage_and_keeps_its_exit_status(run):
    """``praxist-fs VERB`` (and ``python -m praxist_fs``) starts with the cyclic garbage
    collector off, for its imports only: the verb itself runs with it on (a ``serve`` or a
    ``wait`` runs for days), the garbage it leaves is collected and finalized at its exit
    (a buffered file in a cycle is flushed, as before), and its exit status is the
    process's."""
    run_dir, _ = run
    code = ("import gc, os, sys\n"
            "import praxist_fs.commands.jobs as jobs\n"
            "class Cycle:\n"
            "    def __del__(self, write=os.write):\n"
            "        write(1, b'finalized\\n')\n"
            "def cmd_jobs(args):\n"
            "    cycle = Cycle()\n"
            "    cycle.itself = cycle\n"
            "    print('collecting' if gc.isenabled() else 'not collecting', flush=True)\n"
            "    return 3\n"
            "jobs.cmd_jobs = cmd_jobs\n"
            "from praxist_fs.cli import run\n"
            f"sys.argv = ['praxist-fs', 'jobs', '--run-dir', {str(run_dir)!r}]\n"
            "run()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout.split()) == (3, ["collecting", "finalized"]), \
        done.stderr


@pytest.mark.parametrize("entry", [[sys.executable, "-m", "praxist_fs"],
                                   [str(Path(sys.executable).parent / "praxist-fs")]],
                         ids=["python -m", "console script"])
def test_each_entry_answers_a_verb_and_a_mistake(entry, run):
    """Both ways a user starts the CLI (each now entered through ``run``) answer as
    ``main`` does: a verb's output and status 0, and a mistake's status 2 with argparse's
    message."""
    run_dir, job_file = run
    done = subprocess.run([*entry, "jobs", "--limit", "20", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and job_file["job_id"] in done.stdout, done.stderr
    wrong = subprocess.run([*entry, "jobs", "--no-such-flag"], capture_output=True,
                           text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert wrong.returncode == 2 and "--no-such-flag" in wrong.stderr
