"""`praxist-fs demo` (R-OPS-2) runs end to end on a scratch directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "fixtures" / "tasks" / "example.yaml"


def test_demo_runs_the_tour(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "praxist_fs", "demo", "--run-dir", str(tmp_path / "demo"),
         "--config", str(EXAMPLE)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in ("-> duplicate", "-> terminal_duplicate", "-> retry_accepted",
                     "a1=75(infra_retry), a2=0(completed)", "hostile -> rejected",
                     "it ran exactly once", '{"demo": "ok"',
                     "waits: gpu utilization: no device with 45% free",
                     "waits: gpu memory: no device with 120 GiB headroom",
                     "now runs on ['GPU-fake-1']",
                     "-> ok: generation 1 open (Q=1, A_target=3)",
                     "first wave: 1 mature lease(s) for Q=1; 2 peer(s) keep exploring",
                     "submits with lease=g1-peer-a-1: lease consumed",
                     "declines g1-peer-b-2: declined by the peer",
                     "gen_1/CLOSING_SIGNAL",
                     "granted 3, consumed 1, declined 1, revoked 1, conversion_rate 0.3333"):
        assert expected in out, expected
    # issue 17 item 5: "`make demo` ends by writing the HTML report of its run and
    # printing its path"; its timeline has the demo's GPU jobs
    last = json.loads(result.stdout.strip().splitlines()[-1])
    report = Path(last["report"])
    assert report == tmp_path / "demo" / "report.html"
    assert f"-o {report})" in result.stdout
    text = report.read_text()
    assert text.count('<g class="bar') >= 4  # the GPU tour's four jobs, one bar each
    assert "GPU-fake-0" in text and "GPU-fake-1" in text
    # its generation's leases: granted, consumed, declined, expired, revoked, conversion
    assert ("<tr><th>1</th><td>closed</td><td>3</td><td>1</td><td>1</td><td>0</td><td>1</td>"
            "<td>33%</td></tr>") in text
