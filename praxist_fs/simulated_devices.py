"""The simulated devices as a replay sees them, apart from the core's placement.

``praxist_fs.simulate`` carries out the core's decisions on N simulated GPUs; this
ledger follows what each job holds on each device from those decisions alone (a
launch's devices and the job's declared share, a suspension, a resume, an end), with
none of ``core/placement.py``'s code, and audits every decision against the per-device
limits the core promises (R-GPU-2, docs/CONFIG.md): declared utilization at most 100 %,
declared memory below 95 % of the device's, and a job of unknown demand alone on its
device. A replay that broke one says so (``Result.capacity_violations``) instead of
reporting numbers a real host could not have had. It also counts the devices that
hold nothing, so a replay can tell when the task file's cap on jobs at once, not the
GPUs, held work back (``Result.cap_bound_s``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MEMORY_CEILING = 0.95  # declared memory stays below this share of a device (R-GPU-2)
MIB_PER_GIB = 1024.0
MAX_VIOLATIONS = 20    # listed; the rest are only counted
SLACK = 1e-9           # sums kept here in another order than the core's may differ in the last bit


@dataclass(frozen=True, slots=True)
class Share:
    """What a job holds on each of its devices: a declared share, or (``util`` None) the
    whole device, exclusively."""

    util: float | None
    memory_mib: float

    @classmethod
    def of(cls, util_pct: float | None, memory_gib: float | None) -> Share:
        if util_pct is None or memory_gib is None:
            return cls(None, 0.0)
        return cls(util_pct, memory_gib * MIB_PER_GIB)


@dataclass(slots=True)
class DeviceLedger:
    """``count`` devices of ``memory_mib`` each: per device, the utilization and memory
    held, the jobs holding it (suspended ones too: they keep their memory) and how many
    of them hold it exclusively."""

    count: int
    memory_mib: float
    util: list[float] = field(init=False)
    memory: list[float] = field(init=False)
    holders: list[int] = field(init=False)
    exclusive: list[int] = field(init=False)
    idle: int = field(init=False)                   # devices nobody holds
    violations: list[str] = field(default_factory=list)
    broken: int = 0                                 # violations found, listed or not

    def __post_init__(self) -> None:
        self.util = [0.0] * self.count
        self.memory = [0.0] * self.count
        self.holders = [0] * self.count
        self.exclusive = [0] * self.count
        self.idle = self.count

    def take(self, job: str, devices: tuple[int, ...], share: Share, at: float) -> None:
        """``job`` starts on ``devices``: its share is held there, and checked."""
        for device in devices:
            if not self.holders[device]:
                self.idle -= 1
            self.holders[device] += 1
            if share.util is None:
                self.exclusive[device] += 1
            else:
                self.util[device] += share.util
                self.memory[device] += share.memory_mib
            self._check(job, device, at)

    def pause(self, devices: tuple[int, ...], share: Share) -> None:
        """Suspended: it gives back its utilization and keeps its memory (and an
        exclusive device)."""
        for device in devices:
            if share.util is not None:
                self.util[device] -= share.util

    def resume(self, job: str, devices: tuple[int, ...], share: Share, at: float) -> None:
        """Resumed on the devices it kept: its utilization is back, and checked."""
        for device in devices:
            if share.util is not None:
                self.util[device] += share.util
            self._check(job, device, at)

    def release(self, devices: tuple[int, ...], share: Share, paused: bool = False) -> None:
        """It ended (or was evicted): everything it held is free; ``paused``: it was
        suspended, so its utilization was given back already."""
        for device in devices:
            self.holders[device] -= 1
            if not self.holders[device]:
                self.idle += 1
            if share.util is None:
                self.exclusive[device] -= 1
            else:
                self.util[device] -= 0.0 if paused else share.util
                self.memory[device] -= share.memory_mib

    def _check(self, job: str, device: int, at: float) -> None:
        problems = []
        if self.exclusive[device] and self.holders[device] > 1:
            problems.append(f"a job of unknown demand shares it with "
                            f"{self.holders[device] - 1} other(s)")
        if self.util[device] > 100.0 * (1 + SLACK):
            problems.append(f"{self.util[device]:g}% utilization declared")
        if self.memory[device] >= MEMORY_CEILING * self.memory_mib * (1 + SLACK):
            problems.append(f"{self.memory[device] / MIB_PER_GIB:.1f} GiB declared of "
                            f"{self.memory_mib / MIB_PER_GIB:.1f}")
        if problems:
            self.broken += 1
            if len(self.violations) < MAX_VIOLATIONS:
                self.violations.append(f"t={at:g} s: job {job} on device {device}: "
                                       + "; ".join(problems))
