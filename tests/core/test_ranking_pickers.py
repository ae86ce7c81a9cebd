"""Job pickers that use what the core knows (issue 18 item 3): shortest expected
first with aging (calibrated ETAs), Slurm-style multifactor priority, and least
attained service for jobs without ETAs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from praxist_fs.config import load_policy
from praxist_fs.core.backlog import RUNS
from praxist_fs.core.policy import Policy

from .helpers import Cluster, backfill_policy, harness, launched_tags, stream


# -- shortest expected first -------------------------------------------------------------


def test_shortest_expected_first_orders_by_calibrated_eta_after_priority():
    """seed 000 "Mature Evidence And Idle Supply Feedback": the calibration of wall time
    against declared ETA is what the core knows of a job's length; shortest expected
    first runs the short ones first, a job's own priority still first (R-CTL-5), and a
    job without an ETA counts as the longest known one."""
    h = harness("shortest_expected_first")
    h.submit("long", eta_s=1000.0)
    h.submit("unknown")
    h.submit("short", eta_s=10.0)
    h.submit("urgent-long", eta_s=5000.0, priority=5)
    h.submit("medium", eta_s=100.0)
    assert launched_tags(h) == ["urgent-long", "short", "medium", "long", "unknown"]


@pytest.mark.parametrize("aging,first", [(1.0, "old-long"), (0.0, "new-short")])
def test_waiting_moves_a_long_job_ahead_at_the_aging_rate(aging, first):
    """With aging 1, a second waited is worth a second of run time: a 500 s job waiting
    1000 s goes before a 100 s job just submitted; without aging the short one wins."""
    h = harness("shortest_expected_first", slots=1, shortest_first_aging=aging)
    h.submit("old-long", eta_s=500.0)
    h.now += 1000.0
    h.submit("new-short", eta_s=100.0)
    assert launched_tags(h) == [first]


@pytest.mark.parametrize("aging,starves", [(1.0, False), (0.0, True)])
def test_aging_bounds_the_wait_of_a_long_job_under_a_stream_of_short_ones(aging, starves):
    """Bounded p95: a 1000 s job on one device, behind a stream of 10 s jobs arriving
    as fast as they run. With aging it is passed only by jobs submitted less than
    1000 s / aging after it (ETAs told apart to within 2^(1/8), so 2^(1/16) each way),
    so it starts within about 1000 s; with none, never."""
    cluster = Cluster(backfill_policy("shortest_expected_first", slots=1,
                                      shortest_first_aging=aging), external=(0.0,))
    cluster.submit("g1", eta=10.0)
    assert cluster.schedule()
    submitted = cluster.now
    long = cluster.submit("g1", eta=1000.0)
    while cluster.now < submitted + 3000.0:
        cluster.submit("g1", eta=10.0)
        cluster.advance(10.0)
        cluster.schedule()
    if starves:
        assert long not in cluster.started
    else:
        assert cluster.started[long] <= submitted + 1000.0 * 2 ** (1 / 16) + 20.0


@pytest.mark.parametrize("by,order", [("run_time", ["wide-short", "narrow-long"]),
                                      ("gpu_seconds", ["narrow-long", "wide-short"])])
def test_gpu_seconds_weigh_a_job_by_its_width(by, order):
    """By run time a 2-GPU job of 100 s goes before a 1-GPU job of 150 s; by GPU-seconds
    it holds 200 of them against 150, and goes after."""
    h = harness("shortest_expected_first", slots=2, gpus=3, shortest_first_aging=0.0,
                shortest_first_by=by)
    h.submit("wide-short", profile="g2", eta_s=100.0)
    h.submit("narrow-long", profile="g1", eta_s=150.0)
    assert launched_tags(h) == order


@pytest.mark.parametrize("starvation", [None, 600.0])
def test_a_starving_wide_job_starts_within_its_bound_while_short_jobs_keep_arriving(starvation):
    """Aging alone cannot start an 8-GPU job while 1-GPU jobs keep arriving: once it
    leads it still does not fit, and each freed device goes to the next short job.
    With shortest_first_starvation_seconds, after that wait it goes first and the
    devices are reserved for it, so it starts once the jobs running then have ended
    (300 s each); short jobs submitted after it still start before it meanwhile."""
    cluster = Cluster(backfill_policy("shortest_expected_first", slots=16,
                                      shortest_first_starvation_seconds=starvation))
    cluster.submit("g1", eta=300.0)
    cluster.schedule()
    submitted = cluster.now
    wide = cluster.submit("g8", eta=500.0)
    stream(cluster, submitted + 3000.0, eta=300.0)
    if starvation is None:
        assert wide not in cluster.started
    else:
        assert submitted + starvation <= cluster.started[wide] <= submitted + starvation + 310.0
        passed = [tag for tag in cluster.started if tag.startswith("g1")
                  and cluster.started[wide] > cluster.started[tag] > submitted]
        assert len(passed) >= 8


@pytest.mark.parametrize("waited,first", [(3000.0, "new-short"), (3600.0, "old-long")])
def test_a_job_leads_once_it_has_waited_the_starvation_bound(waited, first):
    """Below the bound the order is plain shortest expected first (no aging here); a
    job that has waited the bound goes before every job that has not."""
    h = harness("shortest_expected_first", slots=1, shortest_first_aging=0.0,
                shortest_first_starvation_seconds=3600.0)
    h.submit("old-long", eta_s=5000.0)
    h.now += waited
    h.submit("new-short", eta_s=10.0)
    assert launched_tags(h) == [first]


@pytest.mark.parametrize("factor,first", [(None, "new-short"), (10.0, "new-short"),
                                          (2.0, "old-long")])
def test_a_job_starves_once_it_waited_a_multiple_of_its_queues_median_wait(factor, first):
    """R-SIM-2 (issue 32): a bound from the queue's own scale. The old job has waited
    3,600 s and the median queued job 600 s (three of five were submitted 600 s ago):
    with shortest_first_starvation_factor 2 its bound is 1,200 s and it leads; with 10
    (6,000 s) or none, plain shortest expected first (no aging here) runs the short one."""
    h = harness("shortest_expected_first", slots=1, shortest_first_aging=0.0,
                shortest_first_starvation_factor=factor)
    h.submit("old-long", eta_s=5000.0)
    h.now += 1800.0
    h.submit("mid-long", eta_s=9000.0)
    h.now += 1200.0
    for tag in ("new-short", "new-long", "new-longer"):
        h.submit(tag, eta_s={"new-short": 10.0}.get(tag, 8000.0))
    h.now += 600.0
    assert launched_tags(h) == [first]


def test_the_starving_by_the_factor_go_by_key_shortest_first():
    """Issue 32: a job starving by the factor alone (against a young queue, which
    drains) keeps the picker's order among the starving: the shortest goes first. The
    median job (new-short) has waited 2 s (a second per submission), so a factor of 0.5
    starves old-long and new-short, and new-short leads (oldest first it was old-long,
    which cost the wide jobs' p95 on the whole Philly trace at 831 GPUs)."""
    h = harness("shortest_expected_first", slots=1, shortest_first_aging=0.0,
                shortest_first_starvation_factor=0.5)
    h.submit("old-long", eta_s=5000.0)
    h.now += 3600.0
    for tag in ("new-short", "new-long"):
        h.submit(tag, eta_s=10.0 if tag == "new-short" else 7000.0)
    assert launched_tags(h) == ["new-short"]


def test_the_starving_past_the_fixed_bound_go_oldest_first_before_the_others():
    """Issue 32: among jobs past shortest_first_starvation_seconds the one that has
    waited longest goes first (and, blocked, holds the reservation), not the shortest,
    and before a job starving by the factor alone. old-long and old-short are past the
    1-hour bound; new-short (the median has waited 1 s, a factor of 0.5) starves by the
    factor. By key the shortest of the starving (new-short, then old-short) went first."""
    h = harness("shortest_expected_first", slots=1, shortest_first_aging=0.0,
                shortest_first_starvation_seconds=3600.0, shortest_first_starvation_factor=0.5)
    h.submit("old-long", eta_s=5000.0)
    h.now += 100.0
    h.submit("old-short", eta_s=50.0)
    h.now += 3600.0
    for tag in ("new-short", "new-long"):
        h.submit(tag, eta_s=10.0 if tag == "new-short" else 7000.0)
    assert launched_tags(h) == ["old-long"]


def test_a_starving_wide_job_starts_by_its_queues_own_scale_while_short_jobs_arrive():
    """The stream of 1-GPU jobs (300 s each, one every 10 s, on 8 GPUs) keeps a queue
    whose median job has waited some minutes; the 8-GPU job that has waited twice that
    is starving, gets the devices reserved and starts, where aging alone never starts
    it (the test above)."""
    cluster = Cluster(backfill_policy("shortest_expected_first", slots=16,
                                      shortest_first_starvation_factor=2.0))
    cluster.submit("g1", eta=300.0)
    cluster.schedule()
    submitted = cluster.now
    wide = cluster.submit("g8", eta=500.0)
    stream(cluster, submitted + 3000.0, eta=300.0)
    assert wide in cluster.started
    assert cluster.started[wide] < submitted + 2000.0


# -- least attained service ----------------------------------------------------------------


def test_least_attained_service_puts_served_jobs_behind_fresh_ones():
    """Tiresias' least attained service, for jobs without ETAs: a job requeued after
    running (an infrastructure retry, exit 75) has had GPU-seconds of service, so fresh
    jobs go first and, among served ones, the least served; under fcfs the old job
    would lead."""
    h = harness("least_attained_service", slots=2, gpus=2, infrastructure_retries=3)
    served = {}
    for tag, seconds in (("ran-long", 300.0), ("ran-short", 50.0)):
        job_id = h.submit(tag, profile="g1")["job_id"]
        served[tag] = job_id
    assert launched_tags(h) == ["ran-long", "ran-short"]
    h.go(served["ran-long"], "a1")
    h.go(served["ran-short"], "a1")
    h.now += 50.0
    h.exit(served["ran-short"], "a1", 75)
    h.now += 250.0
    h.exit(served["ran-long"], "a1", 75)
    h.submit("fresh", profile="g1")
    assert launched_tags(h) == ["fresh", "ran-short"]


def test_least_attained_service_is_rank_order_while_nothing_has_run():
    h = harness("least_attained_service", slots=3)
    for tag in ("a", "b", "c"):
        h.submit(tag, priority=1 if tag == "c" else 0)
    assert launched_tags(h) == ["c", "a", "b"]


# -- multifactor ---------------------------------------------------------------------------


def test_multifactor_weighs_priority_size_and_fair_share():
    """seed 002 "Approach C": "Job selection: policy chain: multiple plugins score
    jobs. Composable: priority + fair-share + ...", as Slurm's multifactor priority.
    Smaller jobs first by the size factor; a peer with usage behind one without (fair
    share); a high job priority above both (its default weight is the largest)."""
    h = harness("multifactor", slots=4, gpus=4)
    h.submit("wide", profile="g2", peer="bob")
    h.submit("narrow", profile="g1", peer="bob")
    assert launched_tags(h) == ["narrow", "wide"]
    for job in list(h.sched.running()):
        h.go(job.job_id, job.current.attempt_id)
    h.now += 600.0
    for job in list(h.sched.running()):
        h.exit(job.job_id, job.current.attempt_id, 0)   # bob has 1,800 GPU-seconds now
    h.submit("bob-1", profile="g1", peer="bob")
    h.submit("carol-1", profile="g1", peer="carol")
    h.submit("bob-urgent", profile="g1", peer="bob", priority=50)
    assert launched_tags(h) == ["bob-urgent", "carol-1", "bob-1"]


def test_multifactor_age_lets_a_waiting_job_overtake_a_fresh_smaller_one():
    """The age factor grows with the wait up to ``multifactor_max_age_seconds``: a
    two-device job that waited an hour outranks a one-device job just submitted when
    age weighs more than size, and not when it weighs less."""
    for age_weight, first in ((4000.0, "old-wide"), (100.0, "new-narrow")):
        h = harness("multifactor", slots=1, gpus=2, multifactor_weight_age=age_weight,
                    multifactor_max_age_seconds=3600.0)
        h.submit("old-wide", profile="g2")
        h.now += 3600.0
        h.submit("new-narrow", profile="g1")
        assert launched_tags(h) == [first]


@pytest.mark.parametrize("head_start,order", [
    (None, ["mature-long", "scout-short", "ordinary-mid"]),
    (3600.0, ["scout-short", "mature-long", "ordinary-mid"]),
    (86400.0, ["mature-long", "scout-short", "ordinary-mid"])])
def test_queue_priority_is_a_head_start_with_shortest_first_priority_seconds(head_start, order):
    """Issue 32: strict tiers run the mature queue's longest job before the other queues'
    shortest, and on a backlog their tail pays (the Philly head with work classes: p95
    0.77 of greedy's at 306 GPUs). With shortest_first_priority_seconds the default
    queues form one tier and mature's priority (1) is a head start of that many seconds
    of key: a 2-hour mature job goes after a 10 s scout job with an hour's head start,
    before it with a day's; the ordinary 5,000 s job (no head start) goes last either
    way."""
    h = harness("shortest_expected_first", slots=3, shortest_first_aging=0.0,
                shortest_first_priority_seconds=head_start)
    h.submit("mature-long", eta_s=7200.0, work_class="mature")
    h.submit("ordinary-mid", eta_s=5000.0, work_class="ordinary")
    h.submit("scout-short", eta_s=10.0, work_class="scout")
    assert launched_tags(h) == order


def test_the_picker_keys_are_checked_clamped_and_documented(tmp_path: Path):
    """A bad value names the key and what was expected; one out of range is moved into
    it and recorded (R-CFG-3); every key is in docs/CONFIG.md with its default."""
    task = tmp_path / "task.yaml"
    base = "compute_budget:\n  resource_scheduler:\n    mode: central\n"
    task.write_text(base + "    multifactor_weight_age: lots\n")
    with pytest.raises(Exception, match=r"multifactor_weight_age: got 'lots', expected a "
                                        r"finite number"):
        load_policy(task)
    task.write_text(base + "    shortest_first_starvation_seconds: 0\n")
    with pytest.raises(Exception, match=r"shortest_first_starvation_seconds: got 0, expected "
                                        r"a number > 0, or null"):
        load_policy(task)
    task.write_text(base + "    shortest_first_starvation_factor: -2\n")
    with pytest.raises(Exception, match=r"shortest_first_starvation_factor: got -2, expected "
                                        r"a number > 0, or null"):
        load_policy(task)
    task.write_text(base + "    shortest_first_aging: -1\n    multifactor_max_age_seconds: 1\n"
                    "    shortest_first_starvation_seconds: 1\n    job_picker: multifactor\n"
                    "    shortest_first_starvation_factor: 500\n"
                    "    shortest_first_priority_seconds: 0.5\n")
    policy = load_policy(task)
    assert (policy.shortest_first_aging, policy.multifactor_max_age_seconds,
            policy.shortest_first_starvation_seconds, policy.shortest_first_starvation_factor,
            policy.shortest_first_priority_seconds) == (0.0, 60.0, 60.0, 100.0, 1.0)
    assert [n.key_path.rsplit(".", 1)[1] for n in policy.normalizations] == [
        "shortest_first_aging", "shortest_first_starvation_seconds",
        "shortest_first_starvation_factor", "shortest_first_priority_seconds",
        "multifactor_max_age_seconds"]
    assert Policy.from_dict(policy.to_dict()) == policy
    doc = (Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md").read_text()
    for key in ("placement", "shortest_first_aging", "multifactor_weight_age",
                "multifactor_weight_size", "multifactor_weight_fair_share",
                "multifactor_weight_priority", "multifactor_max_age_seconds"):
        assert f"| `{key}` | `{getattr(Policy(), key):g}`" in doc \
            if key != "placement" else "| `placement` | `spread`" in doc
    assert "| `shortest_first_starvation_seconds` | `null`" in doc
    assert "| `shortest_first_starvation_factor` | `null`" in doc
    assert "| `shortest_first_priority_seconds` | `null`" in doc
    assert "| `shortest_first_by` | `run_time`" in doc
    task.write_text(base + "    shortest_first_by: gpus\n")
    with pytest.raises(Exception, match=r"shortest_first_by: got 'gpus', expected one of "
                                        r"run_time, gpu_seconds"):
        load_policy(task)


def test_the_backlog_keeps_its_runs_equal_to_the_queue_as_jobs_come_and_go():
    """The runs the ranking pickers merge are kept as jobs enter and leave the queue;
    they must always be the queue split by key, each run in rank order, or a pass
    would skip or repeat jobs."""
    rng = random.Random(3)
    h = harness("shortest_expected_first", slots=3)
    for round_ in range(6):
        for i in range(40):
            h.submit(f"j{round_}-{i}", peer=rng.choice(("a", "b", "c")),
                     priority=rng.choice((0, 0, 5)),
                     **({"eta_s": rng.choice((10.0, 11.0, 600.0, 86400.0))}
                        if rng.random() < 0.8 else {}))
        for job_id, attempt_id in h.launch_all():
            h.go(job_id, attempt_id)
            h.exit(job_id, attempt_id, 0)
        queue = h.sched._queue()
        for kind, key in RUNS.items():
            expected: dict = {}
            for job in queue.jobs():
                expected.setdefault(key(job), []).append(job)
            assert queue.runs(kind) == expected


def test_runs_a_pass_has_read_stay_as_they_were_while_the_queue_changes():
    """A pass that stopped early reads the rest of its runs after its launches left the
    queue (``Backlog.runs`` lends them copy-on-write): were they changed under it, the
    reasons it gives later would skip or repeat jobs."""
    rng = random.Random(5)
    h = harness("shortest_expected_first", slots=3)
    for round_ in range(4):
        for i in range(30):
            h.submit(f"j{round_}-{i}", peer=rng.choice(("a", "b")),
                     eta_s=rng.choice((10.0, 600.0)))
        queue = h.sched._queue()
        lent = {kind: queue.runs(kind) for kind in RUNS}
        as_lent = {kind: {key: list(run) for key, run in runs.items()}
                   for kind, runs in lent.items()}
        for job_id, attempt_id in h.launch_all():
            h.go(job_id, attempt_id)
            h.exit(job_id, attempt_id, 0)
        assert lent == as_lent
        assert queue.runs("eta") != as_lent["eta"]  # the queue itself did change
