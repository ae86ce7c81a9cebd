"""The driver is the one interpreter of the core (DESIGN.md, *Where the house goes next*:
"handle -> journal -> one commit -> effects, for the daemon and the simulator alike").

With a journal, what it commits is the state: replaying the journal into a fresh core
gives the live one, which is what a restart relies on. Without one (the simulator's),
the same workload ends in the same state: the simulator runs what the daemon runs.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

from praxist_fs.adapters import crashpoints
from praxist_fs.adapters.journal import Journal
from praxist_fs.backends.memory import MemoryBackend, Run, VirtualHost
from praxist_fs.config import load_policy
from praxist_fs.core.admission import upper_bound
from praxist_fs.core.effects import SpawnAttempt, WriteJob
from praxist_fs.core.events import (
    ClaimsSeen, CoordinatorStarted, HostSampled, RequestSeen, from_record,
)
from praxist_fs.core.observations import GpuDevice, GpuSample, PressureSample
from praxist_fs.core.request import Request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.driver import Driver

FCFS = Path(__file__).resolve().parents[1] / "fixtures" / "policies" / "fcfs.yaml"
GPUS = GpuSample(source="fake", devices=tuple(
    GpuDevice(uuid=f"GPU-{i}", index=i, name="fake H200", memory_total_mib=143771.0,
              memory_used_mib=0.0, utilization_pct=0.0) for i in range(2)))
JOBS = 24  # more than two GPUs serve at once: most wait in the queue
EXITS = (0, 0, 3, 75)  # 75 is retried, 3 fails


def run_workload(journal: Journal | None) -> Scheduler:
    """Submit JOBS GPU requests, one every 10 s, on a virtual host with 2 GPUs, and serve
    them to the end the way the daemon's loop does: requests and exits go to the driver
    with the scheduling pass inside their batch."""
    policy = load_policy(str(FCFS))
    policy = replace(policy, initial_concurrent_experiments=upper_bound(policy, None))
    sched = Scheduler(policy)

    def plan(launch: SpawnAttempt) -> Run:
        """Exit 75 (an infrastructure failure) on a first attempt only: the retry ends 0."""
        i = int(launch.metadata["request_id"][1:])
        code = EXITS[i % len(EXITS)]
        return Run(25.0 + 7 * (i % 5), exit_code=0 if code == 75 and
                   launch.attempt_id != "a1" else code)

    host = VirtualHost()
    driver = Driver(sched, MemoryBackend(plan, host), journal=journal,
                    clock=lambda: host.now)
    driver.process([CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="test",
                                       boot_id="memory"),
                    HostSampled(at=0.0, gpus=GPUS, pressure=PressureSample(
                        source="simulated", cpu=0.0, memory=0.0, io=0.0))])
    profile = next(name for name, p in policy.profiles.items()
                   if p.uses_gpu and p.gpu_count == 1)
    arrivals = [(10.0 * i, Request(request_id=f"r{i}", peer=f"p{i % 3}", tag=f"t{i}",
                                   profile=profile, argv=("train", str(i)), eta_s=60.0))
                for i in range(JOBS)]
    while arrivals or driver.backend.next_timer() < math.inf:
        now = min(arrivals[0][0] if arrivals else math.inf, driver.backend.next_timer())
        assert driver.process(driver.backend.on_timer(now), launch=True)
        while arrivals and arrivals[0][0] == now:
            _, request = arrivals.pop(0)
            assert driver.process([RequestSeen(
                at=now, name=f"{request.request_id}.json", digest=request.request_id,
                request_id=request.request_id, request=request)], launch=True)
    return sched


def test_what_the_driver_commits_replays_to_the_state_it_served(tmp_path):
    journal = Journal(tmp_path / "journal.log")
    live = run_workload(journal)
    journal.close()
    assert live.count(JobState.COMPLETED) + live.count(JobState.FAILED) == JOBS
    assert live.count(JobState.FAILED) == JOBS // len(EXITS)  # exit 3; exit 75 retried
    assert sum(len(job.attempts) for job in live.jobs.values()) == JOBS + JOBS // len(EXITS)

    replayed = Scheduler()
    for record in Journal(tmp_path / "journal.log").replay():
        replayed.handle(from_record(json.loads(json.dumps(record))))
    assert replayed.snapshot() == live.snapshot()


def test_the_simulators_driver_without_a_journal_serves_the_same_history(tmp_path):
    journal = Journal(tmp_path / "journal.log")
    journaled = run_workload(journal)
    journal.close()
    assert run_workload(None).snapshot() == journaled.snapshot()


class RecordingJournal:
    """``driver.Journal`` in memory: appended records wait for ``commit``, which is noted
    among the crash points the driver passes (``points``)."""

    path = "journal.log"

    def __init__(self, points: list[str]) -> None:
        self.points = points
        self.pending: list[dict] = []
        self.records: list[dict] = []

    def append(self, record: dict) -> None:
        self.pending.append(record)

    def commit(self) -> None:
        self.points.append("commit")
        self.records += self.pending
        self.pending = []


def started_with_one_request(policy) -> list:
    """A start on a host with GPUS, and one request (tag t1) for one GPU, seen at once."""
    profile = next(name for name, p in policy.profiles.items()
                   if p.uses_gpu and p.gpu_count == 1)
    request = Request(request_id="r1", peer="p1", tag="t1", profile=profile,
                      argv=("train",), eta_s=60.0)
    return [CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="test",
                               boot_id="memory"),
            HostSampled(at=0.0, gpus=GPUS, pressure=PressureSample(
                source="simulated", cpu=0.0, memory=0.0, io=0.0)),
            RequestSeen(at=1.0, name="r1.json", digest="r1", request_id="r1", request=request)]


def test_a_launch_decided_by_the_pass_alone_is_committed_before_it_runs():
    """A batch whose events change nothing (a look at the other runs' claims) may still
    launch, by the pass that runs inside it: that decision is journaled and committed
    before the spawn, as a kill -9 between them would otherwise start a job the journal
    never launched, and launch it again after the restart."""
    policy = load_policy(str(FCFS))
    points: list[str] = []
    journal = RecordingJournal(points)
    host = VirtualHost()
    sched = Scheduler(policy)
    driver = Driver(sched, MemoryBackend(lambda launch: Run(60.0), host), journal=journal,
                    clock=lambda: host.now, crash_hook=points.append)
    driver.process(started_with_one_request(policy))  # accepted, without a pass: queued
    assert sched.count(JobState.QUEUED) == 1
    points.clear()
    version = sched.version
    assert sched.handle(ClaimsSeen(at=2.0, others=())) == [] and sched.version == version
    driver.process([ClaimsSeen(at=2.0, others=())], launch=True)
    assert sched.count(JobState.RUNNING) == 1
    assert points.index("commit") < points.index("effect.SpawnAttempt.before"), points
    assert not journal.pending


def test_go_is_given_before_the_batchs_queued_jobs_are_told_why_they_wait():
    """A batch that accepts jobs and launches some gives its GO before it works out why the
    others wait (the rest of the pass's walk) and merges its job-file writes: those only
    shape the files written after GO, and working them out first delayed the command's
    start. The files are still written, each job's once, saying why it waits."""
    policy = load_policy(str(FCFS))
    points: list[str] = []
    written: dict[str, list[str]] = {}

    class Reasoning(Scheduler):
        def reasons_of_written(self, effects):
            points.append("reasons")
            return super().reasons_of_written(effects)

    class Views:
        def execute(self, effect, sched) -> None:
            if isinstance(effect, WriteJob):
                written.setdefault(effect.job_id, []).append(
                    sched.written_document(effect).get("reason") or "")

    host = VirtualHost()
    policy = replace(policy, initial_concurrent_experiments=1,
                     max_concurrent_experiments=1)  # one slot: one launch
    sched = Reasoning(policy)
    driver = Driver(sched, MemoryBackend(lambda launch: Run(60.0), host),
                    journal=RecordingJournal(points), views=Views(),
                    clock=lambda: host.now, crash_hook=points.append)
    start, sample, seen = started_with_one_request(policy)
    more = [replace(seen, name=f"r{i}.json", digest=f"r{i}", request_id=f"r{i}",
                    request=replace(seen.request, request_id=f"r{i}", tag=f"t{i}"))
            for i in (2, 3)]
    driver.process([start, sample, seen, *more], launch=True)
    assert sched.count(JobState.RUNNING) == 1 and sched.count(JobState.QUEUED) == 2
    starts = [i for i, p in enumerate(points) if p == "journal.before_commit"]
    batches = [points[a:b] for a, b in zip(starts, starts[1:] + [len(points)])]
    launching = [batch for batch in batches if "effect.SpawnAttempt.after" in batch or
                 "effect.WriteGo.after" in batch]
    assert launching and all("reasons" in batch for batch in launching), batches
    for batch in launching:
        launch_path = [i for i, p in enumerate(batch) if p.startswith(
            ("effect.SpawnAttempt", "effect.WriteGo"))]
        files = [i for i, p in enumerate(batch) if p.startswith("effect.WriteJob")]
        assert batch.index("commit") < min(launch_path)
        assert max(launch_path) < batch.index("reasons") < min(files, default=len(batch))
    for job in sched.jobs.values():
        if job.state is JobState.QUEUED:  # once, with its reason
            assert len(written[job.job_id]) == 1 and written[job.job_id][0], written


def test_each_commit_names_the_moments_of_a_jobs_life_it_journals(monkeypatch):
    """``PRAXIST_CRASH_AT=NAME@MOMENT`` (adapters/crashpoints.py) crashes inside the batch
    that journals a moment of a job's life, however many commits came before it: the
    driver names each batch's moments before its commit, and none once it is done."""
    policy = load_policy(str(FCFS))
    seen: list[tuple[str, frozenset[str]]] = []
    now: list[frozenset[str]] = [frozenset()]
    monkeypatch.setattr(crashpoints, "WANTS_MOMENTS", True)
    monkeypatch.setattr(crashpoints, "within",
                        lambda moments: now.__setitem__(0, frozenset(moments)))
    host = VirtualHost()
    sched = Scheduler(policy)
    retried = Run(60.0, exit_code=75)  # the first attempt's end is retried

    def plan(launch: SpawnAttempt) -> Run:
        return retried if launch.attempt_id == "a1" else Run(60.0)

    driver = Driver(sched, MemoryBackend(plan, host), journal=RecordingJournal([]),
                    clock=lambda: host.now,
                    crash_hook=lambda point: seen.append((point, now[0])))
    driver.process(started_with_one_request(policy), launch=True)
    while driver.backend.next_timer() < math.inf:
        driver.process(driver.backend.on_timer(driver.backend.next_timer()), launch=True)
    named = [moments for point, moments in seen if point == "journal.after_commit" and moments]
    assert named == [{"request:r1.json", "launched:t1", "launched:t1/a1"},
                     {"ended:t1", "ended:t1/a1", "launched:t1", "launched:t1/a2"},
                     {"ended:t1", "ended:t1/a2", "done:t1"}]
    assert now[0] == frozenset()  # between batches no moment holds
    assert ("effect.SpawnAttempt.before", named[1]) in seen  # the retry's, in its batch


def test_a_warm_shim_is_told_its_attempt_before_the_batch_is_encoded_for_the_journal():
    """The backend binds a batch's launches (a warm shim is told its attempt, and prepares
    it while the commit is on its way) before the batch's records are encoded: encoding
    them first kept the shim waiting for work its launch does not need. The records are
    those of the batch, in the order handled, and committed once, before the spawn."""
    policy = load_policy(str(FCFS))
    points: list[str] = []

    class TellingBackend(MemoryBackend):
        def bind(self, effects):
            if any(isinstance(effect, SpawnAttempt) for effect in effects):
                points.append("bind")
            return super().bind(effects)

    class EncodingJournal(RecordingJournal):
        def append(self, record: dict) -> None:
            points.append(f"append.{record['type']}")
            super().append(record)

    host = VirtualHost()
    journal = EncodingJournal(points)
    driver = Driver(Scheduler(policy), TellingBackend(lambda launch: Run(60.0), host),
                    journal=journal, clock=lambda: host.now, crash_hook=points.append)
    driver.process(started_with_one_request(policy), launch=True)
    batch = points[:points.index("commit")]
    assert batch.index("bind") < min(i for i, p in enumerate(batch) if p.startswith("append"))
    assert [p for p in batch if p.startswith("append")] == [
        "append.coordinator_started", "append.request_seen", "append.attempt_launched"]
    assert points.index("commit") < points.index("effect.SpawnAttempt.before")
    assert [record["type"] for record in journal.records[:3]] == [
        "coordinator_started", "request_seen", "attempt_launched"]  # committed as handled
