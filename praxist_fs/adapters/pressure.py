"""Host pressure per domain (SPEC R-ADM-2): Linux PSI, with a psutil fallback.

PSI (``/proc/pressure/{cpu,memory,io}``) is read as the ``avg10`` of the
``some`` line: the percentage of the last ten seconds in which at least one
runnable task was stalled waiting for that resource. A domain whose file is
missing, unreadable or malformed is None ("not observable"); ``sample()``
never raises. Note that /proc/pressure is host-wide, not per cgroup.

When no PSI file can be read at all (kernels before 4.20, kernels booted with
``psi=0``, containers that hide /proc/pressure), ``sample()`` falls back to
psutil and says so with ``source="psutil"``. psutil has no stall accounting,
so these are **approximations** on PSI's 0..100 scale, chosen so that the
default thresholds (cpu 80/40, memory 20/5, io 40/10) keep their meaning
roughly:

cpu
    ``(load1 / cpus - 1) * 100``, clamped to 0..100, with ``load1`` the
    one-minute load average and ``cpus`` the CPUs this process may use. Up to
    one runnable task per CPU nobody needs to wait, so that is 0; above it the
    excess runnable tasks per CPU is the share of demand that has to queue,
    which is what PSI ``some`` measures. So high=80 is a load of 1.8 per CPU,
    low=40 is 1.4. Caveats: the window is one minute, not ten seconds, and
    Linux counts tasks in uninterruptible sleep (mostly I/O waits) in the load
    average, so heavy I/O reads as CPU pressure too. (``cpu_percent`` is not
    used: 100 % utilization with one task per CPU has no waiting at all.)
memory
    The larger of two signals, clamped to 0..100. *Swap-in rate*: each page
    read back from swap stalls the task that faulted on it; at about 1 ms a
    page (an SSD) the stalled share of a second is ``pages/s * 0.1 %``, so
    1000 pages/s (4 MiB/s) reads as 100. It needs two samples, so the first
    sample has only the other signal. *Low available memory*: below a knee of
    10 % available (``psutil.virtual_memory().available``) the kernel reclaims
    actively and tasks start to stall in direct reclaim, so ``(10 -
    available%) * 10``: 10 % available is 0, 8 % is 20 (the default high),
    9.5 % is 5 (the default low), 0 % is 100. Without swap the second signal
    alone carries it.
io
    None: not observable. psutil offers iowait (``cpu_times().iowait``),
    which is only counted while a CPU is otherwise idle and so vanishes on a
    busy host, and per-disk ``busy_time``, which is device utilization (a
    parallel NVMe device is "100 % busy" long before anyone waits). Neither
    measures tasks stalled on I/O, so profiles that declare ``io`` are not
    held on a guess.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from praxist_fs.core.observations import PressureSample
from praxist_fs.core.policy import PRESSURE_DOMAINS

__all__ = [
    "MEMORY_AVAILABLE_KNEE_PCT",
    "SWAPIN_PAGES_PER_S_AT_100",
    "PressureSampler",
    "cpu_pressure_from_load",
    "memory_pressure_from_host",
    "parse_psi_some_avg10",
]

MEMORY_AVAILABLE_KNEE_PCT = 10.0
SWAPIN_PAGES_PER_S_AT_100 = 1000.0  # ~1 ms stall a page: 1000 pages/s is a stalled second
PAGE_BYTES = 4096


def parse_psi_some_avg10(text: str) -> float | None:
    """``avg10`` of the ``some`` line of a PSI file; None when absent or malformed."""
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0] != "some":
            continue
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if key == "avg10" and sep:
                try:
                    number = float(value)
                except ValueError:
                    return None
                return number if math.isfinite(number) and 0.0 <= number <= 100.0 else None
        return None
    return None


def _clamp_pct(value: float) -> float:
    return min(100.0, max(0.0, value))


def cpu_pressure_from_load(load1: float, cpus: int) -> float | None:
    """The psutil approximation of PSI cpu ``some``: runnable excess over one task per CPU."""
    if cpus < 1 or not math.isfinite(load1) or load1 < 0:
        return None
    return _clamp_pct((load1 / cpus - 1.0) * 100.0)


def memory_pressure_from_host(available_pct: float,
                              swapin_pages_per_s: float | None = None) -> float | None:
    """The psutil approximation of PSI memory ``some``: swap-in stalls or scarce memory."""
    if not math.isfinite(available_pct):
        return None
    scarce = (MEMORY_AVAILABLE_KNEE_PCT - available_pct) * (100.0 / MEMORY_AVAILABLE_KNEE_PCT)
    swapping = 0.0
    if swapin_pages_per_s is not None and math.isfinite(swapin_pages_per_s):
        swapping = swapin_pages_per_s * (100.0 / SWAPIN_PAGES_PER_S_AT_100)
    return _clamp_pct(max(scarce, swapping))


class PressureSampler:
    """Reads ``<root>/{cpu,memory,io}``; ``root`` is injectable so tests write their own."""

    def __init__(self, root: str | Path = "/proc/pressure", *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self._clock = clock
        self._last_swapin: tuple[float, int] | None = None  # (at, bytes swapped in so far)

    def sample(self) -> PressureSample:
        values: dict[str, float | None] = {}
        readable = False
        for domain in PRESSURE_DOMAINS:
            try:
                text = (self.root / domain).read_text(encoding="ascii", errors="replace")
            except (OSError, ValueError):
                values[domain] = None
                continue
            readable = True
            values[domain] = parse_psi_some_avg10(text)
        if readable:
            return PressureSample(source="psi", **values)
        return self._sample_psutil()

    # --- fallback -------------------------------------------------------------

    def _sample_psutil(self) -> PressureSample:
        return PressureSample(source="psutil", cpu=self._cpu(), memory=self._memory(), io=None)

    @staticmethod
    def _cpu() -> float | None:
        try:
            load1 = psutil.getloadavg()[0]
            try:
                cpus = len(os.sched_getaffinity(0))
            except (AttributeError, OSError):
                cpus = psutil.cpu_count() or 1
        except (OSError, psutil.Error, RuntimeError):
            return None
        return cpu_pressure_from_load(load1, cpus)

    def _memory(self) -> float | None:
        try:
            memory = psutil.virtual_memory()
            available_pct = 100.0 * memory.available / memory.total
        except (OSError, psutil.Error, RuntimeError, ZeroDivisionError):
            return None
        rate: float | None = None
        try:
            swapped_in = int(psutil.swap_memory().sin)
        except (OSError, psutil.Error, RuntimeError, ValueError):
            swapped_in = None
        if swapped_in is not None:
            now = self._clock()
            if self._last_swapin is not None:
                then, before = self._last_swapin
                if now > then and swapped_in >= before:
                    rate = (swapped_in - before) / PAGE_BYTES / (now - then)
            self._last_swapin = (now, swapped_in)
        return memory_pressure_from_host(available_pct, rate)
