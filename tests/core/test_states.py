"""The transition table, state directories, and h11's "illegal event changes nothing"."""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from praxist_fs.core.events import AttemptLaunched, AttemptObserved
from praxist_fs.core.states import TRANSITIONS, JobState, Trigger, transition
from praxist_fs.errors import InvalidTransition

from .helpers import Harness, documented_table, shim

# docs/PROTOCOL.md's drawing: the copy a reader sees, which the table must equal
EXPECTED_TABLE = documented_table("job")

ALL_PAIRS = list(itertools.product(JobState, Trigger))
UNLISTED = [pair for pair in ALL_PAIRS if pair not in EXPECTED_TABLE]


def test_table_is_exactly_the_documented_one():
    assert dict(TRANSITIONS) == EXPECTED_TABLE


@pytest.mark.parametrize(("state", "trigger"), sorted(EXPECTED_TABLE, key=str))
def test_listed_pair_gives_its_target(state, trigger):
    assert transition("job-1", state, trigger) is EXPECTED_TABLE[(state, trigger)]


@pytest.mark.parametrize(("state", "trigger"), UNLISTED, ids=[f"{s.value}-{t.value}" for s, t in UNLISTED])
def test_unlisted_pair_raises_naming_job_state_and_trigger(state, trigger):
    with pytest.raises(InvalidTransition) as info:
        transition("job-xyz-42", state, trigger)
    message = str(info.value)
    assert "job-xyz-42" in message
    assert state.value in message
    assert trigger.value in message


def test_terminal_states_have_no_way_out_but_a_new_request():
    """retry_terminal reopens a job that ran; an expired one never ran, so a plain
    submission reopens it (seed 000: "the same scientific request may be submitted
    normally afterwards")."""
    for state in JobState:
        if state.terminal:
            exits = {t for (s, t) in TRANSITIONS if s is state}
            assert exits <= ({Trigger.RESUBMIT} if state is JobState.EXPIRED
                             else {Trigger.RETRY_TERMINAL}), state


@pytest.mark.parametrize(("state", "directory"), [
    (JobState.QUEUED, "queued"),
    (JobState.SUSPENDED, "queued"),
    (JobState.RUNNING, "running"),
    (JobState.COMPLETED, "done"),
    (JobState.FAILED, "done"),
    (JobState.REJECTED, "done"),
    (JobState.CANCELLED, "done"),
    (JobState.DRAINED_UNKNOWN, "done"),
    (JobState.EXPIRED, "done"),
])
def test_directory_of_each_state(state, directory):
    assert state.directory == directory
    assert state.terminal is (directory == "done")


def test_every_state_is_covered_by_the_directory_table():
    # R-FS-6 names these eight states; R-SUB-4's admission timeout adds expired
    assert {s.value for s in JobState} == {
        "queued", "running", "suspended", "completed", "failed", "rejected",
        "cancelled", "drained_unknown", "expired"}


@pytest.mark.parametrize("state", list(JobState))
def test_states_serialize_as_plain_strings(state):
    assert json.dumps(state) == json.dumps(state.value)
    assert json.loads(json.dumps({"state": state})) == {"state": state.value}
    assert JobState(json.loads(json.dumps(state))) is state


def test_queued_serializes_exactly():
    assert json.dumps(JobState.QUEUED) == '"queued"'
    assert json.dumps(Trigger.LAUNCH) == '"launch"'


# -- through the scheduler: an illegal event changes nothing ------------------------


def _completed_job() -> tuple[Harness, str]:
    h = Harness()
    job_id = h.submit("exp-done")["job_id"]
    h.launch_all()
    h.go(job_id, "a1")
    h.exit(job_id, "a1", 0)
    assert h.job(job_id)["state"] == "completed"
    return h, job_id


def _queued_job() -> tuple[Harness, str]:
    h = Harness()
    return h, h.submit("exp-queued")["job_id"]


def _running_job() -> tuple[Harness, str]:
    h = Harness()
    job_id = h.submit("exp-running")["job_id"]
    h.launch_all()
    return h, job_id


ILLEGAL = {
    "launch a completed job": (_completed_job, lambda j, at: AttemptLaunched(
        at=at, job_id=j, attempt_id="a2")),
    "launch a completed job again as a1": (_completed_job, lambda j, at: AttemptLaunched(
        at=at, job_id=j, attempt_id="a1")),
    "launch with a skipped attempt id": (_queued_job, lambda j, at: AttemptLaunched(
        at=at, job_id=j, attempt_id="a2")),
    "launch with a garbage attempt id": (_queued_job, lambda j, at: AttemptLaunched(
        at=at, job_id=j, attempt_id="x")),
    "launch a running job": (_running_job, lambda j, at: AttemptLaunched(
        at=at, job_id=j, attempt_id="a2")),
    "launch an unknown job": (_queued_job, lambda j, at: AttemptLaunched(
        at=at, job_id="no-such-job-00000000", attempt_id="a1")),
}


@pytest.mark.parametrize("case", sorted(ILLEGAL))
def test_illegal_event_raises_and_changes_nothing(case):
    setup, make_event = ILLEGAL[case]
    h, job_id = setup()
    before = copy.deepcopy(h.sched.snapshot())
    version = h.sched.version
    with pytest.raises(InvalidTransition):
        h.core_only(make_event(job_id, h.tick()))
    assert h.sched.version == version
    assert h.sched.snapshot() == before
    # and the scheduler still works afterwards
    assert h.submit("exp-after")["outcome"] == "accepted"


def test_illegal_launch_names_the_job():
    h, job_id = _completed_job()
    with pytest.raises(InvalidTransition) as info:
        h.core_only(AttemptLaunched(at=h.tick(), job_id=job_id, attempt_id="a2"))
    assert job_id in str(info.value)
    assert "completed" in str(info.value)


def test_late_observation_of_a_settled_attempt_changes_nothing():
    h, job_id = _completed_job()
    before = copy.deepcopy(h.sched.snapshot())
    version = h.sched.version
    for event in (
        AttemptObserved(at=h.tick(), job_id=job_id, attempt_id="a1", alive=False, go=True),
        AttemptObserved(at=h.tick(), job_id=job_id, attempt_id="a1", alive=False,
                        exited=True, exit_code=3),
        AttemptObserved(at=h.tick(), job_id=job_id, attempt_id="a9", alive=True, handle=shim(5)),
    ):
        assert h.handle(event) == []  # nothing carried out: no file, no signal
    assert h.sched.version == version
    assert h.sched.snapshot() == before
