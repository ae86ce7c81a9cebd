"""EASY backfill (R-POL-1, Slurm's sched/backfill) on a virtual clock.

The first job a backfill queue cannot place gets a reservation: the earliest
time enough running work has ended (by its calibrated ETA) for it to fit, and
the devices it would get. Later jobs start only if they end before then, or
use devices it does not need and leave it a slot.
"""

from __future__ import annotations

import re

import pytest

from praxist_fs.core.queues import Queue

from .helpers import Cluster, backfill_policy, stream


@pytest.mark.parametrize("picker", ["fcfs", "backfill"])
def test_a_wide_job_is_not_starved_by_a_stream_of_narrow_ones(picker):
    cluster = Cluster(backfill_policy(picker))
    first = [cluster.submit("g1", eta=100.0 + 10 * i) for i in range(8)]
    assert cluster.schedule() == first           # the devices free one by one, t+100..170
    last_end = max(cluster.started[tag] + 100.0 + 10 * i for i, tag in enumerate(first))
    wide = cluster.submit("g8", eta=500.0)
    stream(cluster, cluster.now + 1500.0, eta=300.0)
    if picker == "fcfs":   # each freed device goes to the next narrow job: starved
        assert wide not in cluster.started
        assert "gpu" in cluster.reason(wide)
    else:                  # the devices drain for it, and it starts when the last is free
        assert last_end <= cluster.started[wide] <= last_end + 10.0
        narrow = [t for t in cluster.started if t.startswith("g1")][8:]
        assert narrow and all(cluster.started[t] >= cluster.started[wide] for t in narrow)


def test_the_reserved_job_says_when_and_where():
    cluster = Cluster(backfill_policy())
    for i in range(8):
        cluster.submit("g1", eta=100.0 + 10 * i)
    cluster.schedule()
    cluster.advance(105.0)                      # GPU-0 is free, the others end one by one
    wide = cluster.submit("g8", eta=500.0)
    narrow = cluster.submit("g1", eta=300.0)    # fits on GPU-0, but would outlive the wait
    assert cluster.schedule() == []
    assert re.search(r"; backfill reservation: expected to start in \d+s on GPU-0, GPU-1, .*"
                     r"GPU-7$", cluster.reason(wide)), cluster.reason(wide)
    assert re.fullmatch(rf"backfill: would delay {wide}-\w+, reserved in \d+s on 8 device\(s\)",
                        cluster.reason(narrow)), cluster.reason(narrow)


def test_jobs_that_end_before_the_reservation_may_use_its_devices():
    cluster = Cluster(backfill_policy())
    for eta in (100.0, 100.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0):
        cluster.submit("g1", eta=eta)
    cluster.schedule()
    cluster.advance(1.0)
    pair = cluster.submit("g2", eta=50.0)       # blocked until the two 100 s jobs end ...
    cluster.advance(100.0)                       # ... which they now did
    assert cluster.schedule() == [pair]
    wide = cluster.submit("g8", eta=100.0)       # needs everything: reserved in ~950 s
    short = cluster.submit("g1", eta=30.0)
    long = cluster.submit("g1", eta=5000.0)
    unknown = cluster.submit("g1", eta=None)
    cluster.advance(60.0)                        # the pair ends; two devices are free
    assert cluster.schedule() == [short]
    assert cluster.reason(long).startswith("backfill: would delay")
    assert cluster.reason(unknown).startswith("backfill: would delay")
    assert "backfill reservation" in cluster.reason(wide)


def test_devices_the_reserved_job_does_not_need_stay_usable():
    # GPU-4 carries a colleague's 50 %: too busy for 60 % jobs, room for a 30 % one
    cluster = Cluster(backfill_policy(), external=(0.0, 0.0, 0.0, 0.0, 50.0))
    short = [cluster.submit("g1", eta=100.0) for _ in range(2)]   # GPU-0, GPU-1
    long = cluster.submit("g1", eta=5000.0)                        # GPU-2
    assert cluster.schedule() == [*short, long]
    wide = cluster.submit("g3", eta=100.0)       # only GPU-3 fits now: reserved 0, 1, 3
    forever = cluster.submit("g1", eta=None)     # would fit on GPU-3 only: held
    small = cluster.submit("small", eta=None)    # 30 % beside wide's 60 % on GPU-3: room
    second = cluster.submit("small", eta=None)   # a second would crowd GPU-3: GPU-4
    assert cluster.schedule() == [small, second]
    assert cluster.reason(wide).endswith("on GPU-0, GPU-1, GPU-3")
    assert cluster.reason(forever).startswith("backfill: would delay")
    gpus = {j.request.tag: j.current.gpus for j in cluster.h.sched.running()}
    assert (gpus[small], gpus[second]) == (("GPU-3",), ("GPU-4",))
    cluster.advance(100.0)
    assert cluster.schedule() == [wide]


def test_running_work_without_an_eta_means_no_reservation():
    cluster = Cluster(backfill_policy())
    for _ in range(8):
        cluster.submit("g1", eta=None)
    cluster.schedule()
    wide = cluster.submit("g8", eta=100.0)
    cpu = cluster.submit("cpu", eta=None)
    assert cluster.schedule() == [cpu]           # nothing to wait for: later work starts
    assert "backfill reservation" not in cluster.reason(wide)
    assert cluster.reason(wide).startswith("gpu")


def test_cpu_work_backfills_freely():
    """It holds no device the reservation needs, and a slot is always left for the
    reserved job: every job that ends by its start frees one."""
    cluster = Cluster(backfill_policy(slots=10))
    for _ in range(8):
        cluster.submit("g1", eta=100.0)
    cluster.schedule()
    cluster.submit("g8", eta=100.0)
    cpus = [cluster.submit("cpu", eta=None) for _ in range(3)]
    assert cluster.schedule() == cpus[:2]
    assert cluster.reason(cpus[2]).startswith("waiting for a slot")


def test_a_reservation_binds_lower_priority_queues_too():
    queues = (Queue(name="wide", priority=1, work_classes=("mature",), picker="backfill"),
              Queue(name="rest", work_classes=("scout", "ordinary"), picker="fcfs"))
    cluster = Cluster(backfill_policy("fcfs", queues=queues))
    for _ in range(8):
        cluster.submit("g1", eta=100.0)
    cluster.schedule()
    wide = cluster.submit("g8", eta=100.0, work_class="mature")
    narrow = cluster.submit("g1", eta=1000.0)
    cluster.advance(100.0)
    assert cluster.schedule() == [wide]
    assert narrow not in cluster.started


def test_fcfs_queues_make_no_reservation():
    cluster = Cluster(backfill_policy("fcfs"))
    for _ in range(8):
        cluster.submit("g1", eta=100.0)
    cluster.schedule()
    wide = cluster.submit("g8", eta=100.0)
    cluster.advance(50.0)
    assert "reservation" not in cluster.reason(wide)


def test_the_reservation_uses_calibrated_etas():
    """Jobs that took twice their ETA make the scheduler expect the same of the running
    ones: the reservation moves out with the calibrated ratio."""
    def reserved_in(cluster: Cluster) -> float:
        for _ in range(8):
            cluster.submit("g1", eta=100.0)
        cluster.schedule()
        wide = cluster.submit("g8", eta=100.0)
        cluster.schedule()
        return float(re.search(r"start in (\d+)s", cluster.reason(wide)).group(1))

    neutral, slow = Cluster(backfill_policy()), Cluster(backfill_policy())
    for _ in range(20):
        tag = slow.submit("cpu", eta=10.0)
        slow.schedule()
        job = next(j for j in slow.h.sched.running() if j.request.tag == tag)
        slow.h.now = job.current.started_at + 19.5
        slow.h.exit(job.job_id, job.current.attempt_id, 0)   # 20 s for a 10 s ETA
    assert slow.h.sched.calibration.fit()[0] > 0.5
    assert reserved_in(neutral) <= 100.0 < 150.0 < reserved_in(slow)


def test_fractional_jobs_share_reserved_devices_while_they_leave_the_reserved_share():
    """Issue 18 (backfill on fractional demand): a reservation that kept every later
    job off its devices idled the share fractional jobs could use until it started.
    A reservation keeps room instead: a 30 % job that runs
    for ever starts now on a reserved device where the reserved 60 % still fits beside
    it then, is kept off the one where it would not (though it fits there now), and
    the reserved job starts on time."""
    cluster = Cluster(backfill_policy(), external=(0.0, 0.0))
    first = [cluster.submit("g1", eta=500.0), cluster.submit("small", eta=500.0)]
    assert cluster.schedule() == first           # 60 % on GPU-0, 30 % on GPU-1
    wide = cluster.submit("g2", eta=100.0)       # 60 % on both: once GPU-0's job ends
    smalls = [cluster.submit("small", eta=None) for _ in range(2)]
    assert cluster.schedule() == smalls[:1]
    assert cluster.reason(wide).endswith("on GPU-0, GPU-1")
    gpus = {j.request.tag: j.current.gpus for j in cluster.h.sched.running()}
    assert gpus[smalls[0]] == ("GPU-0",)         # 30 + 60 at the start: room
    # GPU-1 takes 30 % more now, but 30 + 30 + 60 would crowd the reserved job then
    assert cluster.reason(smalls[1]).startswith("backfill: would delay")
    cluster.advance(500.0)
    assert cluster.schedule() == [wide, smalls[1]]   # and then the room it kept is free
