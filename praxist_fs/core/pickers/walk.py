"""What the walk over a pass's queue keeps: EASY backfill's ``Reservation``, and the
``Openings`` that tell the loop when no job left to visit could start."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from ..model import Job
from ..observations import Envelope
from ..placement import Demand, DeviceLoad, by_uuid, envelopes_of, holding
from ..policy import Profile


@dataclass(slots=True)
class Reservation:
    """EASY backfill: ``job`` is expected to fit at ``start`` on ``devices``; a later job
    that may still run then must leave it room there. Its slot needs no keeping: every
    job that ends by ``start`` frees one, and the reservation waits for at least one.

    Room, not the devices: ``at_start`` is the load each reserved device is expected
    to carry at ``start`` (plus what the pass has backfilled onto it since), and a job
    that outlasts ``start`` keeps off only the devices where its share would leave
    the reserved ``demand`` no room (``crowded``): fractional work may use the share
    a fractional reservation leaves free until ``start``, instead of idling it."""

    job: Job
    start: float
    devices: tuple[str, ...]
    eta_limit: float  # a job declaring at most this eta_s ends before ``start``
    hold: str         # the reason of a job it keeps from starting
    promise: str      # what the reserved job's reason adds
    demand: Demand
    at_start: dict[str, DeviceLoad]   # reserved device -> its expected load at ``start``
    profiles: Mapping[str, Profile]
    _crowded: dict[str, tuple[str, ...]] = field(default_factory=dict)  # by profile
    # by (profile, reserved device): whether a share of it there crowds the reserved job
    _crowds: dict[tuple[str, str], bool] = field(default_factory=dict)

    def outlasts(self, job: Job) -> bool:
        """Whether ``job``, started now, may still run at ``start`` (its calibrated ETA
        does not end it before; an unknown ETA never ends)."""
        eta = job.request.eta_s
        return eta is None or eta > self.eta_limit

    def avoid(self, job: Job) -> tuple[str, ...]:
        """The devices ``job`` must keep off to start now: none when it ends before
        ``start``, else those its share would crowd (``crowded``)."""
        return self.crowded(job.profile) if self.outlasts(job) else ()

    def crowded(self, profile: str) -> tuple[str, ...]:
        """The reserved devices where one share of ``profile`` would leave the reserved
        job no room at ``start`` (none for work that places nothing on a GPU)."""
        if profile not in self._crowded:
            shape = self.profiles.get(profile)
            if shape is None or not shape.uses_gpu:
                self._crowded[profile] = ()
            elif self.demand.exclusive or Demand.of(shape).exclusive:
                # an exclusive job needs an idle device, and an exclusive share leaves no
                # room: every reserved device, without placing it on each (``fit``)
                self._crowded[profile] = self.devices
            else:
                self._crowded[profile] = tuple(
                    uuid for uuid in self.devices if self._crowds_on(profile, shape, uuid))
        return self._crowded[profile]

    def _crowds_on(self, profile: str, shape: Profile, uuid: str) -> bool:
        """Whether one share of ``profile`` on reserved device ``uuid`` leaves the reserved
        job no room there at ``start``; asked again only once backfill changes it."""
        key = (profile, uuid)
        if (crowds := self._crowds.get(key)) is None:
            self._crowds[key] = crowds = holding(
                self.at_start[uuid], envelopes_of(shape, (uuid,), profile)
            ).fit(self.demand)[0] is None
        return crowds

    def backfilled(self, job: Job, gpus: tuple[str, ...], envelopes: list[Envelope]) -> None:
        """``job`` started now on ``gpus`` holding ``envelopes``: what outlasts ``start``
        on a reserved device is still there then."""
        if not self.outlasts(job) or self.at_start.keys().isdisjoint(gpus):
            return
        changed = set()
        for uuid, mine in by_uuid(envelopes).items():
            if uuid in self.at_start:
                self.at_start[uuid] = holding(self.at_start[uuid], mine)
                changed.add(uuid)
        self._crowded.clear()
        for key in [key for key in self._crowds if key[1] in changed]:
            del self._crowds[key]


@dataclass(slots=True)
class Openings:
    """Which of the jobs a pass has yet to visit could still start, by profile, so that
    the loop stops walking once none could: the rest of the walk would only restate why
    each job waits (``PassDesk._pass`` leaves it until a reason is asked for).

    A profile is open while jobs of it are ``left`` to visit and ``could_start`` (a free
    slot, calm pressure, enough devices that take it) says one may. Once EASY backfill
    reserves devices, a profile that fits only on them stays open while jobs of it that
    end before the reservation (``Reservation.avoid``) are left. Holds by queue rules or
    assessment are not counted: a held job may keep the walk going, never end it early.
    The walk ends only after a job (``exhausted``), so a pass that may start something
    handles its first: its picker hears of it (``JobPicker.blocked``, where backfill
    reserves) before any later job starts. A pass where nothing could start from the
    outset leaves the whole walk to the rest (``PassDesk._pass``)."""

    left: Counter[str]                                   # jobs not visited yet, by profile
    could_start: Callable[[str, tuple[str, ...]], bool]  # (profile, devices to keep off)
    ending_by: Callable[[str, float], int]  # queued jobs of a profile with eta_s <= a limit
    younger: Callable[[str, int], Iterator[Job]]  # a profile's queued jobs after a rank
    # a profile's first queued job after a rank that declares an eta_s of at most a limit
    ending_after: Callable[[str, int, float], Job | None]
    open: set[str] = field(default_factory=set)    # profiles known to open
    unsure: set[str] = field(init=False)           # profiles left not asked since ``update``
    reservation: Reservation | None = None
    short: Counter[str] = field(default_factory=Counter)  # left jobs that end before it
    seen: list[Job] = field(default_factory=list)         # visited before the reservation
    visited: int = 0
    _can: dict[tuple[str, bool], bool] = field(default_factory=dict)  # until loads change

    def __post_init__(self) -> None:
        self.unsure = {profile for profile, count in self.left.items() if count}

    def update(self, reservation: Reservation | None) -> None:
        """After a launch (loads and slots changed) or a reservation: what is open now.
        A pass only takes room away (a launch takes a slot and devices, a reservation
        keeps jobs off some, backfill onto them crowds them more), so a profile found
        closed stays closed: only those open or not asked yet are asked again."""
        self._can.clear()
        if reservation is not None and self.reservation is None:
            self.reservation = reservation  # the pass's own: backfill onto it shows here
            self.short = Counter({profile: self.ending_by(profile, reservation.eta_limit)
                                  for profile, count in self.left.items() if count})
            self.short.subtract(job.profile for job in self.seen if self._ends_first(job))
            self.seen = []
        self.unsure |= self.open
        self.open = set()

    def any_open(self) -> bool:
        """Whether a job still to visit could start. The profiles are asked only until
        one opens: after a launch one mostly does at once, and what a profile answers
        stays the same until the next ``update`` (but for ``short``, which ``visit``
        follows), so asking later answers as asking then."""
        open, unsure = self.open, self.unsure
        while not open and unsure:
            if self._opens(profile := unsure.pop()):
                open.add(profile)
        return bool(open)

    @property
    def exhausted(self) -> bool:
        """No job still to visit could start, and the pass has handled one."""
        return self.visited > 0 and not self.any_open()

    def visit(self, job: Job) -> None:
        profile = job.profile
        self.visited += 1
        self.left[profile] -= 1
        if self.reservation is None:
            self.seen.append(job)
        elif self._ends_first(job):
            self.short[profile] -= 1
            if not self.short[profile] and profile in self.open and not self._opens(profile):
                self.open.discard(profile)
        if not self.left[profile]:
            self.open.discard(profile)
            self.unsure.discard(profile)

    def pass_over(self, profile: str, count: int, short: int) -> None:
        """``count`` jobs of ``profile`` are known held without a visit (``Pass.merge``
        under the reservation), ``short`` of them not kept off by it: as ``visit`` of each."""
        self.visited += count
        self.left[profile] -= count
        if short:
            before = self.short[profile]
            self.short[profile] = after = before - short
            if before > 0 >= after and profile in self.open and not self._opens(profile):
                self.open.discard(profile)
        if not self.left[profile]:
            self.open.discard(profile)
            self.unsure.discard(profile)

    def drop(self, profile: str) -> None:
        """The jobs of ``profile`` left are known held without a visit (``Pass.merge``)."""
        self.left[profile] = 0
        self.open.discard(profile)
        self.unsure.discard(profile)

    def _ends_first(self, job: Job) -> bool:
        return not self.reservation.avoid(job)

    def _opens(self, profile: str) -> bool:
        if self.reservation is None:
            return self._could(profile, False)
        return self._could(profile, True) or (self.short[profile] > 0
                                              and self._could(profile, False))

    def _could(self, profile: str, avoiding: bool) -> bool:
        key = (profile, avoiding)
        if key not in self._can:
            self._can[key] = self.could_start(
                profile, self.reservation.crowded(profile) if avoiding else ())
        return self._can[key]
