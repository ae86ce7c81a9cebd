"""metrics.prom end to end: a real coordinator's file, read with the Prometheus client
library's own parser (issue 17 item 3, R-OPS-1)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .conftest import request, scheduler_task, wait_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpus"
MIB = 1024 * 1024

TASK = scheduler_task("""\
initial_concurrent_experiments: 4
min_concurrent_experiments: 1
max_concurrent_experiments: 8
infrastructure_retries: 1
default_profile: cpu
profiles:
  cpu: {accelerator: cpu, pressure_domains: [cpu]}
  gpu45: {accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}
""")


def samples(path: Path) -> dict[tuple[str, frozenset], float] | None:
    """Every sample of the file, parsed by prometheus_client: (name, labels) -> value."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(parsed: dict, name: str, **labels: str) -> float | None:
    wanted = set(labels.items())
    found = [v for (n, ls), v in parsed.items() if n == name and wanted <= set(ls)]
    assert len(found) <= 1, f"{name} {labels}: {len(found)} samples"
    return found[0] if found else None


def test_metrics_file_parses_and_counts_jobs_attempts_gpus(make_run, tmp_path):
    """Issue 17 item 3: "The coordinator writes <run>/resource_scheduler/metrics.prom
    atomically at the status cadence, in the text exposition format node_exporter's
    textfile collector reads (and into --metrics-textfile-dir DIR when given): jobs by
    state, queue-wait histogram, attempts started and retried, per-device declared and
    observed utilization and memory (labelled by UUID), pressure per domain, concurrency
    limit, leases by outcome, journal commit latency, budget spend." Read here with the
    official client library's parser, as Prometheus would."""
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    run = make_run(task_text=TASK)
    run.start(env={"PRAXIST_FAKE_GPUS": str(FIXTURES / "two_h200.json"),
                   "PRAXIST_METRICS_TEXTFILE_DIR": str(textfiles)})
    gate, marker = tmp_path / "gate", tmp_path / "retried-once"
    held = run.reply(run.submit(request(
        "held", ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
        profile="gpu45")))["job_id"]
    flaky = run.reply(run.submit(request(  # 75: an infrastructure failure, retried once
        "flaky", ["sh", "-c", f"[ -e {marker} ] && exit 0; touch {marker}; exit 75"])))["job_id"]
    done = run.reply(run.submit(request("done", ["true"])))["job_id"]
    for job_id in (flaky, done):
        run.wait_state(job_id, "completed")
    run.wait_state(held, "running")
    metrics = run.sched / "metrics.prom"

    parsed = wait_for(lambda: (m := samples(metrics)) and
                      value(m, "praxist_jobs", state="completed") == 2 and
                      value(m, "praxist_jobs", state="running") == 1 and m,
                      message="metrics.prom counting 2 completed jobs and 1 running")
    run_label = str(run.root)
    assert all(dict(labels)["run"] == run_label for _, labels in parsed)
    assert value(parsed, "praxist_coordinator_serving") == 1
    assert value(parsed, "praxist_jobs", state="queued") == 0
    assert value(parsed, "praxist_attempts_started_total") == 4
    assert value(parsed, "praxist_attempts_retried_total") == 1
    assert value(parsed, "praxist_attempts_ended_total", outcome="infra_retry") == 1
    assert value(parsed, "praxist_attempts_ended_total", outcome="completed") == 2
    assert value(parsed, "praxist_queue_wait_seconds_count", work_class="ordinary") == 4
    assert value(parsed, "praxist_queue_wait_seconds_bucket", work_class="ordinary",
                 le="+Inf") == 4
    assert value(parsed, "praxist_queue_wait_seconds_count", work_class="mature") == 0
    assert value(parsed, "praxist_journal_commit_seconds_count") > 0
    turns = value(parsed, "praxist_loop_turn_seconds_count")
    assert turns > 0 and value(parsed, "praxist_loop_turn_cpu_seconds_count") == turns

    held_on = run.wait_attempt_field(held, "gpus")[0]
    assert value(parsed, "praxist_gpu_declared_utilization_ratio", uuid=held_on) == 0.45
    assert value(parsed, "praxist_gpu_declared_memory_bytes", uuid=held_on) == 20 * 1024 * MIB
    other = ({"GPU-fake-0", "GPU-fake-1"} - {held_on}).pop()
    assert value(parsed, "praxist_gpu_declared_utilization_ratio", uuid=other) == 0
    assert value(parsed, "praxist_gpu_memory_total_bytes", uuid=other) == 143771 * MIB
    assert value(parsed, "praxist_gpu_utilization_ratio", uuid=other) == 0

    assert value(parsed, "praxist_pressure_avg10_ratio", domain="cpu") == 0
    assert value(parsed, "praxist_pressure_high_ratio", domain="cpu") == 0.8
    assert value(parsed, "praxist_concurrency_target") == 4
    assert value(parsed, "praxist_concurrency_upper_bound") == 8
    assert value(parsed, "praxist_lease_outcomes_total", outcome="granted") == 0
    assert value(parsed, "praxist_budget_running_gpu_seconds") > 0  # the held GPU job

    copy = textfiles / next(p.name for p in textfiles.iterdir() if p.suffix == ".prom")
    assert copy.name.startswith("run-") and len(list(textfiles.iterdir())) == 1
    # the copy is written after metrics.prom, at the same snapshot: wait on its own field
    wait_for(lambda: value(samples(copy), "praxist_attempts_retried_total") == 1,
             message="the textfile copy counting the retried attempt")

    gate.touch()
    run.wait_state(held, "completed")
    wait_for(lambda: value(samples(metrics), "praxist_jobs", state="completed") == 3,
             message="metrics.prom counting the third job completed")
    assert run.stop() == 0
    stopped = samples(metrics)
    assert value(stopped, "praxist_coordinator_serving") == 0
    assert value(stopped, "praxist_budget_gpu_seconds_total", kind="experiment") > 0


def test_a_textfile_directory_that_cannot_be_written_never_stops_the_coordinator(
        make_run, tmp_path):
    """Issue 17 item 3 ("and into --metrics-textfile-dir DIR when given"): that directory is
    the operator's; when it cannot be written the run's own metrics.prom is still kept,
    jobs still run, and the coordinator says so once in its log, not at every write."""
    not_a_directory = tmp_path / "plain-file"
    not_a_directory.write_text("")
    run = make_run(task_text=TASK)
    run.start(env={"PRAXIST_METRICS_TEXTFILE_DIR": str(not_a_directory)})
    for tag in ("one", "two"):
        job = run.reply(run.submit(request(tag, ["true"])))["job_id"]
        run.wait_state(job, "completed")
    wait_for(lambda: value(samples(run.sched / "metrics.prom") or {}, "praxist_jobs",
                           state="completed") == 2, message="metrics.prom kept up to date")
    assert run.stop() == 0
    log = (tmp_path / "coordinator-run.log").read_text()
    assert log.count("metrics textfile not written") == 1, log
