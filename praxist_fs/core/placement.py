"""GPU placement by declared envelope and observed external load (R-GPU-2, R-GPU-3).

Per device, two independent hard limits must hold after placing a job:
declared utilization (every held envelope, this run's and other runs' on the
host, plus the job's) + external utilization <= 100 %, and declared memory +
external memory < 95 % of physical VRAM. External load is what the device
shows beyond processes attributed to praxist jobs; a process that cannot be
mapped counts as external, and so does everything when the driver hides its
processes. Feasible devices are tried in the order of the task file's
``placement`` (``Packing``): ``spread`` (the default) most headroom first (the
tighter of the two headrooms), ``best_fit`` least headroom first, and
``fragmentation`` where the expected fragmentation of the device grows least
(FGD, Weng et al., ATC '23); ties go to the lower device index.
gpu_count > 1 takes that many distinct devices. A profile with
unknown demand gets a device with no allocation and no significant external
load, and holds it exclusively.

Allocation is lazy (R-POL-2, seed 002's plan and host iterators): ``plans``
yields candidate plans in preference order (devices that share the tightest
topology group first, where the inventory reports ``GpuDevice.topology``; then
any devices), and each plan is tried against the feasible devices in headroom
order, group by group, taking the first ``per_host`` of a group: no
combination of devices is ever built. One host today, so a plan is "N
devices"; ``Plan.hosts`` is there for the multi-node split (1 x N, 2 x N/2, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .observations import Envelope, GpuDevice, GpuSample
from .policy import Profile

MEMORY_CEILING = 0.95           # declared + external memory must stay below this share of VRAM
IDLE_UTILIZATION_PCT = 5.0      # below this, external compute is "not significant" ...
IDLE_MEMORY_FRACTION = 0.02     # ... and so is external memory below this share of VRAM
MIB_PER_GB = 1024.0             # profiles say gpu_memory_gb; we mean GiB
PLACEMENTS = ("spread", "best_fit", "fragmentation")  # the task file's ``placement``
MIX_SHAPES = 16                 # fragmentation weighs at most this many demand shapes


@dataclass(frozen=True, slots=True)
class Demand:
    gpu_count: int
    utilization_pct: float | None
    memory_mib: float | None

    @classmethod
    def of(cls, profile: Profile) -> Demand:
        memory = profile.gpu_memory_gb * MIB_PER_GB if profile.gpu_memory_gb is not None else None
        return cls(profile.gpu_count, profile.gpu_utilization_pct, memory)

    @property
    def exclusive(self) -> bool:
        """R-CFG-5: unknown demand (either field missing) means a device of its own."""
        return self.utilization_pct is None or self.memory_mib is None

    def describe(self) -> str:
        if self.exclusive:
            return "an idle device (unknown demand is exclusive)"
        return f"{self.utilization_pct:g}% utilization and {self.memory_mib / MIB_PER_GB:g} GiB"


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    """One device as placement sees it: what is promised on it and what else runs there."""

    device: GpuDevice
    declared_util: float
    declared_mem: float
    external_util: float
    external_mem: float
    allocations: int
    exclusive: int  # how many of the held envelopes are exclusive

    @property
    def exclusive_held(self) -> bool:
        return self.exclusive > 0

    @property
    def ceiling_mib(self) -> float:
        return MEMORY_CEILING * self.device.memory_total_mib

    def fit(self, demand: Demand) -> tuple[float | None, str]:
        """(headroom left after placing, or None when it does not fit; the limit that bit)."""
        if self.device.mig_mode:
            return None, "MIG enabled (whole-device placement only)"
        if self.exclusive > 0:  # exclusive_held, inline: placement asks every device
            return None, "held exclusively"
        if demand.utilization_pct is None or demand.memory_mib is None:  # demand.exclusive
            idle = (self.allocations == 0 and self.external_util < IDLE_UTILIZATION_PCT
                    and self.external_mem < IDLE_MEMORY_FRACTION * self.device.memory_total_mib)
            return (1.0, "") if idle else (None, "not idle")
        util = self.declared_util + self.external_util + demand.utilization_pct
        mem = self.declared_mem + self.external_mem + demand.memory_mib
        if util > 100.0:
            return None, "utilization"
        if mem >= self.ceiling_mib:
            return None, "memory"
        return min((100.0 - util) / 100.0, (self.ceiling_mib - mem) / self.device.memory_total_mib), ""


def device_loads(sample: GpuSample, held: list[Envelope]) -> list[DeviceLoad]:
    """Combine a sample with the envelopes held on each device (this run's and others').

    A praxist job's own processes are not external load, but whatever a job uses
    beyond its declared envelope is: the device carries it all the same."""
    by_device = by_uuid(held)
    return [load_on(device, by_device.get(device.uuid, [])) for device in sample.devices]


def load_on(device: GpuDevice, mine: list[Envelope]) -> DeviceLoad:
    """``device`` holding ``mine`` (its envelopes, summed in their order)."""
    declared_util = declared_mem = exclusive = 0
    for e in mine:
        declared_util += e.utilization_pct
        declared_mem += e.memory_mib
        exclusive += e.exclusive
    external_util, external_mem = _external(device, mine)
    return DeviceLoad(device=device, declared_util=declared_util, declared_mem=declared_mem,
                      external_util=external_util, external_mem=external_mem,
                      allocations=len(mine), exclusive=exclusive)


Holding = tuple[object, list[Envelope]]  # (what a holder holds them for: its attempt, envelopes)


@dataclass(slots=True)
class KeptLoads:
    """``device_loads`` of ``sample`` with the envelopes of ``holders`` (in their order), then
    ``others``, kept from call to call: when holders come and go (``update``), only their
    devices are worked out again, not every device (a scheduling pass asks each time, and
    between two passes a few jobs start or end). Each device sums its envelopes in the
    order ``device_loads`` would, so the loads are the same to the last bit."""

    sample: GpuSample
    others: tuple[Envelope, ...]                 # as given, to know them again
    holders: dict[Hashable, Holding]
    mine: dict[str, list[tuple[Hashable, Envelope]]]  # the holders' envelopes by device
    theirs: dict[str, list[Envelope]]            # the others' (non-speculative) by device
    loads: list[DeviceLoad]
    at: dict[str, int]                           # where each device's load is in ``loads``
    # ``fitting``'s counts on ``loads`` by (utilization, memory, devices avoided), as
    # passes fill them (``Pass.kept_fitting``), carried over as devices change (``refit``)
    fitting: dict[tuple[Any, ...], tuple[Demand, Counter[str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, sample: GpuSample, others: tuple[Envelope, ...],
           holders: dict[Hashable, Holding]) -> KeptLoads:
        """Every device's load worked out afresh."""
        mine: dict[str, list[tuple[Hashable, Envelope]]] = {}
        for holder, (_, envelopes) in holders.items():
            for envelope in envelopes:
                mine.setdefault(envelope.uuid, []).append((holder, envelope))
        theirs = by_uuid([e for e in others if not e.speculative])
        return cls(sample, others, holders, mine, theirs, [
            load_on(device, [e for _, e in mine.get(device.uuid, ())]
                    + theirs.get(device.uuid, []))
            for device in sample.devices],
            {device.uuid: index for index, device in enumerate(sample.devices)})

    def update(self, holders: Mapping[Hashable, object],
               holding: Callable[[Hashable], Holding]) -> bool:
        """Follow ``holders`` now (holder -> what it holds for, in order): those gone give
        up their devices, new ones take theirs, in their place in that order (a device's
        envelopes are summed in the holders' order). False, changing nothing, unless every
        holder kept holds for the same as before, in the same order among themselves (as
        running jobs stay in the order they started, and suspended ones after them)."""
        kept = self.holders
        gone = kept.keys() - holders.keys()
        staying = [holder for holder in kept if holder not in gone]
        if any(kept[holder][0] is not holders[holder] for holder in staying) or \
                staying != [holder for holder in holders if holder in kept]:
            return False
        changed: set[str] = set()
        for holder in gone:
            for envelope in kept.pop(holder)[1]:
                entries = self.mine[envelope.uuid]
                entries.remove(next(entry for entry in entries if entry[0] == holder))
                changed.add(envelope.uuid)
        for holder in holders:
            if holder not in kept:
                kept[holder] = held = holding(holder)
                for envelope in held[1]:
                    self.mine.setdefault(envelope.uuid, []).append((holder, envelope))
                    changed.add(envelope.uuid)
        self.holders = {holder: kept[holder] for holder in holders}
        if changed:
            place_of = {holder: index for index, holder in enumerate(holders)}
            before, self.loads = self.loads, self.loads.copy()
            for uuid in changed.intersection(self.at):
                entries = self.mine.get(uuid, [])
                entries.sort(key=lambda entry: place_of[entry[0]])  # stable: a holder's order
                self.loads[self.at[uuid]] = load_on(
                    self.loads[self.at[uuid]].device,
                    [e for _, e in entries] + self.theirs.get(uuid, []))
            # a new dict: a pass that began before keeps reading the counts of its loads
            self.fitting = {key: (demand, Counter(limits))
                            for key, (demand, limits) in self.fitting.items()}
            refit(self.fitting, [(before[index], self.loads[index])
                                 for index in map(self.at.get, changed.intersection(self.at))])
        return True


def _external(device: GpuDevice, mine: Collection[Envelope]) -> tuple[float, float]:
    """(utilization, memory) on ``device`` beyond the envelopes held on it."""
    used_mem: dict[str, float] = {}
    used_util: dict[str, float] = {}
    if device.processes_visible:
        for p in device.processes:
            if p.owner is not None:
                used_mem[p.owner] = used_mem.get(p.owner, 0.0) + (p.used_memory_mib or 0.0)
                used_util[p.owner] = used_util.get(p.owner, 0.0) + (p.sm_util_pct or 0.0)
    if not used_mem:  # nothing attributed to a job: all of it is external
        return max(0.0, device.utilization_pct), max(0.0, device.memory_used_mib)
    declared_mem = {e.owner: 0.0 for e in mine}
    declared_util = {e.owner: 0.0 for e in mine}
    for e in mine:
        declared_mem[e.owner] += e.memory_mib
        declared_util[e.owner] += 100.0 if e.exclusive else e.utilization_pct
    overuse_mem = sum(max(0.0, used - declared_mem.get(owner, 0.0))
                      for owner, used in used_mem.items())
    overuse_util = sum(max(0.0, used - declared_util.get(owner, 0.0))
                       for owner, used in used_util.items())
    return (max(0.0, device.utilization_pct - sum(used_util.values())) + overuse_util,
            max(0.0, device.memory_used_mib - sum(used_mem.values())) + overuse_mem)


@dataclass(frozen=True, slots=True)
class Plan:
    """``hosts`` x ``per_host`` devices; the devices of a host share their topology
    group at ``level`` (an index into ``GpuDevice.topology``), or any when None."""

    hosts: int
    per_host: int
    level: int | None


def plans(count: int, depth: int, hosts: int = 1) -> Iterator[Plan]:
    """Plans for ``count`` devices in preference order: fewer hosts first (seed 002:
    1 x N, 2 x ceil(N/2), ...); within a split, the tightest shared group first."""
    for split in range(1, min(hosts, count) + 1):
        per_host = -(-count // split)
        if per_host > 1:
            for level in range(depth):
                yield Plan(split, per_host, level)
        yield Plan(split, per_host, None)


def candidates(plan: Plan, fits: list[DeviceLoad]) -> Iterator[tuple[str, ...]]:
    """Device sets for a one-host ``plan``, lazily: ``fits`` come in preference order,
    and each topology group (in the order its best device comes) offers its best
    ``per_host`` devices. A device that does not report the level forms no group."""
    if plan.level is None:
        if len(fits) >= plan.per_host:
            yield tuple(load.device.uuid for load in fits[:plan.per_host])
        return
    groups: dict[str, list[str]] = {}
    for load in fits:
        topology = load.device.topology
        if plan.level < len(topology):
            members = groups.setdefault(topology[plan.level], [])
            members.append(load.device.uuid)
            if len(members) == plan.per_host:
                yield tuple(members)


def fitting(demand: Demand, loads: list[DeviceLoad], avoid: Collection[str] = ()) -> Counter[str]:
    """The devices by what one of ``demand``'s shares finds on each now: "" where it fits,
    else the limit that bit ("reserved" for ``avoid``). ``place`` fails when fewer than
    ``gpu_count`` fit (every plan takes its devices from those), for the reason
    ``unplaced`` gives; counting costs no ordering, and the counts are the same for every
    demand of one shape."""
    return Counter("reserved" if load.device.uuid in avoid else load.fit(demand)[1]
                   for load in loads)


def refit(counts: dict[tuple[Any, ...], tuple[Demand, Counter[str]]],
          changed: list[tuple[DeviceLoad, DeviceLoad]]) -> None:
    """Carry ``fitting``'s ``counts`` (by utilization, memory and the devices avoided)
    over a change of a few devices' loads, ``changed`` (before, after): only those are
    counted again."""
    for (_, _, avoid), (demand, limits) in counts.items():
        for old, new in changed:
            if old.device.uuid not in avoid:
                limits[old.fit(demand)[1]] -= 1
                limits[new.fit(demand)[1]] += 1


@dataclass(frozen=True, slots=True)
class Packing:
    """The order feasible devices are tried in (the task file's ``placement``).

    ``spread`` keeps the most room everywhere; ``best_fit`` fills the fullest device
    that still takes the job, keeping whole devices free for wide and exclusive
    work; ``fragmentation`` (FGD) takes the device whose expected fragmentation
    grows least, against ``mix``: the demand shapes waiting to be placed, each with
    its share. A device's fragmentation for one shape is the utilization it has
    free when that shape no longer fits there (all of it is lost to that shape),
    else 0. Every strategy only orders the devices the per-device limits allow."""

    strategy: str = "spread"
    mix: tuple[tuple[Demand, float], ...] = ()

    @classmethod
    def of(cls, strategy: str, profiles: Mapping[str, Profile],
           queued: Mapping[str, int]) -> Packing:
        """``strategy`` against the GPU demand of ``queued`` jobs (count by profile): the
        ``MIX_SHAPES`` most common shapes, ties by shape, so the mix is deterministic."""
        if strategy != "fragmentation":
            return cls(strategy)
        shapes: Counter[Demand] = Counter()
        for name, count in queued.items():
            profile = profiles.get(name)
            if count > 0 and profile is not None and profile.uses_gpu:
                shapes[replace(Demand.of(profile), gpu_count=1)] += count
        common = sorted(shapes.items(), key=lambda item: (
            -item[1], item[0].exclusive, item[0].utilization_pct or 0.0,
            item[0].memory_mib or 0.0))[:MIX_SHAPES]
        total = sum(count for _, count in common)
        return cls(strategy, tuple((shape, count / total) for shape, count in common))

    def order(self, demand: Demand, fits: list[tuple[float, DeviceLoad]]) -> list[DeviceLoad]:
        """``fits`` ((headroom after placing, load), in device order) in preference order."""
        if self.strategy == "spread":
            fits.sort(key=lambda fit: (-fit[0], fit[1].device.index))
        elif self.strategy == "best_fit":
            fits.sort(key=lambda fit: (fit[0], fit[1].device.index))
        else:
            mix = self.mix or ((replace(demand, gpu_count=1), 1.0),)
            share = _envelope(demand, "", "")
            growth: dict[tuple[object, ...], float] = {}  # devices alike grow alike
            keyed = []
            for headroom, load in fits:
                state = (load.device.mig_mode, load.device.memory_total_mib, load.exclusive,
                         load.allocations == 0, load.declared_util, load.declared_mem,
                         load.external_util, load.external_mem)
                if state not in growth:
                    after = holding(load, [replace(share, uuid=load.device.uuid)])
                    growth[state] = fragmentation(after, mix) - fragmentation(load, mix)
                keyed.append((growth[state], headroom, load.device.index, load))
            keyed.sort(key=lambda fit: fit[:3])
            return [load for *_, load in keyed]
        return [load for _, load in fits]


SPREAD = Packing()


def fragmentation(load: DeviceLoad, mix: tuple[tuple[Demand, float], ...]) -> float:
    """FGD's expected fragmentation of one device: the free utilization (percent) that
    the shapes of ``mix`` could not use there, weighed by their shares."""
    free = 0.0 if load.exclusive else max(0.0, 100.0 - load.declared_util - load.external_util)
    if free == 0.0:
        return 0.0
    return free * sum(share for shape, share in mix if load.fit(shape)[0] is None)


def place(demand: Demand, loads: list[DeviceLoad], avoid: Collection[str] = (),
          packing: Packing = SPREAD) -> tuple[tuple[str, ...], str]:
    """(UUIDs in placement order, "") or ((), the reason no placement exists).

    ``avoid``: devices this placement must not use (an EASY backfill reservation);
    ``packing``: the order feasible devices are tried in."""
    fits, misses = [], []
    for load in loads:
        headroom, limit = (None, "reserved") if load.device.uuid in avoid else load.fit(demand)
        if headroom is None:
            misses.append(limit)
        else:
            fits.append((headroom, load))
    if len(fits) >= demand.gpu_count:  # else every plan fails: it takes its devices from fits
        ordered = packing.order(demand, fits)
        depth = max((len(load.device.topology) for load in ordered), default=0)
        for plan in plans(demand.gpu_count, depth):
            for uuids in candidates(plan, ordered):
                return uuids, ""
    limits = Counter(misses)
    limits[""] = len(fits)
    return (), unplaced(demand, len(loads), limits)


def unplaced(demand: Demand, devices: int, limits: Counter[str]) -> str:
    """Why ``demand`` has no placement on ``devices`` devices, which ``fitting`` counted
    as ``limits`` (fewer than ``gpu_count`` of them fit)."""
    fits, misses = limits[""], {limit for limit, count in limits.items() if limit and count > 0}
    if not devices:
        return "gpu placement: no GPU devices in the inventory"
    needed = f"{demand.gpu_count} devices" if demand.gpu_count > 1 else "a device"
    if demand.exclusive:
        return f"gpu exclusive: no idle device ({fits} of {demand.gpu_count} found)"
    if misses == {"memory"}:
        return (f"gpu memory: no device with {demand.memory_mib / MIB_PER_GB:g} GiB "
                f"headroom" + (f" ({fits} of {demand.gpu_count})" if fits else ""))
    if misses == {"utilization"}:
        return (f"gpu utilization: no device with {demand.utilization_pct:g}% free"
                + (f" ({fits} of {demand.gpu_count})" if fits else ""))
    return f"gpu: {needed} with {demand.describe()} free is not available"


def held_envelope(profile: Profile, uuid: str, owner: str) -> Envelope:
    """The envelope a placed job holds on one of its devices for its whole life."""
    return _envelope(Demand.of(profile), uuid, owner)


def envelopes_of(profile: Profile | None, gpus: tuple[str, ...], owner: str) -> list[Envelope]:
    """What a job holds on its devices; a profile no longer defined holds them exclusively."""
    demand = None if profile is None else Demand.of(profile)
    return [_envelope(demand, uuid, owner) for uuid in gpus]


def _envelope(demand: Demand | None, uuid: str, owner: str) -> Envelope:
    if demand is None or demand.exclusive:
        return Envelope(uuid=uuid, utilization_pct=100.0, memory_mib=0.0, exclusive=True,
                        owner=owner)
    return Envelope(uuid=uuid, utilization_pct=demand.utilization_pct,
                    memory_mib=demand.memory_mib, owner=owner)


def with_envelopes(loads: list[DeviceLoad], envelopes: list[Envelope]) -> list[DeviceLoad]:
    """The loads after also holding ``envelopes`` (a job placed earlier in this pass)."""
    by_device = by_uuid(envelopes)
    return [holding(load, mine) if (mine := by_device.get(load.device.uuid)) else load
            for load in loads]


def without_envelopes(loads: list[DeviceLoad], envelopes: list[Envelope]) -> list[DeviceLoad]:
    """The loads once ``envelopes`` are released (a running job ended): the inverse of
    ``with_envelopes``. What the job used beyond its envelope stays external load."""
    by_device = by_uuid(envelopes)
    return [releasing(load, mine) if (mine := by_device.get(load.device.uuid)) else load
            for load in loads]


def by_uuid(envelopes: list[Envelope]) -> dict[str, list[Envelope]]:
    """The envelopes by device, in their order."""
    grouped: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        grouped.setdefault(envelope.uuid, []).append(envelope)
    return grouped


def holding(load: DeviceLoad, mine: list[Envelope]) -> DeviceLoad:
    """``load`` also holding ``mine`` (envelopes on its device)."""
    return _changed(load, mine, 1)


def releasing(load: DeviceLoad, mine: list[Envelope]) -> DeviceLoad:
    """``load`` without ``mine`` (envelopes on its device)."""
    return _changed(load, mine, -1)


def _changed(load: DeviceLoad, mine: list[Envelope], sign: int) -> DeviceLoad:
    """``load`` with ``mine`` added (``sign`` 1) or taken away (-1); built directly, not by
    ``dataclasses.replace``: a pass and a reservation change a device per launch and end."""
    return DeviceLoad(
        device=load.device,
        declared_util=load.declared_util + sign * sum(e.utilization_pct for e in mine),
        declared_mem=load.declared_mem + sign * sum(e.memory_mib for e in mine),
        external_util=load.external_util, external_mem=load.external_mem,
        allocations=load.allocations + sign * len(mine),
        exclusive=load.exclusive + sign * sum(1 for e in mine if e.exclusive))
