"""The documented shell protocol runs verbatim, and the documented state diagram is current."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "PROTOCOL.md"


def documented_block(marker: str) -> str:
    lines = PROTOCOL.read_text().splitlines()
    start = lines.index(f"<!-- tested: {marker} -->")
    assert lines[start + 1] == "```sh"
    end = lines.index("```", start + 2)
    return "\n".join(lines[start + 2:end]) + "\n"


def test_shell_submit_example_runs_verbatim(run):
    script = documented_block("shell-submit")
    env = {"RUN": str(run.root), "PATH": os.environ["PATH"]}
    first = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    reply = json.loads(first.stdout)
    assert reply["outcome"] == "accepted"
    assert run.wait_state(reply["job_id"], "completed")["exit_code"] == 0
    log = run.root / "logs" / "experiments" / reply["job_id"] / "a1.log"
    assert log.read_text() == "hello\n"
    second = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                            capture_output=True, text=True, timeout=60)
    assert json.loads(second.stdout)["outcome"] == "duplicate"


def test_state_diagram_in_protocol_matches_the_transition_table():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "state_diagram.py"),
                             "--check", str(PROTOCOL)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
