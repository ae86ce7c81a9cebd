"""The documented shell protocol runs verbatim, and the documented state diagram is current.

The line right before a block's opening fence marks it (an HTML comment, invisible once
rendered): ``<!-- tested: NAME -->`` means a test below runs the block's text unchanged.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "docs" / "PROTOCOL.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^<!-- (tested|illustrative|output): (\S.*?) -->$")


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


def test_state_diagram_in_protocol_matches_the_transition_table():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "state_diagram.py"),
                             "--check", str(PROTOCOL)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
