"""`praxist-fs simulate`: hand-made traces with delays worked out by hand, trace errors,
the JSON contract, and a prefix of the real Philly trace against a reference model."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from praxist_fs.cli import main
from praxist_fs.commands import simulate as simulate_command
from praxist_fs.config import load_policy
from praxist_fs.core.events import AttemptLaunched, AttemptPreempted
from praxist_fs.core.model import Attempt, Job
from praxist_fs.core.policy import Profile
from praxist_fs.core.request import Request
from praxist_fs.simulate import (
    MAX_IDLE_ROUNDS, JobRecord, Livelock, SimulatedGpu, TraceError, TraceJob, Watch, load_trace,
    percentile, replay, trace_from_history,
)

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "trace_philly.csv"
FCFS = ROOT / "fixtures" / "policies" / "fcfs.yaml"
BACKFILL = ROOT / "fixtures" / "policies" / "backfill.yaml"
PREEMPT = ROOT / "fixtures" / "policies" / "preempt.yaml"
REQUEUE = ROOT / "fixtures" / "policies" / "requeue.yaml"
LIVELOCK = ROOT / "fixtures" / "traces" / "livelock.csv"
HEADER = "job_id,submit_s,duration_s,gpus,user"
FRACTIONAL_HEADER = HEADER + ",gpu_util_pct,gpu_mem_gb"


def trace(tmp_path: Path, *lines: str, header: str = HEADER) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text("\n".join((header, *lines)) + "\n")
    return path


def run(path: Path, gpus: int, placement: str = "declared", policy_override=None):
    policy = replace(load_policy(None), **(policy_override or {}))
    return replay(load_trace(path), gpus=gpus, policy=policy, placement=placement)


def run_json(capsys, *argv: str) -> dict:
    assert main(["simulate", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_third_job_waits_for_the_first_free_gpu(tmp_path):
    path = trace(tmp_path, "a,0,10,1,alice", "b,0,20,1,bob", "c,0,30,1,alice")
    r = run(path, gpus=2)
    assert (r.completed, r.unrunnable, r.preemptions) == (3, [], 0)
    assert r.mean_delay_s == pytest.approx(10 / 3)       # delays 0, 0, 10
    assert (r.p50_delay_s, r.p95_delay_s) == (0, pytest.approx(9.0))
    assert r.mean_jct_s == pytest.approx((10 + 20 + 40) / 3)
    assert r.makespan_s == 40
    assert r.gpu_utilization == pytest.approx(60 / (2 * 40))


def test_a_multi_gpu_job_waits_for_enough_idle_devices(tmp_path):
    path = trace(tmp_path, "a,0,10,1,u", "b,5,10,2,u", "c,6,4,1,u")
    r = run(path, gpus=2)
    # b needs both GPUs and waits; c, younger, is not blocked by it: it takes the free
    # GPU at 6 and ends at 10 with a, when b starts.
    assert r.mean_delay_s == pytest.approx((0 + 5 + 0) / 3)
    assert r.makespan_s == 20


def test_fractional_jobs_share_a_gpu_only_in_declared_mode(tmp_path):
    path = trace(tmp_path, "a,0,100,1,u,40,20", "b,0,100,1,u,40,20", header=FRACTIONAL_HEADER)
    declared = run(path, gpus=1, placement="declared")
    exclusive = run(path, gpus=1, placement="exclusive")
    assert (declared.mean_delay_s, declared.makespan_s) == (0, 100)
    assert declared.gpu_utilization == pytest.approx(2 * 0.4 * 100 / 100)
    assert (exclusive.mean_delay_s, exclusive.makespan_s) == (50, 200)
    assert exclusive.gpu_utilization == pytest.approx(2 * 0.4 * 100 / 200)


def test_declared_shares_respect_the_per_device_limits(tmp_path):
    # 60% + 60% > 100%: the second waits although memory would fit.
    path = trace(tmp_path, "a,0,10,1,u,60,10", "b,0,10,1,u,60,10", header=FRACTIONAL_HEADER)
    assert run(path, gpus=1).mean_delay_s == 5


def test_jobs_that_cannot_run_are_reported_not_hung(tmp_path):
    path = trace(tmp_path, "small,0,10,1,u,,", "huge,0,10,4,u,,", "fat,1,10,1,u,10,200",
                 header=FRACTIONAL_HEADER)
    r = run(path, gpus=2)
    assert r.completed == 1
    reasons = {item["job_id"]: item["reason"] for item in r.unrunnable}
    assert reasons["huge"] == "needs 4 GPUs; the simulated cluster has 2"
    assert reasons["fat"].startswith("gpu memory: no device with 200 GiB headroom")


def test_speedup_packs_arrivals_tighter(tmp_path, capsys):
    path = trace(tmp_path, "a,0,10,1,u", "b,10,10,1,u")
    assert run_json(capsys, "--trace", str(path), "--gpus", "1")["results"][0][
        "mean_delay_s"] == 0
    doc = run_json(capsys, "--trace", str(path), "--gpus", "1", "--speedup", "2")
    assert doc["results"][0]["mean_delay_s"] == 2.5   # b arrives at 5, starts at 10


def test_json_has_every_metric_per_policy_and_placement(tmp_path, capsys):
    path = trace(tmp_path, "a,0,10,1,u", "b,3,10,2,v")
    doc = run_json(capsys, "--trace", str(path), "--gpus", "2", "--placement", "both",
                   "--policy", str(FCFS), "--eta-noise", "0.5")
    assert (doc["gpus"], doc["jobs"]) == (2, 2)
    assert [(r["policy"], r["placement"]) for r in doc["results"]] == [
        ("fcfs", "declared"), ("fcfs", "exclusive")]
    for result in doc["results"]:
        assert {"mean_delay_s", "p50_delay_s", "p95_delay_s", "mean_jct_s", "gpu_utilization",
                "preemptions"} <= set(result)
        assert result["preemptions"] == 0 and result["completed"] == 2


def test_table_names_policies_and_unrunnable_jobs(tmp_path, capsys):
    path = trace(tmp_path, "a,0,10,1,u", "b,0,10,3,v")
    assert main(["simulate", "--trace", str(path), "--gpus", "2", "--policy", str(FCFS)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["POLICY", "PLACEMENT", "JOBS"]
    assert out.splitlines()[1].split()[:5] == ["fcfs", "declared", "2", "1", "1"]
    assert "unrunnable (fcfs, declared): job b: needs 3 GPUs" in out


def test_limit_takes_the_earliest_submissions(tmp_path):
    path = trace(tmp_path, "late,50,1,1,u", "early,0,1,1,u", "mid,7,1,1,u")
    assert [j.job_id for j in load_trace(path, limit=2)] == ["early", "mid"]


@pytest.mark.parametrize("lines, message", [
    ((), "empty; expected a header"),
    (("job_id,submit_s,duration_s,gpus", "a,0,1,1"), "line 1: missing column 'user'"),
    ((HEADER + ",gpu_util", "a,0,1,1,u,5"), "line 1: unknown column 'gpu_util'"),
    ((HEADER, "a,0,1,1.5,u"), "line 2: column gpus: got '1.5', expected an integer >= 1"),
    ((HEADER, "a,0,1,0,u"), "line 2: column gpus: got '0'"),
    ((HEADER, "a,0,1,1,u", "b,x,1,1,u"), "line 3: column submit_s: got 'x', expected a number"),
    ((HEADER, "a,0,0,1,u"), "line 2: column duration_s: got '0', expected a number > 0"),
    ((HEADER, "a,0,nan,1,u"), "line 2: column duration_s: got 'nan'"),
    ((HEADER, "a,inf,1,1,u"), "line 2: column submit_s: got 'inf', expected a number >= 0"),
    ((HEADER, "a,0,1,\u00b2,u"), "line 2: column gpus: got '\u00b2'"),
    ((HEADER, "a,0,1,1"), "line 2: 4 fields; the header has 5"),
    ((HEADER, "a,0,1,1,u", "a,2,1,1,u"), "line 3: column job_id: 'a' again (first at line 2)"),
    ((HEADER, "a,0,1,1,../etc"), "line 2: column user: got '../etc'"),
    ((FRACTIONAL_HEADER, "a,0,1,1,u,150,10"), "line 2: column gpu_util_pct: got '150', "
                                             "expected a number > 0 and <= 100"),
    ((HEADER + ",work_class", "a,0,1,1,u,boss"), "line 2: column work_class: got 'boss', "
                                                "expected one of scout, ordinary, mature"),
])
def test_bad_traces_name_the_line_and_column(tmp_path, capsys, lines, message):
    path = tmp_path / "bad.csv"
    path.write_text("\n".join(lines) + "\n" if lines else "")
    with pytest.raises(TraceError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(str(path)) and message in str(caught.value)
    assert main(["simulate", "--trace", str(path), "--gpus", "1"]) == 2
    assert message in capsys.readouterr().err


def test_unreadable_trace_and_bad_flags_exit_2(tmp_path, capsys):
    assert main(["simulate", "--trace", str(tmp_path / "none.csv"), "--gpus", "1"]) == 2
    assert "none.csv: cannot read" in capsys.readouterr().err
    path = trace(tmp_path, "a,0,1,1,u")
    for flags, problem in ((["--gpus", "0"], "--gpus must be >= 1"),
                           (["--gpus", "1", "--speedup", "0"], "--speedup must be > 0"),
                           (["--gpus", "1", "--limit", "0"], "--limit must be >= 1")):
        assert main(["simulate", "--trace", str(path), *flags]) == 2
        assert problem in capsys.readouterr().err


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    real = simulate_command.importlib.util.find_spec
    monkeypatch.setattr(simulate_command.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    path = trace(tmp_path, "a,0,1,1,u")
    assert main(["simulate", "--trace", str(path), "--gpus", "1", "--plot",
                 str(tmp_path / "out.png")]) == 2
    assert "pip install 'praxist-fs[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "out.png").exists()


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the [plot] extra is not installed")
    path = trace(tmp_path, "a,0,10,1,u", "b,0,10,1,u", "c,5,10,2,u")
    out = tmp_path / "out.png"
    assert main(["simulate", "--trace", str(path), "--gpus", "2", "--placement", "both",
                 "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_percentile_interpolates_between_ranks():
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([0.0, 10.0, 20.0, 30.0], 50) == 15.0


def reference_starts(jobs, gpus: int, cap: int | None) -> dict[str, float]:
    """The current core's rule for whole-GPU jobs, written independently: at each arrival
    or completion, walk the queue oldest first and start every job that fits, while fewer
    than ``cap`` jobs run."""
    return {job.job_id: at for at, job, _ in reference_walk(jobs, gpus, cap)}


def running_counts(jobs, gpus: int, cap: int | None) -> list[int]:
    """How many jobs run right after each start of the reference walk."""
    return [count for _, _, count in reference_walk(jobs, gpus, cap)]


def reference_walk(jobs, gpus: int, cap: int | None):
    free, queue, running, starts = gpus, [], [], []
    pending = sorted(jobs, key=lambda j: j.submit_s)
    i = 0
    while i < len(pending) or running:
        now = min([end for end, _ in running] + ([pending[i].submit_s] if i < len(pending)
                                                 else []))
        for end, job in [r for r in running if r[0] == now]:
            running.remove((end, job))
            free += job.gpus
        while i < len(pending) and pending[i].submit_s == now:
            queue.append(pending[i])
            i += 1
        for job in list(queue):
            if job.gpus <= free and (cap is None or len(running) < cap):
                free -= job.gpus
                queue.remove(job)
                running.append((now + job.duration_s, job))
                starts.append((now, job, len(running)))
    return starts


@pytest.mark.skipif(not PHILLY.exists(), reason="../shared/traces is not checked out")
@pytest.mark.parametrize("uncapped", [True, False])
def test_philly_prefix_matches_the_reference_model(uncapped):
    """2,000 real jobs (up to 8 GPUs) on 64 GPUs: every start time as the reference says,
    with GPUs the only limit (``--uncapped``) and under fcfs.yaml's cap of 8 jobs at once.
    The full 15,000-job replay is bench/bench_simulate.py (minutes; see docs/SIMULATE.md)."""
    jobs = load_trace(PHILLY, limit=2000)
    began = time.perf_counter()
    result = replay(jobs, gpus=64, policy=load_policy(FCFS), name="fcfs", uncapped=uncapped)
    assert time.perf_counter() - began < 30
    assert (result.completed, result.unrunnable) == (2000, [])
    assert result.peak_running == (max(r for r in running_counts(jobs, 64, None))
                                   if uncapped else 8)
    starts = reference_starts(jobs, 64, None if uncapped else 8)
    delays = sorted(starts[j.job_id] - j.submit_s for j in jobs)
    assert result.mean_delay_s == pytest.approx(sum(delays) / len(delays))
    assert result.p95_delay_s == pytest.approx(percentile(delays, 95))
    assert 0 < result.gpu_utilization <= 1


def test_backfill_keeps_its_reservation_where_fcfs_lets_younger_work_pass(tmp_path):
    path = trace(tmp_path, "a,0,100,1,u", "b,1,50,2,v", "c,2,10,1,w", "d,3,200,1,w")
    fcfs, backfill = (run(path, gpus=2, policy_override={"job_picker": picker})
                      for picker in ("fcfs", "backfill"))
    # fcfs: d takes the GPU c frees at 12 and b, needing both, waits until 212.
    assert (fcfs.mean_delay_s, fcfs.makespan_s) == ((0 + 211 + 0 + 9) / 4, 262)
    # backfill: b is reserved for 100 (when a ends); c fits before it, d would delay it.
    assert (backfill.mean_delay_s, backfill.makespan_s) == ((0 + 99 + 0 + 147) / 4, 350)


@pytest.mark.skipif(not PHILLY.exists(), reason="../shared/traces is not checked out")
def test_backfill_task_file_replays_the_philly_prefix():
    policy = load_policy(BACKFILL)
    jobs = load_trace(PHILLY, limit=500)
    result = replay(jobs, gpus=64, policy=policy, name="backfill")
    assert (result.completed, result.unrunnable) == (500, [])


def test_preemption_by_suspension_and_by_requeue_worked_by_hand(tmp_path):
    """One GPU; a (ordinary) and b (mature, the urgent queue) each declare 60%, so they
    cannot share it. b arrives at 10 with a 90 s from its end."""
    path = trace(tmp_path, "a,0,100,1,u,60,10,ordinary", "b,10,20,1,v,60,10,mature",
                 header=FRACTIONAL_HEADER + ",work_class")
    jobs = load_trace(path)
    suspend = load_policy(PREEMPT)
    requeue = replace(suspend, queues=tuple(replace(q, preempt="requeue")
                                            for q in suspend.queues))
    waiting = replace(suspend, queues=tuple(replace(q, preemptible_queues=())
                                            for q in suspend.queues))
    results = {name: replay(jobs, gpus=1, policy=policy, name=name)
               for name, policy in (("suspend", suspend), ("requeue", requeue),
                                    ("none", waiting))}
    # suspend: a stops at 10 with 90 s left, b runs 10-30, a resumes and ends at 120
    # (R-SIM-2: its 20 s suspended are queueing delay)
    r = results["suspend"]
    assert (r.completed, r.unrunnable, r.preemptions) == (2, [], 1)
    assert (r.mean_delay_s, r.mean_jct_s, r.makespan_s) == (20 / 2, (120 + 20) / 2, 120)
    assert r.gpu_utilization == pytest.approx((0.6 * 100 + 0.6 * 20) / 120)
    # requeue: a is terminated at 10 and runs again, from zero, at 30: it ends at 130
    # (its delay is its 20 s waiting to start again)
    r = results["requeue"]
    assert (r.completed, r.unrunnable, r.preemptions) == (2, [], 1)
    assert (r.mean_delay_s, r.mean_jct_s, r.makespan_s) == (20 / 2, (130 + 20) / 2, 130)
    # no preemption: b waits for a, 100-120
    r = results["none"]
    assert (r.preemptions, r.mean_delay_s, r.mean_jct_s) == (0, 90 / 2, (100 + 110) / 2)
    # an exclusive device is never freed by suspending its job: b waits
    r = replay(jobs, gpus=1, policy=suspend, placement="exclusive")
    assert (r.preemptions, r.mean_delay_s, r.makespan_s) == (0, 45, 120)



def test_the_trace_that_livelocked_ends_with_one_preemption(capsys):
    """R-SIM-1, issue 14: on one GPU V1 (30%) and X (40%) run, Q (37%) waits; at 10 X ends
    and M (urgent, 100%) requeues V1. Q once took the room in the same pass, M requeued
    Q, V1 came back, and the replay never ended. Now M runs 10-60 and V1 (from zero) and
    Q share the GPU from 60: V1 ends at 1060, Q at 160."""
    doc = run_json(capsys, "--trace", str(LIVELOCK), "--gpus", "1", "--policy", str(REQUEUE))
    [r] = doc["results"]
    assert (r["completed"], r["unrunnable"], r["preemptions"]) == (4, [], 1)
    assert r["preempted"] == [{"job_id": "V1", "by": "M", "times": 1}]
    assert r["mean_delay_s"] == (50 + 0 + 59 + 0) / 4  # V1 waits 10-60 to start again
    assert (r["mean_jct_s"], r["makespan_s"]) == ((1060 + 10 + 159 + 50) / 4, 1060)


def test_a_livelock_is_reported_naming_the_jobs_and_the_circle():
    """The safety net, for a core that would go round again (the core's own bound makes
    it unreachable through a replay): more preemptions of one job for the same job at one
    instant than the core allows."""
    jobs = {name: JobRecord(TraceJob(job_id=name, submit_s=0, duration_s=1, gpus=1, user="u"))
            for name in ("V1", "Q", "M")}
    watch = Watch("policy requeue (declared)")

    def circle(at: float) -> None:
        for event in (AttemptPreempted(at=at, job_id="V1", attempt_id="a1", mode="requeue",
                                       by="M", reason="r"),
                      AttemptLaunched(at=at, job_id="Q", attempt_id="a1", gpus=()),
                      AttemptPreempted(at=at, job_id="Q", attempt_id="a1", mode="requeue",
                                       by="M", reason="r"),
                      AttemptLaunched(at=at, job_id="V1", attempt_id="a2", gpus=())):
            watch.saw(at, event, jobs)

    for at in range(5):  # the clock moves between them: no livelock, however many
        circle(float(at))
    for _ in range(3):
        circle(10.0)
    with pytest.raises(Livelock) as caught:
        circle(10.0)
    assert str(caught.value) == (
        "policy requeue (declared): livelock at t=10 s: job V1 preempted 4 times for job M "
        "while the clock stood still; it goes round: M preempts V1 -> Q starts -> "
        "M preempts Q -> V1 starts -> M preempts V1")
    assert watch.preempted[("V1", "M")] == 5 + 4


def test_delays_by_gpu_count_show_what_backfill_does_for_wide_jobs(tmp_path, capsys):
    """Nine GPUs. w needs all nine and waits for a (until 10); n, narrow and long, comes at
    2. fcfs starts n at once, so w also waits for n (until 102); backfill keeps the GPUs
    for w, which starts at 10, and n starts when w ends, at 20. t is short enough for
    both (it ends long before 10)."""
    path = trace(tmp_path, "a,0,10,1,u", "w,0,10,9,v", "n,2,100,1,u", "t,3,1,2,u")
    doc = run_json(capsys, "--trace", str(path), "--gpus", "9", "--policy", str(FCFS),
                   "--policy", str(BACKFILL))
    fcfs, backfill = (result["by_gpus"] for result in doc["results"])
    assert list(fcfs) == list(backfill) == ["1", "2", ">8"]
    assert fcfs["1"].items() >= {"completed": 2, "mean_delay_s": 0, "p50_delay_s": 0,
                                 "p95_delay_s": 0}.items()
    assert (fcfs["2"]["mean_delay_s"], fcfs[">8"]["mean_delay_s"]) == (0, 102)
    assert backfill["1"].items() >= {"completed": 2, "mean_delay_s": 9, "p50_delay_s": 9,
                                     "p95_delay_s": pytest.approx(17.1)}.items()  # 0, 18
    assert (backfill["2"]["mean_delay_s"], backfill[">8"]["mean_delay_s"]) == (0, 10)
    assert main(["simulate", "--trace", str(path), "--gpus", "9", "--policy", str(FCFS)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["fcfs", "declared", ">8", "1", "102", "s", "102", "s", "102", "s"] in [
        row[:10] for row in rows]


def test_the_task_files_concurrency_cap_holds_unless_uncapped(tmp_path, capsys):
    """seed 000 "Admission and resource classes": bounded resources are held "through a
    conservative global experiment cap"; R-SIM-1 (issue 18): the replay honours it and
    says so. Ten 1-GPU jobs at 0 on 16 GPUs, fcfs.yaml caps 8 at once: two wait 100 s."""
    path = trace(tmp_path, *(f"j{i},0,100,1,u" for i in range(10)))
    capped = run_json(capsys, "--trace", str(path), "--gpus", "16", "--policy", str(FCFS))
    [r] = capped["results"]
    assert (capped["concurrency"], r["concurrency"]) == ("task file", "task file")
    assert (r["max_concurrent"], r["peak_running"]) == (8, 8)
    assert r["mean_delay_s"] == 2 * 100 / 10
    free = run_json(capsys, "--trace", str(path), "--gpus", "16", "--policy", str(FCFS),
                    "--uncapped")
    [r] = free["results"]
    assert (free["concurrency"], r["concurrency"], r["peak_running"]) == ("uncapped",
                                                                          "uncapped", 10)
    assert r["mean_delay_s"] == 0
    assert main(["simulate", "--trace", str(path), "--gpus", "16", "--policy", str(FCFS)]) == 0
    assert ("concurrency (fcfs, declared): the task file's limits, at most 8 at once; 8 ran "
            "at once at the peak") in capsys.readouterr().out


def test_a_cap_that_holds_work_back_while_devices_idle_is_warned_of(tmp_path, capsys):
    """R-SIM-2 (issue 32): a one-host file replayed on a cluster measures its cap, not the
    GPUs, and simulate says so. Ten 1-GPU jobs at 0 on 16 GPUs: under fcfs.yaml's cap of
    8 two wait 100 s while 8 devices hold nothing; uncapped, or under the recommended
    file's cluster cap, nothing is held back and nothing is said."""
    path = trace(tmp_path, *(f"j{i},0,100,1,u" for i in range(10)))
    capped = run_json(capsys, "--trace", str(path), "--gpus", "16", "--policy", str(FCFS))
    assert capped["results"][0]["cap_bound_s"] == 100
    assert main(["simulate", "--trace", str(path), "--gpus", "16", "--policy", str(FCFS),
                 "--policy", str(RECOMMENDED)]) == 0
    out, err = capsys.readouterr()
    said = ("the cap, not the 16 GPUs, held work back for 100 s (50% of the makespan): 8 "
            "jobs ran, others waited, and a device held nothing")
    assert f"concurrency (fcfs, declared): the task file's limits, at most 8 at once; 8 " \
           f"ran at once at the peak; {said}" in out
    assert err.count("warning") == 1
    assert f"warning: policy fcfs (declared): {said}; the numbers measure its cap" in err
    for flags in ((str(FCFS), "--uncapped"), (str(RECOMMENDED),)):
        assert main(["simulate", "--json", "--trace", str(path), "--gpus", "16",
                     "--policy", *flags]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["results"][0]["cap_bound_s"] == 0 and "warning" not in err


def test_suspended_time_counts_in_delay_and_shows_apart_per_job_and_by_class(
        tmp_path, capsys):
    """R-SIM-2 (issue 32): a job started at once and then preempted waited all the same:
    its time off the devices counts in its queueing delay, and is also reported on its
    own, and in its completion time. One GPU: a (ordinary) runs 0-10, is suspended 10-30
    while b (mature) runs, and ends at 120; under requeue it waits 10-30 again and
    reruns to 130."""
    path = trace(tmp_path, "a,0,100,1,u,60,10,ordinary", "b,10,20,1,v,60,10,mature",
                 header=FRACTIONAL_HEADER + ",work_class")
    out = tmp_path / "jobs.csv"
    doc = run_json(capsys, "--trace", str(path), "--gpus", "1", "--policy", str(PREEMPT),
                   "--policy", str(REQUEUE), "--jobs-csv", str(out))
    suspend, requeue = doc["results"]
    assert suspend["by_class"]["ordinary"] == {
        "completed": 1, "mean_delay_s": 20, "p50_delay_s": 20, "p95_delay_s": 20,
        "max_delay_s": 20, "mean_jct_s": 120, "p95_jct_s": 120, "mean_suspended_s": 20,
        "mean_slowdown": 1.2, "p95_slowdown": 1.2}
    assert suspend["by_class"]["mature"]["mean_jct_s"] == 20
    assert list(suspend["by_class"]) == ["ordinary", "mature"]
    assert (suspend["mean_suspended_s"], suspend["mean_slowdown"]) == (10, (1.2 + 1) / 2)
    assert (requeue["by_class"]["ordinary"]["mean_suspended_s"],
            requeue["by_class"]["ordinary"]["mean_delay_s"],
            requeue["by_class"]["ordinary"]["mean_jct_s"]) == (20, 20, 130)
    assert (suspend["mean_delay_s"], suspend["max_delay_s"]) == (10, 20)
    assert suspend["by_gpus"]["1"]["p95_jct_s"] == pytest.approx(20 + 0.95 * 100)
    rows = out.read_text().splitlines()
    assert rows[0] == ("policy,placement,job_id,user,work_class,gpus,submit_s,start_s,end_s,"
                       "duration_s,delay_s,suspended_s,jct_s,slowdown,preemptions,devices")
    assert rows[1:] == ["preempt,declared,a,u,ordinary,1,0,0,120,100,20,20,120,1.2,1,0",
                        "preempt,declared,b,v,mature,1,10,10,30,20,0,0,20,1,0,0",
                        "requeue,declared,a,u,ordinary,1,0,0,130,100,20,20,130,1.3,1,0",
                        "requeue,declared,b,v,mature,1,10,10,30,20,0,0,20,1,0,0"]


def test_jobs_csv_lists_every_job_with_its_devices_and_the_unrunnable_empty(tmp_path, capsys):
    """R-SIM-1 (issue 18): one row per job. w takes both GPUs after a ends; big never
    fits; a's row names its device; a time 57 days in keeps its digits."""
    path = trace(tmp_path, "a,0,10,1,u", "w,1,5,2,v", "big,2,5,3,v", "late,4976543.25,0.5,1,u")
    out = tmp_path / "jobs.csv"
    assert main(["simulate", "--trace", str(path), "--gpus", "2", "--jobs-csv", str(out)]) == 0
    rows = {row["job_id"]: row for row in csv.DictReader(out.read_text().splitlines())}
    assert list(rows) == ["a", "w", "big", "late"]
    assert (rows["late"]["submit_s"], rows["late"]["end_s"]) == ("4976543.25", "4976543.75")
    assert (rows["a"]["devices"], rows["w"]["devices"]) == ("0", "0 1")
    # w waits 1-10 for a's GPU, ends at 15: (15 - 1) / 5
    assert (rows["w"]["start_s"], rows["w"]["delay_s"], rows["w"]["slowdown"]) == ("10", "9",
                                                                                 "2.8")
    assert (rows["big"]["start_s"], rows["big"]["end_s"], rows["big"]["jct_s"]) == ("", "", "")
    capsys.readouterr()
    assert main(["simulate", "--trace", str(path), "--gpus", "2", "--jobs-csv",
                 str(tmp_path / "no" / "such" / "jobs.csv")]) == 2
    assert "--jobs-csv" in capsys.readouterr().err


def test_the_simulated_device_is_set_by_model_and_memory(tmp_path, capsys):
    """R-SIM-1 (issue 18): --gpu-memory-gb and --gpu-model set the device. Two jobs of
    30% and 50 GiB share an H200 (140 GiB) but not an 80 GiB device; 100 GiB fits on
    neither of those, it is unrunnable on 80 GiB."""
    path = trace(tmp_path, "a,0,10,1,u,30,50", "b,0,10,1,u,30,50", header=FRACTIONAL_HEADER)
    h200 = run_json(capsys, "--trace", str(path), "--gpus", "1")
    assert (h200["gpu_model"], h200["gpu_memory_mib"]) == ("NVIDIA H200", 143771)
    assert h200["results"][0]["mean_delay_s"] == 0
    small = run_json(capsys, "--trace", str(path), "--gpus", "1", "--gpu-memory-gb", "80",
                     "--gpu-model", "NVIDIA A100 80GB")
    assert (small["gpu_model"], small["gpu_memory_mib"]) == ("NVIDIA A100 80GB", 81920)
    assert small["results"][0]["mean_delay_s"] == 5   # b waits for a
    fat = trace(tmp_path, "f,0,10,1,u,30,100", header=FRACTIONAL_HEADER)
    r = replay(load_trace(fat), gpus=1, policy=load_policy(None),
               device=SimulatedGpu(memory_mib=81920))
    assert r.completed == 0
    assert r.unrunnable[0]["reason"].startswith("gpu memory: no device with 100 GiB headroom")
    for flags, problem in ((["--gpu-memory-gb", "0"], "--gpu-memory-gb must be > 0"),
                           (["--gpu-model", " "], "--gpu-model must not be empty")):
        assert main(["simulate", "--trace", str(path), "--gpus", "1", *flags]) == 2
        assert problem in capsys.readouterr().err


def test_deterministic_json_is_the_same_bytes_in_two_processes(tmp_path):
    """R-SIM-1 (issue 18): the same command prints the same bytes; the wall time, which
    differs, goes to stderr. Two processes with different hash seeds, noisy ETAs,
    shared GPUs, preemption and a backfill reservation."""
    lines = [f"j{i},{i * 7 % 50},{10 + i * 13 % 90},{1 + i % 3},u{i % 4},{30 + i % 5 * 10},"
             f"{10 + i % 4 * 20},{('ordinary', 'mature', 'scout')[i % 3]}" for i in range(60)]
    path = trace(tmp_path, *lines, header=FRACTIONAL_HEADER + ",work_class")
    outputs = []
    for hash_seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-m", "praxist_fs", "simulate", "--trace", str(path), "--gpus",
             "4", "--policy", str(PREEMPT), "--policy", str(BACKFILL), "--eta-noise", "0.5",
             "--json", "--deterministic"],
            capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=True)
        outputs.append(done.stdout)
        assert done.stderr.decode().count("replayed in") == 2
    assert outputs[0] == outputs[1]
    doc = json.loads(outputs[0])
    assert all("wall_s" not in r for r in doc["results"])
    assert sum(r["completed"] for r in doc["results"]) == 120


def test_rounds_that_start_nothing_new_are_a_livelock_naming_the_jobs():
    """R-SIM-1 (issue 18): the simulator refuses to spin. Jobs pushed back and forth at
    one instant by different preemptors (so no one pair repeats beyond the core's bound)
    stop the replay after MAX_IDLE_ROUNDS rounds that start no job not yet run there."""
    names = ["A", "B", *(f"P{i}" for i in range(MAX_IDLE_ROUNDS + 2))]
    jobs = {n: JobRecord(TraceJob(job_id=n, submit_s=0, duration_s=1, gpus=1, user="u"))
            for n in names}
    watch = Watch("policy p (declared)")
    start = [AttemptLaunched(at=5.0, job_id="A", attempt_id="a1", gpus=()),
             AttemptLaunched(at=5.0, job_id="B", attempt_id="b1", gpus=())]
    watch.round(5.0, start, jobs)  # progress: A and B start
    for i in range(MAX_IDLE_ROUNDS):
        watch.round(5.0, [AttemptPreempted(at=5.0, job_id="A", attempt_id="a", mode="requeue",
                                           by=f"P{i}", reason="r"), start[1]], jobs)
    with pytest.raises(Livelock) as caught:
        watch.round(5.0, [AttemptPreempted(at=5.0, job_id="B", attempt_id="b", mode="requeue",
                                           by="P0", reason="r"), start[0]], jobs)
    assert str(caught.value) == (
        f"policy p (declared): livelock at t=5 s: {MAX_IDLE_ROUNDS + 1} rounds of decisions "
        "in a row started no new job while the clock stood still; jobs involved: A, B")
    watch.round(6.0, [], jobs)  # the clock moved on: counting starts again
    assert watch.idle_rounds == 0


def test_a_runs_history_becomes_a_trace_of_what_actually_ran():
    """R-SIM-1 (issue 18 item 6): a job's run time is its last attempt's, less the time
    it was suspended; jobs that never ended, use no GPU or whose profile is gone are left
    out and counted; ``since`` keeps the later submissions, the first of them at 0; the
    ETA a peer gave goes with its job."""
    profiles = {"one": Profile(name="one", accelerator="gpu", gpu_count=1,
                               gpu_utilization_pct=45, gpu_memory_gb=20),
                "two": Profile(name="two", accelerator="gpu", gpu_count=2),
                "cpu": Profile(name="cpu", accelerator="cpu")}

    def job(tag: str, at: float, profile: str, *attempts: Attempt, eta: float | None = None
            ) -> Job:
        return Job(job_id=f"{tag}-id", request=Request(request_id=tag, peer="alice", tag=tag,
                                                       work_class="mature", eta_s=eta),
                   profile=profile, fingerprint=tag, submitted_at=at, order=int(at),
                   attempts=list(attempts))

    requeued = Attempt(attempt_id="a1", number=1, round=1, started_at=105, ended_at=107)
    suspended = Attempt(attempt_id="a2", number=2, round=1, started_at=110, ended_at=200,
                        preemptions=({"at": 120, "mode": "suspend", "by": "x", "reason": "r",
                                      "resumed_at": 150},))
    history = [job("old", 10, "one", Attempt(attempt_id="a1", number=1, round=1,
                                              started_at=10, ended_at=20)),
               job("wide", 100, "two", requeued, suspended),
               job("narrow", 103, "one", Attempt(attempt_id="a1", number=1, round=1,
                                                  started_at=103, ended_at=113), eta=30),
               job("waiting", 104, "one"),
               job("cpu", 105, "cpu", Attempt(attempt_id="a1", number=1, round=1,
                                               started_at=105, ended_at=106)),
               job("gone", 106, "dropped", Attempt(attempt_id="a1", number=1, round=1,
                                                    started_at=106, ended_at=107))]
    trace, left_out = trace_from_history(history, profiles, since=50)
    assert trace == [
        TraceJob(job_id="wide-id", submit_s=0, duration_s=90 - 30, gpus=2, user="alice",
                 work_class="mature"),
        TraceJob(job_id="narrow-id", submit_s=3, duration_s=10, gpus=1, user="alice",
                 gpu_util_pct=45, gpu_mem_gb=20, work_class="mature", eta_s=30)]
    assert left_out == {
        "never ended an attempt (queued, running or cancelled before it ran)": 1,
        "uses no GPU": 1, "profile 'dropped' is no longer in the run's task file": 1}
    assert [j.job_id for j in trace_from_history(history, profiles)[0]] == [
        "old-id", "wide-id", "narrow-id"]


RECOMMENDED = ROOT / "fixtures" / "policies" / "recommended.yaml"


def test_the_recommended_policy_is_the_one_docs_simulate_names():
    """issue 18 item 4: fixtures/policies/recommended.yaml is shortest expected first by
    GPU-seconds with aging and best_fit placement, with a cluster's cap, as
    docs/SIMULATE.md says."""
    policy = load_policy(RECOMMENDED)
    assert (policy.job_picker, policy.shortest_first_aging, policy.shortest_first_by,
            policy.placement) == ("shortest_expected_first", 1, "gpu_seconds", "best_fit")
    assert policy.max_concurrent_experiments == policy.initial_concurrent_experiments == 10_000
    doc = (ROOT / "docs" / "SIMULATE.md").read_text()
    choosing = doc[doc.index("## Choosing a policy"):]
    for said in ("`job_picker: shortest_expected_first`", "`shortest_first_aging: 1`",
                 "`shortest_first_by: gpu_seconds`", "`placement: best_fit`", "`max_concurrent_experiments: 10000`",
                 "`shortest_first_starvation_factor: 8`",
                 "`shortest_first_starvation_seconds: 2592000`",
                 "`shortest_first_priority_seconds: 86400`",
                 "bench/policy_table.py", "bench/shipped_table.py"):
        assert said in choosing


def test_the_recommended_policy_packs_shares_and_runs_short_jobs_first(tmp_path, capsys):
    """seed 000 "Admission and resource classes" (GPU work shares devices by declared
    demand) and issue 18 items 2-4, worked by hand on 2 GPUs: a and b (50 % each) share
    GPU 0 under best_fit, so w (100 %) starts at once on GPU 1; when b frees GPU 0 at
    101, short (10 s) goes before long (1,000 s, submitted first). fcfs with spread
    (fcfs.yaml) puts b on GPU 1, so w waits for a, long for b and short for w."""
    path = trace(tmp_path, "a,0,100,1,u,50,20", "b,1,100,1,u,50,20", "w,2,100,1,v,100,70",
                 "long,3,1000,1,x,100,70", "short,4,10,1,y,100,70", header=FRACTIONAL_HEADER)
    out = run_json(capsys, "--trace", str(path), "--gpus", "2", "--policy", str(RECOMMENDED),
                   "--policy", str(FCFS))
    recommended, fcfs = out["results"]
    assert recommended["mean_delay_s"] == (0 + 0 + 0 + (102 - 3) + (101 - 4)) / 5
    assert fcfs["mean_delay_s"] == (0 + 0 + (100 - 2) + (101 - 3) + (200 - 4)) / 5


def test_the_recommended_policy_gives_mature_work_a_head_start_not_the_whole_queue(
        tmp_path, capsys):
    """Issue 32 item 4: with work classes, mature's priority is a day's head start in
    the recommended order (shortest_first_priority_seconds), not a tier above every
    other job. On one GPU, once busy ends at 100, a 10 s scout job goes before a
    100,000 s mature job (100,000 - 86,400 > 10 GPU-seconds of key): the scout waits
    98 s, the mature job 109 s. Strict tiers ran the mature job first and kept the
    scout waiting 100,098 s."""
    path = trace(tmp_path, "busy,0,100,1,u,ordinary", "mature,1,100000,1,u,mature",
                 "scout,2,10,1,u,scout", header=HEADER + ",work_class")
    [r] = run_json(capsys, "--trace", str(path), "--gpus", "1", "--policy",
                   str(RECOMMENDED))["results"]
    assert r["by_class"]["scout"]["max_delay_s"] == 98
    assert r["by_class"]["mature"]["max_delay_s"] == 109


def test_the_recommended_cap_leaves_the_gpus_the_only_limit(tmp_path, capsys):
    """R-SIM-1 (issue 18): without --uncapped the replay holds the task file's cap; the
    recommended file's is a cluster's, so twelve 1-GPU jobs on 12 GPUs all start at 0."""
    path = trace(tmp_path, *(f"j{i},0,100,1,u" for i in range(12)))
    [r] = run_json(capsys, "--trace", str(path), "--gpus", "12", "--policy",
                   str(RECOMMENDED))["results"]
    assert (r["concurrency"], r["max_concurrent"], r["peak_running"]) == ("task file",
                                                                          10_000, 12)
    assert r["mean_delay_s"] == 0


def derive_fractional(path: Path, tmp_path: Path, *flags: str) -> list[TraceJob]:
    """The trace at ``path`` as bench/derive_fractional_trace.py derives it with ``flags``."""
    out = tmp_path / "derived.csv"
    with out.open("w") as handle:
        subprocess.run([sys.executable, str(ROOT / "bench" / "derive_fractional_trace.py"),
                        "--trace", str(path), *flags], stdout=handle, check=True, cwd=ROOT)
    return load_trace(out)


def test_the_fractional_variant_keeps_the_trace_and_gives_one_gpu_jobs_a_hashed_share(
        tmp_path):
    """issue 18 item 4: bench/derive_fractional_trace.py, the variant docs/SIMULATE.md's
    table replays. Everything but the share is the trace's; a one-GPU job gets 25, 50 or
    100 % (with 20, 40, 70 GiB) about 30/30/40 % of the time, the same whichever prefix
    is derived; a wider job 100 % and 70 GiB."""
    path = trace(tmp_path, *(f"j{i},{i * 7.5},{100 + i},{8 if i % 10 == 0 else 1},u{i % 3}"
                             for i in range(1000)))

    def derived(*flags: str) -> list[TraceJob]:
        return derive_fractional(path, tmp_path, *flags)

    whole, every = load_trace(path), derived()
    assert [replace(j, gpu_util_pct=None, gpu_mem_gb=None) for j in every] == whole
    shares = [(j.gpu_util_pct, j.gpu_mem_gb) for j in every if j.gpus == 1]
    assert {(j.gpu_util_pct, j.gpu_mem_gb) for j in every if j.gpus > 1} == {(100, 70)}
    assert set(shares) == {(25, 20), (50, 40), (100, 70)}
    for share, expected in (((25, 20), 0.3), ((50, 40), 0.3), ((100, 70), 0.4)):
        assert shares.count(share) / len(shares) == pytest.approx(expected, abs=0.05)
    assert derived("--limit", "100") == every[:100]


def test_the_work_class_variant_gives_a_quarter_scouts_half_ordinary_a_quarter_mature(
        tmp_path):
    """issue 32 item 4: derive_fractional_trace.py --work-classes adds a work class by
    another byte of the job id's hash, so the class says nothing of the share; --whole
    leaves the GPUs whole (the classes alone)."""
    path = trace(tmp_path, *(f"j{i},{i},{100 + i},{8 if i % 10 == 0 else 1},u"
                             for i in range(2000)))

    def derived(*flags: str) -> list[TraceJob]:
        return derive_fractional(path, tmp_path, *flags)

    classed, shared = derived("--work-classes"), derived()
    assert [replace(j, work_class=shared[0].work_class) for j in classed] == shared
    classes = [j.work_class for j in classed]
    for work_class, expected in (("scout", 0.25), ("ordinary", 0.5), ("mature", 0.25)):
        assert classes.count(work_class) / len(classes) == pytest.approx(expected, abs=0.04)
        full = [j for j in classed if j.work_class == work_class and j.gpu_util_pct == 100]
        assert len(full) / classes.count(work_class) == pytest.approx(0.46, abs=0.06)
    whole = derived("--work-classes", "--whole")
    assert [(j.work_class, j.gpu_util_pct) for j in whole] == [(c, None) for c in classes]


@pytest.mark.parametrize("path", sorted((ROOT / "fixtures" / "policies").glob("*.yaml")),
                         ids=lambda path: path.stem)
def test_each_shipped_policy_says_in_its_first_line_the_scale_it_is_for(path):
    """R-SIM-2 (issue 32): a newcomer comparing two files learns from their first lines
    which scale each was written for, and it is the scale their cap allows: one host
    (seed 000's 8 at once) or a cluster (a cap far above what its GPUs run)."""
    first = path.read_text().splitlines()[0]
    cap = load_policy(str(path)).max_concurrent_experiments
    assert first.startswith("# Scale: ")
    if cap <= 8:
        assert first.startswith(f"# Scale: one host (up to {cap} GPUs): at most {cap} jobs")
    else:
        assert first.startswith("# Scale: a shared cluster of hundreds of GPUs (a cap of "
                                f"{cap:,} jobs at once")


def test_recommended_policy_bounds_the_wait_of_a_wide_job_narrow_jobs_keep_passing(tmp_path):
    """Issue 32: four GPUs, a one-GPU job of 1,000 s every 240 s (a little more than they
    serve, so a queue builds) and one 4-GPU job at 100 s. By GPU-seconds first the wide
    job soon leads, but each GPU that frees goes to the narrow job behind it, so without
    a bound it starts only once the narrow jobs stop coming, 21 h later. Under
    recommended.yaml it starves once it has waited 8x the median queued job, gets a
    reservation, and starts within two hours; the narrow jobs' mean wait grows by
    minutes."""
    path = trace(tmp_path, "wide,100,1000,4,w",
                 *(f"n{i},{i * 240},1000,1,u{i % 3}" for i in range(300)))
    bounded = load_policy(RECOMMENDED)
    assert bounded.shortest_first_starvation_factor == 8
    unbounded = replace(bounded, shortest_first_starvation_factor=None)
    waits = {}
    for name, policy in (("bounded", bounded), ("unbounded", unbounded)):
        result = replay(load_trace(path), gpus=4, policy=policy, placement="declared",
                        name=name)
        assert (result.completed, result.capacity_violations) == (301, 0)
        waits[name] = (result.by_gpus["4"]["max_delay_s"], result.by_gpus["1"]["mean_delay_s"])
    assert waits["unbounded"][0] > 20 * 3600
    assert waits["bounded"][0] < 2 * 3600
    assert waits["bounded"][1] < waits["unbounded"][1] + 30 * 60


def test_recommended_policy_starts_a_wide_job_within_a_month_under_a_backlog_that_never_drains(
        tmp_path):
    """Issue 32 item 1: two GPUs, a 2-GPU job of 40 days at 0 and a one-day one-GPU job
    every 6 hours, twice what the GPUs serve. The queue's median ages at a quarter of
    the wide job's pace, so no factor of 8 (nor 4) ever starves it, and by GPU-seconds
    (80 days of key) every narrow job passes it: it starts after all 200, at 100 days.
    recommended.yaml's backstop (shortest_first_starvation_seconds, 30 days) starves it
    at 30 days; it starts once the two narrow jobs then running end, at 31."""
    day = 86400
    path = trace(tmp_path, f"wide,1,{40 * day},2,w",
                 *(f"n{i},{i * day // 4},{day},1,u{i % 3}" for i in range(200)))
    recommended = load_policy(RECOMMENDED)
    assert recommended.shortest_first_starvation_seconds == 30 * day
    waits = {}
    for name, policy in (("recommended", recommended),
                         ("factor only", replace(recommended,
                                                 shortest_first_starvation_seconds=None))):
        result = replay(load_trace(path), gpus=2, policy=policy, placement="declared",
                        name=name)
        assert (result.completed, result.capacity_violations) == (201, 0)
        waits[name] = result.by_gpus["2"]["max_delay_s"]
    assert waits == {"recommended": 31 * day - 1, "factor only": 100.25 * day - 1}


def test_recommended_policy_reserves_for_the_oldest_starving_job_not_the_shortest(tmp_path):
    """Issue 32 item 1: two GPUs kept busy by a one-day one-GPU job every 6 hours (twice
    what they serve); a 2-GPU job of 10 days at 0 and five 2-GPU jobs of a day a minute
    apart just after. Narrow jobs pass them all, so all six starve at recommended.yaml's
    30-day backstop, the long one first. It holds the reservation and starts at 30.25
    days, once both GPUs are free; the others wait for it. By GPU-seconds among the
    starving (until issue 32's third round) each short one took the reservation as it
    starved, a minute later, and the long one waited for all five: 35.25 days (on the
    whole Philly trace at 443 GPUs: an 8-GPU job 21 days after it starved)."""
    day = 86400
    path = trace(tmp_path, f"long,0,{10 * day},2,w",
                 *(f"w{i},{i * 60},{day},2,v" for i in range(1, 6)),
                 *(f"n{i},{i * day // 4},{day},1,u{i % 3}" for i in range(200)))
    result = replay(load_trace(path), gpus=2, policy=load_policy(RECOMMENDED),
                    placement="declared", name="recommended")
    assert (result.completed, result.capacity_violations) == (206, 0)
    starts = {r.job.job_id: r.start for r in result.records if r.job.gpus == 2}
    assert starts["long"] == 30.25 * day
    assert starts["long"] + 10 * day <= min(starts[f"w{i}"] for i in range(1, 6))


def test_recommended_policy_starves_nobody_by_the_factor_while_the_median_job_has_not_waited(
        tmp_path):
    """Issue 32: docs/CONFIG.md's promise that a queue whose median job has not waited
    starves nobody by shortest_first_starvation_factor. One GPU, busy until 100; a
    1,000 s job waits from 10, and three 10 s jobs arrive at 100, as it frees: the
    median queued job has waited 0 s, so by GPU-seconds s1 goes first. At 110 the old
    job has waited 100 s, 10x the median's 10 s (s2's), and starves by recommended.yaml's
    factor of 8. Until issue 32's third round the factor's bound was then 0 and every
    job older than the instant starved: the old job started at 100, the short ones
    after it."""
    path = trace(tmp_path, "busy,0,100,1,u", "old,10,1000,1,v",
                 *(f"s{i},100,10,1,w" for i in range(1, 4)))
    result = replay(load_trace(path), gpus=1, policy=load_policy(RECOMMENDED),
                    placement="declared", name="recommended")
    assert (result.completed, result.capacity_violations) == (5, 0)
    starts = {r.job.job_id: r.start for r in result.records}
    assert starts == {"busy": 0, "s1": 100, "old": 110, "s2": 1110, "s3": 1120}


def test_recommended_starvation_bound_holds_no_device_for_a_job_that_stops_starving(tmp_path):
    """Issue 32 item 1: the bound's price is the devices a starving job's reservation
    idles, and a job that starves against a young queue stops starving as the queue
    ages. Two GPUs: l1 (10,000 s) and l2 (20,000 s) run from 0; a 2-GPU job waits from 1;
    three 30,000 s one-GPU jobs come at 8,000. When l1 ends at 10,000 the wide job has
    waited 5x the median queued job (2,000 s). With a factor of 4 (recommended.yaml until
    now) it starves and GPU 0 is held for it, idle, until l2 ends at 20,000; by then the
    median has waited 12,000 s, so it no longer starves and both GPUs go to the narrow
    jobs: x0, x2 and the wide job each wait 10,000 s longer, for nothing. recommended.yaml's 8 gives GPU 0
    to x0 at 10,000 and the wide job starts at 70,000 instead of 80,000."""
    path = trace(tmp_path, "l1,0,10000,1,u", "l2,0,20000,1,u", "wide,1,50000,2,w",
                 *(f"x{i},8000,30000,1,v" for i in range(3)))
    recommended = load_policy(RECOMMENDED)
    starts = {}
    for factor in (4, recommended.shortest_first_starvation_factor):
        result = replay(load_trace(path), gpus=2, placement="declared", name=f"{factor}",
                        policy=replace(recommended, shortest_first_starvation_factor=factor))
        assert (result.completed, result.capacity_violations) == (6, 0)
        starts[factor] = {r.job.job_id: r.start for r in result.records}
    assert starts[4] == {"l1": 0, "l2": 0, "x0": 20000, "x1": 20000, "x2": 50000,
                         "wide": 80000}
    assert starts[8] == {"l1": 0, "l2": 0, "x0": 10000, "x1": 20000, "x2": 40000,
                         "wide": 70000}
