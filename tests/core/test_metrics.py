"""core/metrics.py: the exposition text, read back with Prometheus's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from praxist_fs.core.metrics import COMMIT_BUCKETS, Histogram, render_metrics
from praxist_fs.core.scheduler import Scheduler


def test_histogram_buckets_are_cumulative_and_labels_escaped():
    """Issue 17 item 3: "in the text exposition format node_exporter's textfile collector
    reads". A run directory with a quote, a backslash and a newline in its name still
    gives a file the parser reads, with the name intact; bucket counts are cumulative
    with +Inf equal to the count, as the format requires."""
    commits = Histogram(COMMIT_BUCKETS)
    for seconds in (0.0002, 0.003, 0.003, 5.0):
        commits.observe(seconds)
    run = 'odd "run" \\ dir\nname'
    text = render_metrics(Scheduler(), 1_700_000_000.0, run, 42, commits)
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
    assert render_metrics(Scheduler(), 1_700_000_000.0, run, 42, commits) == text
