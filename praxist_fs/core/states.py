"""Every state machine the core keeps, each with its one table of allowed transitions.

Rule 1: every change of a job's state goes through ``transition()``, of an
attempt's phase through ``attempt_transition()``, of a generation's phase through
``generation_transition()``, of a lease's state through ``lease_transition()``, of a
cluster node's health through ``node_transition()``, and every reply's outcome is
checked by ``reply_transition()``. A pair missing from
its table is a bug in the scheduler and raises ``InvalidTransition`` naming the
thing, the state and the trigger, before anything changed.
Rule 2: states are plain strings on disk (``str`` enums: ``json.dumps`` writes
the value). The newer machines are ``StrEnum``s, whose ``str()`` and f-strings give
the value too, since their states are spelled into reasons and replies as they are.
So are the outcomes a machine ends or answers in (an attempt's outcome, a control
reply's, a lease's use, the budget's verdict) and a queue's preemption mode: each is
one of a closed set of words that files carry, named once here.
Rule 3: docs/PROTOCOL.md draws every table here (``TABLES``, by
``tools/state_diagram.py``), and a test fails when a drawing and its table differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, StrEnum

from ..errors import InvalidTransition
from .job_state import JobState  # here too: every machine's states are named in this module

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    _S = TypeVar("_S")


class Trigger(str, Enum):
    LAUNCH = "launch"                # admitted: an attempt starts
    EXIT_OK = "exit_ok"              # the attempt exited 0
    EXIT_RETRY = "exit_retry"        # exit 75 with infrastructure retries left
    EXIT_FAIL = "exit_fail"          # any other exit, or 75 with none left
    RELEASE = "release"              # the attempt never started its command
    LOST = "lost"                    # the attempt vanished without an exit record
    RETRY_TERMINAL = "retry_terminal"  # a --retry-terminal request reopens the job
    FREEZE = "freeze"                # its generation closed before it started
    CANCEL = "cancel"                # the run was stopped
    SUSPEND = "suspend"              # preempted by suspension: its group is stopped (R-POL-3)
    RESUME = "resume"                # a suspended attempt continues
    PREEMPT = "preempt"              # an attempt preempted for requeue ended: queued again
    EXPIRE = "expire"                # its admission timeout passed while it was queued
    RESUBMIT = "resubmit"            # a request for an expired job's tag: accepted as new


TRANSITIONS: dict[tuple[JobState, Trigger], JobState] = {
    (JobState.QUEUED, Trigger.LAUNCH): JobState.RUNNING,
    (JobState.QUEUED, Trigger.FREEZE): JobState.REJECTED,
    (JobState.QUEUED, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.RUNNING, Trigger.EXIT_OK): JobState.COMPLETED,
    (JobState.RUNNING, Trigger.EXIT_RETRY): JobState.QUEUED,
    (JobState.RUNNING, Trigger.EXIT_FAIL): JobState.FAILED,
    (JobState.RUNNING, Trigger.RELEASE): JobState.QUEUED,
    (JobState.RUNNING, Trigger.LOST): JobState.DRAINED_UNKNOWN,
    (JobState.RUNNING, Trigger.SUSPEND): JobState.SUSPENDED,
    (JobState.RUNNING, Trigger.PREEMPT): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.RESUME): JobState.RUNNING,
    # a suspended attempt is still an attempt: it may end (killed, lost, the run stopped)
    (JobState.SUSPENDED, Trigger.CANCEL): JobState.CANCELLED,
    (JobState.SUSPENDED, Trigger.EXIT_OK): JobState.COMPLETED,
    (JobState.SUSPENDED, Trigger.EXIT_RETRY): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.EXIT_FAIL): JobState.FAILED,
    (JobState.SUSPENDED, Trigger.RELEASE): JobState.QUEUED,
    (JobState.SUSPENDED, Trigger.LOST): JobState.DRAINED_UNKNOWN,
    (JobState.FAILED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.REJECTED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.CANCELLED, Trigger.RETRY_TERMINAL): JobState.QUEUED,
    (JobState.QUEUED, Trigger.EXPIRE): JobState.EXPIRED,
    (JobState.EXPIRED, Trigger.RESUBMIT): JobState.QUEUED,
}


def transition(job_id: str, state: JobState, trigger: Trigger) -> JobState:
    """The state after ``trigger``, or ``InvalidTransition`` if the table has no entry."""
    return _step(TRANSITIONS, "job", job_id, state, trigger)


class AttemptPhase(StrEnum):
    """launching -> barrier -> running -> ended; status.json shows it (``active[].phase``)."""

    LAUNCHING = "launching"  # intent journaled, shim not yet seen
    BARRIER = "barrier"      # shim pid recorded, waiting at the barrier for GO
    RUNNING = "running"      # GO journaled (``go``): the shim starts the command at once
    ENDED = "ended"


class AttemptOutcome(StrEnum):
    """How an attempt ended (``Attempt.outcome``; job files and status show it)."""

    COMPLETED = "completed"      # its command exited 0
    FAILED = "failed"            # any other exit, or 75 / an infrastructure failure, no retry left
    INFRA_RETRY = "infra_retry"  # exit 75 or an infrastructure failure, with a retry left
    RELEASED = "released"        # it never started its command: the job is queued again
    LOST = "lost"                # it vanished without an exit record, or its shim died
    PREEMPTED = "preempted"      # preempted for requeue (R-POL-3): the job is queued again
    CANCELLED = "cancelled"      # the job was cancelled, or the run stopped


class AttemptTrigger(StrEnum):
    SHIM_SEEN = "shim_seen"  # its shim was seen (its pid recorded): it waits at the barrier
    GO = "go"                # GO decided and journaled
    END = "end"              # the attempt settled, whatever its outcome


ATTEMPT_TRANSITIONS: dict[tuple[AttemptPhase, AttemptTrigger], AttemptPhase] = {
    (AttemptPhase.LAUNCHING, AttemptTrigger.SHIM_SEEN): AttemptPhase.BARRIER,
    (AttemptPhase.BARRIER, AttemptTrigger.GO): AttemptPhase.RUNNING,
    # an attempt may end in any phase: its shim may die before it was seen, or at the barrier
    (AttemptPhase.LAUNCHING, AttemptTrigger.END): AttemptPhase.ENDED,
    (AttemptPhase.BARRIER, AttemptTrigger.END): AttemptPhase.ENDED,
    (AttemptPhase.RUNNING, AttemptTrigger.END): AttemptPhase.ENDED,
}


def attempt_transition(attempt: str, phase: AttemptPhase, trigger: AttemptTrigger
                       ) -> AttemptPhase:
    """``attempt`` names it in the error: "<job id>/<attempt id>"."""
    return _step(ATTEMPT_TRANSITIONS, "attempt", attempt, phase, trigger)


class GenerationStage(StrEnum):
    """A generation's ``phase`` (R-SUP-1..8): only open and assessment accept work."""

    OPEN = "open"
    ASSESSMENT = "assessment"  # only deadline-safe mature top-ups start
    CLOSING = "closing"        # its queue frozen, its leases revoked: its running work drains
    CLOSED = "closed"          # drained (or its grace is over): later results are quarantined


class GenerationTrigger(StrEnum):
    ASSESS = "assess"  # an operator's assess, or a close waiting for the mature quorum
    CLOSE = "close"    # an operator's close, or an assessment that is over
    DRAIN = "drain"    # its running work drained, or the drain grace is over


GENERATION_TRANSITIONS: dict[tuple[GenerationStage, GenerationTrigger], GenerationStage] = {
    (GenerationStage.OPEN, GenerationTrigger.ASSESS): GenerationStage.ASSESSMENT,
    (GenerationStage.ASSESSMENT, GenerationTrigger.ASSESS): GenerationStage.ASSESSMENT,
    (GenerationStage.OPEN, GenerationTrigger.CLOSE): GenerationStage.CLOSING,
    (GenerationStage.ASSESSMENT, GenerationTrigger.CLOSE): GenerationStage.CLOSING,
    (GenerationStage.CLOSING, GenerationTrigger.DRAIN): GenerationStage.CLOSED,
}


def generation_transition(number: int, phase: GenerationStage, trigger: GenerationTrigger
                          ) -> GenerationStage:
    return _step(GENERATION_TRANSITIONS, "generation", str(number), phase, trigger)


class LeaseState(StrEnum):
    """A supply lease (R-SUP-3..6): granted, then ended one way, for good."""

    GRANTED = "granted"
    CONSUMED = "consumed"
    DECLINED = "declined"
    EXPIRED = "expired"
    REVOKED = "revoked"


class LeaseTrigger(StrEnum):
    CONSUME = "consume"  # a submission of its peer carried it and queued work
    DECLINE = "decline"  # its peer declined it
    EXPIRE = "expire"    # its submission window passed unused
    REVOKE = "revoke"    # its generation closed, its claim's capacity was taken, a restart, a stop


class LeaseUse(StrEnum):
    """What a submission carrying a lease did to it (R-SUP-4): the ``outcome`` of its
    reply's ``lease``; the ignored ones are counted in the generation's stats."""

    CONSUMED = "consumed"                    # it queued work: the lease is used up
    DUPLICATE_IGNORED = "duplicate_ignored"  # a duplicate queues nothing: the lease stands
    STALE_SUBMISSION = "stale_submission"    # the lease had expired
    REUSE_IGNORED = "reuse_ignored"          # it was consumed already
    DECLINED_IGNORED = "declined_ignored"    # its peer had declined it
    REVOKED_IGNORED = "revoked_ignored"      # it had been revoked
    UNKNOWN = "unknown"                      # no lease of that id is the peer's


LEASE_TRANSITIONS: dict[tuple[LeaseState, LeaseTrigger], LeaseState] = {
    (LeaseState.GRANTED, LeaseTrigger.CONSUME): LeaseState.CONSUMED,
    (LeaseState.GRANTED, LeaseTrigger.DECLINE): LeaseState.DECLINED,
    (LeaseState.GRANTED, LeaseTrigger.EXPIRE): LeaseState.EXPIRED,
    (LeaseState.GRANTED, LeaseTrigger.REVOKE): LeaseState.REVOKED,
}


def lease_transition(lease_id: str, state: LeaseState, trigger: LeaseTrigger) -> LeaseState:
    return _step(LEASE_TRANSITIONS, "lease", lease_id, state, trigger)


class NodeState(StrEnum):
    """A cluster node's health (R-BUD-2, core/nodes.py): whether new attempts go there.
    ``probing`` is shown, never stored: an offline node whose cool-down is over."""

    ONLINE = "online"    # takes work
    SUSPECT = "suspect"  # failing, but the last node of a partition: still takes work
    OFFLINE = "offline"  # excluded from new attempts until a success
    PROBING = "probing"  # offline with its cool-down over: its one probe may go there


class NodeTrigger(StrEnum):
    SUCCEED = "succeed"      # an attempt there ran its command and ended (its probe, say)
    FAIL = "fail"            # failing: out of rotation (again: its cool-down restarts)
    FAIL_LAST = "fail_last"  # failing, but the last node of a partition that takes work
    RELIEVE = "relieve"      # another node of its partitions takes work again
    COOL = "cool"            # its cool-down is over (shown only: its stored state stands)


NODE_TRANSITIONS: dict[tuple[NodeState, NodeTrigger], NodeState] = {
    (NodeState.SUSPECT, NodeTrigger.SUCCEED): NodeState.ONLINE,
    (NodeState.OFFLINE, NodeTrigger.SUCCEED): NodeState.ONLINE,
    # the second failure in a row, or a new node's first probe failed
    (NodeState.ONLINE, NodeTrigger.FAIL): NodeState.OFFLINE,
    (NodeState.SUSPECT, NodeTrigger.FAIL): NodeState.OFFLINE,
    (NodeState.OFFLINE, NodeTrigger.FAIL): NodeState.OFFLINE,
    (NodeState.ONLINE, NodeTrigger.FAIL_LAST): NodeState.SUSPECT,
    (NodeState.OFFLINE, NodeTrigger.FAIL_LAST): NodeState.SUSPECT,
    (NodeState.SUSPECT, NodeTrigger.RELIEVE): NodeState.OFFLINE,
    (NodeState.OFFLINE, NodeTrigger.COOL): NodeState.PROBING,
}


def node_transition(node: str, state: NodeState, trigger: NodeTrigger) -> NodeState:
    return _step(NODE_TRANSITIONS, "node", node, state, trigger)


class Verdict(StrEnum):
    """Where the run's spend stands against its budget (R-BUD-1, seed 003), in rising
    severity; advisory."""

    UNDER = "under"
    AT = "at"      # at or past the task's ``at_fraction`` of a limit
    OVER = "over"  # past a limit


class PreemptMode(StrEnum):
    """How a queue's jobs preempt running work (R-POL-3, a queue's ``preempt``)."""

    SUSPEND = "suspend"  # its process group is stopped until its room is there again
    REQUEUE = "requeue"  # it is terminated, and its job queued again without using a retry


class ReplyOutcome(StrEnum):
    """What a peer's request did (R-SUB-2, R-SUB-3): the reply's ``outcome``."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    TERMINAL_DUPLICATE = "terminal_duplicate"
    RETRY_ACCEPTED = "retry_accepted"
    REJECTED = "rejected"


class ControlOutcome(StrEnum):
    """What a control request did (R-CTL-1): its reply's ``outcome``."""

    OK = "ok"
    REJECTED = "rejected"  # nothing was changed; the reply's ``reason`` says why


class ActionResult(StrEnum):
    """What a job action did to one selected job (R-CTL-1, R-CTL-5): ``jobs[].result`` of
    its control reply."""

    UNCHANGED = "unchanged"    # nothing to do: the job is not in a state the action changes
    CANCELLED = "cancelled"    # a queued job, ended at once
    CANCELLING = "cancelling"  # a running or suspended attempt, asked to end
    HELD = "held"
    RELEASED = "released"
    UPDATED = "updated"


# a request for a job in these states is answered as a duplicate (or refused if it differs)
REPLAYABLE_STATES = (JobState.QUEUED, JobState.RUNNING, JobState.SUSPENDED,
                     JobState.COMPLETED, JobState.DRAINED_UNKNOWN)
TERMINAL_DUPLICATES = (JobState.FAILED, JobState.REJECTED, JobState.CANCELLED)
# A reply's outcome is a transition of the state of the job its tag names (None: no job,
# or a reply that names none), from before the request to the reply's ``state``:
# docs/PROTOCOL.md section 4's table of outcomes
REPLY_TRANSITIONS: dict[tuple[JobState | None, ReplyOutcome], JobState | None] = {
    (None, ReplyOutcome.ACCEPTED): JobState.QUEUED,
    (JobState.EXPIRED, ReplyOutcome.ACCEPTED): JobState.QUEUED,
    **{(state, ReplyOutcome.DUPLICATE): state for state in REPLAYABLE_STATES},
    **{(state, ReplyOutcome.TERMINAL_DUPLICATE): state for state in TERMINAL_DUPLICATES},
    **{(state, ReplyOutcome.RETRY_ACCEPTED): JobState.QUEUED for state in TERMINAL_DUPLICATES},
    **{(state, ReplyOutcome.REJECTED): state for state in (None, *JobState)},
}


def reply_transition(request_id: str, state: JobState | None, outcome: ReplyOutcome
                     ) -> JobState | None:
    """The state the job is in once answered ``outcome`` (``state`` before the request)."""
    return _step(REPLY_TRANSITIONS, "request", request_id, state, outcome)


# Every table above by the name its drawing carries in docs/PROTOCOL.md
# (tools/state_diagram.py draws them; a test checks each drawing against its table).
TABLES: dict[str, Mapping[tuple[Any, Enum], Any]] = {
    "job": TRANSITIONS,
    "attempt": ATTEMPT_TRANSITIONS,
    "generation": GENERATION_TRANSITIONS,
    "lease": LEASE_TRANSITIONS,
    "node": NODE_TRANSITIONS,
    "reply": REPLY_TRANSITIONS,
}


def _step(table: Mapping[tuple[_S, Enum], _S], what: str, name: str, state: _S,
          trigger: Enum) -> _S:
    try:
        return table[(state, trigger)]
    except KeyError:
        shown = "none" if state is None else state.value
        raise InvalidTransition(
            f"can't handle {trigger.value} in state {shown} for {what} {name}") from None
