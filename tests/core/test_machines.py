"""The core's other state machines (issue 16): attempt phase, generation phase, lease
life cycle, node health (issue 30) and reply outcomes, each a str enum with one table,
like the jobs', drawn in docs/PROTOCOL.md: the drawing is what the table must equal.

A pair missing from a table raises ``InvalidTransition`` naming the thing, its
state and the trigger; the values stay the strings the journal, snapshots, job
files, replies and status.json always held, and a snapshot restores the members.
"""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from praxist_fs.core.events import (
    ControlSeen, GenerationPhase, LeaseGranted, from_record, to_record,
)
from praxist_fs.core.request import ControlRequest
from praxist_fs.core.snapshot import load, render
from praxist_fs.core.states import (
    ATTEMPT_TRANSITIONS, GENERATION_TRANSITIONS, LEASE_TRANSITIONS, NODE_TRANSITIONS,
    REPLY_TRANSITIONS, TRANSITIONS, AttemptPhase, AttemptTrigger, GenerationStage,
    GenerationTrigger, JobState, LeaseState, LeaseTrigger, NodeState, NodeTrigger,
    ReplyOutcome, attempt_transition, generation_transition, lease_transition,
    node_transition, reply_transition,
)
from praxist_fs.errors import InvalidTransition

from .helpers import Harness, documented_table

_RERUNNABLE = (JobState.FAILED, JobState.REJECTED, JobState.CANCELLED)

# (table, expected: docs/PROTOCOL.md's drawing, its checked step, states, triggers)
MACHINES = {
    "attempt": (ATTEMPT_TRANSITIONS, documented_table("attempt"), attempt_transition,
                list(AttemptPhase), list(AttemptTrigger)),
    "generation": (GENERATION_TRANSITIONS, documented_table("generation"), generation_transition,
                   list(GenerationStage), list(GenerationTrigger)),
    "lease": (LEASE_TRANSITIONS, documented_table("lease"), lease_transition,
              list(LeaseState), list(LeaseTrigger)),
    "node": (NODE_TRANSITIONS, documented_table("node"), node_transition,
             list(NodeState), list(NodeTrigger)),
    "reply": (REPLY_TRANSITIONS, documented_table("reply"), reply_transition,
              [None, *JobState], list(ReplyOutcome)),
}
LEGAL = [(machine, pair) for machine, (_, expected, *_rest) in MACHINES.items()
         for pair in expected]
ILLEGAL = [(machine, pair) for machine, (_, expected, _step, states, triggers) in MACHINES.items()
           for pair in itertools.product(states, triggers) if pair not in expected]


def _id(case):
    machine, (state, trigger) = case
    return f"{machine}-{getattr(state, 'value', state)}-{trigger.value}"


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_each_table_is_exactly_the_documented_one(machine):
    table, expected, *_ = MACHINES[machine]
    assert dict(table) == expected


@pytest.mark.parametrize("case", LEGAL, ids=map(_id, LEGAL))
def test_a_listed_pair_gives_its_target(case):
    machine, (state, trigger) = case
    _, expected, step, *_ = MACHINES[machine]
    assert step("thing-7", state, trigger) is expected[(state, trigger)]


@pytest.mark.parametrize("case", ILLEGAL, ids=map(_id, ILLEGAL))
def test_an_unlisted_pair_raises_naming_the_thing_its_state_and_the_trigger(case):
    machine, (state, trigger) = case
    step = MACHINES[machine][2]
    with pytest.raises(InvalidTransition) as info:
        step("thing-7", state, trigger)
    message = str(info.value)
    assert "thing-7" in message and trigger.value in message
    assert (state.value if state is not None else "none") in message


def test_ended_things_stay_ended():
    """An ended attempt, a closed generation and an ended lease have no way out."""
    assert not [pair for pair in ATTEMPT_TRANSITIONS if pair[0] is AttemptPhase.ENDED]
    assert not [pair for pair in GENERATION_TRANSITIONS if pair[0] is GenerationStage.CLOSED]
    assert {state for state, _ in LEASE_TRANSITIONS} == {LeaseState.GRANTED}


def test_a_probing_node_is_shown_never_stored():
    """Only a cool-down leads to probing, and nothing leaves it: the registry keeps the
    node offline, so its probe's outcome moves it from there (R-BUD-2)."""
    assert not [pair for pair in NODE_TRANSITIONS if pair[0] is NodeState.PROBING]
    assert [pair for pair, target in NODE_TRANSITIONS.items()
            if target is NodeState.PROBING] == [(NodeState.OFFLINE, NodeTrigger.COOL)]


def test_a_reply_that_queues_work_again_is_a_job_transition():
    """seed 000 "Submission": "Without the flag, a terminal duplicate is reported
    explicitly instead of silently rerunning": only accepted (an expired job) and
    retry_accepted move an existing job, and the job's own table allows each move."""
    moves = {(before, after) for (before, _), after in REPLY_TRANSITIONS.items()
             if before is not None and after != before}
    assert moves == {(JobState.EXPIRED, JobState.QUEUED), *(
        (state, JobState.QUEUED) for state in _RERUNNABLE)}
    allowed = {(state, target) for (state, _), target in TRANSITIONS.items()}
    assert moves <= allowed


@pytest.mark.parametrize(("enum", "values"), [
    (AttemptPhase, {"launching", "barrier", "running", "ended"}),
    (GenerationStage, {"open", "assessment", "closing", "closed"}),
    (LeaseState, {"granted", "consumed", "declined", "expired", "revoked"}),
    (NodeState, {"online", "suspect", "offline", "probing"}),
    (ReplyOutcome, {"accepted", "duplicate", "terminal_duplicate", "retry_accepted",
                    "rejected"}),
])
def test_values_are_the_strings_on_disk(enum, values):
    """The journal, snapshots, job files, replies and status.json keep their bytes."""
    assert {member.value for member in enum} == values
    for member in enum:
        assert member == member.value
        assert json.dumps({"x": member}) == json.dumps({"x": member.value})
        assert f"{member}" == str(member) == member.value  # reasons spell them as they are


# -- through the scheduler ---------------------------------------------------------


def _control(h: Harness, action: str, **fields) -> list:
    rid = f"{action}-{h.counter}"
    h.counter += 1
    return h.handle(ControlSeen(at=h.tick(), name=f"{rid}.json", digest=rid, request_id=rid,
                                control=ControlRequest(request_id=rid, action=action, **fields)))


def _busy_run() -> Harness:
    """A run with every machine in several states: attempts ended, running and at the
    barrier; a generation in assessment; leases consumed and granted; all five kinds of
    replies but retry_accepted."""
    h = Harness()
    _control(h, "generation_open", generation=1, cohort=("peer-a", "peer-b"))
    for peer in ("peer-a", "peer-b"):
        h.handle(LeaseGranted(at=h.tick(), generation=1, lease_id=f"g1-{peer}", peer=peer,
                              priority="frontier_followup", profiles=("cpu",),
                              expires_at=h.now + 600))
    done = h.submit("done", lease="g1-peer-a")["job_id"]
    running = h.submit("running")["job_id"]
    h.launch_all()
    h.go(done, "a1")
    h.exit(done, "a1", 0)
    h.go(running, "a1")
    barrier = h.submit("barrier")["job_id"]
    h.launch_all()
    h.spawn(barrier, "a1")
    assert h.submit("running")["outcome"] == "duplicate"
    assert h.submit("running", argv=("other",))["differs"] == ["argv"]  # shared, with why
    assert h.submit("running", argv=("third",), retry_terminal=True)["outcome"] == "rejected"
    _control(h, "generation_assess", generation=1)
    return h


def test_a_snapshot_restores_the_members_and_dumps_the_same_bytes():
    h = _busy_run()
    sched = h.sched
    phases = {a.phase for job in sched.jobs.values() for a in job.attempts}
    assert phases == {AttemptPhase.ENDED, AttemptPhase.RUNNING, AttemptPhase.BARRIER}
    assert {lease.state for lease in sched.generations[1].leases.values()} == {
        LeaseState.CONSUMED, LeaseState.GRANTED}
    data = render(sched, 42).data
    _, restored = load(data.splitlines(keepends=True))
    assert render(restored, 42).data == data
    assert restored.snapshot() == sched.snapshot()
    for job in restored.jobs.values():
        for attempt in job.attempts:
            assert type(attempt.phase) is AttemptPhase
    gen = restored.generations[1]
    assert gen.phase is GenerationStage.ASSESSMENT
    assert all(type(lease.state) is LeaseState for lease in gen.leases.values())
    assert {type(reply.outcome) for reply in restored.replies.values()} == {ReplyOutcome}
    assert {reply.outcome for reply in restored.replies.values()} == {
        ReplyOutcome.ACCEPTED, ReplyOutcome.DUPLICATE, ReplyOutcome.REJECTED}


def test_a_journaled_phase_is_the_plain_string_and_replays_as_the_member():
    event = GenerationPhase(at=1.0, generation=1, phase=GenerationStage.CLOSED, reason="drained")
    assert json.dumps(to_record(event)) == json.dumps(to_record(GenerationPhase(
        at=1.0, generation=1, phase="closed", reason="drained")))
    replayed = from_record(json.loads(json.dumps(to_record(event))))
    assert replayed == event and replayed.phase is GenerationStage.CLOSED
    with pytest.raises(ValueError, match=r"GenerationPhase.phase must be one of \('open', "):
        GenerationPhase(at=1.0, generation=1, phase="shut", reason="a damaged record")


def test_draining_a_generation_that_is_not_closing_raises_and_changes_nothing():
    """Before the tables, a stray "closed" phase event closed an open generation."""
    h = _busy_run()
    before = copy.deepcopy(h.sched.snapshot())
    version = h.sched.version
    for phase in ("closed", "open"):
        with pytest.raises(InvalidTransition) as info:
            h.core_only(GenerationPhase(at=h.tick(), generation=1, phase=phase,
                                           reason="stray"))
        assert "generation 1" in str(info.value)
    assert h.sched.version == version
    assert h.sched.snapshot() == before
    assert h.sched.generations[1].phase is GenerationStage.ASSESSMENT


def test_a_lease_ended_once_is_not_ended_again():
    """seed 000 "Mature Evidence And Idle Supply Feedback": "Unused offers terminate as
    declined, expired, or revoked"; a lease ends once, and a second end is a bug the
    table catches."""
    h = _busy_run()
    lease = h.sched.generations[1].leases["g1-peer-a"]
    assert lease.state is LeaseState.CONSUMED
    with pytest.raises(InvalidTransition) as info:
        lease_transition(lease.lease_id, lease.state, LeaseTrigger.REVOKE)
    assert "g1-peer-a" in str(info.value) and "consumed" in str(info.value)
