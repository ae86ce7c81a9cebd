"""replay(journal) == live state, for random legal operation sequences.

The daemon's own ``Driver`` (praxist_fs/driver.py) feeds a live Scheduler: it journals
exactly the events that changed ``version`` (through to_record + JSON, into the
journal's twin), commits each batch once and carries out the effects, GO and ABORT on a
barrier twin that checks their order, the files on the views' twin (tests/core/twins.py);
a request or an exit may carry the scheduling pass in its batch, as in the daemon. At
random points the test "restarts" by replaying the journal into a fresh core and carries
on with that one.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from praxist_fs.core.effects import Effect, WriteJob, WriteReply
from praxist_fs.core.events import (
    AttemptObserved, ControlSeen, CoordinatorStarted, Event, RequestSeen, from_record,
    to_record,
)
from praxist_fs.core.request import parse_control, parse_request, request_id_from_filename
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.states import JobState
from praxist_fs.driver import Driver as ProductionDriver
from praxist_fs.errors import BadRequest

from .helpers import make_policy, shim
from .twins import Barrier, Disk, Files, MemoryJournal

TAGS = ["exp-a", "exp-b", "exp-c"]
ARGVS = [["python", "a.py"], ["python", "b.py"]]
ENVS = [{}, {"SEED": "1"}]
PROFILES = [None, None, None, "cpu", "gpu", "tpu"]


def full_state(s: Scheduler) -> dict[str, Any]:
    """The snapshot plus every field of every object (phases, boot ids, ...)."""
    return {
        "snapshot": s.snapshot(),
        "jobs": {jid: dataclasses.asdict(j) for jid, j in s.jobs.items()},
        "replies": {rid: dataclasses.asdict(r) for rid, r in s.replies.items()},
    }


def replay(records: list[dict[str, Any]], into: Scheduler | None = None) -> Scheduler:
    fresh = into if into is not None else Scheduler()
    for record in records:
        fresh.handle(from_record(json.loads(json.dumps(record))))
    return fresh


class Checked(Scheduler):
    """The live core: an event that changes ``version`` must survive the journal's codec,
    and one that does not (it is not journaled) must change nothing at all."""

    checking = False  # not while a restart replays the journal

    def handle(self, event: Event) -> list[Effect]:
        if not self.checking:
            return super().handle(event)
        version, before = self.version, copy.deepcopy(full_state(self))
        effects = super().handle(event)  # the driver is legal: nothing may raise
        if self.version != version:
            assert from_record(json.loads(json.dumps(to_record(event)))) == event
        else:  # not journaled, so it must not have changed anything
            assert full_state(self) == before, event
        return effects


class Driver:
    """What the test drives: the production driver around a ``Checked`` core, its
    journal, views and backend twins, and the peers' inboxes the views consume."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.records: list[dict[str, Any]] = []
        self.now = 100.0
        self.names = 0
        self.pids = 1000
        self.sent: list[tuple[str, bytes]] = []
        self.disk = Disk()
        self.incoming: dict[str, bytes] = {}  # what Files consumes: the spool's requests
        self.control_inbox: dict[str, bytes] = {}
        self.declines: dict[int, dict[str, bytes]] = {}
        self.journal = MemoryJournal(self.records)
        self.driver = ProductionDriver(self.checked(Checked(policy)),
                                       Barrier(self.disk, lambda: self.sched),
                                       journal=self.journal,
                                       views=Files(self), clock=lambda: self.now)
        self.feed(CoordinatorStarted(at=self.tick(), policy=policy.to_dict(), pid=1,
                                     host="host", boot_id="boot"))

    @property
    def sched(self) -> Scheduler:
        return self.driver.sched

    @staticmethod
    def checked(sched: Checked) -> Checked:
        sched.checking = True
        return sched

    def tick(self) -> float:
        self.now += 0.25
        return self.now

    # -- the daemon's loop ------------------------------------------------------

    def feed(self, *events: Event, launch: bool = False) -> None:
        """One batch through the driver (with the scheduling pass in it, ``launch``)."""
        assert self.driver.process(list(events), launch=launch)
        assert not self.journal.pending, "a batch left records uncommitted"
        self.check_invariants()

    def restart(self) -> None:
        fresh = replay(self.records, Checked())
        assert full_state(fresh) == full_state(self.sched)
        assert fresh.version == self.sched.version
        self.driver.sched = self.checked(fresh)

    # -- operations ----------------------------------------------------------------

    def submit(self, data: st.DataObject) -> None:
        mode = data.draw(st.sampled_from(["fresh", "fresh", "fresh", "resend", "clash", "bad"]))
        if mode == "resend" and self.sent:
            name, raw = data.draw(st.sampled_from(self.sent))
        else:
            doc: dict[str, Any] = {
                "peer": data.draw(st.sampled_from(["p1", "p2"])),
                "tag": data.draw(st.sampled_from(TAGS)),
                "argv": data.draw(st.sampled_from(ARGVS)),
                "env": data.draw(st.sampled_from(ENVS)),
            }
            profile = data.draw(st.sampled_from(PROFILES))
            if profile is not None:
                doc["profile"] = profile
            if data.draw(st.booleans()):
                doc["retry_terminal"] = True
            extra = data.draw(st.sampled_from(["", "", "", "after", "hold", "priority"]))
            if extra == "after":
                doc["after"] = [{"job": data.draw(st.sampled_from(TAGS)),
                                 "when": data.draw(st.sampled_from(["ok", "any", "notok"]))}]
            elif extra == "hold":
                doc["hold"] = True
            elif extra == "priority":
                doc["priority"] = data.draw(st.integers(-100, 100))
            if mode == "bad":
                doc["tag"] = data.draw(st.sampled_from(["../x", ".hidden", ""]))
            if mode == "clash" and self.sent:
                name = data.draw(st.sampled_from(self.sent))[0]
                doc["argv"] = doc["argv"] + ["--changed"]
            else:
                self.names += 1
                name = f"r{self.names}.json"
            raw = json.dumps(doc).encode()
        self.sent.append((name, raw))
        digest = hashlib.sha256(raw).hexdigest()
        try:
            request = parse_request(name, raw)
        except BadRequest as exc:
            event = RequestSeen(at=self.tick(), name=name, digest=digest,
                                request_id=request_id_from_filename(name),
                                error_field=exc.field, error_problem=exc.problem)
        else:
            event = RequestSeen(at=self.tick(), name=name, digest=digest,
                                request_id=request.request_id, request=request)
        self.feed(event, launch=data.draw(st.booleans()))

    def control(self, data: st.DataObject) -> None:
        """An operator's cancel, hold, release or update of a random tag (R-CTL)."""
        action = data.draw(st.sampled_from(["cancel", "cancel", "hold", "release", "update"]))
        doc = {"action": action, "jobs": [data.draw(st.sampled_from(TAGS))]}
        if action == "update":
            doc["priority"] = data.draw(st.integers(-100, 100))
        self.names += 1
        name = f"c{self.names}.json"
        raw = json.dumps(doc).encode()
        control = parse_control(name, raw)
        self.feed(ControlSeen(at=self.tick(), name=name, digest=hashlib.sha256(raw).hexdigest(),
                              request_id=control.request_id, control=control))

    def launch(self, data: st.DataObject) -> None:
        self.feed(*self.sched.next_launches(self.tick()))  # as the loop's own pass

    def observe(self, data: st.DataObject) -> None:
        running = sorted(self.sched.running(), key=lambda j: j.order)
        if not running:
            return
        job = data.draw(st.sampled_from(running))
        attempt = job.current
        key = (job.job_id, attempt.attempt_id)
        go = key in self.disk.go
        choices = ["spawn", "spawn", "ready", "ready", "dead"]
        if go:
            choices += ["exit"] * 6
        action = data.draw(st.sampled_from(choices))
        base = dict(at=self.tick(), job_id=job.job_id, attempt_id=attempt.attempt_id)
        if action == "spawn":  # a sighting of the shim; the same pid once it is known
            if attempt.pid is None:
                self.pids += 1
            pid = attempt.pid or self.pids
            event = AttemptObserved(**base, alive=True, handle=shim(pid, pid * 7), go=go)
        elif action == "ready":
            event = AttemptObserved(**base, alive=True, handle=attempt.handle, ready=True, go=go)
        elif action == "dead":
            fenced = go and data.draw(st.booleans())  # what it left running was terminated
            event = AttemptObserved(**base, alive=False, ready=data.draw(st.booleans()), go=go,
                                    fenced=fenced, error="supervisor died" if fenced else None)
        else:
            code, signal = data.draw(st.sampled_from(
                [(0, None), (3, None), (75, None), (75, None), (137, 9)]))
            event = AttemptObserved(**base, alive=False, ready=True, go=True, exited=True,
                                    exit_code=code, signal=signal, ended_at=self.now - 0.1)
        self.feed(event, launch=data.draw(st.booleans()))

    def late_sighting(self, data: st.DataObject) -> None:
        ended = [(j.job_id, a.attempt_id) for j in self.sched.jobs.values()
                 for a in j.attempts if a.ended_at is not None]
        if not ended:
            return
        job_id, attempt_id = data.draw(st.sampled_from(sorted(ended)))
        version = self.sched.version
        self.feed(AttemptObserved(at=self.tick(), job_id=job_id, attempt_id=attempt_id,
                                  alive=False, go=True, exited=True, exit_code=0))
        assert self.sched.version == version

    # -- invariants -----------------------------------------------------------------

    def check_invariants(self) -> None:
        s = self.sched
        assert s.count(JobState.RUNNING) <= self.policy.initial_concurrent_experiments
        # each job is in exactly one state, and its file in exactly one directory
        assert sum(s.count(state) for state in JobState) == len(s.jobs)
        for job_id, job in s.jobs.items():
            holders = [d for d, folder in self.disk.jobs.items() if job_id in folder]
            assert holders == [job.state.directory], (job_id, holders, job.state)
            expected = job.to_dict()
            if job.job_id in s._parked:  # held, or waiting for a dependency: it says why
                expected["reason"] = s._pending[job.job_id]
            assert same_file(self.disk.jobs[holders[0]][job_id], expected, s), "stale job file"
            ids = [a.attempt_id for a in job.attempts]
            assert ids == [f"a{n}" for n in range(1, len(ids) + 1)]
            open_attempts = [a for a in job.attempts if a.ended_at is None]
            if job.state is JobState.RUNNING:
                assert open_attempts == [job.current]
            else:
                assert open_attempts == []
            if job.profile == "gpu":  # (a retry may switch a CPU job to GPU: new round)
                assert [a for a in job.attempts if a.round == job.round] == [], \
                    "GPU work ran on the CPU"
        assert sum(len(folder) for folder in self.disk.jobs.values()) == len(s.jobs)
        for rid, reply in s.replies.items():
            assert reply.job_id is None or reply.job_id in s.jobs
            if reply.job_id is None:
                assert reply.outcome == "rejected"
            assert self.disk.replies[rid] == reply.to_dict()
        assert set(self.disk.replies) == set(s.replies)


def same_file(written: dict[str, Any], want: dict[str, Any], sched: Scheduler) -> bool:
    """A job file says what the core does; a queued job's pending reason aside, unless it
    is held or waits for a dependency (soft: it is rewritten at the status cadence, or
    with the batch's own pass, ``Scheduler.reasons_of_written``)."""
    if want["state"] == "queued" and want["job_id"] not in sched._parked:
        written, want = ({key: value for key, value in document.items() if key != "reason"}
                         for document in (written, want))
    return written == want


OPERATIONS = ["submit", "submit", "submit", "launch", "launch", "observe", "observe",
              "observe", "observe", "late_sighting", "restart", "control"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(),
       retries=st.integers(0, 2),
       slots=st.integers(1, 3),
       steps=st.integers(0, 60))
def test_replay_of_the_journal_equals_the_live_state(data, retries, slots, steps):
    policy = make_policy(infrastructure_retries=retries, initial_concurrent_experiments=slots,
                         max_concurrent_experiments=max(slots, 3))
    driver = Driver(policy)
    for _ in range(steps):
        op = data.draw(st.sampled_from(OPERATIONS))
        if op == "restart":
            driver.restart()
        else:
            getattr(driver, op)(data)
    replayed = replay(driver.records)
    assert replayed.snapshot() == driver.sched.snapshot()
    assert full_state(replayed) == full_state(driver.sched)
    assert replayed.version == driver.sched.version
    # the derived views a restart would write match what the live run wrote
    for effect in replayed.derived_views():
        if isinstance(effect, WriteJob):
            assert same_file(driver.disk.jobs[effect.directory][effect.job_id],
                             replayed.written_document(effect),
                             driver.sched)
        elif isinstance(effect, WriteReply):
            assert driver.disk.replies[effect.request_id] == effect.document


def test_driver_reaches_interesting_states():
    """A fixed walk through the driver's operations, so the property test's
    machinery is known to reach retries, releases and terminal states."""
    policy = make_policy(infrastructure_retries=1)
    d = Driver(policy)

    class Scripted:
        def __init__(self, values):
            self.values = list(values)

        def draw(self, strategy):
            return self.values.pop(0)

    # submit exp-a (fresh), launch, spawn, ready -> GO, exit 75 -> requeued
    d.submit(Scripted(["fresh", "p1", "exp-a", ARGVS[0], {}, None, False, "", False]))
    d.launch(None)
    (job,) = d.sched.running()
    d.observe(Scripted([job, "spawn", False]))
    d.observe(Scripted([job, "ready", False]))
    assert (job.job_id, "a1") in d.disk.go
    d.observe(Scripted([job, "exit", (75, None), False]))
    assert job.state is JobState.QUEUED
    d.launch(None)
    d.observe(Scripted([job, "dead", False, False]))  # released before GO
    assert (job.job_id, "a2") in d.disk.abort and job.state is JobState.QUEUED
    d.restart()
    job = d.sched.jobs[job.job_id]
    d.launch(None)
    d.observe(Scripted([job, "spawn", False]))
    d.observe(Scripted([job, "ready", False]))
    d.observe(Scripted([job, "exit", (3, None), False]))
    assert job.state is JobState.FAILED
    assert [a.outcome for a in job.attempts] == ["infra_retry", "released", "failed"]
    d.submit(Scripted(["fresh", "p1", "exp-a", ARGVS[0], {}, None, True, "", False]))
    assert job.state is JobState.QUEUED
    d.submit(Scripted(["resend", d.sent[-1], False]))
    assert replay(d.records).snapshot() == d.sched.snapshot()
    kinds = [r["type"] for r in d.records]
    assert kinds[0] == "coordinator_started"
    assert {"request_seen", "attempt_launched", "attempt_observed"} <= set(kinds)
