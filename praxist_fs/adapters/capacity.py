"""Gather the host facts for ``max_concurrent_experiments: auto`` (SPEC R-ADM-3).

The arithmetic is ``praxist_fs.core.capacity.resolve_capacity``; this module
only reads the host:

- CPUs: ``len(os.sched_getaffinity(0))`` (a cpuset or taskset narrows it);
- available memory: ``psutil.virtual_memory().available``;
- own running memory: the RSS of the run's running experiments, each pid
  with its whole process tree (counted once each), added back by the
  resolver so the limit does not collapse as admitted work starts;
- cgroup limits: cgroup v2 ``memory.max``/``cpu.max`` (``max`` is unlimited),
  or cgroup v1 ``memory.limit_in_bytes``/``cpu.cfs_quota_us`` +
  ``cpu.cfs_period_us`` (``-1`` and the page-counter maximum are unlimited).
  The cgroup of this process is found in ``/proc/self/cgroup``; every
  ancestor up to the mount root is read too, because a parent's limit binds
  its children, and the smallest one wins. The cgroup's current use
  (``memory.current``/``memory.usage_in_bytes`` less its inactive file
  cache, the working set ``docker stats`` and the kubelet report) lets the
  resolver see memory other processes of the same cgroup hold.

Nothing here raises on a missing or malformed file: an unreadable fact is
"no limit" (cgroup) or skipped (a process that exited).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from praxist_fs.core.capacity import AUTO_CAP, OS_RESERVE_MIB, resolve_capacity
from praxist_fs.core.observations import HostCapacity

__all__ = ["CgroupLimits", "read_cgroup_limits", "read_host_capacity", "tree_rss_mib"]

MIB = 1024 * 1024
# Above this a "limit" is the kernel's way of saying none (v1 reports
# PAGE_COUNTER_MAX * page size, 9223372036854771712, for an unlimited group).
_UNLIMITED_BYTES = 2**60


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    """What the cgroup of this process allows; None where it sets no limit."""

    version: str  # "v2", "v1" or "none"
    memory_limit_mib: float | None = None
    memory_used_mib: float | None = None
    cpu_limit: float | None = None  # CPUs (quota / period)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except (OSError, ValueError):
        return None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _stat_value(text: str | None, key: str) -> int | None:
    """One ``key value`` line of a memory.stat file."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return _int_or_none(parts[1])
    return None


def _chain(mount: Path, cgroup_path: str) -> list[Path]:
    """The cgroup's directory and its ancestors up to the mount point, leaf first.

    When the path of /proc/self/cgroup is not visible under the mount (a
    container that mounts only its own group at the root), the mount point
    itself is the group.
    """
    relative = cgroup_path.strip("/")
    leaf = mount / relative if relative else mount
    if relative and ".." not in relative.split("/") and leaf.is_dir():
        chain = [leaf]
        while chain[-1] != mount:
            chain.append(chain[-1].parent)
        return chain
    return [mount]


def _parse_proc_cgroup(text: str | None) -> tuple[str | None, dict[str, tuple[str, str]]]:
    """(the v2 path of the ``0::`` line, v1 controller -> (its hierarchy's controllers, path))."""
    unified: str | None = None
    v1: dict[str, tuple[str, str]] = {}
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            unified = path
        for controller in controllers.split(","):
            if controller:
                v1[controller] = (controllers, path)
    return unified, v1


def _v1_group(cgroup_root: Path, controller: str,
              v1: dict[str, tuple[str, str]]) -> list[Path] | None:
    """The v1 group of ``controller`` and its ancestors, e.g. under /sys/fs/cgroup/cpu,cpuacct."""
    if controller not in v1:
        return None
    controllers, path = v1[controller]
    for name in (controllers, controller):
        mount = cgroup_root / name
        if mount.is_dir():
            return _chain(mount, path)
    return None


def _min(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _v2_limits(cgroup_root: Path, path: str) -> CgroupLimits:
    chain = _chain(cgroup_root, path)
    memory: list[float | None] = []
    cpu: list[float | None] = []
    for directory in chain:
        raw = _read(directory / "memory.max")
        limit = _int_or_none(raw) if raw != "max" else None
        memory.append(limit / MIB if limit is not None and 0 < limit < _UNLIMITED_BYTES else None)
        quota_period = (_read(directory / "cpu.max") or "").split()
        if len(quota_period) == 2 and quota_period[0] != "max":
            quota, period = _int_or_none(quota_period[0]), _int_or_none(quota_period[1])
            if quota and period and quota > 0 and period > 0:
                cpu.append(quota / period)
    leaf = chain[0]
    current = _int_or_none(_read(leaf / "memory.current"))
    used = None
    if current is not None:
        inactive = _stat_value(_read(leaf / "memory.stat"), "inactive_file") or 0
        used = max(0, current - inactive) / MIB
    limit = _min(memory)
    return CgroupLimits(version="v2", memory_limit_mib=limit,
                        memory_used_mib=used if limit is not None else None,
                        cpu_limit=_min(cpu))


def _v1_limits(cgroup_root: Path, v1: dict[str, tuple[str, str]]) -> CgroupLimits:
    memory_limit = memory_used = cpu_limit = None
    chain = _v1_group(cgroup_root, "memory", v1)
    if chain is not None:
        limits: list[float | None] = []
        for directory in chain:
            limit = _int_or_none(_read(directory / "memory.limit_in_bytes"))
            limits.append(limit / MIB if limit is not None and 0 < limit < _UNLIMITED_BYTES
                          else None)
        stat = _read(chain[0] / "memory.stat")
        hierarchical = _stat_value(stat, "hierarchical_memory_limit")
        if hierarchical is not None and 0 < hierarchical < _UNLIMITED_BYTES:
            limits.append(hierarchical / MIB)
        memory_limit = _min(limits)
        usage = _int_or_none(_read(chain[0] / "memory.usage_in_bytes"))
        if memory_limit is not None and usage is not None:
            inactive = _stat_value(stat, "total_inactive_file") or 0
            memory_used = max(0, usage - inactive) / MIB
    chain = _v1_group(cgroup_root, "cpu", v1)
    if chain is not None:
        quotas: list[float | None] = []
        for directory in chain:
            quota = _int_or_none(_read(directory / "cpu.cfs_quota_us"))
            period = _int_or_none(_read(directory / "cpu.cfs_period_us"))
            if quota and period and quota > 0 and period > 0:
                quotas.append(quota / period)
        cpu_limit = _min(quotas)
    return CgroupLimits(version="v1", memory_limit_mib=memory_limit,
                        memory_used_mib=memory_used, cpu_limit=cpu_limit)


def read_cgroup_limits(
    *,
    proc_cgroup: str | Path = "/proc/self/cgroup",
    cgroup_root: str | Path = "/sys/fs/cgroup",
) -> CgroupLimits:
    """The memory and CPU limits of this process's cgroup (v2, else v1); never raises."""
    root = Path(cgroup_root)
    unified, v1 = _parse_proc_cgroup(_read(Path(proc_cgroup)))
    try:
        if (root / "cgroup.controllers").is_file() and unified is not None:
            return _v2_limits(root, unified)
        if "memory" in v1 or "cpu" in v1:
            return _v1_limits(root, v1)
    except OSError:
        pass
    return CgroupLimits(version="none")


def tree_rss_mib(pids: Iterable[int]) -> float:
    """Resident memory of each pid and all its descendants, each process counted once."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except (psutil.Error, ValueError):
            continue
        for process in tree:
            if process.pid in seen:
                continue
            seen.add(process.pid)
            try:
                total += process.memory_info().rss
            except psutil.Error:
                continue
    return total / MIB


def _affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_host_capacity(
    per_experiment_mib: float,
    own_pids: Iterable[int],
    *,
    cap: int = AUTO_CAP,
    reserve_mib: float = OS_RESERVE_MIB,
    proc_cgroup: str | Path = "/proc/self/cgroup",
    cgroup_root: str | Path = "/sys/fs/cgroup",
) -> HostCapacity:
    """Sample the host and resolve ``auto``; ``own_pids`` are the run's running experiments.

    A cgroup memory limit at or above physical memory constrains nothing the
    host bound does not already, so it is left out (as seed 003 does).
    """
    memory = psutil.virtual_memory()
    cgroup = read_cgroup_limits(proc_cgroup=proc_cgroup, cgroup_root=cgroup_root)
    cgroup_memory = cgroup.memory_limit_mib
    if cgroup_memory is not None and cgroup_memory >= memory.total / MIB:
        cgroup_memory = None
    return resolve_capacity(
        cap=cap,
        cpus=_affinity_cpus(),
        available_memory_mib=memory.available / MIB,
        own_running_memory_mib=tree_rss_mib(own_pids),
        per_experiment_mib=per_experiment_mib,
        reserve_mib=reserve_mib,
        cgroup_memory_limit_mib=cgroup_memory,
        cgroup_cpu_limit=cgroup.cpu_limit,
        cgroup_memory_used_mib=cgroup.memory_used_mib if cgroup_memory is not None else None,
    )
