"""GPU inventory contract (R-GPU-1), run against every implementation.

The same contract runs against FakeInventory (always, on real files in
tmp_path) and NvmlInventory (skipped where NVML cannot initialize, e.g. a
machine without a driver; on the GPU machine tests/gpu/run_gpu_check.sh sets
PRAXIST_REQUIRE_NVML=1 so that a skip becomes a failure).

A last section drives NvmlInventory over the real pynvml module with a few of
its functions replaced, to cover NVML failure paths (not supported, no
permission, no new utilization sample) that a healthy GPU never shows.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from praxist_fs.adapters import gpus
from praxist_fs.adapters.gpus import (
    FakeInventory,
    GpuInventory,
    InventoryUnavailable,
    NoInventory,
    NvmlInventory,
    open_inventory,
    pci_topology,
)
from praxist_fs.core.observations import GpuDevice, GpuSample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gpus"
FIXTURE_NAMES = ("two_h200.json", "one_h200_busy.json", "eight_h200.json")
REQUIRE_NVML = os.environ.get("PRAXIST_REQUIRE_NVML") == "1"


def _nvml_or_skip() -> NvmlInventory:
    try:
        return NvmlInventory()
    except InventoryUnavailable as exc:
        if REQUIRE_NVML:
            pytest.fail(f"PRAXIST_REQUIRE_NVML=1 but NVML cannot initialize: {exc}")
        pytest.skip(f"NVML cannot initialize on this machine (no driver or GPU): {exc}")


@pytest.fixture(params=[*(f"fake:{name}" for name in FIXTURE_NAMES), "nvml"])
def inventory(request, tmp_path):
    if request.param == "nvml":
        inv = _nvml_or_skip()
    else:
        path = tmp_path / "gpus.json"
        shutil.copyfile(FIXTURES / request.param.split(":", 1)[1], path)
        inv = FakeInventory(path)
    yield inv
    inv.close()


def write_json(path: Path, data: object) -> None:
    """Write-then-rename, as the demo and tests are told to."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def fake_device(n: int = 0, **fields) -> dict:
    device = {"uuid": f"GPU-fake-{n}", "index": n, "name": "NVIDIA H200 (fake)",
              "memory_total_mib": 143771}
    device.update(fields)
    return device


# --- the contract -------------------------------------------------------------


class TestContract:
    def test_is_a_gpu_inventory(self, inventory):
        assert isinstance(inventory, GpuInventory)
        assert inventory.source in ("nvml", "fake")

    def test_sample_is_a_gpu_sample_with_source(self, inventory):
        sample = inventory.sample()
        assert isinstance(sample, GpuSample)
        assert sample.source == inventory.source
        assert sample.error is None, sample.error
        assert sample.devices, "a working inventory here has at least one device"
        assert all(isinstance(d, GpuDevice) for d in sample.devices)

    def test_devices_have_unique_uuids_in_index_order(self, inventory):
        devices = inventory.sample().devices
        uuids = [d.uuid for d in devices]
        assert all(isinstance(u, str) and u for u in uuids)
        assert len(set(uuids)) == len(uuids)
        indices = [d.index for d in devices]
        assert indices == sorted(indices)
        assert len(set(indices)) == len(indices)
        assert all(d.name for d in devices)

    def test_memory_and_utilization_in_range(self, inventory):
        for d in inventory.sample().devices:
            assert d.memory_total_mib > 0
            assert 0 <= d.memory_used_mib <= d.memory_total_mib, d
            assert 0 <= d.utilization_pct <= 100, d
            assert isinstance(d.mig_mode, bool)
            assert isinstance(d.processes_visible, bool)

    def test_processes_are_well_formed(self, inventory):
        for d in inventory.sample().devices:
            if not d.processes_visible:
                assert d.processes == ()
            pids = [p.pid for p in d.processes]
            assert len(set(pids)) == len(pids)
            for p in d.processes:
                assert isinstance(p.pid, int) and p.pid > 0
                assert p.used_memory_mib is None or p.used_memory_mib >= 0
                assert p.sm_util_pct is None or 0 <= p.sm_util_pct <= 100
                assert p.owner is None  # the coordinator maps owners, not the adapter

    def test_repeated_samples_are_stable(self, inventory):
        first, second = inventory.sample(), inventory.sample()
        assert [d.uuid for d in first.devices] == [d.uuid for d in second.devices]
        assert second.error is None, second.error

    def test_close_is_safe_twice_and_sample_never_raises_after(self, inventory):
        inventory.close()
        inventory.close()
        sample = inventory.sample()
        assert sample.source == inventory.source
        assert sample.error


# --- NVML only (the GPU machine) ------------------------------------------------


def test_nvml_uuids_look_like_physical_gpus():
    inv = _nvml_or_skip()
    try:
        sample = inv.sample()
        assert sample.error is None, sample.error
        for d in sample.devices:
            assert d.uuid.startswith("GPU-"), d.uuid
            assert d.memory_total_mib > 1024
    finally:
        inv.close()


def test_nvml_two_instances_share_the_library():
    """nvmlInit/nvmlShutdown are reference counted: closing one inventory must
    not break another (the coordinator and the profiler may both hold one)."""
    first = _nvml_or_skip()
    second = NvmlInventory()
    first.close()
    try:
        sample = second.sample()
        assert sample.error is None, sample.error
        assert sample.devices
    finally:
        second.close()


# --- fake only ----------------------------------------------------------------


def test_fixtures_have_the_documented_shape():
    two = FakeInventory(FIXTURES / "two_h200.json").sample()
    assert [d.uuid for d in two.devices] == ["GPU-fake-0", "GPU-fake-1"]
    assert all(d.memory_total_mib == 143771 and d.memory_used_mib == 0 for d in two.devices)
    busy = FakeInventory(FIXTURES / "one_h200_busy.json").sample()
    (device,) = busy.devices
    assert device.memory_used_mib == 60000 and device.utilization_pct == 50
    assert [p.used_memory_mib for p in device.processes] == [60000]
    eight = FakeInventory(FIXTURES / "eight_h200.json").sample()
    assert [d.index for d in eight.devices] == list(range(8))


def test_fake_defaults(tmp_path):
    path = tmp_path / "gpus.json"
    write_json(path, {"devices": [fake_device(0)]})
    (device,) = FakeInventory(path).sample().devices
    assert (device.memory_used_mib, device.utilization_pct, device.processes,
            device.mig_mode, device.processes_visible) == (0, 0, (), False, True)


def test_fake_rewrite_changes_the_next_sample(tmp_path):
    path = tmp_path / "gpus.json"
    write_json(path, {"devices": [fake_device(0)]})
    inv = FakeInventory(path)
    idle = inv.sample().devices[0]
    assert idle.utilization_pct == 0 and idle.processes == ()

    write_json(path, {"devices": [fake_device(
        0, memory_used_mib=30000, utilization_pct=70,
        processes=[{"pid": 777, "used_memory_mib": 30000, "sm_util_pct": 70},
                   {"pid": 778}])]})
    busy = inv.sample().devices[0]
    assert (busy.memory_used_mib, busy.utilization_pct) == (30000, 70)
    assert [(p.pid, p.used_memory_mib, p.sm_util_pct) for p in busy.processes] == [
        (777, 30000, 70), (778, None, None)]

    write_json(path, {"devices": [fake_device(0, processes_visible=False), fake_device(1)]})
    sample = inv.sample()
    assert [d.uuid for d in sample.devices] == ["GPU-fake-0", "GPU-fake-1"]
    assert sample.devices[0].processes_visible is False


def test_fake_devices_come_back_in_index_order(tmp_path):
    path = tmp_path / "gpus.json"
    write_json(path, {"devices": [fake_device(1), fake_device(0)]})
    assert [d.index for d in FakeInventory(path).sample().devices] == [0, 1]


def test_fake_half_written_file_is_an_error_not_an_exception(tmp_path):
    path = tmp_path / "gpus.json"
    full = json.dumps({"devices": [fake_device(0)]})
    path.write_text(full[: len(full) // 2])
    sample = FakeInventory(path).sample()
    assert sample.source == "fake" and sample.devices == ()
    assert "not valid JSON" in sample.error and str(path) in sample.error


@pytest.mark.parametrize("device, field", [
    (fake_device(0, memory_total_mib="lots"), "devices[0].memory_total_mib"),
    (fake_device(0, memory_used_mib=200000), "devices[0].memory_used_mib"),
    (fake_device(0, utilization_pct=101), "devices[0].utilization_pct"),
    (fake_device(0, utilization_pct=True), "devices[0].utilization_pct"),
    (fake_device(0, mig_mode="no"), "devices[0].mig_mode"),
    (fake_device(0, processes={"pid": 1}), "devices[0].processes"),
    (fake_device(0, processes=[{"pid": 0}]), "devices[0].processes[0].pid"),
    (fake_device(0, processes=[{"pid": 5, "sm_util_pct": -1}]),
     "devices[0].processes[0].sm_util_pct"),
    (fake_device(0, processes=[{"pid": 5, "colour": "red"}]), "devices[0].processes[0].colour"),
    (fake_device(0, utilisation_pct=50), "devices[0].utilisation_pct"),
    ({"index": 0, "name": "x", "memory_total_mib": 1}, "devices[0].uuid"),
    (fake_device(0, index=-1), "devices[0].index"),
])
def test_fake_invalid_field_is_named(tmp_path, device, field):
    path = tmp_path / "gpus.json"
    write_json(path, {"devices": [device]})
    sample = FakeInventory(path).sample()
    assert sample.devices == ()
    assert f"{field}:" in sample.error, sample.error


@pytest.mark.parametrize("data, field", [
    ([], "<file>"),
    ({"gpus": []}, "<file>.gpus"),
    ({"devices": "none"}, "devices"),
    ({"devices": [fake_device(0), fake_device(0)]}, "devices[].uuid"),
    ({"devices": [fake_device(0), fake_device(1, index=0)]}, "devices[].index"),
])
def test_fake_invalid_document_is_named(tmp_path, data, field):
    path = tmp_path / "gpus.json"
    write_json(path, data)
    sample = FakeInventory(path).sample()
    assert sample.devices == () and f"{field}:" in sample.error, sample.error


def test_fake_missing_file_is_an_error(tmp_path):
    path = tmp_path / "absent.json"
    inv = FakeInventory(path)
    sample = inv.sample()
    assert sample.source == "fake" and sample.devices == ()
    assert "cannot read" in sample.error and str(path) in sample.error
    write_json(path, {"devices": [fake_device(0)]})  # appears later: picked up
    assert inv.sample().error is None


def test_fake_recovers_after_a_bad_write(tmp_path):
    path = tmp_path / "gpus.json"
    inv = FakeInventory(path)
    path.write_text("{")
    assert inv.sample().error
    write_json(path, {"devices": [fake_device(0)]})
    assert inv.sample().devices[0].uuid == "GPU-fake-0"


# --- none and the factory -----------------------------------------------------


def test_no_inventory_reports_its_reason():
    inv = NoInventory("NVML unavailable: test")
    assert isinstance(inv, GpuInventory)
    assert inv.sample() == GpuSample(source="none", error="NVML unavailable: test")
    inv.close()
    inv.close()


def test_open_inventory_with_a_path_is_fake(tmp_path):
    inv = open_inventory(str(tmp_path / "gpus.json"))
    assert isinstance(inv, FakeInventory) and inv.source == "fake"


def test_open_inventory_here(tmp_path):
    """Without a GPU (this CI): "none" with an error naming NVML. With one: NVML."""
    inv = open_inventory(None)
    try:
        sample = inv.sample()
        if REQUIRE_NVML:
            assert inv.source == "nvml", sample.error
        if inv.source == "none":
            assert sample.devices == ()
            assert "NVML" in sample.error
        else:
            assert inv.source == "nvml" and sample.error is None, sample.error
    finally:
        inv.close()


@pytest.fixture
def nvml_library(monkeypatch):
    """The NVML library "loads" (dlopen(NULL): the program itself), so that the pynvml
    functions a test replaces decide what NvmlInventory sees, on any machine."""
    monkeypatch.setattr(gpus, "NVML_LIBRARY", None)


def test_without_the_nvml_library_pynvml_is_never_imported(monkeypatch):
    monkeypatch.setattr(gpus, "NVML_LIBRARY", "libpraxist-no-such-library.so.1")
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    sample = open_inventory(None).sample()
    assert sample.source == "none" and "NVML Shared Library Not Found" in sample.error
    assert "libpraxist-no-such-library.so.1" in sample.error
    assert "pynvml" not in sys.modules  # its bindings would only cost memory


def test_open_inventory_falls_back_when_the_driver_is_missing(monkeypatch, nvml_library):
    import pynvml

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    inv = open_inventory(None)
    assert isinstance(inv, NoInventory)
    sample = inv.sample()
    assert sample.source == "none" and sample.devices == ()
    assert sample.error.startswith("NVML unavailable:") and "Driver Not Loaded" in sample.error


def test_open_inventory_falls_back_without_pynvml(monkeypatch, nvml_library):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sample = open_inventory(None).sample()
    assert sample.source == "none" and "NVML unavailable" in sample.error
    assert "pynvml" in sample.error


def test_open_inventory_falls_back_when_nvml_sees_no_device(monkeypatch, nvml_library):
    import pynvml

    shutdowns = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: shutdowns.append(1))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 0)
    sample = open_inventory(None).sample()
    assert sample.source == "none" and "no device" in sample.error
    assert shutdowns == [1]  # the init it did is undone


# --- NvmlInventory over a simulated driver --------------------------------------


class SimulatedDriver:
    """Replaces the handful of pynvml functions NvmlInventory calls, keeping the
    real pynvml error classes and constants. Each attribute can be changed by a
    test to describe a device or make a call fail."""

    def __init__(self, pynvml):
        self.pynvml = pynvml
        self.devices = [dict(uuid="GPU-sim-0", name="NVIDIA H200", total=143771 * 2**20,
                             used=2048 * 2**20, util=37, mig=[0, 0],
                             compute=[(100, 1024 * 2**20)], graphics=[],
                             samples=[(100, 10, 40), (100, 20, 60)])]
        self.failures: dict[tuple[int, str], Exception] = {}
        self.timestamps_asked: list[int] = []
        self.initialized = 0

    def error(self, code):
        return self.pynvml.NVMLError(code)

    def install(self, monkeypatch):
        p = self.pynvml

        def call(name, handle, result):
            failure = self.failures.get((handle, name))
            if failure is not None:
                raise failure
            return result

        def procs(rows):
            return [SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in rows]

        def process_utilization(h, stamp):
            self.timestamps_asked.append(stamp)
            rows = [SimpleNamespace(pid=pid, timeStamp=t, smUtil=sm)
                    for pid, t, sm in self.devices[h]["samples"] if t > stamp]
            if not rows:
                raise self.error(p.NVML_ERROR_NOT_FOUND)
            return call("util_proc", h, rows)

        def init():
            self.initialized += 1

        def shutdown():
            self.initialized -= 1

        fns = {
            "nvmlInit": init,
            "nvmlShutdown": shutdown,
            "nvmlDeviceGetCount": lambda: len(self.devices),
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetUUID": lambda h: call("uuid", h, self.devices[h]["uuid"]),
            "nvmlDeviceGetName": lambda h: call("name", h, self.devices[h]["name"]),
            "nvmlDeviceGetMemoryInfo": lambda h: call("memory", h, SimpleNamespace(
                total=self.devices[h]["total"], used=self.devices[h]["used"],
                free=self.devices[h]["total"] - self.devices[h]["used"])),
            "nvmlDeviceGetUtilizationRates": lambda h: call(
                "util", h, SimpleNamespace(gpu=self.devices[h]["util"], memory=0)),
            "nvmlDeviceGetMigMode": lambda h: call("mig", h, self.devices[h]["mig"]),
            "nvmlDeviceGetComputeRunningProcesses": lambda h: call(
                "compute", h, procs(self.devices[h]["compute"])),
            "nvmlDeviceGetGraphicsRunningProcesses": lambda h: call(
                "graphics", h, procs(self.devices[h]["graphics"])),
            "nvmlDeviceGetProcessUtilization": process_utilization,
        }
        for name, fn in fns.items():
            monkeypatch.setattr(p, name, fn)
        return self


@pytest.fixture
def sim(monkeypatch, nvml_library):
    import pynvml
    return SimulatedDriver(pynvml).install(monkeypatch)


def test_sim_maps_a_device(sim):
    inv = NvmlInventory()
    sample = inv.sample()
    assert sample.error is None and sample.source == "nvml"
    (d,) = sample.devices
    assert (d.uuid, d.index, d.name) == ("GPU-sim-0", 0, "NVIDIA H200")
    assert (d.memory_total_mib, d.memory_used_mib, d.utilization_pct) == (143771, 2048, 37)
    assert d.mig_mode is False and d.processes_visible is True
    (p,) = d.processes
    assert (p.pid, p.used_memory_mib, p.sm_util_pct, p.owner) == (100, 1024, 60, None)
    inv.close()
    inv.close()
    assert sim.initialized == 0


def test_sim_process_utilization_asks_only_for_new_samples(sim):
    inv = NvmlInventory()
    inv.sample()
    second = inv.sample()  # nothing newer than timestamp 20: NotFound -> unknown
    assert sim.timestamps_asked == [0, 20]
    assert second.error is None
    assert second.devices[0].processes[0].sm_util_pct is None
    sim.devices[0]["samples"].append((100, 30, 5))
    assert inv.sample().devices[0].processes[0].sm_util_pct == 5
    inv.close()


def test_sim_union_of_compute_and_graphics_and_unknown_memory(sim):
    not_available = sim.pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    sim.devices[0].update(compute=[(100, 1024 * 2**20), (101, None)],
                          graphics=[(100, 512 * 2**20), (102, not_available)],
                          samples=[])
    inv = NvmlInventory()
    procs = inv.sample().devices[0].processes
    assert [(p.pid, p.used_memory_mib, p.sm_util_pct) for p in procs] == [
        (100, 1024, None), (101, None, None), (102, None, None)]
    inv.close()


@pytest.mark.parametrize("code", ["NVML_ERROR_NO_PERMISSION", "NVML_ERROR_NOT_SUPPORTED"])
def test_sim_unlistable_processes_are_invisible(sim, code):
    sim.failures[(0, "compute")] = sim.error(getattr(sim.pynvml, code))
    inv = NvmlInventory()
    sample = inv.sample()
    assert sample.error is None
    assert sample.devices[0].processes_visible is False and sample.devices[0].processes == ()
    inv.close()


def test_sim_graphics_not_supported_is_ignored(sim):
    sim.failures[(0, "graphics")] = sim.error(sim.pynvml.NVML_ERROR_NOT_SUPPORTED)
    inv = NvmlInventory()
    d = inv.sample().devices[0]
    assert d.processes_visible is True and [p.pid for p in d.processes] == [100]
    inv.close()


def test_sim_mig(sim):
    sim.devices[0]["mig"] = [sim.pynvml.NVML_DEVICE_MIG_ENABLE, 0]
    inv = NvmlInventory()
    assert inv.sample().devices[0].mig_mode is True
    sim.failures[(0, "mig")] = sim.error(sim.pynvml.NVML_ERROR_NOT_SUPPORTED)
    sample = inv.sample()
    assert sample.devices[0].mig_mode is False and sample.error is None
    sim.failures[(0, "mig")] = sim.error(sim.pynvml.NVML_ERROR_UNKNOWN)
    sample = inv.sample()
    assert sample.devices[0].mig_mode is True and "MIG" in sample.error
    inv.close()


def test_sim_failed_device_call_is_reported_not_raised(sim):
    sim.devices.append(dict(sim.devices[0], uuid="GPU-sim-1", compute=[], samples=[]))
    sim.failures[(0, "memory")] = sim.error(sim.pynvml.NVML_ERROR_GPU_IS_LOST)
    sim.failures[(1, "util_proc")] = sim.error(sim.pynvml.NVML_ERROR_UNKNOWN)
    sim.failures[(1, "name")] = sim.error(sim.pynvml.NVML_ERROR_UNKNOWN)
    inv = NvmlInventory()
    sample = inv.sample()
    assert [d.uuid for d in sample.devices] == ["GPU-sim-1"]  # device 0 left out, not idle
    assert sample.devices[0].name == "unknown"
    assert "device 0" in sample.error and "GPU is lost" in sample.error
    assert "GPU-sim-1" in sample.error
    inv.close()


def test_sim_unexpected_exception_becomes_an_error(sim, monkeypatch):
    def boom():
        raise RuntimeError("driver surprise")

    inv = NvmlInventory()
    monkeypatch.setattr(sim.pynvml, "nvmlDeviceGetCount", boom)
    sample = inv.sample()
    assert sample.devices == () and "driver surprise" in sample.error
    inv.close()


def _sysfs(tmp_path: Path, gpus: dict[str, tuple[str, int]]) -> Path:
    """A sysfs like a two-switch host: /sys/devices/pci0000:3a/<root port>/<switch up>/
    <switch down>/<gpu>, and /sys/bus/pci/devices/<gpu> linking to it."""
    devices, bus = tmp_path / "devices", tmp_path / "bus"
    bus.mkdir()
    for address, (switch, node) in gpus.items():
        down = f"0000:{switch}:{address[-4:-2]}.0"
        path = devices / "pci0000:3a" / "0000:3a:00.0" / f"0000:{switch}:00.0" / down / address
        path.mkdir(parents=True)
        (path / "numa_node").write_text(f"{node}\n")
        (bus / address).symlink_to(path)
    return bus


def test_pci_topology_groups_gpus_by_switch_then_host_bridge_then_numa(tmp_path):
    bus = _sysfs(tmp_path, {"0000:3d:00.0": ("3b", 0), "0000:3e:00.0": ("3b", 0),
                            "0000:5d:00.0": ("5b", 1)})
    a, b, c = (pci_topology(f"00000000:{x}:00.0", x, str(bus)) for x in ("3D", "3E", "5D"))
    assert a == ("switch:0000:3b:00.0", "host:pci0000:3a", "numa:0")
    assert a == b and c[0] != a[0] and c[1] == a[1] and c[2] == "numa:1"


def test_pci_topology_without_sysfs_groups_with_nothing(tmp_path):
    assert pci_topology("00000000:3B:00.0", "GPU-x", str(tmp_path)) == (
        "switch:none:GPU-x", "host:none:GPU-x", "numa:none:GPU-x")
    assert pci_topology("not a bus id", "GPU-x", str(tmp_path)) == ()


def test_fake_topology_is_read_and_checked(tmp_path):
    path = tmp_path / "gpus.json"
    device = {"uuid": "GPU-a", "index": 0, "name": "H200", "memory_total_mib": 1000,
              "topology": ["switch:0", "numa:0"]}
    path.write_text(json.dumps({"devices": [device]}))
    assert FakeInventory(str(path)).sample().devices[0].topology == ("switch:0", "numa:0")
    path.write_text(json.dumps({"devices": [{**device, "topology": "switch:0"}]}))
    assert "devices[0].topology" in FakeInventory(str(path)).sample().error
