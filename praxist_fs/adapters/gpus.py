"""GPU inventories (R-GPU-1): what the host's NVIDIA devices look like right now.

Three implementations behind one ``GpuInventory`` interface, so the coordinator
never knows which one it holds:

- ``NvmlInventory``: the real devices, through pynvml, identified by UUID.
- ``FakeInventory``: a JSON file re-read on every sample, so tests and the demo
  can change devices, load and processes while a coordinator runs.
- ``NoInventory``: no NVML (no driver, no GPU, no library). CPU work runs; GPU
  work waits with the reason carried in ``GpuSample.error``.

``sample()`` never raises: a failure becomes ``GpuSample.error`` (the whole
sample) or a note in it (one device or one call), because a coordinator must
not die of a flaky driver call. Adapters decide nothing: ``owner`` is left
None (the coordinator maps pids to jobs, and ``attribute_processes`` applies its
map through each process's session), and no device is filtered for
scheduling reasons. Where a reading is missing we report what is conservative
rather than invent an idle device: a device whose memory or utilization cannot
be read is left out of the sample (with the reason in ``error``), and a device
whose processes cannot be listed has ``processes_visible=False`` so all of its
load counts as external. Memory is in MiB, utilization in percent.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from praxist_fs.adapters import procs
from praxist_fs.core.observations import GpuDevice, GpuProcess, GpuSample
from praxist_fs.errors import PraxistError

MIB = 1024 * 1024
NVML_LIBRARY = "libnvidia-ml.so.1"  # the name pynvml loads on Linux


class InventoryUnavailable(PraxistError):
    """A GPU inventory cannot start here (no pynvml, no driver, no device)."""


@runtime_checkable
class GpuInventory(Protocol):
    """What the coordinator needs of a GPU inventory; see the module docstring."""

    source: str  # "nvml", "fake" or "none"

    def sample(self) -> GpuSample:
        """The devices now. Never raises; a failure is reported in ``error``."""
        ...

    def close(self) -> None:
        """Release the inventory. Safe to call more than once."""
        ...


def _join_errors(errors: list[str]) -> str | None:
    return "; ".join(errors) if errors else None


# --- none ---------------------------------------------------------------------


class NoInventory:
    """No GPU can be observed; every sample carries the reason, so GPU work waits
    with a clear message instead of running on the CPU (R-GPU-1)."""

    source = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def sample(self) -> GpuSample:
        return GpuSample(source=self.source, devices=(), error=self.reason)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"NoInventory({self.reason!r})"


# --- topology -------------------------------------------------------------------

PCI_ADDRESS = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def pci_topology(bus_id: str, unique: str, sysfs: str = "/sys/bus/pci/devices"
                 ) -> tuple[str, ...]:
    """The groups a GPU shares with its neighbours, tightest first, for placement plans
    (R-POL-2): its PCIe switch (the bridge above its own downstream port), its host
    bridge, its NUMA node; from sysfs, by the PCI bus id NVML reports. A level sysfs
    does not tell gets a key of the device's own (``unique``), so it groups with nothing."""
    parts = bus_id.lower().split(":")
    if parts and len(parts[0]) == 8:  # NVML's 8-digit domain; sysfs writes 4
        parts[0] = parts[0][-4:]
    address = ":".join(parts)
    if not PCI_ADDRESS.fullmatch(address):
        return ()
    path = os.path.realpath(os.path.join(sysfs, address))
    components = path.split(os.sep)
    bridges = [c for c in components[:-1] if PCI_ADDRESS.fullmatch(c)][::-1]  # nearest first
    roots = [c for c in components if c.startswith("pci") and ":" in c]
    try:
        with open(os.path.join(path, "numa_node")) as handle:
            node = int(handle.read())
    except (OSError, ValueError):
        node = -1
    return (f"switch:{bridges[1]}" if len(bridges) >= 2 else f"switch:none:{unique}",
            f"host:{roots[0]}" if roots else f"host:none:{unique}",
            f"numa:{node}" if node >= 0 else f"numa:none:{unique}")


# --- fake ---------------------------------------------------------------------

_FAKE_DEVICE_KEYS = {"uuid", "index", "name", "memory_total_mib", "memory_used_mib",
                     "utilization_pct", "mig_mode", "processes_visible", "processes",
                     "topology"}
_FAKE_PROCESS_KEYS = {"pid", "used_memory_mib", "sm_util_pct"}


class _FakeFormatError(ValueError):
    """The fake inventory file is wrong at ``field``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def _number(obj: dict, key: str, where: str, *, default: float | None = None,
            low: float | None = None, high: float | None = None,
            nullable: bool = False) -> float | None:
    field = f"{where}.{key}"
    if key not in obj:
        if default is None and not nullable:
            raise _FakeFormatError(field, "missing (required)")
        return default
    value = obj[key]
    if value is None and nullable:
        return None
    if not _is_number(value):
        raise _FakeFormatError(field, f"expected a number, got {value!r}")
    if low is not None and value < low:
        raise _FakeFormatError(field, f"expected >= {low:g}, got {value!r}")
    if high is not None and value > high:
        raise _FakeFormatError(field, f"expected <= {high:g}, got {value!r}")
    return float(value)


def _int(obj: dict, key: str, where: str, *, low: int) -> int:
    field = f"{where}.{key}"
    if key not in obj:
        raise _FakeFormatError(field, "missing (required)")
    value = obj[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise _FakeFormatError(field, f"expected an integer, got {value!r}")
    if value < low:
        raise _FakeFormatError(field, f"expected >= {low}, got {value!r}")
    return value


def _bool(obj: dict, key: str, where: str, default: bool) -> bool:
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise _FakeFormatError(f"{where}.{key}", f"expected true or false, got {value!r}")
    return value


def _str(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _FakeFormatError(f"{where}.{key}", f"expected a non-empty string, got {value!r}")
    return value


def _no_unknown(obj: dict, known: set[str], where: str) -> None:
    for key in obj:
        if key not in known:
            raise _FakeFormatError(f"{where}.{key}",
                                   "unknown field (known: " + ", ".join(sorted(known)) + ")")


def _fake_process(raw: Any, where: str) -> GpuProcess:
    if not isinstance(raw, dict):
        raise _FakeFormatError(where, f"expected an object, got {raw!r}")
    _no_unknown(raw, _FAKE_PROCESS_KEYS, where)
    return GpuProcess(
        pid=_int(raw, "pid", where, low=1),
        used_memory_mib=_number(raw, "used_memory_mib", where, low=0, nullable=True),
        sm_util_pct=_number(raw, "sm_util_pct", where, low=0, high=100, nullable=True),
    )


def _fake_device(raw: Any, where: str) -> GpuDevice:
    if not isinstance(raw, dict):
        raise _FakeFormatError(where, f"expected an object, got {raw!r}")
    _no_unknown(raw, _FAKE_DEVICE_KEYS, where)
    total = _number(raw, "memory_total_mib", where)
    if total is not None and total <= 0:
        raise _FakeFormatError(f"{where}.memory_total_mib", f"expected > 0, got {total!r}")
    used = _number(raw, "memory_used_mib", where, default=0.0, low=0, high=total)
    processes_raw = raw.get("processes", [])
    if not isinstance(processes_raw, list):
        raise _FakeFormatError(f"{where}.processes", f"expected a list, got {processes_raw!r}")
    processes = tuple(_fake_process(p, f"{where}.processes[{i}]")
                      for i, p in enumerate(processes_raw))
    pids = [p.pid for p in processes]
    if len(set(pids)) != len(pids):
        raise _FakeFormatError(f"{where}.processes", f"duplicate pid in {pids}")
    return GpuDevice(
        uuid=_str(raw, "uuid", where),
        index=_int(raw, "index", where, low=0),
        name=_str(raw, "name", where),
        memory_total_mib=total,
        memory_used_mib=used,
        utilization_pct=_number(raw, "utilization_pct", where, default=0.0, low=0, high=100),
        processes=processes,
        mig_mode=_bool(raw, "mig_mode", where, False),
        processes_visible=_bool(raw, "processes_visible", where, True),
        topology=_topology(raw.get("topology", []), f"{where}.topology"),
    )


def _topology(raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(g, str) and g.strip() for g in raw):
        raise _FakeFormatError(where, f"expected a list of group names (tightest first), "
                                      f"got {raw!r}")
    return tuple(raw)


def parse_fake_inventory(text: str) -> tuple[GpuDevice, ...]:
    """Parse the fake inventory format; raises ValueError naming the wrong field.

    ``{"devices": [{"uuid", "index", "name", "memory_total_mib", "memory_used_mib"=0,
    "utilization_pct"=0, "mig_mode"=false, "processes_visible"=true,
    "processes"=[{"pid", "used_memory_mib"=null, "sm_util_pct"=null}]}]}``.
    Unknown keys are rejected so a typo cannot silently read as an idle device.
    Devices are returned in index order.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _FakeFormatError("<file>", f"not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _FakeFormatError("<file>", f"expected an object with 'devices', got {data!r:.80}")
    _no_unknown(data, {"devices"}, "<file>")
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, list):
        raise _FakeFormatError("devices", f"expected a list, got {raw_devices!r:.80}")
    devices = [_fake_device(d, f"devices[{i}]") for i, d in enumerate(raw_devices)]
    for attr in ("uuid", "index"):
        values = [getattr(d, attr) for d in devices]
        if len(set(values)) != len(values):
            raise _FakeFormatError(f"devices[].{attr}", f"duplicate value in {values}")
    return tuple(sorted(devices, key=lambda d: d.index))


class FakeInventory:
    """A test double of the NVML inventory: a JSON file (see
    ``parse_fake_inventory``) read again on every ``sample()``.

    The file may be rewritten at any time; a missing, half-written or invalid
    file gives a sample with ``error`` naming the problem, never an exception.
    Writers should still prefer write-then-rename.
    """

    source = "fake"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._closed = False

    def sample(self) -> GpuSample:
        if self._closed:
            return GpuSample(source=self.source, error="fake inventory is closed")
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            return GpuSample(source=self.source,
                             error=f"fake inventory {self.path}: cannot read ({exc})")
        try:
            devices = parse_fake_inventory(text)
        except ValueError as exc:
            return GpuSample(source=self.source, error=f"fake inventory {self.path}: {exc}")
        return GpuSample(source=self.source, devices=devices)

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"FakeInventory({self.path!r})"


# --- nvml ---------------------------------------------------------------------


@dataclass(slots=True)
class _ProcessRow:
    pid: int
    used_memory_mib: float | None
    sm_util_pct: float | None = None


def _nvml_str(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_mib(value: Any, not_available: int) -> float | None:
    """usedGpuMemory in bytes -> MiB; None when NVML cannot say (None or the sentinel)."""
    if value is None or value == not_available:
        return None
    try:
        return int(value) / MIB
    except (TypeError, ValueError):
        return None


class NvmlInventory:
    """The real devices through pynvml (R-GPU-1). Physical GPUs by UUID; MIG
    mode is reported, never claimed.

    Raises ``InventoryUnavailable`` from the constructor when pynvml is missing,
    ``nvmlInit`` fails or NVML sees no device, so ``open_inventory`` can fall
    back to ``NoInventory`` with the reason.

    Per-process SM utilization comes from ``nvmlDeviceGetProcessUtilization``,
    asked only for samples newer than the last one seen on that device: a pid
    with no new sample since the previous ``sample()`` gets ``sm_util_pct=None``
    (unknown), not 0.
    """

    source = "nvml"

    def __init__(self) -> None:
        try:  # as pynvml loads it: where it is missing, pynvml's 2 MB of bindings buy nothing
            ctypes.CDLL(NVML_LIBRARY)
        except OSError as exc:
            raise InventoryUnavailable(
                f"nvmlInit failed: NVML Shared Library Not Found ({exc})") from exc
        try:
            import pynvml
        except ImportError as exc:
            raise InventoryUnavailable(f"pynvml is not importable ({exc})") from exc
        self._nvml = pynvml
        self._topologies: dict[str, tuple[str, ...]] = {}
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise InventoryUnavailable(f"nvmlInit failed: {exc}") from exc
        self._closed = False
        self._last_seen: dict[str, int] = {}  # uuid -> last process-utilization timestamp
        try:
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:
            self.close()
            raise InventoryUnavailable(f"nvmlDeviceGetCount failed: {exc}") from exc
        if count < 1:
            self.close()
            raise InventoryUnavailable("NVML initialized but reports no device")
        self._not_available = int(pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value)

    def sample(self) -> GpuSample:
        if self._closed:
            return GpuSample(source=self.source, error="NVML inventory is closed")
        try:
            return self._sample()
        except Exception as exc:  # never let a driver surprise reach the loop
            return GpuSample(source=self.source,
                             error=f"NVML sample failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass  # nothing useful to do about a failed shutdown

    def __repr__(self) -> str:
        return "NvmlInventory()"

    def _sample(self) -> GpuSample:
        nvml = self._nvml
        errors: list[str] = []
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return GpuSample(source=self.source, error=f"nvmlDeviceGetCount: {exc}")
        devices = []
        for index in range(count):
            device = self._device(index, errors)
            if device is not None:
                devices.append(device)
        return GpuSample(source=self.source, devices=tuple(devices),
                         error=_join_errors(errors))

    def _device(self, index: int, errors: list[str]) -> GpuDevice | None:
        nvml = self._nvml
        where = f"device {index}"
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _nvml_str(nvml.nvmlDeviceGetUUID(handle))
            where = f"device {index} ({uuid})"
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
        except nvml.NVMLError as exc:
            # Without identity, memory or load the device cannot be described
            # honestly; leave it out rather than report it idle.
            errors.append(f"{where} left out: {exc}")
            return None
        try:
            name = _nvml_str(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            errors.append(f"{where} name: {exc}")
            name = "unknown"
        return GpuDevice(
            uuid=uuid,
            index=index,
            name=name,
            memory_total_mib=int(memory.total) / MIB,
            memory_used_mib=int(memory.used) / MIB,
            utilization_pct=float(utilization),
            mig_mode=self._mig_mode(handle, where, errors),
            topology=self._topology(handle, uuid),
            **self._processes(handle, uuid, where, errors),
        )

    def _topology(self, handle: Any, uuid: str) -> tuple[str, ...]:
        """Read once per device (it does not change while the driver is loaded)."""
        if uuid not in self._topologies:
            try:
                bus_id = _nvml_str(self._nvml.nvmlDeviceGetPciInfo(handle).busId)
            except self._nvml.NVMLError:
                bus_id = ""
            self._topologies[uuid] = pci_topology(bus_id, uuid)
        return self._topologies[uuid]

    def _mig_mode(self, handle: Any, where: str, errors: list[str]) -> bool:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except nvml.NVMLError_NotSupported:
            return False  # a GPU without MIG
        except nvml.NVMLError as exc:
            # Unknown MIG state: report it enabled so a whole-device placement
            # (which MIG would break) is not made on a guess.
            errors.append(f"{where} MIG mode unreadable, reported as enabled: {exc}")
            return True
        return current == nvml.NVML_DEVICE_MIG_ENABLE

    def _processes(self, handle: Any, uuid: str, where: str,
                   errors: list[str]) -> dict[str, Any]:
        """Union of compute and graphics processes, with per-process SM utilization.

        A compute listing that fails, or a graphics listing refused for
        permission, makes the processes invisible (all load external). A
        graphics listing that is merely unsupported is ignored: compute is what
        our jobs run.
        """
        nvml = self._nvml
        rows: dict[int, _ProcessRow] = {}
        listings = (("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
                    ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses))
        for kind, listing in listings:
            try:
                found = listing(handle)
            except nvml.NVMLError_NotSupported:
                if kind == "graphics":
                    continue
                return {"processes": (), "processes_visible": False}
            except nvml.NVMLError_NoPermission:
                return {"processes": (), "processes_visible": False}
            except Exception as exc:  # NVMLError or NVMLLibraryMismatchError
                errors.append(f"{where} {kind} processes: {exc}")
                return {"processes": (), "processes_visible": False}
            for proc in found:
                pid = int(proc.pid)
                used = _nvml_mib(getattr(proc, "usedGpuMemory", None), self._not_available)
                row = rows.get(pid)
                if row is None:
                    rows[pid] = _ProcessRow(pid, used)
                elif used is not None:
                    row.used_memory_mib = max(row.used_memory_mib or 0.0, used)
        if rows:
            self._process_utilization(handle, uuid, rows, where, errors)
        processes = tuple(GpuProcess(pid=r.pid, used_memory_mib=r.used_memory_mib,
                                     sm_util_pct=r.sm_util_pct)
                          for r in sorted(rows.values(), key=lambda r: r.pid))
        return {"processes": processes, "processes_visible": True}

    def _process_utilization(self, handle: Any, uuid: str, rows: dict[int, _ProcessRow],
                             where: str, errors: list[str]) -> None:
        nvml = self._nvml
        last = self._last_seen.get(uuid, 0)
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(handle, last)
        except (nvml.NVMLError_NotFound, nvml.NVMLError_NotSupported):
            return  # no sample newer than ``last``, or no per-process accounting
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_SUCCESS:
                return  # pynvml raises "success" when the buffer is empty
            errors.append(f"{where} process utilization: {exc}")
            return
        newest: dict[int, tuple[int, float]] = {}
        for s in samples:
            stamp = int(s.timeStamp)
            last = max(last, stamp)
            pid = int(s.pid)
            if pid not in newest or stamp >= newest[pid][0]:
                newest[pid] = (stamp, float(s.smUtil))
        self._last_seen[uuid] = last
        for pid, (_stamp, sm) in newest.items():
            if pid in rows:
                rows[pid].sm_util_pct = min(max(sm, 0.0), 100.0)


# --- factory ------------------------------------------------------------------


def open_inventory(fake_path: str | os.PathLike[str] | None) -> GpuInventory:
    """The fake inventory when a path is given, else NVML, else a ``NoInventory``
    whose samples say why NVML is unavailable."""
    if fake_path is not None:
        return FakeInventory(fake_path)
    try:
        return NvmlInventory()
    except InventoryUnavailable as exc:
        return NoInventory(f"NVML unavailable: {exc}")


def attribute_processes(sample: GpuSample, owners: dict[int, str]) -> GpuSample:
    """Map each GPU process to the praxist job whose shim leads its session, if any.

    A pid missing from our /proc is outside our PID namespace: unmappable."""
    devices = []
    for device in sample.devices:
        processes = []
        for process in device.processes:
            session = procs.session_id(process.pid)
            processes.append(replace(process, in_namespace=session is not None,
                                     owner=owners.get(session) if session is not None else None))
        devices.append(replace(device, processes=tuple(processes)))
    return replace(sample, devices=tuple(devices))
