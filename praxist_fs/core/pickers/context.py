"""``Pass``: what one scheduling pass knows and has decided so far, the ``ctx`` every
picker's ``init`` gets.

It is built from journaled state and the current host sample only, so a pass is a
pure function of both and replay never needs to re-run one (launches are journaled).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any

from .. import tenancy
from ..backlog import RUNS, Backlog, Heads, RunKey, eta_step, heads_of
from ..model import Job
from ..observations import GpuSample, PressureSample
from ..placement import (
    Demand, DeviceLoad, Packing, by_uuid, envelopes_of, fitting, place, refit, releasing,
    unplaced, with_envelopes,
)
from ..policy import Policy
from ..queues import Project, Queue, window_hold
from .base import RANK, JobPicker
from .ledger import Usage, slot_usage
from .walk import Openings, Reservation

_WORK_CLASS = attrgetter("request.work_class")


def peer_of(job: Job) -> tuple[int | None, str]:
    """Whom a job counts against for ``max_concurrent_per_peer``: its name within its uid."""
    return tenancy.peer_key(job.uid, job.request.peer)


@dataclass(slots=True, kw_only=True)
class Pass:
    """One scheduling pass: its inputs, and what it has decided so far."""

    at: float
    policy: Policy
    target: int
    free: int
    loads: list[DeviceLoad] | None
    queued: list[Job]                 # rank order (``Job.rank``)
    running: list[Job]
    ledger: Usage
    ratio: float                      # calibrated wall time / eta_s (median)
    coordinator_uid: int | None = None  # whose peers reasons name without a uid
    assessing: bool = False           # a generation is in assessment (its holds apply)
    assessment_holds: dict[str, str] = field(default_factory=dict)  # job id -> why, this pass
    queue_ledger: Usage = field(default_factory=Usage)  # slot-seconds by queue (projects)
    queues: tuple[Queue, ...] = ()
    by_class: dict[str, Queue] = field(default_factory=dict)
    suspended: int = 0                   # suspended jobs: each may resume, taking a slot
    ruled: frozenset[str] = frozenset()  # work classes whose queue has a limit, reserve or window
    picker_of: dict[str, JobPicker] = field(default_factory=dict)  # work class -> picker
    waiting: Counter[str] = field(default_factory=Counter)     # queued, by queue
    running_in: Counter[str] = field(default_factory=Counter)  # running, by queue
    # running, by peer within its uid (R-SUB-5, R-SEC-5: ``peer_of``)
    running_of: Counter[tuple[int | None, str]] = field(default_factory=Counter)
    launched: list[tuple[Job, tuple[str, ...]]] = field(default_factory=list)
    reservation: Reservation | None = None
    unsatisfiable: dict[tuple[Any, ...], str] = field(default_factory=dict)  # R-POL-4
    verdicts: dict[str, str | None] = field(default_factory=dict)  # profile -> once slots are full
    slot_wait: tuple[int, str] = (-1, "")  # the slot's words for this many running (``_slot_wait``)
    # profile -> what its job needs to start once a slot is free (``PassDesk._could_start``)
    needs: dict[str, Demand | bool] = field(default_factory=dict)
    # preemption (R-POL-3, core/preemption.py): the reasons it may lift (a full house, a
    # failed allocation), the jobs preempted or resumed in this pass, and the attempts
    # being evicted for requeue by the job they make room for (found once per pass)
    liftable: set[str] = field(default_factory=set)
    taken: set[str] = field(default_factory=set)
    evicting: dict[str, list[Job]] | None = None
    classes: Counter[str] | None = None  # queued jobs by work class; counted here if not given
    openings: Openings | None = None     # None: walk every job (or the walk has ended early)
    # until preemption and resumption are done with (``PassDesk._may_open``): the queued
    # jobs by profile as the pass began, the queues that may preempt with jobs still to
    # visit, those with suspended jobs still to resume, and the jobs visited so far
    unopened: tuple[Counter[str], set[str], set[str], list[Job]] | None = None
    # the pass cannot run out of slots: no job's reason depends on whether it is read
    # before the last slot goes (``merge`` may pass over jobs ahead of their turn)
    slots_to_spare: bool = False
    # The host as the pass began (pressure, the GPU sample): what its rest reads however
    # late it runs, so that a new sample need not finish it first. ``resting``: the walk
    # went on as the rest (``PassDesk._pass``).
    pressure: PressureSample | None = None
    gpus: GpuSample | None = None
    resting: bool = False
    skipped: list[tuple[int, int, type[JobPicker], bool]] = field(default_factory=list)  # skim
    # ``merge``: (profile, picker, runs, where each was read up to, the profile's runs,
    # its ``apart`` and ``only``)
    dropped: list[tuple[str, type[JobPicker], dict[Hashable, list[Job]], dict[Hashable, int],
                        list[tuple[Any, Hashable]], Callable[[Job], bool] | None,
                        Callable[[Job], bool] | None]] = field(default_factory=list)
    # ``merge`` under a reservation: (a run, from, to, picker, the jobs yielded apart)
    passed: list[tuple[list[Job], int, int, type[JobPicker], Callable[[Job], bool] | None]] = \
        field(default_factory=list)
    mix: Counter[str] | None = None  # queued jobs by profile (``packing``); counted if not given
    backlog: Backlog | None = None  # the queue as it is kept; ``queued`` is as it was (``lend``)
    _packing: Packing | None = None
    _running_usage: dict[str, float] | None = None
    _closed: dict[str, str | None] = field(default_factory=dict)  # queue -> window_hold
    _fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] = field(default_factory=dict)
    _fitting_on: list[DeviceLoad] | None = None  # the loads ``_fitting`` counted
    # ``_fitting`` of the loads the pass starts with, kept from pass to pass while they
    # stay the same (``KeptLoads.fitting``); None: not kept
    kept_fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] | None = None
    _loads_at_start: list[DeviceLoad] | None = None
    _cursors: dict[tuple[str, type[JobPicker]], tuple[Iterator[Job], Job | None]] = \
        field(default_factory=dict)  # ``_wanted_after``: (the rest, the next unread job)
    # ``_wanted_after``: by (profile, picker), the rank last asked and the first job after
    # it that ends before the reservation, or None
    _shorts: dict[tuple[str, type[JobPicker]], tuple[int, Job | None]] = \
        field(default_factory=dict)

    def __post_init__(self) -> None:
        self.queues = self.policy.queue_set()
        self.by_class = self.policy.queue_of_class()
        # a reserve holds nothing back in a pass that cannot bring the free slots down to
        # it (each launch or resume takes one): a cluster's cap leaves thousands free
        least_free = self.free - len(self.queued) - self.suspended
        self.ruled = frozenset(c for c, q in self.by_class.items()
                               if q.max_running is not None or q.windows
                               or q.leave_slots and least_free <= q.leave_slots)
        self.slots_to_spare = least_free > 0
        if self.classes is None:
            self.classes = Counter(map(_WORK_CLASS, self.queued))
        for work_class, count in self.classes.items():
            self.waiting[self.by_class[work_class].name] += count
        for job in self.queued if self.assessment_holds else ():
            if job.job_id in self.assessment_holds:  # it cannot start: no slot is kept for it
                self.waiting[self.by_class[job.request.work_class].name] -= 1
        # counted by work class and by peer in C: a pass may follow dozens of running jobs
        for work_class, count in Counter(map(_WORK_CLASS, self.running)).items():
            self.running_in[self.by_class[work_class].name] += count
        self.running_of.update(map(peer_of, self.running))
        self._loads_at_start = self.loads

    def jobs(self, queues: list[Queue]) -> list[Job]:
        """The queued jobs of ``queues`` (each queue is in one project), in rank order;
        read-only."""
        classes = {c for q in queues for c in q.work_classes}.intersection(self.classes)
        if len(classes) == len(self.classes):
            return self.queued
        return [job for job in self.queued if job.request.work_class in classes] if classes else []

    def fitting(self, demand: Demand, avoid: tuple[str, ...] = ()) -> int:
        """How many devices of ``loads`` take one of ``demand``'s shares now
        (``placement.fitting``)."""
        return self._limits(demand, avoid)[""]

    def _limits(self, demand: Demand, avoid: tuple[str, ...]) -> Counter[str]:
        """``placement.fitting`` on ``loads``, counted once per demand shape until the
        loads change (``_refit``); on the loads the pass started with, once until they
        change between passes (``kept_fitting``)."""
        if self._fitting_on is not self.loads:
            self._fitting, self._fitting_on = {}, self.loads
        key = (demand.utilization_pct, demand.memory_mib, avoid)
        if key not in self._fitting and avoid:
            # the counts without them, less what the few devices avoided count there
            limits = Counter(self._limits(demand, ()))
            for load in self.loads:
                if load.device.uuid in avoid:
                    limits[load.fit(demand)[1]] -= 1
                    limits["reserved"] += 1
            self._fitting[key] = (demand, limits)
        elif key not in self._fitting:
            kept = self.kept_fitting  # without devices to avoid: a reservation's are its own
            if kept is None or self.loads is not self._loads_at_start:
                self._fitting[key] = (demand, fitting(demand, self.loads, avoid))
            else:
                if key not in kept:
                    kept[key] = (demand, fitting(demand, self.loads, avoid))
                self._fitting[key] = (demand, Counter(kept[key][1]))  # the pass's to change
        return self._fitting[key][1]

    def _refit(self, before: list[DeviceLoad]) -> None:
        """Carry ``fitting``'s counts from ``before`` to ``loads``: a launch changed only
        its own devices."""
        if self._fitting_on is not before:
            return
        refit(self._fitting, [(old, new) for old, new in zip(before, self.loads) if old is not new])
        self._fitting_on = self.loads

    def skim(self, jobs: list[Job], picker: type[JobPicker]) -> Iterator[Job]:
        """``jobs`` in rank order, for a picker of that order. When they are the whole
        queue and nothing in the pass varies by a job's place but launches (``openings``,
        no queue rules queued), each run of jobs whose demand is known to fail (R-POL-4:
        it failed earlier in the pass) is skipped, since they are held for that reason
        wherever they stand. The runs go to ``skipped``; ``skimmed`` gives them back."""
        return self._skimming(picker) if self.skims(jobs) else iter(jobs)

    def skims(self, jobs: list[Job]) -> bool:
        """Whether a picker of ``jobs`` may pass over the jobs known held (``skim``,
        ``merge``): they are the whole queue, and nothing in the pass varies by a job's
        place but launches (``openings``, no queue rules queued)."""
        return jobs is self.queued and self.openings is not None and \
            self.ruled.isdisjoint(self.classes)

    def skimmed(self) -> Iterator[tuple[Job, str]]:
        """The jobs ``skim`` skipped and ``merge`` dropped, each with the reason it is held
        for."""
        for start, stop, picker, reserved in self.skipped:
            for job in self.queued[start:stop]:
                yield job, self._known(job, picker, reserved)
        for profile, picker, runs, position, heap, apart, only in self.dropped:
            reason = self.unsatisfiable[(profile, picker, False)]
            for _, of in heap:  # the profile's runs, read up to ``position``
                for job in islice(runs[of], position.get(of, 0), None):
                    if only is not None and not only(job):
                        break
                    if apart is None or not apart(job):
                        yield job, reason
        for run, start, stop, picker, apart in self.passed:
            for job in islice(run, start, stop):
                if apart is None or not apart(job):
                    yield job, self._known(job, picker)

    def _known(self, job: Job, picker: type[JobPicker], reserved: bool = True) -> str:
        """Why ``job``, passed over as known held, waits: its demand's failure, as kept
        by the reservation when it was ``reserved`` (the reservation a job was passed
        under may not be the one asked now: its demand failed either way)."""
        avoid = reserved and self.reservation is not None and bool(self.reservation.avoid(job))
        known = self.unsatisfiable
        return known.get((job.profile, picker, avoid)) or known[(job.profile, picker, not avoid)]

    def merge(self, jobs: list[Job], runs: dict[Hashable, list[Job]], key: RunKey,
              picker: type[JobPicker], heads: Heads | None = None,
              apart: Callable[[Job], bool] | None = None,
              only: Callable[[Job], bool] | None = None) -> Iterator[Job]:
        """``jobs``, split in ``runs`` of one profile each, in the order of ``key(the run's
        key, job, its place in the run)`` (which no two jobs share), read lazily: the runs
        of each profile are merged, and the profiles by their next jobs. ``heads`` are
        the runs' first jobs by profile (``heads_of``; ``Pass.heads`` keeps them from pass
        to pass where it may). A picker that yields some jobs first (the starving,
        ``core/starvation.py``) merges twice: once ``only`` those, which are the first of
        each run (a run ends at its first job ``only`` rejects; ``heads``: the runs that
        begin with one), and once without them (``apart``).

        When ``skims`` allows, the jobs whose demand is known to fail (R-POL-4: it failed
        earlier in the pass) are passed over, since they are held for that reason
        wherever they stand: a profile's, once its demand fails unhindered; under an EASY
        reservation, in a pass that cannot run out of slots (``slots_to_spare``: a job
        read after the last slot went would wait for a slot instead), each job whose
        demand fails as the reservation keeps it (its ``avoid``), found run by run
        without a visit, so that a pass with a reservation does not walk the thousands
        of jobs it cannot start one by one. They go to ``dropped`` and ``passed``;
        ``skimmed`` gives them back."""
        top = [(heap[0][0], profile, heap)
               for profile, heap in (heads_of(runs, key) if heads is None else heads).items()]
        heapq.heapify(top)
        position: dict[Hashable, int] = {}
        skims, unsatisfiable = self.skims(jobs), self.unsatisfiable
        while top:
            _, profile, heap = top[0]
            if skims and self.openings is not None and self.reservation is None and \
                    (profile, picker, False) in unsatisfiable:
                heapq.heappop(top)
                self.dropped.append((profile, picker, runs, position, heap, apart, only))
                self.openings.drop(profile)
                continue
            of = heap[0][1]
            run, at = runs[of], position.get(of, 0)
            if skims and self.slots_to_spare and self.openings is not None and \
                    self.reservation is not None:
                to = self._pass_over(run, at, profile, picker, apart, only)
            else:
                to = at + 1 if apart is not None and apart(run[at]) else at
            if to == at:
                yield run[at]
                to += 1
            # else the run's next job is keyed against the others' before it is read
            at = position[of] = to
            if at < len(run) and (only is None or only(run[at])):
                heapq.heapreplace(heap, (key(of, run[at], at), of))
            else:
                heapq.heappop(heap)
            if heap:
                heapq.heapreplace(top, (heap[0][0], profile, heap))
            else:
                heapq.heappop(top)

    def _pass_over(self, run: list[Job], at: int, profile: str, picker: type[JobPicker],
                   apart: Callable[[Job], bool] | None,
                   only: Callable[[Job], bool] | None) -> int:
        """Where in ``run`` (one profile's, from ``at``) the first job that ``merge``
        reads is: not ``apart``, and not known held as the pass's reservation keeps it
        (``PassDesk._serve``'s key). The held jobs before it count as visited
        (``Openings.pass_over``) and go to ``passed``."""
        reservation, unsatisfiable = self.reservation, self.unsatisfiable
        held = (profile, picker, False) in unsatisfiable
        kept = (profile, picker, True) in unsatisfiable
        if not (held or kept) and apart is None:
            return at  # the common case: nothing of it known held (no need to ask ``crowded``)
        crowded = (held or kept) and bool(reservation.crowded(profile))
        kept = crowded and kept
        stop, count, short = at, 0, 0
        while stop < len(run):
            job = run[stop]
            if only is not None and not only(job):
                break
            if apart is None or not apart(job):
                outlasting = crowded and reservation.outlasts(job)
                if not (kept if outlasting else held):
                    break
                count += 1
                short += not outlasting
            stop += 1
        if count:
            self.passed.append((run, at, stop, picker, apart))
            self.openings.pass_over(profile, count, short)
        return stop

    def _skimming(self, picker: type[JobPicker]) -> Iterator[Job]:
        jobs, position = self.queued, 0
        while position < len(jobs):
            job = jobs[position]
            if self.openings is not None and self._key(job, picker) in self.unsatisfiable:
                stop = self._wanted_after(job.rank, picker)
                self.skipped.append((position, stop, picker, self.reservation is not None))
                position = stop
            else:
                yield job
                position += 1

    def _key(self, job: Job, picker: type[JobPicker]) -> tuple[str, type[JobPicker], bool]:
        """The demand of ``job`` as ``PassDesk._serve`` keys ``unsatisfiable``."""
        avoid = self.reservation is not None and bool(self.reservation.avoid(job))
        return job.profile, picker, avoid

    def _wanted_after(self, rank: int, picker: type[JobPicker]) -> int:
        """Where in ``queued`` the first job ranked after ``rank`` whose demand is not
        known to fail is (``len(queued)`` when there is none). Each profile's jobs are
        read once a pass (``_cursors``): a demand once known to fail stays so."""
        first, reservation, unsatisfiable = math.inf, self.reservation, self.unsatisfiable
        for profile in self.openings.left:
            # ``_key`` by profile: a job keeps off the devices its share crowds when it
            # outlasts the reservation's start; whether its demand failed so or unhindered
            crowds = reservation is not None and bool(reservation.crowded(profile))
            free = (profile, picker, False) not in unsatisfiable
            kept = crowds and (profile, picker, True) not in unsatisfiable
            if not (free or kept):
                continue  # each of its jobs is known held
            # the jobs wanted: every one (None), or those that do (True) or do not outlast it
            outlasting = None if free and (kept or not crowds) else kept
            if outlasting is False:  # its short jobs alone: found apart, as they may be few
                asked, found = self._shorts.get((profile, picker), (math.inf, None))
                if asked > rank or found is not None and found.rank <= rank:
                    asked, found = self._shorts[(profile, picker)] = (
                        rank, self.openings.ending_after(profile, rank, reservation.eta_limit))
                if found is not None and found.rank < first:
                    first = found.rank
                continue
            jobs, job = self._cursors.get((profile, picker)) or (
                self.openings.younger(profile, rank), None)
            job = job or next(jobs, None)
            while job is not None and (job_rank := job.rank) < first:
                if job_rank > rank and (outlasting is None
                                        or reservation.outlasts(job) is outlasting):
                    first = job_rank
                    break
                job = next(jobs, None)
            self._cursors[(profile, picker)] = (jobs, job)
        return len(self.queued) if first == math.inf else bisect_left(self.queued, first,
                                                                       key=RANK)

    def queue_hold(self, queue: Queue, freed: int = 0,
                   joining: Counter[str] | None = None) -> str | None:
        """Why the queue's own rules hold its next job now, or None; or, for preemption
        (R-POL-3), once ``freed`` more slots are free and ``joining`` jobs (by queue) are
        queued again."""
        if queue.windows:
            if queue.name not in self._closed:
                self._closed[queue.name] = window_hold(
                    queue, self.at, self.policy.windows_utc_offset_minutes)
            if closed := self._closed[queue.name]:
                return closed
        running = self.running_in[queue.name]
        if queue.max_running is not None and running >= queue.max_running:
            return f"queue {queue.name}: {running} of max_running {queue.max_running} running"
        free, joining = self.free + freed, joining or {}
        if queue.leave_slots and 0 < free <= min(queue.leave_slots, sum(
                self.waiting[q] + joining.get(q, 0) for q in queue.leave_slots_for)):
            if self.policy.queues is None:  # the default queues: today's words
                return f"exploration_reserve: {free} slot(s) kept for queued exploration"
            return (f"queues.{queue.name}.leave_slots: {free} slot(s) kept for queued "
                    + ", ".join(queue.leave_slots_for))
        return None

    def peer_hold(self, job: Job) -> str | None:
        """Why ``job``'s peer may start nothing more now (R-SUB-5), or None. Holding it
        costs the job nothing: no attempt, no failure record; other peers' work goes on."""
        cap = self.policy.max_concurrent_per_peer
        if cap is None or self.running_of[peer := peer_of(job)] < cap:  # no cap: ask no peer
            return None
        return (f"peer {tenancy.peer_label(job.uid, job.request.peer, self.coordinator_uid)}: "
                f"{self.running_of[peer]} of max_concurrent_per_peer {cap} running")

    def usage(self, peer: str) -> float:
        """Decayed GPU-seconds of ``peer``'s ended attempts plus its running ones so far
        (a plugin picker's, docs/CONFIG.md)."""
        return self.usages((peer,))[peer]

    def usages(self, peers: Iterable[str]) -> dict[str, float]:
        """``usage`` of each of ``peers``, in one go (a pass orders every queued peer)."""
        at = self.at
        if self._running_usage is None:
            self._running_usage = running = {}
            for job in self.running:
                attempt, peer = job.attempts[-1], job.request.peer  # ``Job.current``
                running[peer] = running.get(peer, 0) + \
                    len(attempt.gpus) * max(0.0, at - attempt.started_at)
        running = self._running_usage
        return {peer: used + running.get(peer, 0.0) for peer, used in self.ledger.of_each(
            peers, at, self.policy.fair_share_half_life_seconds).items()}

    def project_usage(self, project: Project) -> float:
        """``slot_usage`` of ``project`` now (``ProjectFairShare``)."""
        return slot_usage(project, self.queue_ledger, self.running, self.by_class, self.at,
                          self.policy.fair_share_half_life_seconds)

    def expected_end(self, job: Job, started_at: float) -> float:
        """When ``job`` started at ``started_at`` should end: its calibrated ETA, never
        before now; an unknown ETA never ends (inf)."""
        eta = job.request.eta_s
        return math.inf if eta is None else max(self.at, started_at + eta * self.ratio)

    def heads(self, kind: str, jobs: list[Job], runs: dict[Hashable, list[Job]],
              token: Hashable, key: RunKey) -> Heads:
        """``heads_of(runs, key)`` for ``merge``: when ``runs`` are the whole queue's
        (``runs``), the backlog's, kept from pass to pass while ``token`` is the same,
        for a ``key`` that depends on nothing else that changes."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.heads(kind, token, key)
        return heads_of(runs, key)

    def longest_eta_step(self, jobs: list[Job], runs: dict[Hashable, list[Job]]
                         ) -> tuple[int, bool]:
        """The ETA step (``backlog.eta_step``) of the longest ETA ``jobs`` declare (0 when
        none does), and whether one of them declares none; ``runs`` are theirs by "eta"."""
        if jobs is self.queued and self.backlog is not None:
            longest, lacking = self.backlog.longest_eta()
            return (0 if longest is None else eta_step(longest)), lacking
        steps = {step for _, _, step, _ in runs}
        return max(steps - {None}, default=0), None in steps

    def served(self, jobs: list[Job]) -> list[Job]:
        """Those of ``jobs`` that ran before, in no order: the backlog's when they are the
        whole queue, so a pass does not look at thousands of jobs to find none."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.served()
        return [job for job in jobs if job.attempts]

    def runs(self, kind: str, jobs: list[Job]) -> dict[Hashable, list[Job]]:
        """``jobs`` (rank order) split by ``backlog.RUNS[kind]``, each run in rank order:
        the backlog's own runs when they are the whole queue, else split here."""
        if jobs is self.queued and self.backlog is not None:
            return self.backlog.runs(kind)
        runs: dict[Hashable, list[Job]] = {}
        key = RUNS[kind]
        for job in jobs:
            runs.setdefault(key(job), []).append(job)
        return runs

    @property
    def packing(self) -> Packing:
        """The task file's ``placement``, against the demand queued at the start of the
        pass (the fragmentation strategy's mix)."""
        if self._packing is None:
            self._packing = Packing.of(self.policy.placement, self.policy.profiles,
                                       self.mix if self.mix is not None
                                       else Counter(job.profile for job in self.queued))
        return self._packing

    def allocate(self, demand: Demand, avoid: tuple[str, ...] = ()) -> tuple[tuple[str, ...], str]:
        """``placement.place`` on the pass's loads, in the task file's ``placement``. A
        demand that too few devices take fails from ``fitting``'s counts, which the pass
        keeps anyway, without looking at every device again."""
        limits = self._limits(demand, avoid)
        if limits[""] < demand.gpu_count:
            return (), unplaced(demand, len(self.loads), limits)
        return place(demand, self.loads, avoid, self.packing)

    def place(self, job: Job, gpus: tuple[str, ...]) -> None:
        """Account for a launch decided in this pass."""
        queue = self.by_class[job.request.work_class]
        self.free -= 1
        self.waiting[queue.name] -= 1
        self.running_in[queue.name] += 1
        self.running_of[peer_of(job)] += 1
        self.launched.append((job, gpus))
        if gpus:
            before, held = self.loads, envelopes_of(
                self.policy.profiles.get(job.profile), gpus, job.job_id)
            self.loads = with_envelopes(before, held)
            self._refit(before)
            if self.reservation is not None and self.reservation.job is not job:
                self.reservation.backfilled(job, gpus, held)
        if self.openings is not None:
            self.openings.update(self.reservation)

    def reserve(self, job: Job) -> Reservation | None:
        """EASY backfill's reservation for ``job``: the earliest time enough running work
        (with an ETA) has ended for it to be placed, and the devices it would get.
        None when no such time exists: running work without an ETA never ends, and
        load that is not ours never leaves."""
        profile = self.policy.profiles.get(job.profile)
        if profile is None or not profile.uses_gpu or self.loads is None:
            return None
        demand = Demand.of(profile)
        ending = sorted(
            (self.expected_end(other, started), other.order, other, gpus)
            for other, started, gpus in (
                *((j, j.current.started_at, j.current.gpus) for j in self.running),
                *((j, self.at, gpus) for j, gpus in self.launched)))
        # the loads as running work ends, device by device: only where the demand fits
        # often enough is placement tried (``fitting``)
        loads = list(self.loads)
        where = {load.device.uuid: index for index, load in enumerate(loads)}
        fits = {load.device.uuid for load in loads if load.fit(demand)[0] is not None}
        for end, _, other, gpus in ending:
            if end == math.inf:
                break
            released = envelopes_of(self.policy.profiles.get(other.profile), gpus, other.job_id)
            for uuid, mine in by_uuid(released).items():
                if (index := where.get(uuid)) is not None:
                    loads[index] = releasing(loads[index], mine)
                    if loads[index].fit(demand)[0] is not None:
                        fits.add(uuid)
            if len(fits) < demand.gpu_count:
                continue
            devices, reason = place(demand, loads, packing=self.packing)
            if not reason:
                self.reservation = Reservation(
                    job=job, start=end, devices=devices, eta_limit=(end - self.at) / self.ratio,
                    hold=f"backfill: would delay {job.job_id}, reserved in "
                         f"{end - self.at:.0f}s on {len(devices)} device(s)",
                    promise=f"backfill reservation: expected to start in {end - self.at:.0f}s "
                            f"on {', '.join(devices)}",
                    demand=demand, at_start={uuid: loads[where[uuid]] for uuid in devices},
                    profiles=self.policy.profiles)
                if self.openings is not None:
                    self.openings.update(self.reservation)
                return self.reservation
        return None
