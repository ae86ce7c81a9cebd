"""Every shell and Python block of README.md and docs/*.md runs verbatim here, or says why
it cannot; and the documented state diagram is current.

The line right before a block's opening fence marks it (an HTML comment, invisible once
rendered):

    <!-- tested: NAME -->        a test below runs the block's text unchanged, by NAME
    <!-- illustrative: WHY -->   it is not run (a GPU, a foreground server, PyPI, a synopsis)

A shell block is run from the repository root by ``bash -euo pipefail``, a Python block as a
script by the virtual environment's Python (as ``python3 FILE`` would), with its output in files
(a block may leave a coordinator serving in the background) and only its own variables
(``RUN``, ``GPURUN``) set from outside. Its coordinators get a temporary host registry and
calm PSI files like every coordinator of the tests, and are stopped afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from .conftest import SLURM_TASK, Run, read_json, request, wait_for

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "PROTOCOL.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE_TASK = ROOT / "fixtures" / "tasks" / "example.yaml"
SHELL_LANGUAGES = {"sh", "bash", "shell", "console", "zsh", "shell-session"}
PYTHON_LANGUAGES = {"python", "py", "python3", "pycon"}
FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^<!-- (tested|illustrative|output): (\S.*?) -->$")
# Every block marked tested, by the test that runs it.
TESTED = {
    "quick-start", "tour-submit", "tour-generation", "tour-control", "tour-stop",
    "tour-gpus", "tour-simulate",  # README
    "shell-submit", "shell-wait", "central-attempts",  # PROTOCOL
    "legacy-launch", "ops-status", "ops-status-json", "ops-generation-operator",
    "ops-generation-status", "ops-invariants", "ops-report", "slurm-warning",  # OPERATIONS
    "simulate-livelock",  # SIMULATE
    "python-client", "python-sweep",  # PYTHON
}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, from 1
    language: str
    marker: str | None  # tested, illustrative or output
    name: str | None  # the marker's NAME or WHY
    text: str  # without the fences and the indentation of a block in a list

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, language = fence.groups()
        end = next((j for j in range(i + 1, len(lines))
                    if set(lines[j].strip()) == {ticks[0]} and len(lines[j].strip()) >= len(ticks)),
                   len(lines))
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip()
                for line in lines[i + 1:end]]
        marker = MARKER.match(lines[i - 1].strip()) if i else None
        found.append(Block(path, i + 1, language, marker and marker[1], marker and marker[2],
                           "\n".join(body) + "\n"))
        i = end + 1
    return found


def documented(name: str, marker: str = "tested") -> str:
    [block] = [b for path in DOCS for b in blocks(path) if (b.marker, b.name) == (marker, name)]
    return block.text


def test_every_doc_whose_blocks_run_praxist_fs_from_path_says_how_to_put_it_there():
    """Issue 29: blocks ran only because the tests put .venv/bin on PATH; no doc said so."""
    bare = re.compile(r"(^|[\s;(|&])praxist-fs\s")
    for path in DOCS:
        text = path.read_text()
        if any(b.marker == "tested" and bare.search(b.text) for b in blocks(path)):
            assert '.venv/bin:$PATH' in text, f"{path.name} runs praxist-fs from PATH"


def test_every_shell_and_python_block_is_run_by_a_test_or_marked_illustrative():
    every = [b for path in DOCS for b in blocks(path)]
    unmarked = [b.where() for b in every
                if b.language in SHELL_LANGUAGES | PYTHON_LANGUAGES and b.marker is None]
    assert not unmarked, ("each shell or Python block needs '<!-- tested: NAME -->' (and a test in "
                          "tests/e2e/test_docs.py) or '<!-- illustrative: WHY -->' on the line "
                          f"before its fence: {unmarked}")
    tested = [b.name for b in every if b.marker == "tested"]
    assert len(tested) == len(set(tested)), f"a tested name is used twice: {sorted(tested)}"
    assert set(tested) == TESTED, "TESTED must name exactly the blocks marked tested"
    for path in DOCS:  # a marker that is not right before a fence marks nothing
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines[:-1], 1):
            if MARKER.match(line.strip()):
                assert FENCE.match(lines[number]), f"{path.name}:{number}: no fence after {line}"


def test_the_block_reader_finds_blocks_and_markers(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("text\n<!-- tested: a -->\n```sh\necho a\n```\n1. item\n"
                   "   <!-- illustrative: needs a GPU -->\n   ```bash\n   nvidia-smi\n"
                   "     indented\n   ```\n````console\n$ x\n```\n````\n```json\n{}\n```\n")
    found = [(b.line, b.language, b.marker, b.name, b.text) for b in blocks(doc)]
    assert found == [(3, "sh", "tested", "a", "echo a\n"),
                     (8, "bash", "illustrative", "needs a GPU", "nvidia-smi\n  indented\n"),
                     (12, "console", None, None, "$ x\n```\n"),
                     (16, "json", None, None, "{}\n")]


# -- running blocks ------------------------------------------------------------------------

class Shell:
    """Runs documented blocks verbatim, and stops every coordinator they leave behind."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        psi = tmp_path / "calm-psi"
        psi.mkdir()
        for domain in ("cpu", "memory", "io"):
            (psi / domain).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        (tmp_path / "tmp").mkdir()
        self.env = {name: value for name, value in os.environ.items()
                    if not name.startswith("PRAXIST_")}
        # bare `praxist-fs` in docs/ is the clone's console script: the docs tell readers
        # to put .venv/bin first on PATH (OPERATIONS.md's opening), as is done here
        self.env.update(PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                        PRAXIST_HOST_REGISTRY=str(tmp_path / "host-registry"),
                        PRAXIST_PSI_ROOT=str(psi), TMPDIR=str(tmp_path / "tmp"))
        self.runs: list[Path] = []
        self.serial = 0

    def run_dir(self, name: str, variable: str = "RUN") -> Path:
        """A run directory of this test, named to the blocks by ``variable``."""
        path = self.tmp / name
        self.env[variable] = str(path)
        self.runs.append(path)
        return path

    def __call__(self, *names: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run the named blocks one after the other in one bash, as a reader pastes them."""
        self.serial += 1
        out, err = (self.tmp / f"block-{self.serial}.{kind}" for kind in ("out", "err"))
        with open(out, "w") as stdout, open(err, "w") as stderr:
            code = subprocess.run(["bash", "-euo", "pipefail", "-c",
                                   "".join(documented(name) for name in names)],
                                  cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL,
                                  stdout=stdout, stderr=stderr, timeout=timeout).returncode
        return subprocess.CompletedProcess(names, code, out.read_text(), err.read_text())

    def python(self, name: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """Run the named Python block as a script file of its own, from the repository
        root, with this interpreter (the virtual environment's). Its cache (an executor's
        default folder) is in the test's directory."""
        script = self.tmp / f"{name}.py"
        script.write_text(documented(name))
        return subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, timeout=timeout,
                              env={**self.env, "XDG_CACHE_HOME": str(self.tmp / "cache")})

    def close(self) -> None:
        for root in self.runs:
            serving = [p for p in psutil.process_iter(["cmdline"])
                       if "serve" in (p.info["cmdline"] or ()) and str(root) in p.info["cmdline"]]
            for proc in serving:
                proc.send_signal(signal.SIGTERM)
            for proc in psutil.wait_procs(serving, timeout=15)[1]:
                proc.kill()
            Run(root, EXAMPLE_TASK).kill_attempt_groups()


@pytest.fixture
def shell(tmp_path):
    if not (ROOT / ".venv" / "bin" / "praxist-fs").exists():
        pytest.fail("the README's blocks run .venv/bin/praxist-fs: `make .venv/.installed` first")
    shell = Shell(tmp_path)
    yield shell
    shell.close()


def job_id(tag: str) -> str:
    from praxist_fs.core.identity import job_id_for
    return job_id_for(tag)


def test_readme_quick_start_and_tour_run_verbatim(shell):
    run = Run(shell.run_dir("myrun"), EXAMPLE_TASK)

    quick = shell("quick-start")
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "train done: seed 1 lr 0.1 final loss" in quick.stdout  # launch streamed the log
    assert re.search(r"^counts: completed 1$", quick.stdout, re.M), quick.stdout  # status
    train = job_id("train-lr0.1-seed1")
    assert run.job(train)["state"] == "completed"
    assert read_json(run.sched / "attempts" / train / "a1" / "progress.json") == {
        "done": 5, "total": 5, "unit": "step"}

    submit = shell("tour-submit")  # printf + mv: no env, so the coordinator's PATH
    assert submit.returncode == 0, submit.stderr
    reply = json.loads(submit.stdout)
    assert (reply["outcome"], reply["job_id"]) == ("accepted", job_id("eval-seed3"))
    assert run.wait_state(reply["job_id"], "completed", "failed")["exit_code"] == 0
    log = run.root / "logs" / "experiments" / reply["job_id"] / "a1.log"
    assert log.read_text().endswith("eval done: seed 3 accuracy 0.790\n")

    generation = shell("tour-generation")
    assert generation.returncode == 0, generation.stdout + generation.stderr
    assert "eval done: seed 4 accuracy" in generation.stdout
    assert '"reason": "generation 1 closing"' in generation.stdout
    evaluated = run.job(job_id("eval-seed4"))
    lease = read_json(run.sched / "spool" / "replies" / f"{evaluated['request_id']}.json")["lease"]
    assert lease["outcome"] == "consumed" and evaluated["exit_code"] == 0

    control = shell("tour-control")
    assert control.returncode == 0, control.stdout + control.stderr
    train, evaluate = job_id("train-lr0.3-seed1"), job_id("eval-lr0.3-seed1")
    assert control.stdout.split()[:2] == [train, evaluate]  # --detach prints the job ids
    assert f"dependency: waiting for {train}" in control.stdout  # the jobs table
    assert re.search(rf"^  {train} +cancell(ed|ing) ", control.stdout, re.M)
    assert "eval ended: exit 1" in control.stdout
    assert run.job(train)["state"] == "cancelled"
    assert run.job(evaluate)["reason"] == f"dependency {train} ended cancelled"
    assert "train done: seed 1 lr 0.1" in control.stdout  # logs of the quick start's job

    stop = shell("tour-stop")
    assert stop.returncode == 0, stop.stderr
    assert json.loads(stop.stdout)["stopped_run_ids"] == [str(run.root)]
    assert not (run.sched / "endpoint.json").exists()  # the coordinator has exited


def test_readme_gpu_tour_runs_verbatim(shell):
    run = Run(shell.run_dir("gpurun", "GPURUN"), EXAMPLE_TASK)
    result = shell("tour-gpus")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [job_id(f"ft-seed{i}") for i in (1, 2, 3)]
    assert result.stdout.split()[:3] == ids  # --detach prints each job id
    jobs = [run.wait_state(j, "running") for j in ids]
    wait_for(lambda: all((run.job(j)["attempts"][-1]["gpus"]) for j in ids))
    gpus = [run.job(j)["attempts"][-1]["gpus"] for j in ids]
    assert all(len(g) == 1 for g in gpus) and gpus[0] != gpus[1], (jobs, gpus)


def test_protocol_shell_examples_run_verbatim(run):
    env = {"RUN": str(run.root), "PATH": os.environ["PATH"]}

    def sh(*names):
        result = subprocess.run(["bash", "-euo", "pipefail", "-c",
                                 "".join(documented(n) for n in names)],
                                env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    reply = json.loads(sh("shell-submit"))
    assert reply["outcome"] == "accepted"
    assert run.wait_state(reply["job_id"], "completed")["exit_code"] == 0
    log = run.root / "logs" / "experiments" / reply["job_id"] / "a1.log"
    assert log.read_text() == "hello\n"
    first, *waited = sh("shell-submit", "shell-wait").splitlines()  # section 6 continues it
    assert json.loads(first)["outcome"] == "duplicate"
    assert waited == [f"job {reply['job_id']}: completed (exit code 0)", "hello"]


def test_central_attempts_recipe_lists_exactly_the_live_attempts(make_run, shell, tmp_path):
    """seed 000 "Existing protected-PID manifests remain the process-lifecycle compatibility
    surface used by close, stop, diagnostics, and late/quarantined result handling": central
    attempts are not written there; PROTOCOL.md section 15 says what to read instead, and
    its recipe finds a running attempt's real process group and no ended attempt."""
    run = make_run()
    run.start()
    shell.env["RUN"] = str(run.root)
    done = run.reply(run.submit(request("ended", ["true"])))["job_id"]
    run.wait_state(done, "completed")
    gate, pid_file = tmp_path / "gate", tmp_path / "command.pid"
    live = run.reply(run.submit(request("live", [
        "sh", "-c", f"echo $$ > {pid_file}; while [ ! -e {gate} ]; do sleep 0.05; done"])))
    run.wait_state(live["job_id"], "running")
    command = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(),
                           message="the live command's pid"))

    listed = shell("central-attempts")
    assert listed.returncode == 0, listed.stderr
    group = os.getpgid(command)
    assert listed.stdout == f"{live['job_id']}/a1 pgid={group} sid={os.getsid(command)}\n"
    assert not (run.sched / "protected_pids").exists() or \
        not list((run.sched / "protected_pids").glob("*.json"))
    gate.touch()
    run.wait_state(live["job_id"], "completed")
    assert shell("central-attempts").stdout == ""


def test_legacy_launch_example_runs_verbatim(shell):
    root = shell.run_dir("legacy-run")
    result = shell("legacy-launch")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "eval done: seed 3 accuracy 0.790"
    assert not (root / "resource_scheduler" / "protected_pids" / "alice.json").exists()


# The documented status example: two slots, a CPU job and a GPU job running on the fake
# H200 that a colleague half uses, and three jobs waiting, each for another reason.
STATUS_TASK = EXAMPLE_TASK.read_text().replace(
    "initial_concurrent_experiments: 4", "initial_concurrent_experiments: 2").replace(
    "max_concurrent_experiments: 8", "max_concurrent_experiments: 2")
STATUS_JOBS = [("sweep.lr0.1", "cpu_ordinary"), ("ft.seed1", "gpu_work"),
               ("sweep.lr0.3", "cpu_ordinary"), ("ft.seed2", "gpu_work"),
               ("big.seed1", "gpu_large")]
VOLATILE = [(re.compile(r"\d+(\.\d+)?(e[-+]\d+)?"), "N"), (re.compile(r" on \S+: "), " on HOST: "),
            (re.compile(r"\s+"), " ")]


def shape(text: str) -> list[str]:
    """The lines with numbers, the host name and alignment taken out."""
    lines = []
    for line in text.strip().splitlines():
        for pattern, replacement in VOLATILE:
            line = pattern.sub(replacement, line)
        lines.append(line.strip())
    return lines


def test_operations_examples_run_verbatim_against_a_live_coordinator(make_run, shell, tmp_path):
    run = make_run(task_text=STATUS_TASK)
    gpus = tmp_path / "gpus.json"
    shutil.copy(ROOT / "fixtures" / "gpus" / "one_h200_busy.json", gpus)
    run.start(env={"PRAXIST_FAKE_GPUS": str(gpus)})
    shell.env["RUN"] = str(run.root)
    train = ["python3", "fixtures/jobs/train.py", "--steps", "600", "--step-time", "0.1"]
    for tag, profile in STATUS_JOBS:
        run.reply(run.submit(request(tag, train, profile=profile, cwd=str(ROOT))))

    def settled():
        status = run.status() or {}
        return (len(status.get("active", ())) == 2
                and all(a["progress"] for a in status["active"])
                and [q["reason"] != "queued" for q in status["queue"]] == [True] * 3
                and status["gpus"]["devices"] and status["pressure"]["source"])
    wait_for(settled, message="the documented status example's state")
    status = shell("ops-status")
    assert status.returncode == 0, status.stderr
    assert shape(status.stdout) == shape(documented("ops-status", "output")), status.stdout

    summary = shell("ops-status-json")
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.splitlines()[:3] == [
        "pressure psi {'cpu': 0.0, 'memory': 0.0, 'io': 0.0}",
        "concurrency 2 configured max 2 initial", "gpus fake "]
    assert summary.stdout.splitlines()[3].startswith("0 GPU-fake-0 declared 45% 20480 MiB")

    operator = shell("ops-generation-operator")
    assert operator.returncode == 0, operator.stdout + operator.stderr
    assert operator.stdout.count('"outcome": "ok"') == 3
    opened = subprocess.run([sys.executable, "-m", "praxist_fs", "generation", "open", "2",
                             "--run-dir", str(run.root), "--cohort", "alice"],
                            capture_output=True, text=True, timeout=60)
    assert opened.returncode == 0, opened.stderr
    generations = shell("ops-generation-status")
    assert generations.returncode == 0, generations.stderr
    lines = generations.stdout.splitlines()
    assert lines[0] == "generation 2 open " and lines[1].startswith("maturity Q=")
    assert lines[-2].startswith("1 ") and lines[-1].startswith("2 open conversion")

    invariants = shell("ops-invariants")
    assert (invariants.returncode, invariants.stdout) == (0, "consistent\n"), invariants.stderr

    report = shell("ops-report")  # issue 17 item 2: the run report of this live run
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(f"report written to {run.root}-report.html (")
    assert '<g class="bar' in Path(f"{run.root}-report.html").read_text()



def test_the_slurm_warning_example_checkpoints_and_completes(fake_cluster, make_run, shell):
    """R-DIST-2: the documented script, launched with a time limit on the fake cluster
    (tests/slurm/fake/cluster, whose sbatch honours ``--signal=B:SIG@N`` with ``-t``):
    warned with USR2, it saves its checkpoint and ends 0 before the limit."""
    run = make_run(task_text=SLURM_TASK)
    run.start()
    shell.env["RUN"] = str(run.root)
    result = shell("slurm-warning", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.fullmatch(r"checkpoint at step \d+\n", result.stdout), result.stdout
    assert run.job(job_id("warned"))["state"] == "completed"


def test_the_livelock_trace_replays_as_documented(shell):
    """R-SIM-1: the four jobs that once made the replay spin end it, with the table
    docs/SIMULATE.md shows (but for the wall time)."""
    replayed = shell("simulate-livelock")
    assert replayed.returncode == 0, replayed.stderr

    def rows(text: str) -> list[str]:
        return [re.sub(r" +[0-9.]+s$", "", line) for line in text.splitlines()]

    assert rows(replayed.stdout) == rows(documented("simulate-livelock", "output"))


def test_the_readme_tour_simulate_step_compares_two_policies_that_differ(shell):
    """Issue 29: the tour's replay named a trace a fresh clone lacks and compared two
    policies whose cap bounded both alike. Its own trace: the two policies' rows differ,
    the recommended one ahead, as the README says, and no cap warning."""
    replayed = shell("tour-simulate")
    assert replayed.returncode == 0, replayed.stderr
    assert "warning" not in (replayed.stdout + replayed.stderr).lower()
    table = {line.split()[0]: line.split() for line in replayed.stdout.splitlines()[1:3]}
    assert set(table) == {"fcfs", "recommended"}

    def hours(row: list[str], column: int) -> float:
        value, unit = row[column], row[column + 1]
        return float(value) * {"s": 1 / 3600, "min": 1 / 60, "h": 1, "d": 24}[unit]

    fcfs, recommended = hours(table["fcfs"], 5), hours(table["recommended"], 5)  # MEAN DELAY
    assert recommended < 0.85 * fcfs, replayed.stdout


@pytest.fixture
def served(make_run, shell):
    """A live coordinator whose run the blocks know as ``RUN``."""
    run = make_run()
    run.start()
    shell.env["RUN"] = str(run.root)
    return run


def test_python_client_example_runs_verbatim(served, shell):
    """R-API-1: docs/PYTHON.md's client example, against a live coordinator, prints what
    the document shows."""
    result = shell.python("python-client")
    assert (result.returncode, result.stdout) == (0, documented("python-client", "output")), \
        result.stdout + result.stderr
    assert served.job(job_id("eval.seed1"))["after"] == [{"job": job_id("train.seed1"),
                                                          "when": "ok"}]
    assert served.job(job_id("sleeper"))["state"] == "cancelled"


def test_python_sweep_example_runs_verbatim_and_again_without_rerunning(served, shell):
    """R-API-1: docs/PYTHON.md's executor sweep prints what the document shows; run again,
    its calls are the same four jobs, each run once."""
    def ended() -> dict[str, dict]:
        return {path.stem: read_json(path)
                for path in (served.sched / "jobs" / "done").glob("*.json")}

    first = shell.python("python-sweep")
    assert (first.returncode, first.stdout) == (0, documented("python-sweep", "output")), \
        first.stdout + first.stderr
    jobs = ended()
    assert sorted(doc["state"] for doc in jobs.values()) == ["completed"] * 3 + ["failed"]
    assert all(len(doc["attempts"]) == 1 for doc in jobs.values())
    failed = next(doc for doc in jobs.values() if doc["state"] == "failed")
    log = served.root / "logs" / "experiments" / failed["job_id"] / "a1.log"
    assert "ValueError: diverged: lr 3.0 is too large" in log.read_text()  # the traceback

    second = shell.python("python-sweep")
    assert (second.returncode, second.stdout) == (0, first.stdout), second.stderr
    assert ended().keys() == jobs.keys()
    assert all(len(doc["attempts"]) == 1 for doc in ended().values())  # nothing ran again


def test_state_diagrams_in_protocol_match_their_tables():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "state_diagram.py"),
                             "--check", str(PROTOCOL)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
