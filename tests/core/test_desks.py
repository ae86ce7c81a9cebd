"""The Scheduler's desks (issues 16, 30): the submission, attempt, job-control, pass,
generation and preemption desks are collaborators it owns, each seeing it only through a narrow
board, and none imports the scheduler back.

The guard below hands each desk its scheduler wrapped so that any member not on
the desk's board fails the test: a desk that reached for more would be caught the
first time the path ran. The scenarios walk every event each desk handles.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from praxist_fs.core import attempts, generations, jobcontrol, passes, preemption, submissions
from praxist_fs.core.attempts import AttemptBoard, AttemptDesk
from praxist_fs.core.effects import ResumeAttempt, SuspendAttempt, WriteControlReply
from praxist_fs.core.events import (
    AttemptPreempted, AttemptResumed, ControlSeen, CoordinatorStarted, DeclineSeen, Event,
    HostSampled, IdleSeen, ResultSeen,
)
from praxist_fs.core.generations import GenerationBoard, GenerationDesk
from praxist_fs.core.jobcontrol import JobControlBoard, JobControlDesk
from praxist_fs.core.observations import PressureSample
from praxist_fs.core.passes import PassBoard, PassDesk
from praxist_fs.core.preemption import PreemptionBoard, PreemptionDesk
from praxist_fs.core.queues import Queue
from praxist_fs.core.request import parse_control
from praxist_fs.core.states import GenerationStage, JobState, LeaseState
from praxist_fs.core.submissions import SubmissionBoard, SubmissionDesk

from .helpers import Harness, make_policy


class Guarded:
    """A scheduler as one desk may see it: the members of its board (and of the boards it
    extends), nothing else."""

    def __init__(self, sched: Any, board: type) -> None:
        boards = [b for b in board.__mro__ if b.__module__.startswith("praxist_fs.")]
        members = {name for b in boards for name in b.__annotations__} | {
            name for b in boards for name, value in vars(b).items()
            if callable(value) and not name.startswith("__")}
        object.__setattr__(self, "_sched", sched)
        object.__setattr__(self, "_members", frozenset(members))
        object.__setattr__(self, "_board", board.__name__)

    def __getattr__(self, name: str) -> Any:
        assert name in self._members, f"the desk reached for {name!r}, not on its {self._board}"
        return getattr(self._sched, name)

    def __setattr__(self, name: str, value: Any) -> None:
        assert name in self._members, f"the desk changed {name!r}, not on its {self._board}"
        setattr(self._sched, name, value)


class Run(Harness):
    """The harness, with every desk guarded and each pass's decisions fed back."""

    def __init__(self, **policy: Any) -> None:
        super().__init__(make_policy(**policy))
        sched = self.sched
        sched.submissions = SubmissionDesk(Guarded(sched, SubmissionBoard))
        sched.attempts = AttemptDesk(Guarded(sched, AttemptBoard))
        sched.jobcontrol = JobControlDesk(Guarded(sched, JobControlBoard))
        sched.generations_desk = GenerationDesk(Guarded(sched, GenerationBoard))
        sched.preemption = PreemptionDesk(Guarded(sched, PreemptionBoard))
        sched.passes = PassDesk(Guarded(sched, PassBoard))
        self.effects: list = []
        self.handle(CoordinatorStarted(at=self.tick(), policy=sched.policy.to_dict(), pid=1,
                                       host="h", boot_id="boot"))

    def feed(self, events: list[Event], launch: bool = False) -> list:
        effects = super().feed(events, launch)
        self.effects += effects
        return effects

    def control(self, action: str, **fields: Any) -> dict[str, Any]:
        self.counter += 1
        data = json.dumps({"action": action, **fields}).encode()
        name = f"ctl-{self.counter}.json"
        parsed = parse_control(name, data)
        effects = self.handle(ControlSeen(at=self.tick(), name=name,
                                          digest=hashlib.sha256(data).hexdigest(),
                                          request_id=parsed.request_id, control=parsed))
        (reply,) = [e.document for e in effects if isinstance(e, WriteControlReply)]
        return reply

    def decide(self) -> None:
        """One tick of the daemon: a pass, a host sample, then what is due and the grants."""
        for event in self.sched.next_launches(self.tick()):
            self.handle(event)
        self.handle(HostSampled(at=self.now, pressure=PressureSample(source="psi", cpu=0.0)))
        for event in [*self.sched.due(self.now), *self.sched.next_grants(self.now)]:
            self.handle(event)


@pytest.mark.parametrize("module", [submissions, attempts, jobcontrol, passes, generations,
                                    preemption])
def test_no_desk_imports_the_scheduler(module):
    tree = ast.parse(Path(module.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "scheduler" not in imported and "praxist_fs.core.scheduler" not in imported


def test_the_generation_desk_works_through_its_board_alone():
    """seed 000 "Mature Evidence And Idle Supply Feedback": idle peers are woken with
    leases while slots sit unused; a close freezes the queue, then the generation drains.
    Every generation event goes through the guarded desk."""
    run = Run(initial_concurrent_experiments=2, max_concurrent_experiments=2,
              supply_idle_samples=2)
    assert run.control("generation_open", generation=1, cohort=["a", "b"])["outcome"] == "ok"
    run.handle(IdleSeen(at=run.tick(), generation=1, peers=("a", "b")))
    for _ in range(3):
        run.decide()
    gen = run.sched.generations[1]
    leases = {lease.peer: lease for lease in gen.leases.values()}
    assert set(leases) == {"a", "b"} and run.sched.outstanding_leases() == 2
    reply = run.submit("from-a", peer="a", lease=leases["a"].lease_id)
    assert reply["lease"] == {"lease_id": leases["a"].lease_id, "outcome": "consumed"}
    run.handle(DeclineSeen(at=run.tick(), generation=1, peer="b",
                           lease_id=leases["b"].lease_id, name="b.json"))
    assert {lease.state for lease in gen.leases.values()} == {LeaseState.CONSUMED,
                                                               LeaseState.DECLINED}
    run.handle(ResultSeen(at=run.tick(), generation=1, result_id="r1", peer="a", mature=True))
    assert run.sched.maturity(gen).m == 1
    assert run.control("generation_assess", generation=1)["outcome"] == "ok"
    assert gen.phase is GenerationStage.ASSESSMENT
    queued = run.submit("late", peer="a")["job_id"]
    assert run.control("generation_close", generation=1)["reason"] == "generation 1 closing"
    assert run.sched.jobs[queued].state is JobState.REJECTED  # its queue was frozen
    run.decide()
    assert gen.phase is GenerationStage.CLOSED
    assert run.sched.generation_status(gen)["results"]["count"] == 1
    assert len(run.sched.derived_views()) > len(run.sched.jobs) + len(run.sched.replies)


@pytest.mark.parametrize("mode", ["suspend", "requeue"])
def test_the_preemption_desk_works_through_its_board_alone(mode):
    """R-POL-3: a mature job preempts a running ordinary one (suspended, then resumed; or
    terminated and queued again), and a restart carries the decisions out again. Every
    preemption event goes through the guarded desk."""
    run = Run(initial_concurrent_experiments=1, min_concurrent_experiments=1,
              max_concurrent_experiments=1, queues=(
                  Queue(name="high", priority=10, work_classes=("mature",),
                        preemptible_queues=("low",), preempt=mode),
                  Queue(name="low", priority=0, work_classes=("scout", "ordinary"))))
    low = run.submit("low", work_class="ordinary")["job_id"]
    run.launch_all()
    run.go(low, "a1")
    high = run.submit("high", work_class="mature")["job_id"]
    run.launch_all()
    preempted = [e for e in run.effects if isinstance(e, SuspendAttempt)] if mode == "suspend" \
        else run.sched.jobs[low].current.preemptions
    assert preempted, "the mature job preempted nothing"
    assert run.sched.preempted_jobs == {low: None}
    if mode == "suspend":
        assert run.sched.jobs[low].state is JobState.SUSPENDED
        run.handle(CoordinatorStarted(at=run.tick(), policy=run.sched.policy.to_dict(), pid=2,
                                      host="h", boot_id="boot"))
        assert SuspendAttempt(job_id=low, attempt_id="a1") in run.last_effects  # reasserted
    else:
        run.exit(low, "a1", 143, signal=15)
        assert run.sched.jobs[low].state is JobState.QUEUED
        assert run.sched.jobs[low].current.outcome == "preempted"
        run.launch_all()
    run.go(high, "a1")
    run.exit(high, "a1", 0)
    decided = run.sched.next_launches(run.tick())
    for event in decided:
        run.handle(event)
    if mode == "suspend":
        assert [type(e) for e in decided] == [AttemptResumed]
        assert ResumeAttempt(job_id=low, attempt_id="a1") in run.last_effects
        assert run.sched.jobs[low].state is JobState.RUNNING
    else:
        assert [(e.job_id, e.attempt_id) for e in decided] == [(low, "a2")]
    assert not any(isinstance(e, AttemptPreempted) for e in decided)


def test_the_submission_and_attempt_desks_work_through_their_boards_alone():
    """R-SUB-1..4, R-RUN-2: every kind of answer to a request and every kind of end of
    an attempt, and an admission timeout, go through the guarded submission and
    attempt desks."""
    run = Run(initial_concurrent_experiments=8, min_concurrent_experiments=8,
              max_concurrent_experiments=8, infrastructure_retries=1)
    ok = run.submit("ok")["job_id"]
    assert run.submit("ok")["outcome"] == "duplicate"
    assert run.submit("ok", argv=["other"])["differs"] == ["argv"]  # shared by default
    assert run.submit("waits", after=["no-such-job"])["field"] == "after"
    assert run.submit("bad", profile="nope")["field"] == "profile"
    retried, failed, released, lost = (run.submit(tag)["job_id"]
                                       for tag in ("retried", "failed", "released", "lost"))
    run.launch_all()
    for job in (ok, retried, failed, lost):
        run.go(job, "a1")
    run.exit(ok, "a1", 0)
    run.exit(retried, "a1", 75)
    run.exit(failed, "a1", 3)
    run.spawn(released, "a1")
    run.observe(released, "a1", alive=False)  # its shim died before GO
    run.observe(lost, "a1", alive=False, ready=True, go=True)  # after GO, no exit record
    outcomes = {job: run.sched.jobs[job].current.outcome
                for job in (ok, retried, failed, released, lost)}
    assert outcomes == {ok: "completed", retried: "infra_retry", failed: "failed",
                        released: "released", lost: "lost"}
    assert run.submit("failed")["outcome"] == "terminal_duplicate"
    assert run.submit("failed", retry_terminal=True)["outcome"] == "retry_accepted"
    late = run.submit("late", admission_timeout_s=1)["job_id"]
    run.tick()
    for event in run.sched.due(run.tick()):
        run.handle(event)
    assert run.sched.jobs[late].state is JobState.EXPIRED


def test_the_job_control_desk_works_through_its_board_alone():
    """R-CTL-1, R-CTL-5: hold, release, update and cancel (of a queued job and of a
    running one, whose end then cancels it), and a dependency on a tag whose failure
    cancels the job that waits for it, go through the guarded job-control desk."""
    run = Run(initial_concurrent_experiments=1, min_concurrent_experiments=1,
              max_concurrent_experiments=1)
    train = run.submit("train")["job_id"]
    evaluate = run.submit("eval", after=["train"])["job_id"]
    spare = run.submit("spare", hold=True)["job_id"]
    assert run.launch_all() == [(train, "a1")]
    assert run.sched.pending[evaluate] == f"dependency: waiting for {train} (running)"
    assert run.control("release", jobs=["spare"])["jobs"][0]["result"] == "released"
    assert run.control("hold", jobs=[spare])["jobs"][0]["result"] == "held"
    assert run.control("update", jobs=[spare], priority=5)["jobs"][0]["result"] == "updated"
    assert run.control("cancel", jobs=[spare])["jobs"][0]["result"] == "cancelled"
    run.go(train, "a1")
    assert run.control("cancel", jobs=["train"])["jobs"][0]["result"] == "cancelling"
    run.exit(train, "a1", 143, signal=15)
    assert run.sched.jobs[train].state is JobState.CANCELLED
    assert run.sched.jobs[evaluate].state is JobState.CANCELLED  # its dependency failed
    run.handle(CoordinatorStarted(at=run.tick(), policy=run.sched.policy.to_dict(), pid=2,
                                  host="h", boot_id="boot"))


def test_the_guard_refuses_what_is_not_on_the_board():
    """The guard itself: the preemption desk's board has no pending reasons, nor the
    generation desk's any control replies."""
    sched = Harness().sched
    with pytest.raises(AssertionError, match="_pending"):
        Guarded(sched, PreemptionBoard)._pending
    with pytest.raises(AssertionError, match="control_replies"):
        Guarded(sched, GenerationBoard).control_replies = {}
    assert Guarded(sched, GenerationBoard).generations is sched.generations
