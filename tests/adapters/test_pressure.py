"""Host pressure (SPEC R-ADM-2): PSI files written in tmp_path, and the psutil fallback."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from praxist_fs.adapters import pressure
from praxist_fs.adapters.pressure import (
    PressureSampler,
    cpu_pressure_from_load,
    memory_pressure_from_host,
    parse_psi_some_avg10,
)
from praxist_fs.core.observations import PressureSample

CPU = "some avg10=12.50 avg60=3.00 avg300=1.00 total=123456\n"
MEMORY = ("some avg10=0.75 avg60=0.24 avg300=1.07 total=16717141\n"
          "full avg10=0.50 avg60=0.15 avg300=0.71 total=11540104\n")
IO = ("full avg10=99.00 avg60=0.00 avg300=0.00 total=0\n"  # full first: some still wins
      "some avg10=41.00 avg60=0.00 avg300=0.00 total=0\n")


def psi(tmp_path: Path, **files: str) -> Path:
    root = tmp_path / "pressure"
    root.mkdir()
    for domain, text in files.items():
        (root / domain).write_text(text)
    return root


def test_reads_avg10_of_the_some_line(tmp_path):
    sample = PressureSampler(psi(tmp_path, cpu=CPU, memory=MEMORY, io=IO)).sample()
    assert sample == PressureSample(source="psi", cpu=12.5, memory=0.75, io=41.0)
    assert sample.get("io") == 41.0


def test_the_real_host_never_raises():
    sample = PressureSampler().sample()
    assert sample.source in ("psi", "psutil")
    for domain in ("cpu", "memory", "io"):
        value = sample.get(domain)
        assert value is None or 0.0 <= value <= 100.0


def test_a_missing_domain_is_none_the_rest_is_psi(tmp_path):
    sample = PressureSampler(psi(tmp_path, cpu=CPU, memory=MEMORY)).sample()
    assert sample == PressureSample(source="psi", cpu=12.5, memory=0.75, io=None)


MALFORMED = [
    "",
    "\n\n",
    "full avg10=1.00 avg60=0.00 avg300=0.00 total=0\n",  # no some line
    "some avg60=1.00 avg300=0.00 total=0\n",  # no avg10
    "some avg10= avg60=1.00\n",
    "some avg10=abc avg60=1.00\n",
    "some avg10=nan avg60=1.00\n",
    "some avg10=-1.0\n",
    "some avg10=250.0\n",
    "some avg10\n",
    "avg10=5.0 some\n",
    "\x00\xff garbage",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_a_malformed_domain_is_none(tmp_path, text):
    sample = PressureSampler(psi(tmp_path, cpu=text, memory=MEMORY, io=IO)).sample()
    assert (sample.source, sample.cpu, sample.memory, sample.io) == ("psi", None, 0.75, 41.0)
    assert parse_psi_some_avg10(text) is None


def test_an_unreadable_domain_is_none(tmp_path):
    root = psi(tmp_path, memory=MEMORY, io=IO)
    (root / "cpu").mkdir()  # reading a directory fails with an OSError
    sample = PressureSampler(root).sample()
    assert (sample.source, sample.cpu, sample.memory) == ("psi", None, 0.75)


def test_later_samples_see_new_file_contents(tmp_path):
    root = psi(tmp_path, cpu=CPU, memory=MEMORY, io=IO)
    sampler = PressureSampler(root)
    assert sampler.sample().cpu == 12.5
    (root / "cpu").write_text("some avg10=90.00 avg60=3.00 avg300=1.00 total=1\n")
    assert sampler.sample().cpu == 90.0


@pytest.mark.parametrize("layout", ["no directory", "empty directory", "all unreadable"])
def test_no_psi_falls_back_to_psutil(tmp_path, layout):
    root = tmp_path / "pressure"
    if layout != "no directory":
        root.mkdir()
    if layout == "all unreadable":
        for domain in ("cpu", "memory", "io"):
            (root / domain).mkdir()
    sample = PressureSampler(root).sample()
    assert sample.source == "psutil"
    assert sample.io is None  # documented as not observable without PSI
    assert sample.cpu is not None and 0.0 <= sample.cpu <= 100.0
    assert sample.memory is not None and 0.0 <= sample.memory <= 100.0


def test_fallback_uses_load_per_cpu_and_swap_in_rate(tmp_path, monkeypatch):
    from collections import namedtuple

    VM = namedtuple("VM", "total available")
    Swap = namedtuple("Swap", "sin")
    swapped = {"sin": 0}
    monkeypatch.setattr(psutil, "getloadavg", lambda: (3.0, 1.0, 1.0))
    monkeypatch.setattr(pressure.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(psutil, "virtual_memory", lambda: VM(total=1000, available=500))
    monkeypatch.setattr(psutil, "swap_memory", lambda: Swap(sin=swapped["sin"]))
    now = {"t": 100.0}
    sampler = PressureSampler(tmp_path / "absent", clock=lambda: now["t"])
    first = sampler.sample()
    assert first == PressureSample(source="psutil", cpu=50.0, memory=0.0, io=None)
    now["t"] += 10.0
    swapped["sin"] += 500 * 4096 * 10  # 500 pages/s for ten seconds
    assert sampler.sample().memory == 50.0
    now["t"] += 10.0  # no swap-in since: calm again
    assert sampler.sample().memory == 0.0


def test_fallback_survives_psutil_errors(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("nope")

    monkeypatch.setattr(psutil, "getloadavg", broken)
    monkeypatch.setattr(psutil, "virtual_memory", broken)
    sample = PressureSampler(tmp_path / "absent").sample()
    assert sample == PressureSample(source="psutil", cpu=None, memory=None, io=None)


CPU_FROM_LOAD = [
    # load1, cpus, percent
    (0.0, 4, 0.0),
    (4.0, 4, 0.0),  # one runnable task per CPU: nobody waits
    (6.0, 4, 50.0),
    (7.2, 4, 80.0),  # the default high threshold: 1.8 per CPU
    (5.6, 4, 40.0),  # the default low threshold: 1.4 per CPU
    (40.0, 4, 100.0),  # capped
    (1.0, 0, None),
    (-1.0, 4, None),
    (float("nan"), 4, None),
]


@pytest.mark.parametrize("load1,cpus,expected", CPU_FROM_LOAD)
def test_cpu_approximation(load1, cpus, expected):
    result = cpu_pressure_from_load(load1, cpus)
    assert result == (pytest.approx(expected) if expected is not None else None)


MEMORY_FROM_HOST = [
    # available %, swap-in pages/s, percent
    (60.0, None, 0.0),
    (10.0, None, 0.0),  # the knee
    (8.0, None, 20.0),  # the default high threshold
    (9.5, None, 5.0),  # the default low threshold
    (0.0, None, 100.0),
    (60.0, 0.0, 0.0),
    (60.0, 200.0, 20.0),
    (60.0, 5000.0, 100.0),  # capped
    (5.0, 100.0, 50.0),  # the larger signal wins
    (float("nan"), 10.0, None),
]


@pytest.mark.parametrize("available,swapin,expected", MEMORY_FROM_HOST)
def test_memory_approximation(available, swapin, expected):
    result = memory_pressure_from_host(available, swapin)
    assert result == (pytest.approx(expected) if expected is not None else None)
