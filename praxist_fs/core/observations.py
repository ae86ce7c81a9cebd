"""What the adapters observe of the host, as plain values the core decides with.

Samples are soft state: they are never journaled. Every decision taken from
them is journaled instead (an ``AttemptLaunched`` carries its GPU UUIDs), so
replay never needs an old sample. Memory is in MiB, utilization in percent.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuProcess:
    """A process NVML reports on a device. ``owner`` is the praxist job it belongs to
    (this run's or another run's on the host), or None when it cannot be mapped."""

    pid: int
    used_memory_mib: float | None = None
    sm_util_pct: float | None = None
    owner: str | None = None
    in_namespace: bool | None = None  # False: the pid is not in our PID namespace (unmappable)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuDevice:
    uuid: str
    index: int
    name: str
    memory_total_mib: float
    memory_used_mib: float
    utilization_pct: float
    processes: tuple[GpuProcess, ...] = ()
    mig_mode: bool = False
    processes_visible: bool = True  # False: the driver would not list processes
    # Locality groups, tightest first (an NVLink domain, a PCIe switch, a NUMA node):
    # devices with the same label at one position are close. Empty: not reported.
    topology: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    """One inventory reading; ``error`` says why there is none (no driver, no GPU)."""

    source: str  # nvml, fake, none
    devices: tuple[GpuDevice, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Envelope:
    """A declared GPU allocation held on a device. ``speculative``: a lease's short-lived
    claim, which blocks further promises but never real work (real work preempts it)."""

    uuid: str
    utilization_pct: float
    memory_mib: float
    exclusive: bool = False
    owner: str = ""
    speculative: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PressureSample:
    """PSI ``some avg10`` per domain in percent; a missing domain was not observable."""

    source: str  # psi, psutil
    cpu: float | None = None
    memory: float | None = None
    io: float | None = None

    def get(self, domain: str) -> float | None:
        return getattr(self, domain)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostCapacity:
    """The resolved ``max_concurrent_experiments: auto`` and the bound that won."""

    limit: int
    bound: str  # e.g. "memory-bound at 2"
    details: dict[str, int] = field(default_factory=dict)
