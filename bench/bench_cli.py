#!/usr/bin/env python3
"""How long a CLI verb takes to start and answer (issue 31: "commands that start in a
blink", target <= 60 ms per read/control verb on a quiet machine), beside a bare Python
and, where installed, task-spooler's ``tsp -l``.

Each verb runs ``--runs`` times against ``--run-dir`` (default: a fresh run built by
bench/fixture.py with ``--finished`` finished jobs, 1,000 unless given, then served once by
a coordinator and stopped, as every real run is: the fixture alone has no job index, and
without one ``jobs`` reads every job file, seconds at 100,000); the median wall
time and the median CPU time (user + system, which a loaded machine inflates less) are
printed per verb. The verbs need no coordinator: status, jobs --limit 20, jobs --state
failed, and logs and wait of an ended job only read ``--run-dir``; ``cancel`` of an ended
job writes a control request and withdraws it when no coordinator answers, so it runs on
a run of its own (``--finished`` jobs, built and served here) and never on ``--run-dir``.

Then a coordinator serves that run of its own, for the verbs that talk to one (``served``):
``launch --detach`` (a new tag each time: written, accepted, the job id printed),
``generation open 1`` (answered: ok, then "already exists"), ``lease decline`` and ``lease
wait --timeout 0`` (each writes its file), and, with the coordinator frozen (SIGSTOP) so
that it cannot act on it, ``stop --timeout 0``: the stop's start, up to its request
written and its first look for the reply (a whole stop also waits for the coordinator to
end its work and exit, and sweeps the run's processes: not a start). The coordinator
goes on (SIGCONT) afterwards, reads the stops and exits. ``bind -- true`` (a harness's
GPU-mask check before it execs its command, once per attempt) needs no run.

Beside the times, ``python -X importtime`` of each (median of ``--runs``): *imports* is
what the command imports once the interpreter is up (the sum of the top-level imports
after ``site``), *site* the interpreter's own start-up imports (an editable install's
finder among them: every Python of that environment pays it, the bare one too).

Usage: .venv/bin/python bench/bench_cli.py [--run-dir RUN] [--finished N] [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_compaction import served_fixture  # noqa: E402
from bench_coordinator import Coordinator  # noqa: E402
from bench_tsp import TaskSpooler  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NUMBERS = itertools.count(1)  # "{n}" in a command: a new number at each run (a new tag)


def numbered(argv: list[str]) -> list[str]:
    n = str(next(NUMBERS))
    return [word.replace("{n}", n) for word in argv]


def timed(argv: list[str], runs: int, cwd: Path | None = None) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``argv`` over ``runs`` runs (in ``cwd``: away
    from the tree, ``python -m`` finds the package installed, not the tree's)."""
    walls, cpus = [], []
    for _ in range(runs):
        command = numbered(argv)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False, cwd=cwd)
        walls.append((time.perf_counter() - started) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def import_ms(argv: list[str], runs: int) -> tuple[float, float]:
    """Median milliseconds (imports after ``site``, ``site``'s own) of ``python -X
    importtime`` running ``argv`` (a Python script and its arguments) ``runs`` times."""
    after, site = [], []
    for _ in range(runs):
        done = subprocess.run([argv[0], "-X", "importtime", *numbered(argv[1:])],
                              capture_output=True, text=True, check=False)
        top = [(name.strip(), int(cumulative)) for line in done.stderr.splitlines()
               if line.startswith("import time:") and "|" in line
               for _, cumulative, name in [line[len("import time:"):].split("|")]
               if cumulative.strip().isdigit() and not name[1:].startswith(" ")]
        names = [name for name, _ in top]
        first = names.index("site") + 1 if "site" in names else 0
        site.append(sum(us for _, us in top[:first]) / 1000)
        after.append(sum(us for _, us in top[first:]) / 1000)
    return statistics.median(after), statistics.median(site)


def installed_python(directory: Path) -> str:
    """A Python in ``directory`` with praxist_fs installed as a user's ``pip install``
    leaves it (the package's files and their bytecode in its site-packages), its
    dependencies read from this environment's. This environment is a developer's
    (``make``'s ``pip install -e``): setuptools' editable finder, imported by ``site`` at
    every Python start, cost ``python -c pass`` 31 ms against 13 ms without it, and a verb
    about 12 ms (2026-12-07). Made offline, from the tree: building a wheel needs the
    ``wheel`` package, which this environment need not have."""
    venv = directory / "installed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    where = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                            "['purelib'])"], capture_output=True, text=True, check=True)
    site = Path(where.stdout.strip())
    shutil.copytree(REPO / "praxist_fs", site / "praxist_fs",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([python, "-m", "compileall", "-q", str(site / "praxist_fs")], check=True)
    # a path in a .pth is added as it is: its own .pth files (the finder's) are not read
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def built_run(directory: Path, finished: int) -> Path:
    """A run with ``finished`` jobs as a coordinator that served it leaves it."""
    return served_fixture(directory / "served", finished) / "run"


def served_verbs(directory: Path, cli: list[str]) -> Iterator[tuple[str, list[str]]]:
    """(label, command) of each verb that talks to a coordinator, yielded while one serves
    ``directory``/run (served_fixture's: a scratch run, which gets jobs, generation 1 and
    stop requests); the last ones while it is frozen (SIGSTOP: alive to a client, acting
    on nothing). Once the caller is done the coordinator goes on (SIGCONT), reads the
    stops and exits."""
    at = ["--run-dir", str(directory / "run")]
    with Coordinator("cli", 1, scratch=directory, keep=True) as coordinator:
        yield "launch --detach", [*cli, "launch", "--detach", "--peer", "bench", "--tag",
                                  "bench-{n}", *at, "--", "true"]
        yield "generation open 1", [*cli, "generation", "open", "1", *at]
        yield "lease decline", [*cli, "lease", "decline", "--peer", "bench", "--generation",
                                "1", "--lease", "L{n}", *at]
        yield "lease wait --timeout 0", [*cli, "lease", "wait", "--peer", "bench",
                                         "--generation", "1", "--timeout", "0", *at]
        coordinator.proc.send_signal(signal.SIGSTOP)
        try:
            yield "stop --timeout 0 (frozen)", [*cli, "stop", str(directory / "run"),
                                                "--timeout", "0"]
        finally:
            coordinator.proc.send_signal(signal.SIGCONT)


def an_ended_job(run: Path) -> str:
    done = sorted((run / "resource_scheduler" / "jobs" / "done").glob("*.json"))
    return json.loads(done[0].read_text())["job_id"] if done else "none"


def print_row(label: str, argv: list[str], runs: int) -> None:
    wall, cpu = timed(argv, runs)
    imports = import_ms(argv, runs) if argv[0] == sys.executable else None
    print(f"{label:32}{wall:10.1f}{cpu:10.1f}" + (
        f"{imports[0]:10.1f}{imports[1]:8.1f}" if imports else f"{'-':>10}{'-':>8}"),
        flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, help="an existing run (default: one built)")
    parser.add_argument("--finished", type=int, default=1000,
                        help="finished jobs of the run built (default 1000)")
    parser.add_argument("--runs", type=int, default=15, help="runs per verb (default 15)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-cli."))
    os.environ.setdefault("PRAXIST_HOST_REGISTRY", str(scratch / "hosts"))  # its coordinators'
    with contextlib.ExitStack() as stack:
        if shutil.which("tsp"):  # ``tsp -l`` asks a private server (TS_SOCKET), killed after
            spooler = stack.enter_context(TaskSpooler(shutil.which("tsp"), "cli", 1))
            os.environ["TS_SOCKET"] = spooler.env["TS_SOCKET"]
        return rows_timed(args, scratch)


def rows_timed(args: argparse.Namespace, scratch: Path) -> int:
    try:
        run = args.run_dir or built_run(scratch, args.finished)
        own = built_run(scratch, args.finished) if args.run_dir else run  # cancel writes
        job, own_job = an_ended_job(run), an_ended_job(own)
        cli = [sys.executable, "-m", "praxist_fs"]
        rows = [("python -c pass", [sys.executable, "-c", "pass"])]
        for verb in (["status"], ["jobs", "--limit", "20"], ["jobs", "--state", "failed"],
                     ["logs", job], ["wait", job]):
            rows.append((" ".join(verb[:3]).replace(job, "JOB"),
                         [*cli, *verb, "--run-dir", str(run)]))
        rows.append(("cancel JOB" + (" (own run)" if args.run_dir else ""),
                     [*cli, "cancel", own_job, "--timeout", "0", "--run-dir", str(own)]))
        if shutil.which("tsp"):
            rows.append(("tsp -l (task-spooler)", ["tsp", "-l"]))
        rows.append(("bind -- true", [*cli, "bind", "--", "true"]))
        print(f"{'command':32}{'wall ms':>10}{'cpu ms':>10}{'imports':>10}{'site':>8}   "
              f"({args.runs} runs, median; imports, site: -X importtime, ms; load "
              f"{os.getloadavg()[0]:.1f})")
        for label, argv in rows:
            print_row(label, argv, args.runs)
        for label, argv in served_verbs(own.parent, cli):  # always on the run of its own
            print_row(label, argv, args.runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
