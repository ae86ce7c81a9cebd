"""`praxist-fs simulate --report`: a trace replay drawn by the run report's renderer
(issue 17 item 2), its bars worked out by hand."""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from praxist_fs import report_history
from praxist_fs.adapters import history
from praxist_fs.adapters.history import read_run
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.cli import main
from praxist_fs.config import load_policy
from praxist_fs.core import snapshot
from praxist_fs.report import (
    MIN_SHARE, Device, _lane_order, devices_of, render, report_of, write,
)
from praxist_fs.simulate import load_trace, replay

HEADER = "job_id,submit_s,duration_s,gpus,user,gpu_util_pct,gpu_mem_gb"
LANE = 32  # praxist_fs.report.LANE_H less the gap between lanes
ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "fixtures" / "policies"


def bars(text: str) -> dict[str, list[tuple[float, float, float]]]:
    """Each attempt group's job tag (from its hover text) -> its rects' (x, y, height)."""
    found = {}
    for group in re.findall(r'<g class="bar[^>]*>(.*?)</g>', text):
        tag = re.search(r"<title>([^ ]+) ", group).group(1)
        found[tag] = [tuple(map(float, rect)) for rect in re.findall(
            r'<rect x="([\d.]+)" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"/>', group)]
    return found


def test_simulate_report_draws_each_attempt_on_its_devices(tmp_path, capsys):
    """seed 000 / R-OPS-1 (issue 17: "`praxist-fs simulate … --report out.html` writes
    the same report for a trace replay"): four half-GPU jobs fill two devices, two
    stacked in each lane; a two-GPU job waits for both and is one bar with a rectangle
    in each lane."""
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join((HEADER, *(f"{tag},0,10,1,alice,50,10" for tag in "abcd"),
                                "w,1,5,2,carol,,")) + "\n")
    out = tmp_path / "sim.html"
    assert main(["simulate", "--trace", str(trace), "--gpus", "2", "--report", str(out)]) == 0
    assert f"report written to {out}" in capsys.readouterr().err
    found = bars(out.read_text())
    assert sorted(found) == ["a", "b", "c", "d", "w"]
    halves = [rect for tag in "abcd" for rect in found[tag]]
    assert len(halves) == 4 and {(x, h) for x, _, h in halves} == {(halves[0][0], LANE / 2)}
    assert sorted(y for _, y, _ in halves) == [0, LANE / 2, LANE + 2, LANE + 2 + LANE / 2]
    assert sorted(y for _, y, _ in found["w"]) == [0, LANE + 2]  # one rect per lane, full
    assert found["w"][0][0] > halves[0][0] and found["w"][0][2] == LANE
    assert "t=10 s" in out.read_text()  # the virtual clock, not 1970


def test_simulate_report_per_placement(tmp_path):
    """Two placements replayed side by side give one report each, named after them."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + "\na,0,10,1,alice,50,10\n")
    assert main(["simulate", "--trace", str(trace), "--gpus", "1", "--placement", "both",
                 "--report", str(tmp_path / "sim.html")]) == 0
    assert sorted(p.name for p in tmp_path.glob("sim-*.html")) == [
        "sim-default-declared.html", "sim-default-exclusive.html"]
    assert not (tmp_path / "sim.html").exists()


def test_the_timeline_can_tell_queues_apart(tmp_path):
    """issue 17 item 2: bars "coloured by peer or queue". One peer's jobs in two work
    classes (each its own queue by default): one colour by peer, two by queue, and the
    legend names the queues."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + ",work_class\na,0,10,1,alice,,,ordinary\n"
                     "m,0,10,1,alice,,,mature\n")
    result = replay(load_trace(trace), gpus=2, policy=load_policy(None), keep_scheduler=True)

    def colours(colour_by: str) -> tuple[dict[str, str], str]:
        text = render(result.scheduler, title="t", until=20.0, colour_by=colour_by)
        return {tag: colour for colour, tag in re.findall(
            r'<g class="bar (p\d+)"[^>]*><title>([^ ]+) ', text)}, text

    by_peer, _ = colours("peer")
    by_queue, text = colours("queue")
    assert len(set(by_peer.values())) == 1 and len(by_peer) == 2
    assert by_queue["a"] != by_queue["m"]
    start = text.index('<p class="legend">')
    legend = text[start:text.index("</p>", start)]
    assert "ordinary" in legend and "mature" in legend and "alice" not in legend


def test_queue_length_follows_arrivals_and_starts(tmp_path):
    """issue 17 item 2: "queue length over time". One GPU, a and b at t=0, c at t=5,
    each 10 s: 1 waits from 0, 2 from 5, 1 from 10 (b starts), none from 20."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + "\na,0,10,1,u,,\nb,0,10,1,u,,\nc,5,10,1,u,,\n")
    result = replay(load_trace(trace), gpus=1, policy=load_policy(None), keep_scheduler=True)
    text = render(result.scheduler, title="t", until=30.0)
    assert "peak 2 queued" in text
    points = re.search(r'<polyline points="([^"]+)"', text).group(1).split()
    ys = [float(point.split(",")[1]) for point in points]
    levels = [round((160 - y) / 75) for y in ys]  # 160 high, 150 for the peak of 2
    assert [n for i, n in enumerate(levels) if i == 0 or n != levels[i - 1]] == [1, 2, 1, 0]
    xs = [float(point.split(",")[0]) for point in points]
    assert xs[levels.index(2)] == pytest.approx(190 + 1000 * 5 / 30, abs=0.1)  # at t=5


def test_lanes_are_the_hosts_gpus_in_index_order_idle_ones_too_and_small_jobs_visible(
        tmp_path):
    """Issue 29: lanes sorted as strings (GPU-0, -1, -10, -100 ...), UUIDs only, no lane
    for an idle GPU, and a 5 %-utilisation job a hairline."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + "\na,0,10,1,alice,5,10\n")
    result = replay(load_trace(trace), gpus=12, policy=load_policy(None), keep_scheduler=True)
    devices = devices_of(None, result.scheduler)
    assert len(devices) == 12  # the replay's inventory: every lane, busy or not
    text = render(result.scheduler, title="t", until=20.0, devices=devices)
    lanes = re.findall(r'class="lane"><title>([^<]+)</title>([^<]*)</text>', text)
    by_index = sorted(devices, key=lambda device: device.index)
    assert [uuid for uuid, _ in lanes] == [device.uuid for device in by_index]
    assert [label for _, label in lanes] == [f"GPU {d.index} {d.name}".strip() for d in by_index]
    [(_, _, height)] = bars(text)["a"]
    assert height == pytest.approx(MIN_SHARE * LANE)  # 5 % drawn at the least height


def test_lanes_without_an_inventory_sort_as_people_count():
    names = ["GPU-10", "GPU-2", "GPU-100", "GPU-1"]
    assert sorted((Device(n) for n in names), key=_lane_order) == [
        Device(n) for n in ("GPU-1", "GPU-2", "GPU-10", "GPU-100")]


def test_queue_delay_counts_the_time_suspended_and_requeued(tmp_path):
    """R-SIM-2 (issue 32): the report's queue delay is every wait, as simulate's. One GPU:
    a (ordinary, 60 %) runs from 0, b (mature, 60 %) comes at 10 and preempts it. Under
    preempt.yaml a is suspended 10-30; under requeue it waits 10-30 to run again: 20 s
    of delay either way, though it first started at once."""
    trace = tmp_path / "trace.csv"
    trace.write_text(HEADER + ",work_class\na,0,100,1,u,60,10,ordinary\n"
                     "b,10,20,1,v,60,10,mature\n")
    for name in ("preempt", "requeue"):
        policy = load_policy(str(POLICIES / f"{name}.yaml"))
        result = replay(load_trace(trace), gpus=1, policy=policy, keep_scheduler=True)
        text = render(result.scheduler, title="t", until=200.0)
        rows = dict(re.findall(r"<tr><th>(\w+)</th><td>1</td><td>([^<]+)</td>", text))
        assert rows == {"mature": "0.00 s", "ordinary": "20 s"}, name


def compacted_run(tmp_path: Path, finished: int) -> Path:
    """A run of ``finished`` completed jobs, compacted: they lie in its snapshot's shelf,
    as a long-served run's history does (bench/fixture.py builds and compacts it)."""
    run = tmp_path / f"run-{finished}"
    for extra in ((), ("--compact",)):
        subprocess.run([sys.executable, "bench/fixture.py", str(run),
                        "fixtures/tasks/example.yaml", "--finished", str(finished), *extra],
                       cwd=ROOT, check=True, capture_output=True, timeout=120)
    return run


def test_a_reports_memory_does_not_hold_a_row_per_finished_job(tmp_path):
    """issue 31 item 3 ("report ... stream history instead of loading it all (memory
    flat in history)"): building the report of 2,500 finished jobs takes at most 600
    bytes more per job, at its peak, than that of 500 (what grows is the shelf's index
    and the queue curve's points; a row kept per job cost ~1,250 bytes)."""
    peaks = {}
    for finished in (500, 2500):
        layout = RunLayout.at(compacted_run(tmp_path, finished))
        tracemalloc.start()
        try:
            document, jobs = report_of(layout)
            write(tmp_path / f"report-{finished}.html", document)
            peaks[finished] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert jobs == finished
    assert (peaks[2500] - peaks[500]) / 2000 <= 600, peaks


def test_a_report_is_written_as_it_is_drawn_not_held_whole(tmp_path):
    """issue 31 item 3 ("memory flat in history"): building and writing the report of
    10,000 finished jobs peaks at most the report's size (~0.5 MB, its queue curve a
    point per wait) above building it and dropping each piece as it is drawn: the
    report is written a piece at a time as it is drawn (a 256 KB write buffer). Joined,
    then encoded, then written whole, it peaked ~2 times its size above. (Measured
    against the read of the run alone before, whose peak fell under the drawing's once
    the header was read in pieces.)"""
    layout = RunLayout.at(compacted_run(tmp_path, 10_000))
    out = tmp_path / "report.html"
    ways = {"dropped": lambda document: sum(map(len, document)),
            "written": lambda document: write(out, document)}
    peaks = {way: [] for way in ways}  # the least of two rounds: a round's peak varies
    for _ in range(2):  # by ~2 MB with what the round before left to the allocator
        for way, consume in ways.items():
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                document, jobs = report_of(layout)
                consume(document)
                peaks[way].append(tracemalloc.get_traced_memory()[1] - before)
                del document
            finally:
                tracemalloc.stop()
    size = out.stat().st_size
    assert jobs == 10_000 and size > 400_000
    assert out.read_text().endswith("by praxist-fs report.</p></body></html>")
    assert min(peaks["written"]) <= min(peaks["dropped"]) + size, (peaks, size)


def test_a_read_of_a_runs_history_keeps_no_id_of_its_finished_jobs_and_replies(tmp_path):
    """issue 31 item 3 (report's memory grows with history: what grew was the shelf's
    index, its ids ~60 % of it): reading a run keeps at most 8 bytes more for each more
    finished job or reply (2,500 finished jobs against 500: the fixed cost of a read
    cancels), where an index of their ids kept ~30 (their ids, and offset, length and
    the key's start in 4 bytes each). The ids are read from the snapshot's lines when a
    lookup asks (``LineKeyed``), and every job is still there to walk."""
    kept = {}
    for finished in (500, 2500):
        layout = RunLayout.at(compacted_run(tmp_path, finished))
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sched, _ = read_run(layout)
            kept[finished] = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert len(sched.jobs) == len(sched.replies) == finished
        assert sum(1 for _ in sched.jobs.values()) == finished
        del sched
    assert (kept[2500] - kept[500]) / (2 * 2000) <= 8, kept


def test_a_report_drawn_streaming_is_the_report_of_the_run_read_whole(tmp_path, monkeypatch):
    """issue 31 item 3 ("stream history instead of loading it all"; the report unchanged):
    the report as `report` draws it, the run's keys left in its snapshot's lines and its
    waits spilled to a file in sorted runs (of 64 here: 2,500 jobs make ~100 of them),
    is byte for byte the report of the run read as a start reads it, every key and wait
    in memory, but for the line that says when it was built."""
    layout = RunLayout.at(compacted_run(tmp_path, 2500))
    monkeypatch.setattr(report_history, "SORTED_RUN", 64)
    streamed = "".join(report_of(layout)[0])
    monkeypatch.setattr(report_history, "SORTED_RUN", 1 << 30)
    monkeypatch.setattr(history, "read", lambda *args, keys_in_file: snapshot.read(*args))
    whole = "".join(report_of(layout)[0])
    built = re.compile(r"Built [^<]* by praxist-fs report")
    assert len(built.findall(whole)) == 1 and "peak " in whole
    assert built.sub("", streamed) == built.sub("", whole)
