"""Soak: many seeds of the deterministic core simulation, or crash cases against a real
coordinator, until the time is up. Stops at the first failure and prints how to
reproduce it. Not collected by pytest (the name does not match test_*.py).

    PYTHONPATH=. python tests/soak.py --seed 1 --minutes 5            # simulation
    PYTHONPATH=. python tests/soak.py --seed 1 --minutes 5 --real     # real coordinator
    PYTHONPATH=. python tests/soak.py --seed 1 --real --case 7        # one real case again

Simulation mode runs ``Simulation(seed).run(steps)`` for seed, seed+1, ... (the bugs
listed in tests/core/simulation.py KNOWN_BUGS are tolerated unless --strict). Real mode draws
case i from ``random.Random(f"{seed}:{i}")``: a named crash point of the crash matrix
(BASIC or GENERATION, run through that test's own scenario), or a random crash point
with a random count, or a kill -9 at a random moment (sometimes twice), or a power cut
that leaves a drawn disk state (torn appends, half-made directories; sometimes a second
cut while the next boot recovers), or one of the other faults' e2e cases run again as
they are (a shim killed under its command; a disk that fills while jobs run, when run as
root), each in a fresh temporary run directory, and checks tests/invariants.check_run
afterwards. The real cases are chosen reproducibly; their timing is the machine's.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # PYTHONPATH=. does this too
    sys.path.insert(0, str(ROOT))


# -- the deterministic simulation -------------------------------------------------------

def soak_simulation(seed: int, minutes: float, steps: int, strict: bool) -> int:
    from tests.core.simulation import KNOWN_BUGS, Simulation, SimulationFailure

    tolerate = frozenset() if strict else frozenset(KNOWN_BUGS)
    deadline = time.monotonic() + minutes * 60
    started = time.monotonic()
    total_steps, seeds, last_report = 0, 0, started
    current = seed
    print(f"simulation soak: seeds from {seed}, {steps} steps each, {minutes:g} min"
          + ("" if strict else f", tolerating known bugs: {', '.join(sorted(tolerate))}"),
          flush=True)
    while time.monotonic() < deadline:
        try:
            sim = Simulation(current, tolerate=tolerate).run(steps)
        except SimulationFailure as exc:
            print(f"\nFAILED after {seeds} good seeds:\n{exc}", flush=True)
            option = "" if not strict else ", tolerate=[]"
            print(f"\nreproduce:\n  PYTHONPATH=. {sys.executable} -c \"from "
                  f"tests.core.simulation import run_seed; run_seed({exc.seed}, "
                  f"{exc.step}{option})\"\n  PYTHONPATH=. {sys.executable} tests/soak.py "
                  f"--seed {current} --minutes 0.01 --steps {steps}"
                  + (" --strict" if strict else ""), flush=True)
            return 1
        seeds += 1
        total_steps += sim.step_no
        current += 1
        now = time.monotonic()
        if now - last_report >= 5:
            print(f"  {seeds} seeds ({seed}..{current - 1}), {total_steps} steps, "
                  f"{total_steps / (now - started):.0f} steps/s", flush=True)
            last_report = now
    elapsed = time.monotonic() - started
    print(f"ok: {seeds} seeds ({seed}..{current - 1}), {total_steps} steps in {elapsed:.1f} s, "
          f"{total_steps / max(elapsed, 1e-9):.0f} steps/s", flush=True)
    return 0


# -- a real coordinator -------------------------------------------------------------------

class Runs:
    """tests/e2e/conftest.py's make_run fixture, outside pytest."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.runs = []

    def __call__(self, slots: int = 2, retries: int = 1, name: str = "run",
                 task_text: str | None = None):
        from tests.e2e.conftest import TASK, Run

        task = self.base / f"{name}-task.yaml"
        task.write_text(task_text or TASK.format(slots=slots, retries=retries))
        run = Run(self.base / name, task)
        run.root.mkdir()
        for sub in ("spool/tmp", "spool/incoming"):
            (run.sched / sub).mkdir(parents=True)
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            if run.proc is not None and run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
            run.kill_attempt_groups()


def invariants(root: Path, **checks) -> list[str]:
    """tests/invariants.check_run once it holds, else what it finds after 10 s: the
    coordinator still works (a generation's leased job runs on after its test), and a
    job file read while it moves between directories is in two or in neither."""
    from tests.e2e.conftest import wait_for
    from tests.invariants import check_run

    with contextlib.suppress(AssertionError):
        wait_for(lambda: not check_run(root, **checks), timeout=10, message="invariants")
    return check_run(root, **checks)


def basic_case(make_run, tmp: Path, point: str, rng: random.Random) -> list[str]:
    from tests.e2e import test_crash_matrix as matrix
    from tests.e2e.crashes import COMPACT_OFTEN, COMPACTION

    env = COMPACT_OFTEN if point in COMPACTION else {}
    matrix.test_crash_at_point_loses_nothing_and_runs_nothing_twice(make_run, tmp, point, env)
    return invariants(make_run.runs[-1].root, starts=tmp / "starts")


def generation_case(make_run, tmp: Path, point: str, rng: random.Random) -> list[str]:
    from tests.e2e import test_crash_matrix as matrix

    matrix.test_crash_in_a_generation_keeps_leases_and_stats_consistent(make_run, tmp, point)
    return invariants(make_run.runs[-1].root, settled=False)


def random_case(make_run, tmp: Path, point: str, rng: random.Random) -> list[str]:
    """The basic scenario under a crash point reached N times, or a kill -9 at a random
    moment if it is not reached by then; sometimes the next coordinator is killed too."""
    from tests.e2e.crashes import CRASH_TASK, basic_scenario, job_ids, settle, start_crashing

    run = make_run(task_text=CRASH_TASK)
    proc = start_crashing(run, point)
    ids = basic_scenario(run, tmp)
    try:
        proc.wait(timeout=rng.uniform(0.2, 3.0))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if rng.random() < 0.4:  # a second kill -9, of a normally started coordinator
        run.start()
        time.sleep(rng.uniform(0.0, 1.5))
        run.kill()
    run.start()
    jobs = job_ids(run, ids)
    settle(run, jobs)
    outcome = {tag: run.job(job_id) for tag, job_id in jobs.items()}
    assert outcome["a"]["state"] == "completed" and outcome["d"]["state"] == "completed"
    assert [a["exit_code"] for a in outcome["b"]["attempts"]
            if a["outcome"] != "released"] == [75, 0], outcome["b"]
    assert outcome["c"]["state"] == "failed" and outcome["c"]["exit_code"] == 3
    assert run.reply("a-again")["job_id"] == jobs["a"]
    assert run.reply("bad")["outcome"] == "rejected"
    return invariants(run.root, starts=tmp / "starts")


def power_loss_case(make_run, tmp: Path, draw: str, rng: random.Random) -> list[str]:
    """tests/e2e/test_power_loss.py's drawn case: the cut, its disk state and whether
    power goes again during recovery all follow from the draw."""
    from tests.e2e.test_power_loss import drawn_power_loss_case

    cuts = io.StringIO()  # what each cut changed: shown only if the case fails
    try:
        with contextlib.redirect_stdout(cuts):
            drawn_power_loss_case(make_run, tmp, int(draw))
    except Exception:
        print(cuts.getvalue(), flush=True)
        raise
    return invariants(make_run.runs[-1].root, starts=tmp / "starts")


# Faults whose e2e tests build their own scenario (a fixture, a tmpfs): run as they are.
FAULT_TESTS = [
    "tests/e2e/test_dead_shim.py::test_a_killed_shim_is_fenced_and_its_job_retried",
    "tests/e2e/test_dead_shim.py::test_a_shim_killed_while_the_coordinator_is_down_is_fenced_at_start",
    "tests/e2e/test_full_disk.py::test_a_full_disk_degrades_the_coordinator_which_resumes_once_there_is_room",
    "tests/e2e/test_full_disk.py::test_an_exit_the_shim_holds_reaches_a_coordinator_started_later",
]


def fault_test_case(make_run, tmp: Path, node: str, rng: random.Random) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp / "pytest"), node], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    return [done.stdout[-4000:] + done.stderr[-2000:]] if done.returncode != 0 else []


def draw_case(seed: int, index: int):
    from tests.e2e.crashes import BASIC, COMPACTION, GENERATION

    rng = random.Random(f"{seed}:{index}")
    kind = rng.choices(["basic", "generation", "random", "power", "fault"], [4, 2, 3, 3, 1])[0]
    if kind == "basic":
        return kind, rng.choice(BASIC + COMPACTION), basic_case, rng
    if kind == "generation":
        return kind, rng.choice(GENERATION), generation_case, rng
    if kind == "power":
        return kind, str(rng.randint(1, 10**9)), power_loss_case, rng
    if kind == "fault":  # a tmpfs is mounted only by root
        nodes = [n for n in FAULT_TESTS if os.geteuid() == 0 or "full_disk" not in n]
        return kind, rng.choice(nodes), fault_test_case, rng
    base = rng.choice(BASIC + GENERATION).partition("@")[0].partition(":")[0]
    return kind, f"{base}:{rng.randint(1, 4)}", random_case, rng


def soak_real(seed: int, minutes: float, only: int | None) -> int:
    deadline = time.monotonic() + minutes * 60
    started = time.monotonic()
    indexes = [only] if only is not None else range(1, 1_000_000)
    done = 0
    print(f"real soak: seed {seed}, {minutes:g} min" +
          (f", case {only} only" if only is not None else ""), flush=True)
    for index in indexes:
        if only is None and time.monotonic() >= deadline:
            break
        kind, point, case, rng = draw_case(seed, index)
        base = Path(tempfile.mkdtemp(prefix=f"praxist-soak-{seed}-{index}-"))
        make_run = Runs(base)
        began = time.monotonic()
        problems: list[str] = []
        try:
            problems = case(make_run, base, point, rng)
        except Exception:  # an assertion of the scenario, or a timeout waiting for it
            problems = [traceback.format_exc()]
        finally:
            make_run.close()
        took = time.monotonic() - began
        if problems:
            print(f"case {index}: {kind} {point}: FAILED after {took:.1f} s", flush=True)
            for problem in problems:
                print(f"  {problem}", flush=True)
            print(f"run directory kept: {base}\nreproduce:\n  PYTHONPATH=. {sys.executable} "
                  f"tests/soak.py --real --seed {seed} --case {index}", flush=True)
            return 1
        shutil.rmtree(base, ignore_errors=True)
        done += 1
        print(f"case {index}: {kind} {point}: ok ({took:.1f} s)", flush=True)
    print(f"ok: {done} real cases in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--real", action="store_true",
                        help="crash cases against a real coordinator instead of the simulation")
    parser.add_argument("--steps", type=int, default=1000, help="simulation steps per seed")
    parser.add_argument("--strict", action="store_true",
                        help="simulation: do not tolerate the known bugs")
    parser.add_argument("--case", type=int, default=None, help="real: run only this case")
    args = parser.parse_args(argv)
    if args.real:
        return soak_real(args.seed, args.minutes, args.case)
    return soak_simulation(args.seed, args.minutes, args.steps, args.strict)


if __name__ == "__main__":
    sys.exit(main())
