"""The devices that take each demand shape, counted once and kept from pass to pass
(``KeptLoads.fitting``, ``Pass.kept_fitting``): a pass that may start nothing by those
counts walks no job, so counts left stale by a job that ended would keep a job queued on
idle devices."""

from __future__ import annotations

from .helpers import Cluster, backfill_policy


def test_a_device_freed_between_passes_starts_the_job_waiting_for_it():
    cluster = Cluster(backfill_policy("fcfs"))
    first = cluster.submit("g8", eta=100.0)  # 60 % of each of the eight devices
    assert cluster.schedule() == [first]
    second = cluster.submit("g8", eta=100.0)
    assert cluster.schedule() == []          # no device has 60 % left: counted, and kept
    third = cluster.submit("g8", eta=100.0)
    assert cluster.schedule() == []          # the same loads: the kept counts say so again
    assert "gpu utilization" in cluster.reason(third)
    cluster.advance(100.0)                   # the first ends: its devices count again
    assert cluster.schedule() == [second]
    assert "gpu utilization" in cluster.reason(third)
    cluster.advance(100.0)
    assert cluster.schedule() == [third]


def test_shares_freed_on_some_devices_are_counted_on_those_only():
    """The wide job's shape is first counted while every device is busy, then kept while
    the shares on one device, then on another, end: each pass must see what is free."""
    cluster = Cluster(backfill_policy("fcfs", slots=32))
    # two 30 % shares a device, spread: devices 0 and 1 hold the 1st and 9th, the 2nd and 10th
    etas = [50.0, 100.0, *[1000.0] * 6] * 2
    small = [cluster.submit("small", eta=eta) for eta in etas]
    assert cluster.schedule() == small
    wide = cluster.submit("g2", eta=100.0)   # 60 % of two devices
    assert cluster.schedule() == []
    assert cluster.reason(wide) == "gpu utilization: no device with 60% free"
    cluster.advance(60.0)                    # device 0 is free
    assert cluster.schedule() == []
    assert cluster.reason(wide) == "gpu utilization: no device with 60% free (1 of 2)"
    cluster.advance(60.0)                    # and device 1
    assert cluster.schedule() == [wide]
