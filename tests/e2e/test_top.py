"""praxist-fs top in a real terminal: tmux runs it in an 80x24 pane against a real
coordinator on the fake GPU inventory; keys go in with send-keys and the screen comes
back with capture-pane (R-OPS-1, R-OPS-4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from praxist_fs.commands.render import top_summary

from .conftest import request, scheduler_task, wait_for

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "img" / "top.txt"  # rewritten with PRAXIST_UPDATE_SCREENSHOTS=1
TASK = scheduler_task("""\
initial_concurrent_experiments: 1
min_concurrent_experiments: 1
max_concurrent_experiments: 1
default_profile: cpu
profiles:
  cpu: {accelerator: cpu}
  gpu_work: {accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}
""")


@pytest.fixture(scope="module")
def tmux() -> str:
    """tmux, installed with apt-get when missing and we are root."""
    if shutil.which("tmux") is None and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-q", "tmux"], capture_output=True,
                       timeout=600, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed and installing it needs root: apt-get install tmux "
                    "(praxist-fs top is tested in a tmux pane)")
    return shutil.which("tmux")


class Pane:
    """An 80x24 shell in a tmux server of its own (-L), so no other tmux is touched."""

    def __init__(self, tmux: str, socket: str) -> None:
        self.base = [tmux, "-L", socket, "-f", "/dev/null"]
        env = {**os.environ, "LANG": "C.UTF-8", "PS1": "$ "}
        subprocess.run([*self.base, "new-session", "-d", "-s", "top", "-x", "80", "-y", "24",
                        "bash --norc --noprofile"], check=True, env=env, timeout=30)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "top", *keys], check=True, timeout=30)

    def type(self, text: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", "top", "-l", text], check=True, timeout=30)

    def screen(self) -> str:
        return subprocess.run([*self.base, "capture-pane", "-p", "-t", "top"], check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def wait(self, predicate, message: str) -> str:
        """The screen, once ``predicate`` holds for it; the last one shown on failure."""
        seen = [""]

        def holds() -> str | None:
            seen[0] = self.screen()
            return seen[0] if predicate(seen[0]) else None
        try:
            return wait_for(holds, timeout=20.0, message=message)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{seen[0]}") from None

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def pane(tmux, tmp_path):
    pane = Pane(tmux, f"praxist-top-{os.getpid()}-{tmp_path.name}")
    yield pane
    pane.close()


def rows(screen: str) -> list[str]:
    """The job list's lines: a kind, then a job id."""
    return [line for line in screen.splitlines() if line[:4] in ("RUN ", "QUE ", "SUS ")]


def detail(screen: str) -> str:
    """The two lines above the footer: the selected job in full."""
    return " ".join(line.strip() for line in screen.rstrip("\n").splitlines()[-3:-1]).strip()


def test_top_shows_the_run_filters_cancels_and_survives_its_coordinator(make_run, pane,
                                                                       tmp_path):
    """seed 000 "State And Compatibility": status.json is "a compact derived view" of the
    run, and an operator should "use progress, logs, process trees ... before diagnosing
    a stall"; SPEC R-OPS-1/R-OPS-4: a live `top` view of queue, running jobs with their
    GPUs, devices, pressure and the generation arithmetic."""
    gpus = tmp_path / "gpus.json"
    shutil.copy(ROOT / "fixtures" / "gpus" / "two_h200.json", gpus)
    run = make_run(task_text=TASK)
    run.start(env={"PRAXIST_FAKE_GPUS": str(gpus)})
    progress = ('echo hello-from-train; echo \'{"done": 3, "total": 10, "unit": "epochs"}\' '
                '> "$PRAXIST_EXPERIMENT_ATTEMPT_DIR/progress.json"; exec sleep 300')
    train = run.reply(run.submit(request("top-train", ["sh", "-c", progress], peer="alice",
                                         profile="gpu_work")))["job_id"]
    run.wait_state(train, "running")
    evaluate = run.reply(run.submit(request("top-eval", peer="bob")))["job_id"]
    sweep = run.reply(run.submit(request("top-sweep", peer="carol")))["job_id"]
    opened = subprocess.run([sys.executable, "-m", "praxist_fs", "generation", "open", "1",
                             "--run-dir", str(run.root), "--cohort", "alice", "bob"],
                            capture_output=True, text=True, timeout=60)
    assert opened.returncode == 0, opened.stderr

    pane.type(f"{sys.executable} -m praxist_fs top --run-dir {run.root}; echo top-exited-$?")
    pane.keys("Enter")
    screen = pane.wait(lambda s: "3/10 epochs" in s and "generation 1 open" in s
                       and len(rows(s)) == 3, "top showing the running job's progress, "
                       "the generation and three jobs")
    (tmp_path / "top.txt").write_text(screen)
    if os.environ.get("PRAXIST_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        SCREENSHOT.write_text(screen)
    running, queued, _ = rows(screen)
    assert running.startswith(f"RUN {train}") and "alice" in running and " 0 " in running \
        and " a1 " in running  # on GPU 0, its first attempt
    assert queued.startswith(f"QUE {evaluate}") and "waiting for a slot" in queued
    lines = screen.splitlines()
    assert any(line.startswith(" 0 GPU-fake-0") and "45+0%" in line and "1 job" in line
               for line in lines), "device 0 carries the job's declared 45 %"
    assert any(line.startswith("pressure cpu [") for line in lines)
    assert any(line.startswith("running 1 of 1 (min 1, bound 1: configured max 1)")
               for line in lines)
    assert "generation 1 open: Q " in screen and "leases 0 held; granted 0" in screen
    assert all(len(line) <= 79 for line in top_summary(run.status(), True, str(run.root), 0))

    pane.keys("Down")  # the selection moves to the second job: its full line shows
    pane.wait(lambda s: detail(s) == f"{evaluate} (bob, cpu): waiting for a slot: 1 of 1 "
              "running", "the selected job's detail line after Down")

    pane.keys("/")
    pane.type("carol")
    pane.keys("Enter")
    # the rows narrow as the filter is typed: the footer says when Enter kept it
    pane.wait(lambda s: [r[:4] + r.split()[1] for r in rows(s)] == [f"QUE {sweep}"]
              and "filter 'carol' (1 jobs)" in s, "the filter keeping carol's job alone")

    pane.keys("c")
    pane.wait(lambda s: f"cancel {sweep}? y/n" in s, "the cancel confirmation")
    pane.keys("y")
    assert run.wait_state(sweep, "cancelled")["reason"].endswith("in praxist-fs top")
    pane.wait(lambda s: "ok:" in s.splitlines()[-1], "the coordinator's answer in the footer")

    pane.keys("/")
    pane.keys("Escape")  # the filter is cleared: the running job is selected again
    pane.wait(lambda s: len(rows(s)) == 2 and detail(s).startswith(train),
              "both remaining jobs, the running one selected")
    pane.keys("l")
    pane.wait(lambda s: f"log of {train}" in s and "hello-from-train" in s
              and "==> attempt a1 (started" in s, "the running job's log")
    pane.keys("q")  # leaves the log, not top
    pane.wait(lambda s: len(rows(s)) == 2, "the job list again")

    run.kill()
    pane.wait(lambda s: s.startswith("coordinator not running (last status"),
              "top saying the coordinator is gone")
    pane.keys("c")
    pane.wait(lambda s: f"cancel {train}? y/n" in s, "the cancel confirmation")
    pane.keys("y")  # nobody to ask: refused at once, the job file untouched
    pane.wait(lambda s: s.splitlines()[-1].startswith(
        f"not cancelled: coordinator not running ({train})"), "the refused cancel")
    assert run.job(train)["state"] == "running"
    pane.keys("q")
    screen = pane.wait(lambda s: "top-exited-0" in s, "top quitting with 0")
    assert "q quit" not in screen and not rows(screen), "the terminal is restored"


def test_top_refuses_without_a_terminal(run):
    result = subprocess.run([sys.executable, "-m", "praxist_fs", "top", "--run-dir",
                             str(run.root)], capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert "praxist-fs top: needs a terminal; scripts read praxist-fs status --json" \
        in result.stderr


def test_top_without_a_coordinator_and_on_a_status_it_cannot_read(pane, tmp_path):
    """The view never ends in a traceback: a run whose coordinator never started, then a
    status.json of a shape it does not know (an older or damaged one), are said so."""
    run_dir = tmp_path / "run"
    (run_dir / "resource_scheduler").mkdir(parents=True)
    pane.type(f"{sys.executable} -m praxist_fs top --run-dir {run_dir}; echo top-exited-$?")
    pane.keys("Enter")
    pane.wait(lambda s: s.startswith("coordinator not running: ")
              and "start one with: praxist-fs serve" in s, "the missing coordinator")
    status = run_dir / "resource_scheduler" / "status.json"
    status.with_suffix(".tmp").write_text(json.dumps({"protocol": 1, "updated_at": 0,
                                                      "active": [{"job_id": "x"}]}))
    status.with_suffix(".tmp").rename(status)
    pane.wait(lambda s: s.startswith("cannot show status.json (KeyError: ")
              and "praxist-fs status --json" in s, "the odd status")
    pane.keys("q")
    pane.wait(lambda s: "top-exited-0" in s, "top quitting with 0")
