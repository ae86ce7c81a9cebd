"""praxist-fs launch behaves like srun: stream the log, exit with the experiment's code."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from praxist_fs import client
from praxist_fs.adapters.layout import RunLayout

from .conftest import read_json, wait_for

ROOT = Path(__file__).resolve().parents[2]

LAUNCH = [sys.executable, "-m", "praxist_fs", "launch"]


def launch(run, *args, timeout=60, **kwargs):
    return subprocess.run([*LAUNCH, f"--run-dir={run.root}", "--peer=cli", *args],
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def test_launch_streams_the_log_and_returns_the_exit_code(run, tmp_path):
    result = launch(run, "--tag=cli-exit", "--", "sh", "-c",
                    'echo "id=$PRAXIST_EXPERIMENT_ID cuda=[$CUDA_VISIBLE_DEVICES]"; '
                    'echo "profile=$PRAXIST_RESOURCE_PROFILE dir=$PRAXIST_EXPERIMENT_ATTEMPT_DIR"; '
                    'pwd; exit 4', cwd=tmp_path)
    assert result.returncode == 4
    lines = result.stdout.splitlines()
    assert lines[0].startswith("id=cli-exit-") and lines[0].endswith("cuda=[]")
    assert lines[1].startswith("profile=cpu dir=") and lines[1].endswith("/a1")
    assert lines[2] == str(tmp_path)  # runs in the caller's directory
    assert "failed" in result.stderr


def test_launch_passes_the_callers_environment(run):
    env = {"PATH": "/usr/bin:/bin", "LEARNING_RATE": "0.03"}
    result = launch(run, "--tag=cli-env", "--", "sh", "-c", 'echo "lr=$LEARNING_RATE"', env=env)
    assert result.returncode == 0 and result.stdout == "lr=0.03\n"


def test_detach_prints_the_job_id_and_returns(run, tmp_path):
    gate = tmp_path / "gate"
    result = launch(run, "--tag=cli-detach", "--detach", "--", "sh", "-c",
                    f"while [ ! -e {gate} ]; do sleep 0.05; done")
    assert result.returncode == 0
    job_id = result.stdout.strip()
    assert job_id.startswith("cli-detach-")
    run.wait_state(job_id, "queued", "running")  # its file is written just after the reply
    gate.touch()
    run.wait_state(job_id, "completed")


def test_the_same_experiment_from_another_shell_and_workspace_shares_its_job(run, tmp_path):
    """R-SUB-7, seed 000: "The tag identifies science, not execution syntax": a second
    launch of the experiment from another tmux pane and workspace, under another
    PRAXIST_PEER_ID, with a logging flag added, follows the job the first one made."""
    gate, marker = tmp_path / "gate", tmp_path / "starts"
    first_dir, second_dir = tmp_path / "ws1", tmp_path / "ws2"
    first_dir.mkdir()
    second_dir.mkdir()
    body = f"echo x >> {marker}; while [ ! -e {gate} ]; do sleep 0.05; done; echo trained"
    base = {**os.environ, "PATH": os.environ["PATH"]}
    first = launch(run, "--tag=shared-exp", "--detach", "--", "sh", "-c", body,
                   cwd=first_dir, env={**base, "PRAXIST_PEER_ID": "pane-1", "TMUX_PANE": "%1"})
    job_id = first.stdout.strip()
    run.wait_state(job_id, "running")
    second = subprocess.Popen(
        [*LAUNCH, f"--run-dir={run.root}", "--tag=shared-exp", "--", "sh", "-c", body,
         "--verbose"], cwd=second_dir, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={**base, "PRAXIST_PEER_ID": "pane-2", "TMUX_PANE": "%2"})
    gate.touch()
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0 and out == "trained\n", err
    assert (f"praxist-fs launch: duplicate: job {job_id} (shared: its tag names it; this "
            "launch differs in argv, cwd, env:PRAXIST_PEER_ID)") in err.splitlines()
    assert marker.read_text() == "x\n"  # one job, run once


@pytest.mark.parametrize("peer", ["--peer=bad peer", "--peer=../x"])
def test_a_peer_name_outside_the_alphabet_is_refused_before_anything_is_written(run, peer):
    """Issue 29: 'launch --peer "bad peer"' hung for ever: the request id made from the
    peer was refused, and no reply was ever written."""
    result = subprocess.run([*LAUNCH, f"--run-dir={run.root}", peer, "--tag=t", "--",
                             "true"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "expected 1-128 characters from A-Z a-z 0-9" in result.stderr
    spool = run.sched / "spool"
    assert not os.listdir(spool / "incoming") and not os.listdir(spool / "tmp")


def test_a_request_refused_without_a_reply_ends_the_wait_with_why(run):
    """A request the coordinator sets aside without a reply (no usable request id, for
    one) ends the client's wait with the reason, instead of waiting for ever."""
    layout = RunLayout.at(run.root)
    run.drop_raw("bad id.json", b'{"peer": "p", "tag": "t", "argv": ["true"]}')
    with pytest.raises(client.SetAside, match="is not a safe id"):
        client.wait_for_reply(layout, "bad id", 10)


def test_rejected_launch_exits_nonzero_with_the_reason(run):
    result = launch(run, "--tag=bad/tag", "--", "true")
    assert result.returncode == 2 and "tag" in result.stderr
    result = launch(run, "--tag=cli-prof", "--profile=nope", "--", "true")
    assert result.returncode == 2 and "nope" in result.stderr


def test_launch_from_a_crowded_environment_says_so_and_submits_nothing(run, tmp_path):
    crowded = {f"VAR_{i}": "v" * 100 for i in range(700)}
    marker = tmp_path / "ran"
    result = launch(run, "--tag=cli-crowded", "--", "touch", str(marker),
                    env={**os.environ, **crowded})
    assert result.returncode == 2
    assert "praxist-fs launch: rejected: the request is larger than 65536 bytes; its env " \
        "holds about" in result.stderr and "submit fewer variables" in result.stderr
    spool = run.sched / "spool"
    written = [p.name for d in ("tmp", "incoming", "replies", "rejected")
               for p in (spool / d).iterdir()]
    assert written == []
    assert not marker.exists()


def test_retry_terminal_shows_only_the_new_attempt(run):
    assert launch(run, "--tag=cli-retry", "--", "sh", "-c", "echo first; exit 3").returncode == 3
    again = launch(run, "--tag=cli-retry", "--", "sh", "-c", "echo first; exit 3")
    assert again.returncode == 2 and "retry_terminal" in again.stderr
    fixed = launch(run, "--tag=cli-retry", "--retry-terminal", "--", "sh", "-c", "echo second")
    assert fixed.returncode == 0 and fixed.stdout == "second\n"



def test_retry_terminal_shows_its_attempt_though_it_ended_before_launch_read_the_reply(run):
    """The retry's attempt runs and ends between the reply and launch's first look at the
    job (launch stopped meanwhile): it is still this launch's to show, not an earlier one."""
    assert launch(run, "--tag=cli-late", "--", "sh", "-c", "echo first; exit 3").returncode == 3
    incoming = run.sched / "spool" / "incoming"
    os.kill(run.proc.pid, signal.SIGSTOP)
    try:
        retry = subprocess.Popen([*LAUNCH, f"--run-dir={run.root}", "--peer=cli", "--tag=cli-late",
                                  "--retry-terminal", "--", "sh", "-c", "echo second"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: any(path.suffix == ".json" for path in incoming.rglob("*")),
                 message="the retry's request in the spool")
        retry.send_signal(signal.SIGSTOP)
    finally:
        os.kill(run.proc.pid, signal.SIGCONT)
    layout = RunLayout(run.root)
    wait_for(lambda: (found := client.find_job(layout, "cli-late")) is not None
             and found[1]["state"] == "completed", message="the retry's attempt over")
    retry.send_signal(signal.SIGCONT)
    out, err = retry.communicate(timeout=60)
    assert retry.returncode == 0 and out == "second\n", err

def test_launch_without_a_live_coordinator_fails_after_a_bounded_wait(make_run, tmp_path):
    run = make_run()
    marker = tmp_path / "ran"
    started = time.monotonic()
    result = launch(run, "--tag=cli-none", "--wait-coordinator=0.5", "--", "touch", str(marker))
    assert result.returncode == 69 and "no live coordinator" in result.stderr
    assert time.monotonic() - started < 10 and not marker.exists()


def test_stale_endpoint_of_a_dead_coordinator_is_not_trusted(make_run):
    run = make_run()
    run.start()
    run.kill()  # endpoint.json stays behind, naming a dead pid
    assert read_json(run.sched / "endpoint.json")
    result = launch(run, "--tag=cli-stale", "--wait-coordinator=0.3", "--", "true")
    assert result.returncode == 69


@pytest.mark.parametrize("entry", [["-m", "praxist_fs"], None])
def test_console_script_and_module_are_the_same_command(run, entry):
    if entry is None:
        exe = [str(Path(sys.executable).with_name("praxist-fs"))]
    else:
        exe = [sys.executable, *entry]
    result = subprocess.run([*exe, "launch", f"--run-dir={run.root}", "--peer=cli",
                             f"--tag=cli-entry-{len(exe)}", "--", "echo", "ok"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "ok\n"


def test_nested_launch_runs_inside_the_existing_allocation(run, tmp_path):
    nested = (f"{sys.executable} -m praxist_fs launch --run-dir={run.root} --peer=cli "
              f"--tag=inner -- sh -c 'echo inner $PRAXIST_EXPERIMENT_ID'")
    result = launch(run, "--tag=outer", "--", "sh", "-c", f"{nested}; echo outer done")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("inner outer-") and lines[1] == "outer done"  # outer's identity
    inner = [p.name for p in (run.sched / "jobs" / "done").glob("inner-*.json")]
    assert inner == []  # never queued as a second top-level experiment


def test_copied_attempt_variables_are_refused(run, tmp_path):
    launch(run, "--tag=donor", "--", "true")
    donor = next((run.sched / "attempts").glob("donor-*/a1"))
    env = {**os.environ, "PRAXIST_EXPERIMENT_ATTEMPT_DIR": str(donor),
           "PRAXIST_EXPERIMENT_ID": donor.parent.name}
    result = launch(run, "--tag=impostor", "--", "true", env=env)
    assert result.returncode == 2 and "refusing nested launch" in result.stderr


NESTED_SIGNAL_EXIT = re.compile(r"killed by\s+signal N makes `launch` exit (\d+)\+N")
NESTED_NOT_FOUND = re.compile(r"cannot\s+be started ends it with exit (\d+) and\s+"
                              r"`praxist-fs launch: cannot run '<cmd>':")


def test_nested_launch_exits_as_protocol_documents(run):
    """docs/PROTOCOL.md *Nested launch* (R-SUB-6): a nested command killed by signal N makes
    ``launch`` exit as the document says (128+N), and one that cannot be started exits 127
    with a message, not a traceback; the numbers are read from the document itself."""
    text = " ".join((ROOT / "docs" / "PROTOCOL.md").read_text().split())
    documented = [pattern.search(text) for pattern in (NESTED_SIGNAL_EXIT, NESTED_NOT_FOUND)]
    assert all(documented), "PROTOCOL.md *Nested launch* no longer states its exit codes"
    signal_base, not_found = (int(found[1]) for found in documented)
    nested = (f"{sys.executable} -m praxist_fs launch --run-dir={run.root} --peer=cli "
              f"--tag=inner")
    killed = launch(run, "--tag=outer-killed", "--", "sh", "-c",
                    f"{nested} -- sh -c 'kill -TERM $$'; echo nested=$?")
    assert killed.returncode == 0, killed.stderr
    assert killed.stdout.splitlines()[-1] == f"nested={signal_base + signal.SIGTERM}"
    missing = launch(run, "--tag=outer-missing", "--", "sh", "-c",
                     f"{nested} -- /nonexistent/praxist-cmd; echo nested=$?")
    assert missing.stdout.splitlines()[-1] == f"nested={not_found}"
    log = missing.stdout  # the attempt's log, stderr included, streamed by the outer launch
    assert "praxist-fs launch: cannot run '/nonexistent/praxist-cmd':" in log
    assert "Traceback" not in log
