"""core/metrics.py: the exposition text, read back with Prometheus's own parser."""

from __future__ import annotations

import copy
import json

from prometheus_client.parser import text_string_to_metric_families

from praxist_fs.core.effects import WriteJob
from praxist_fs.core.metrics import (
    COMMIT_BUCKETS, TURN_BUCKETS, AttemptTally, Histogram, render_metrics,
)
from praxist_fs.core.scheduler import Scheduler

from .helpers import Harness, make_policy


def test_histogram_buckets_are_cumulative_and_labels_escaped():
    """Issue 17 item 3: "in the text exposition format node_exporter's textfile collector
    reads". A run directory with a quote, a backslash and a newline in its name still
    gives a file the parser reads, with the name intact; bucket counts are cumulative
    with +Inf equal to the count, as the format requires."""
    commits = Histogram(COMMIT_BUCKETS)
    for seconds in (0.0002, 0.003, 0.003, 5.0):
        commits.observe(seconds)
    run = 'odd "run" \\ dir\nname'
    text = render_metrics(Scheduler(), 1_700_000_000.0, run, 42, AttemptTally(), commits)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    buckets = {s.labels["le"]: s.value for s in families["praxist_journal_commit_seconds"].samples
               if s.name.endswith("_bucket")}
    assert (buckets["0.0005"], buckets["0.005"], buckets["1.0"], buckets["+Inf"]) == (1, 3, 3, 4)
    commit_count = next(s for s in families["praxist_journal_commit_seconds"].samples
                        if s.name.endswith("_count"))
    assert commit_count.value == 4
    assert {s.labels["run"] for f in families.values() for s in f.samples} == {run}
    assert families["praxist_journal_seq"].samples[0].value == 42
    assert families["praxist_attempts_started"].type == "counter"  # parser drops _total
    assert render_metrics(Scheduler(), 1_700_000_000.0, run, 42, AttemptTally(), commits) == text


def test_the_loop_turns_are_two_histograms_wall_and_cpu():
    """Issue 31 item 3 ("no loop stall > 50 ms"): metrics.prom says how long each turn of
    the loop took and how much of it was the loop thread's CPU, as two histograms."""
    wall, cpu = Histogram(TURN_BUCKETS), Histogram(TURN_BUCKETS)
    for took, worked in ((0.002, 0.002), (0.07, 0.004), (0.3, 0.2)):
        wall.observe(took)
        cpu.observe(worked)
    text = render_metrics(Scheduler(), 1_700_000_000.0, "run", 1, AttemptTally(),
                          Histogram(COMMIT_BUCKETS), turns=(wall, cpu))
    families = {f.name: f for f in text_string_to_metric_families(text)}

    def buckets(name):
        return {s.labels["le"]: s.value for s in families[name].samples
                if s.name.endswith("_bucket")}
    assert (buckets("praxist_loop_turn_seconds")["0.05"],
            buckets("praxist_loop_turn_seconds")["+Inf"]) == (1, 3)
    assert (buckets("praxist_loop_turn_cpu_seconds")["0.05"],
            buckets("praxist_loop_turn_cpu_seconds")["+Inf"]) == (2, 3)
    assert "praxist_loop_turn_seconds" not in render_metrics(
        Scheduler(), 1_700_000_000.0, "run", 1, AttemptTally(), Histogram(COMMIT_BUCKETS))


def tally_numbers(tally: AttemptTally) -> tuple:
    return (tally.started, tally.retried, dict(tally.outcomes),
            {c: (h.counts, round(h.total, 6), h.count) for c, h in tally.waits.items()})


def test_the_attempt_tally_kept_job_by_job_equals_a_count_of_the_whole_run():
    """Issue 17 item 3: "attempts started and retried" and the "queue-wait histogram",
    kept up to date from the job writes the daemon makes (a status write must not walk
    every job), say what a count of the whole run says, as a restart computes it; and
    a job written again without change counts nothing twice."""
    h = Harness(make_policy(initial_concurrent_experiments=2, max_concurrent_experiments=2,
                            infrastructure_retries=1))
    kept = AttemptTally()

    def feed(effects):
        for effect in effects:
            if isinstance(effect, WriteJob):
                kept.update(h.sched.jobs[effect.job_id])
                kept.update(h.sched.jobs[effect.job_id])  # a rewrite (repair): idempotent
        return effects

    for tag in ("ok", "flaky", "fails", "waits"):
        feed(h.handle(h.request_event({"peer": "p", "tag": tag, "argv": ["true"]})))
    codes = {"ok": 0, "flaky": 75, "fails": 3}
    for _ in range(4):
        for event in h.sched.next_launches(h.tick()):
            feed(h.handle(event))
            h.spawn(event.job_id, event.attempt_id)
            feed(h.last_effects)
            tag = h.sched.jobs[event.job_id].request.tag
            if tag in codes:
                feed(h.exit(event.job_id, event.attempt_id, codes[tag]))
                codes["flaky"] = 0 if tag == "flaky" else codes["flaky"]
                if tag != "flaky":
                    codes.pop(tag)
    whole = AttemptTally.of(h.sched.jobs.values())
    assert tally_numbers(kept) == tally_numbers(whole)
    assert (whole.started, whole.retried) == (5, 1)
    assert whole.outcomes == {"completed": 2, "infra_retry": 1, "failed": 1}
    assert whole.waits["ordinary"].count == 5 and whole.waits["mature"].count == 0


def test_a_tally_saved_with_a_snapshot_and_given_the_tails_changes_counts_the_whole_run():
    """A start counts what the records after the snapshot changed, as a replay sees each
    (the snapshot saves the rest). A job finished at the compaction is not remembered
    (100,000 of them would cost megabytes): rewritten it counts nothing, reopened by
    retry_terminal it counts only its new round."""
    h = Harness(make_policy(initial_concurrent_experiments=2, max_concurrent_experiments=2,
                            infrastructure_retries=1))
    kept, saved, changes = AttemptTally(), None, []

    def feed(effects) -> None:  # as the views count each batch's job writes
        for effect in effects:
            if isinstance(effect, WriteJob):
                kept.update(h.sched.jobs[effect.job_id])
                kept.update(h.sched.jobs[effect.job_id])  # a rewrite: counts nothing
                changes.append(copy.deepcopy(h.sched.jobs[effect.job_id]))

    def run(tag: str, code: int, **fields) -> None:
        feed(h.handle(h.request_event({"peer": "p", "tag": tag, "argv": ["true"], **fields})))
        for event in h.sched.next_launches(h.tick()):
            feed(h.handle(event))
            h.spawn(event.job_id, event.attempt_id)
            feed(h.last_effects)
            feed(h.exit(event.job_id, event.attempt_id, code))

    run("t0", 0)
    run("t1", 75)
    run("t2", 3)
    kept.forget_finished(h.sched.jobs.get, h.sched.last_order)  # as a compaction does
    assert not kept._seen
    saved, changes = json.loads(json.dumps(kept.to_dict())), []
    run("t3", 0)
    run("t2", 0, retry_terminal=True)
    restarted = AttemptTally.from_dict(saved)
    for job in changes:
        restarted.update(job)
    whole = AttemptTally.of(h.sched.jobs.values())
    assert tally_numbers(restarted) == tally_numbers(kept) == tally_numbers(whole)
    assert (whole.started, whole.retried) == (6, 2)
