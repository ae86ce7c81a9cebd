"""Job control (R-CTL-1, R-CTL-5): cancel, hold, release, update, and dependencies.

A collaborator the ``Scheduler`` owns (``Scheduler.jobcontrol``), like the
submission and attempt desks: it reads and changes the scheduler's state only
through the narrow view it is given (``JobControlBoard``), under the scheduler's
rules: every change bumps ``version`` and is journaled by the daemon before its
effects are carried out. It keeps who waits for whom (``dependents``), rebuilt from
the jobs at a restore.
Every decision here follows from a journaled event (a control request, a request's
``after``, the end of a job others wait for), so replay makes it again.

A cancel of a queued job ends it at once. A running or suspended attempt is asked to
end (``CancelAttempt``: TERM to its whole group, SIGCONT first if suspended, KILL after
the grace); the decision is on the attempt (``Attempt.cancel``) before any signal, and
the attempt's end, whatever it is but exit 0, makes the job ``cancelled``. A start
carries out every cancel still under way again, since the last coordinator may have
journaled one and died before its signal.

Held jobs and jobs waiting for a dependency are queued but ``parked``: out of the
backlog that passes walk, each with the reason it waits. A dependency that can no
longer be met cancels the job that waits for it (Slurm's kill_invalid_depend), unless
the task's ``dependency_failure`` is ``hold``: then it waits until the dependency is
run again (``retry_terminal``) or the job is cancelled.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from .effects import CancelAttempt, Effect
from .events import AttemptObserved, ControlSeen
from . import tenancy
from .identity import job_id_for
from .request import ControlRequest, Request
from .states import ActionResult, AttemptOutcome, ControlOutcome, JobState, Trigger

if TYPE_CHECKING:
    from .attempts import AttemptDesk
    from .effects import WriteJob
    from .model import Attempt, Job
    from .policy import Policy
    from .shelf import Shelf
    from .supply import Generation

Outcome = tuple[ActionResult, str, list[Effect]]  # (result, why, effects) of one job's action


class JobControlBoard(Protocol):
    """What the job-control desk reads and changes of the scheduler that owns it."""

    policy: Policy
    version: int
    jobs: Shelf[Job]
    coordinator_uid: int | None
    _by_state: dict[JobState, dict[str, Job | None]]  # a selection without names: live jobs
    _pending: dict[str, str]  # why a held or released job waits, for the control's reply
    attempts: AttemptDesk  # a cancelled attempt's end settles there

    def in_flight(self) -> list[Job]: ...
    def _transition(self, job: Job, trigger: Trigger) -> None: ...
    def _write_job(self, job: Job) -> WriteJob: ...
    def _requeue_in_place(self, job: Job, change: Callable[[], None]) -> None: ...
    def _not_theirs(self, job: Job, uid: int | None) -> str | None: ...
    def _control_reply(self, ev: ControlSeen, outcome: ControlOutcome, reason: str,
                       gen: Generation | None, **more: Any) -> list[Effect]: ...


class JobControlDesk:
    """Job control and dependencies for the scheduler whose ``board`` it is given."""

    def __init__(self, board: JobControlBoard) -> None:
        self.board = board
        self.dependents: dict[str, list[str]] = {}  # job id -> jobs that wait for it
        self.settled: dict[str, None] = {}  # scratch: jobs with dependents that changed state

    def changed_state(self, job_id: str) -> None:
        """A job changed state (``Scheduler._transition``): the jobs that wait for it are
        settled once the event is handled (``settle_dependents``)."""
        if job_id in self.dependents:
            self.settled[job_id] = None  # its dependents may start, wait or be cancelled

    # -- operator and peer requests ------------------------------------------------

    def on_control(self, ev: ControlSeen, operator: bool) -> list[Effect]:
        """A job action. A peer that is not an operator acts on its own jobs only (R-SEC-3):
        naming another's job rejects the request; a selection without names is narrowed
        to its own."""
        board = self.board
        control = ev.control
        tags_of = control.owner if control.owner is not None else ev.uid
        chosen, unknown = self._select(control, tags_of, narrow=not operator or
                                       control.owner is not None)
        if unknown:
            return board._control_reply(ev, ControlOutcome.REJECTED, (
                f"jobs: {unknown[0]!r} names no job of this run (expected a job id or a "
                f"tag{self._whose_tags(tags_of)}); nothing was changed"), None)
        found = [self.find_job(ref, tags_of) for ref in control.jobs]
        if not operator and (others := [problem for job in found
                                        if (problem := board._not_theirs(job, ev.uid))]):
            return board._control_reply(ev, ControlOutcome.REJECTED, (
                f"jobs: {others[0]}; only operators (root, the coordinator's uid, the "
                "task's operators) act on others' jobs; nothing was changed"), None)
        act = {"cancel": self._cancel, "hold": self._hold_job, "release": self._release_job,
               "update": self._update_job}[control.action]
        by = self.asker(control.by, ev.uid)
        effects: list[Effect] = []
        results = []
        for job in chosen:
            result, why, made = act(job, control, by, ev.at)
            effects += made
            results.append({"job_id": job.job_id, "tag": job.request.tag, "result": result,
                            "state": job.state.value, "reason": why})
        changed = sum(r["result"] != ActionResult.UNCHANGED for r in results)
        summary = (f"{control.action}: {changed} of {len(results)} selected job(s) changed"
                   if results else f"{control.action}: no job matches the selection")
        return effects + board._control_reply(ev, ControlOutcome.OK, summary, None, jobs=results)

    def find_job(self, ref: str, uid: int | None = None) -> Job | None:
        """The job a reference names: a job id, else a tag of ``uid``'s (``tagged``)."""
        return self.board.jobs.get(ref) or self.tagged(ref, uid)

    def tagged(self, tag: str, uid: int | None) -> Job | None:
        """``uid``'s job of ``tag`` (core/tenancy.py): in its namespace, or, accepted before
        each uid had its own, under the tag alone and its own."""
        board = self.board
        namespace = tenancy.namespace(uid, board.coordinator_uid)
        job = board.jobs.get(job_id_for(tag, namespace))
        if job is None and namespace is not None:
            older = board.jobs.get(job_id_for(tag))
            if older is not None and older.request.tag == tag and \
                    not board._not_theirs(older, uid):
                return older
        return job

    def _whose_tags(self, uid: int | None) -> str:
        """", uid N's" where tags were looked up in another uid's namespace than ours."""
        theirs = tenancy.namespace(uid, self.board.coordinator_uid)
        return "" if theirs is None else f" of uid {theirs}"

    def _select(self, control: ControlRequest, uid: int | None, narrow: bool
                ) -> tuple[list[Job], list[str]]:
        """(the jobs the control selects, in submit order; the references that name none).
        Names are job ids or ``uid``'s tags; named jobs are narrowed by ``peer`` and
        ``states``; without names, ``peer`` and ``states`` choose among the jobs not yet
        ended, of ``uid`` only when ``narrow`` (a peer's, or an operator naming a uid)."""
        board = self.board
        if control.jobs:
            found = {ref: self.find_job(ref, uid) for ref in control.jobs}
            unknown = [ref for ref, job in found.items() if job is None]
            candidates = list({job.job_id: job for job in found.values() if job}.values())
        else:
            unknown, candidates = [], [j for state, jobs in board._by_state.items()
                                       if not state.terminal for j in jobs.values()
                                       if not narrow or not board._not_theirs(j, uid)]
        states = set(control.states)
        chosen = [job for job in candidates
                  if (control.peer is None or job.request.peer == control.peer)
                  and (not states or job.state.value in states
                       or ("held" in states and job.held is not None))]
        return sorted(chosen, key=lambda job: job.order), unknown

    def asker(self, label: str | None, uid: int | None) -> dict[str, Any]:
        """Who asked for a job action, as the job's record keeps it: the request's ``by``
        label (default "operator"), with the uid that owns its file where that is not
        ours, and that uid itself: a label never replaces it (R-SEC-5)."""
        asker: dict[str, Any] = {"by": tenancy.peer_label(uid, label or "operator",
                                                          self.board.coordinator_uid)}
        if uid is not None:
            asker["uid"] = uid
        return asker

    def _cancel(self, job: Job, control: ControlRequest, by: dict[str, Any],
                at: float) -> Outcome:
        board = self.board
        if job.state.terminal:
            return ActionResult.UNCHANGED, f"already {job.state.value}", []
        why = _cancelled_by(by["by"], control.reason)
        if job.state is JobState.QUEUED:
            job.held = None
            board._transition(job, Trigger.CANCEL)
            job.reason = why
            board.version += 1
            return ActionResult.CANCELLED, why, [board._write_job(job)]
        attempt = job.current
        if attempt.cancel is not None:
            return ActionResult.UNCHANGED, job.reason, []
        grace = board.policy.cancel_grace_seconds if control.grace is None else control.grace
        attempt.cancel = {"at": at, **by, "reason": control.reason, "grace": grace}
        job.reason = f"{why}: attempt {attempt.attempt_id} is being terminated " \
                     f"(TERM, then KILL after {grace:g}s)"
        board.version += 1
        return ActionResult.CANCELLING, job.reason, [board._write_job(job), _terminate(job)]

    def _hold_job(self, job: Job, control: ControlRequest, by: dict[str, Any],
                  at: float) -> Outcome:
        board = self.board
        if job.state is not JobState.QUEUED:
            return ActionResult.UNCHANGED, f"{job.state.value}: only queued jobs can be held", []
        if job.held is not None:
            return ActionResult.UNCHANGED, f"already held by {job.held['by']}", []
        board._requeue_in_place(job, lambda: setattr(job, "held", {**by, "at": at}))
        board.version += 1
        return ActionResult.HELD, board._pending[job.job_id], [board._write_job(job)]

    def _release_job(self, job: Job, control: ControlRequest, by: dict[str, Any],
                     at: float) -> Outcome:
        board = self.board
        if job.state is not JobState.QUEUED or job.held is None:
            return ActionResult.UNCHANGED, f"{job.state.value} and not held", []
        board._requeue_in_place(job, lambda: setattr(job, "held", None))
        board.version += 1
        return (ActionResult.RELEASED, board._pending.get(job.job_id, "queued"),
                [board._write_job(job)])

    def _update_job(self, job: Job, control: ControlRequest, by: dict[str, Any],
                    at: float) -> Outcome:
        board = self.board
        if job.state is not JobState.QUEUED:
            return ActionResult.UNCHANGED, f"{job.state.value}: only queued jobs can be updated", []
        before = job.priority
        if before == control.priority:
            return ActionResult.UNCHANGED, f"priority is {before} already", []
        board._requeue_in_place(job, lambda: setattr(job, "priority", control.priority))
        board.version += 1
        return ActionResult.UPDATED, f"priority {before} -> {job.priority}", [board._write_job(job)]

    # -- running attempts ------------------------------------------------------------

    def end_cancelled(self, job: Job, attempt: Attempt,
                      ev: AttemptObserved) -> list[Effect]:
        """A cancelled attempt ended (any end but exit 0, which completes the job)."""
        attempt.exit_code, attempt.signal, attempt.failure = ev.exit_code, ev.signal, ev.failure
        attempt.outcome = AttemptOutcome.CANCELLED
        why = _cancelled_by(attempt.cancel["by"], attempt.cancel["reason"])
        if ev.exited:
            why += f" (exit code {ev.exit_code}" + (f", signal {ev.signal})" if ev.signal
                                                    else ")")
        return self.board.attempts.settle(job, attempt, ev.ended_at or ev.at, Trigger.CANCEL, why)

    def reassert_cancels(self) -> list[Effect]:
        """At a start, every cancel under way is carried out again (signals are
        idempotent; the last coordinator may have died between its record and its TERM)."""
        return [_terminate(job) for job in self.board.in_flight() if job.current.cancel is not None]

    # -- dependencies ------------------------------------------------------------------

    def resolve_after(self, request: Request, job_id: str, uid: int | None
                      ) -> tuple[tuple[tuple[str, str], ...], str | None]:
        """The request's ``after`` as (job id, kind) pairs, or the problem that rejects it:
        an unknown job, the job itself, a cycle, or (when an unmeetable dependency cancels)
        one that can no longer be met. Tags are ``uid``'s, the requester's."""
        board = self.board
        resolved = []
        for ref, when in request.after:
            dep = self.find_job(ref, uid)
            if dep is None:
                return (), f"{ref!r} names no job of this run (expected a job id or a tag)"
            if dep.job_id == job_id:
                return (), f"{ref!r} is this job itself"
            if _met(dep, when) is False and board.policy.dependency_failure == "cancel":
                return (), (f"job {dep.job_id} ended {dep.state.value}, so 'after' {when} "
                            "can never be met")
            resolved.append((dep.job_id, when))
        if job_id in board.jobs and (path := self._cycle(job_id, resolved)):
            return (), "dependency cycle: " + " -> ".join([job_id, *path])
        return tuple(dict.fromkeys(resolved)), None

    def _cycle(self, job_id: str, after: list[tuple[str, str]]) -> list[str]:
        """A path of dependencies from ``after`` back to ``job_id``, or []."""
        stack, seen = [(dep, [dep]) for dep, _ in after], set()
        while stack:
            current, path = stack.pop()
            if current == job_id:
                return path
            if current not in seen:
                seen.add(current)
                stack += [(dep, [*path, dep]) for dep, _ in self.board.jobs[current].after]
        return []

    def link_dependencies(self, job: Job) -> None:
        for dep_id, _ in job.after:
            waiting = self.dependents.setdefault(dep_id, [])
            if job.job_id not in waiting:
                waiting.append(job.job_id)

    def parked_reason(self, job: Job) -> str | None:
        """Why no pass may start this queued job (held, or a dependency), or None."""
        if job.held is not None:
            return f"held by {job.held['by']} since {utc_iso(job.held['at'])}"
        for dep_id, when in job.after:
            dep = self.board.jobs[dep_id]
            met = _met(dep, when)
            if met is None:
                return f"dependency: waiting for {dep_id} ({dep.state.value})"
            if not met:
                return (f"dependency {dep_id} ended {dep.state.value}; kept (the task's "
                        "dependency_failure is hold) until it runs again")
        return None

    def settle_dependents(self, at: float) -> list[Effect]:
        """Jobs that others wait for changed state: a waiting job may now start, waits
        with a new reason, or (a dependency that can no longer be met) is cancelled,
        which may in turn settle the jobs waiting for it."""
        board = self.board
        effects: list[Effect] = []
        while self.settled:
            dep_id = next(iter(self.settled))
            del self.settled[dep_id]
            for job in map(board.jobs.__getitem__, self.dependents.get(dep_id, ())):
                if job.state is not JobState.QUEUED or \
                        all(dep != dep_id for dep, _ in job.after):
                    continue  # ended or running, or retried since with other dependencies
                broken = next(((d, board.jobs[d].state) for d, when in job.after
                               if _met(board.jobs[d], when) is False), None)
                if broken is not None and board.policy.dependency_failure == "cancel":
                    job.held = None
                    board._transition(job, Trigger.CANCEL)
                    job.reason = f"dependency {broken[0]} ended {broken[1].value}"
                    board.version += 1
                else:
                    board._requeue_in_place(job, lambda: None)
                effects.append(board._write_job(job))
        return effects


def _met(dep: Job, when: str) -> bool | None:
    """Whether a dependency of kind ``when`` on ``dep`` is met (True), can no longer be
    met unless ``dep`` runs again (False), or not yet known (None: ``dep`` has not ended)."""
    if not dep.state.terminal:
        return None
    completed = dep.state is JobState.COMPLETED
    return {"ok": completed, "notok": not completed, "any": True}[when]


def _terminate(job: Job) -> CancelAttempt:
    attempt = job.current
    return CancelAttempt(job_id=job.job_id, attempt_id=attempt.attempt_id,
                         grace=attempt.cancel["grace"])


def _cancelled_by(by: str, reason: str | None) -> str:
    return f"cancelled by {by}" + (f": {reason}" if reason else "")


def utc_iso(at: float) -> str:
    """A time as reasons show it: UTC, to the second (``2026-12-01T17:20:05Z``)."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
