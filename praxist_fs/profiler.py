"""``praxist-fs profile -- CMD``: observe an unchanged command, propose a profile (R-GPU-4).

The command runs as given (its own session, so its whole process tree can be
found; its stdout is sent to our stderr so that stdout carries only the
proposal). Every ``interval`` seconds (default 0.15; seed 000's norm is
100-200 ms) we record one sample of the tree: CPU percent of one core summed
over the tree, RSS summed, disk IO bytes read/written in the interval
(psutil ``io_counters`` where permitted), and per GPU device the memory and SM
utilization of the tree's PIDs from the GPU inventory. The series goes to a
JSON-lines file when ``--out`` names one (never, unasked, into the caller's
directory); a proposed profile block in task-file YAML goes to stdout.

Estimation rules (``propose``; pure, table-tested):

- **Useful samples** are those taken while a process of the tree was alive.
  Fewer than ``MIN_USEFUL_SAMPLES`` (10, pooled over ``--repeat`` runs) leave
  GPU demand unknown.
- **Utilization**: for each run and each device the tree used, the lifetime
  mean over the run's useful samples (a sample where the tree is not on the
  device counts 0%) plus one standard error; a run's value is its busiest
  device. The proposal is the nearest-rank 90th percentile of the per-run
  values (the maximum for fewer than ten runs), rounded up to a whole percent,
  clamped to 1..100.
- **Teardown rule**: if utilization is 0% in every useful sample except
  possibly the last one of each run, GPU demand is unknown (a teardown sample,
  or a context held at 0%, does not establish demand either way).
- **VRAM**: the peak per-device memory of the tree over useful samples, plus
  headroom max(10%, 512 MiB), in GiB rounded up to 0.5.
- **gpu_count**: the most distinct devices the tree used within one run.
- **Attribution**: when the tree's processes are the only ones on a device,
  its utilization is the device's own (the metric external load is read in)
  and, without per-process memory, the device's used memory; on a shared
  device, the sum of the tree's per-process readings. A sample without a
  reading is left out; over half the readings missing makes demand unknown.
- Unknown demand omits both ``gpu_memory_gb`` and ``gpu_utilization_pct``
  (exclusive placement) and says why in a YAML comment.
- **accelerator: cpu** when the inventory works and never lists a tree PID in
  ten or more useful samples, or when the host has no GPU inventory at all
  (``source: none``). An inventory that never answered leaves the accelerator
  unknown: a gpu profile with unknown demand is proposed, to be reviewed.
- **pressure_domains**: ``cpu`` if the time-weighted mean CPU exceeds 50% of
  one core, ``memory`` if peak RSS exceeds 1 GiB, ``io`` if the average disk
  IO rate (read + write) exceeds 10 MiB/s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import psutil

from praxist_fs.core.observations import GpuSample

DEFAULT_INTERVAL_S = 0.15
NORMAL_INTERVAL_S = (0.1, 0.2)
MIN_USEFUL_SAMPLES = 10
UTIL_PERCENTILE = 90
VRAM_HEADROOM_FRACTION = 0.10
VRAM_HEADROOM_MIN_MIB = 512.0
CPU_PRESSURE_PCT = 50.0  # percent of one core
MEMORY_PRESSURE_BYTES = 1 << 30  # 1 GiB
IO_PRESSURE_BYTES_PER_S = 10 * (1 << 20)  # 10 MiB/s
DEFAULT_NAME = "proposed_profile"
_PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # as config.py accepts

GpuSampler = Callable[[], GpuSample]

# gpu_status of a sample
GPU_OK = "ok"  # the inventory answered
GPU_NONE = "no_gpu"  # the host has no GPU (source none, or no device)
GPU_UNAVAILABLE = "unavailable"  # the inventory failed


# --- the series ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceUse:
    """What the tree's PIDs used on one device in one sample; None = not attributable."""

    memory_mib: float | None = None
    util_pct: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    """One reading of the command's process tree."""

    run: int = 0
    t: float = 0.0  # seconds since this run started
    dt: float = 0.0  # seconds this sample covers (since the previous one of the run)
    alive: bool = True  # a process of the tree was alive: a useful sample
    pids: int = 1
    cpu_pct: float = 0.0  # percent of one core, summed over the tree
    rss_bytes: int = 0
    io_read_bytes: int = 0  # during dt
    io_write_bytes: int = 0
    gpu_status: str = GPU_OK
    gpu_note: str = ""  # the inventory's error, if any
    gpu: Mapping[str, DeviceUse] = field(default_factory=dict)  # uuid -> use (tree on it)
    hidden: tuple[str, ...] = ()  # devices whose driver did not list processes

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "sample", "run": self.run, "t": round(self.t, 4), "dt": round(self.dt, 4),
            "alive": self.alive, "pids": self.pids, "cpu_pct": round(self.cpu_pct, 2),
            "rss_bytes": self.rss_bytes, "io_read_bytes": self.io_read_bytes,
            "io_write_bytes": self.io_write_bytes, "gpu_status": self.gpu_status,
            "gpu": {uuid: {"memory_mib": use.memory_mib, "util_pct": use.util_pct}
                    for uuid, use in self.gpu.items()},
        }
        if self.gpu_note:
            out["gpu_note"] = self.gpu_note
        if self.hidden:
            out["hidden"] = list(self.hidden)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sample:
        return cls(run=data["run"], t=data["t"], dt=data["dt"], alive=data["alive"],
                   pids=data["pids"], cpu_pct=data["cpu_pct"], rss_bytes=data["rss_bytes"],
                   io_read_bytes=data["io_read_bytes"], io_write_bytes=data["io_write_bytes"],
                   gpu_status=data["gpu_status"], gpu_note=data.get("gpu_note", ""),
                   gpu={u: DeviceUse(**v) for u, v in data.get("gpu", {}).items()},
                   hidden=tuple(data.get("hidden", ())))


# --- pure arithmetic -----------------------------------------------------------------


def mean_plus_stderr(values: Sequence[float]) -> float:
    """The mean plus one standard error (sample std / sqrt(n)); 0 for no values."""
    n = len(values)
    if n == 0:
        return 0.0
    mean = sum(values) / n
    if n < 2:
        return mean
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean + math.sqrt(var / n)


def nearest_rank(values: Sequence[float], percentile: float) -> float:
    """Nearest-rank percentile: the smallest value with >= percentile% at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]


def utilization_estimate(per_run: Sequence[Sequence[float]]) -> int:
    """Per-run lifetime series of one device (or a run's busiest) -> declared percent.

    Nearest-rank 90th percentile of per-run (mean + 1 standard error), rounded
    up, clamped to 1..100.
    """
    values = [mean_plus_stderr(series) for series in per_run if series]
    if not values:
        raise ValueError("no utilization series")
    upper = nearest_rank(values, UTIL_PERCENTILE)
    return int(min(100, max(1, math.ceil(upper - 1e-9))))


def vram_estimate_gb(peak_mib: float) -> float:
    """Observed peak + max(10%, 512 MiB), in GiB rounded up to 0.5."""
    with_headroom = max(peak_mib * (1 + VRAM_HEADROOM_FRACTION), peak_mib + VRAM_HEADROOM_MIN_MIB)
    return math.ceil(with_headroom / 1024 * 2 - 1e-9) / 2


def pressure_domains(cpu_pcts: Sequence[float], dts: Sequence[float],
                     rss_bytes: Sequence[int], io_bytes: Sequence[int]) -> list[str]:
    """Domains the command presses, from parallel per-sample lists (useful samples)."""
    seconds = sum(dts)
    domains = []
    if seconds > 0:
        mean_cpu = sum(c * d for c, d in zip(cpu_pcts, dts, strict=True)) / seconds
        if mean_cpu > CPU_PRESSURE_PCT + 1e-9:  # float sums: exactly half a core is not above
            domains.append("cpu")
    if rss_bytes and max(rss_bytes) > MEMORY_PRESSURE_BYTES:
        domains.append("memory")
    if seconds > 0 and sum(io_bytes) / seconds > IO_PRESSURE_BYTES_PER_S + 1e-6:
        domains.append("io")
    return domains


def teardown_only(per_run: Sequence[Sequence[float]]) -> bool:
    """True when utilization is 0 everywhere except possibly each run's last sample."""
    return all(v == 0 for series in per_run for v in series[:-1])


@dataclass(slots=True)
class Proposal:
    name: str
    fields: dict[str, Any]  # task-file keys, in order
    comments: list[str]
    useful_samples: int
    seconds: float
    runs: int

    def header(self) -> str:
        runs = f"{self.runs} run" + ("" if self.runs == 1 else "s")
        return (f"proposed by praxist-fs profile: {self.useful_samples} samples over "
                f"{self.seconds:.1f} s ({runs})")


def propose(samples: Sequence[Sample], *, name: str = DEFAULT_NAME,
            runs: int | None = None) -> Proposal:
    """The proposed profile for a pooled series (see the module docstring for rules)."""
    useful = [s for s in samples if s.alive]
    run_ids = sorted({s.run for s in samples})
    n_runs = runs if runs is not None else len(run_ids)
    by_run: dict[int, list[Sample]] = {}
    for s in useful:
        by_run.setdefault(s.run, []).append(s)
    seconds = sum(max((s.t for s in samples if s.run == r), default=0.0) for r in run_ids)
    comments: list[str] = []
    fields: dict[str, Any] = {}
    n = len(useful)
    undersampled = n < MIN_USEFUL_SAMPLES
    if undersampled:
        comments.append(f"only {n} useful samples (< {MIN_USEFUL_SAMPLES}): run a longer "
                        "representative unit or use --repeat")

    statuses = {s.gpu_status for s in useful}
    answered = [s for s in useful if s.gpu_status == GPU_OK]
    used_per_run = {r: {u for s in ss for u in s.gpu} for r, ss in by_run.items()}
    gpu_count = max((len(u) for u in used_per_run.values()), default=0)
    hidden = sorted({u for s in answered for u in s.hidden})
    failures = sum(1 for s in useful if s.gpu_status == GPU_UNAVAILABLE)

    def unknown_gpu(why: str, count: int = 1) -> None:
        fields.update(accelerator="gpu", gpu_count=max(1, count))
        comments.append(f"GPU demand unknown: {why}; gpu_memory_gb and gpu_utilization_pct "
                        "are omitted, so the profile gets an exclusive device")

    if gpu_count == 0:
        if useful and statuses == {GPU_NONE}:
            note = next((s.gpu_note for s in useful if s.gpu_note), "no GPU")
            fields["accelerator"] = "cpu"
            comments.append(f"no GPU inventory on this host ({note}): the command ran on "
                            "CPU here; profile it on a GPU host if it can use one")
        elif not answered:
            note = next((s.gpu_note for s in useful if s.gpu_note), "no sample")
            unknown_gpu(f"the GPU inventory never answered ({note}), so GPU use "
                        "could not be observed")
        elif hidden:
            unknown_gpu("the driver did not list processes on " + ", ".join(hidden))
        elif undersampled:
            unknown_gpu("too few samples to establish that the command uses no GPU")
        else:
            fields["accelerator"] = "cpu"
            if failures:
                comments.append(f"the GPU inventory failed in {failures} of {n} samples; "
                                "no GPU use was seen in the others")
    else:
        fields.update(accelerator="gpu", gpu_count=gpu_count)
        peak = _peak_memory(useful)
        util_runs = _util_series(by_run)
        if failures:
            comments.append(f"the GPU inventory failed in {failures} of {n} samples")
        if undersampled:
            unknown_gpu("too few useful samples", gpu_count)
        elif peak is None or util_runs is None:
            unknown_gpu("the driver gave no per-process GPU memory or utilization for the "
                        "command in over half the samples", gpu_count)
        elif teardown_only(util_runs):
            unknown_gpu("GPU utilization was 0% in every sample except a teardown sample",
                        gpu_count)
        else:
            fields["gpu_memory_gb"] = vram_estimate_gb(peak)
            fields["gpu_utilization_pct"] = utilization_estimate(util_runs)
            means = [sum(s) / len(s) for s in util_runs if s]
            comments.append(f"VRAM peak {peak:.0f} MiB + max(10%, 512 MiB); utilization: "
                            f"p{UTIL_PERCENTILE} of per-run (lifetime mean + 1 s.e.), run means "
                            + ", ".join(f"{m:.1f}%" for m in means))
        if "gpu_memory_gb" not in fields and peak is not None:
            comments.append(f"observed VRAM peak {peak:.0f} MiB per device (not declared)")

    fields["pressure_domains"] = pressure_domains(
        [s.cpu_pct for s in useful], [s.dt for s in useful], [s.rss_bytes for s in useful],
        [s.io_read_bytes + s.io_write_bytes for s in useful])
    return Proposal(name=name, fields=fields, comments=comments, useful_samples=n,
                    seconds=seconds, runs=n_runs)


def _too_many_missing(missing: int, readings: int) -> bool:
    return readings == 0 or missing * 2 > readings


def _peak_memory(useful: Sequence[Sample]) -> float | None:
    """Peak per-device memory of the tree; None if over half the readings are missing."""
    known = [use.memory_mib for s in useful for use in s.gpu.values()]
    values = [v for v in known if v is not None]
    if _too_many_missing(len(known) - len(values), len(known)):
        return None
    return max(values)


def _util_series(by_run: Mapping[int, Sequence[Sample]]) -> list[list[float]] | None:
    """Per run, the lifetime series of its busiest device (0 where the tree is off it).

    A sample where the tree is on the device without a utilization reading is
    left out of that series; over half such samples make utilization unknown.
    """
    out = []
    missing = readings = 0
    for run in sorted(by_run):
        samples = by_run[run]
        devices = sorted({u for s in samples for u in s.gpu})
        best: list[float] = [0.0] * len(samples)
        best_mean = -1.0
        for uuid in devices:
            series = []
            for s in samples:
                use = s.gpu.get(uuid)
                if use is None:
                    series.append(0.0)
                    continue
                readings += 1
                if use.util_pct is None:
                    missing += 1
                else:
                    series.append(use.util_pct)
            mean = mean_plus_stderr(series)
            if mean > best_mean:
                best, best_mean = series, mean
        out.append(best)
    if _too_many_missing(missing, readings):
        return None
    return out


def render_yaml(proposal: Proposal) -> str:
    """The proposal as a task-file profile block, comments first."""
    lines = [f"# {proposal.header()}"]
    lines += [f"# {comment}" for comment in proposal.comments]
    lines.append(f"{proposal.name}:")
    for key, value in proposal.fields.items():
        if isinstance(value, list):
            text = "[" + ", ".join(value) + "]"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        lines.append(f"  {key}: {text}")
    return "\n".join(lines) + "\n"


# --- observing a process tree --------------------------------------------------------


def attribute_gpu(sample: GpuSample, pids: set[int]) -> tuple[str, str, dict[str, DeviceUse],
                                                               tuple[str, ...]]:
    """(status, note, uses by device, devices with hidden processes) for the tree's PIDs."""
    if sample.error:
        status = GPU_NONE if sample.source == "none" else GPU_UNAVAILABLE
        return status, sample.error, {}, ()
    if not sample.devices:
        return GPU_NONE, "no GPU device", {}, ()
    uses: dict[str, DeviceUse] = {}
    hidden = []
    for device in sample.devices:
        if not device.processes_visible:
            hidden.append(device.uuid)
            continue
        mine = [p for p in device.processes if p.pid in pids]
        if not mine:
            continue
        sole = len(mine) == len(device.processes)
        mems = [p.used_memory_mib for p in mine]
        utils = [p.sm_util_pct for p in mine]
        memory: float | None
        if None not in mems:
            memory = sum(mems)  # type: ignore[arg-type]
        else:
            memory = device.memory_used_mib if sole else None
        util: float | None
        if sole:  # the device's own busy time is ours: the metric external load is read in
            util = device.utilization_pct
        elif None not in utils:
            util = sum(utils)  # type: ignore[arg-type]
        else:
            util = None  # shared device, no per-process reading in this window
        uses[device.uuid] = DeviceUse(memory_mib=memory,
                                      util_pct=None if util is None else min(100.0, util))
    return GPU_OK, "", uses, tuple(hidden)


class _Tree:
    """The live processes of one command: its descendants plus its session's members."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self._procs: dict[int, psutil.Process] = {}
        self._cpu: dict[tuple[int, float], float] = {}
        self._io: dict[tuple[int, float], tuple[int, int]] = {}

    def _process(self, pid: int) -> psutil.Process | None:
        proc = self._procs.get(pid)
        try:
            if proc is None or not proc.is_running():
                proc = psutil.Process(pid)
                self._procs[pid] = proc
            return proc
        except psutil.Error:
            self._procs.pop(pid, None)
            return None

    def members(self) -> list[psutil.Process]:
        pids: set[int] = {self.root_pid}
        try:
            pids.update(p.pid for p in psutil.Process(self.root_pid).children(recursive=True))
        except psutil.Error:
            pass
        for pid in psutil.pids():  # orphans re-parented away from the root stay in the session
            try:
                if os.getsid(pid) == self.root_pid:
                    pids.add(pid)
            except OSError:
                continue
        procs = [self._process(pid) for pid in sorted(pids)]
        return [p for p in procs if p is not None]

    def sample(self, dt: float) -> tuple[set[int], float, int, int, int]:
        """(live pids, cpu %, rss, io read, io write) since the previous call."""
        live: set[int] = set()
        cpu_s = 0.0
        rss = read = write = 0
        for proc in self.members():
            try:
                with proc.oneshot():
                    if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                        continue
                    resident = proc.memory_info().rss
                    if not resident:  # its memory is gone: exiting, a zombie in a moment
                        continue
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    rss += resident
                    try:
                        io = proc.io_counters()
                        counters = (io.read_bytes, io.write_bytes)
                    except (psutil.AccessDenied, AttributeError, NotImplementedError):
                        counters = None
            except psutil.Error:
                continue
            live.add(proc.pid)
            total = times.user + times.system
            cpu_s += max(0.0, total - self._cpu.get(key, 0.0))
            self._cpu[key] = total
            if counters is not None:
                before = self._io.get(key, (0, 0))
                read += max(0, counters[0] - before[0])
                write += max(0, counters[1] - before[1])
                self._io[key] = counters
        cpu_pct = 100.0 * cpu_s / dt if dt > 0 else 0.0
        return live, cpu_pct, rss, read, write


def _safe(sampler: GpuSampler) -> GpuSample:
    try:
        return sampler()
    except Exception as exc:  # noqa: BLE001 - a broken inventory must not end the profile
        return GpuSample(source="unavailable", error=f"GPU inventory failed: {exc}")


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_once(cmd: Sequence[str], *, run: int, interval: float, gpu_sampler: GpuSampler,
             on_sample: Callable[[Sample], None] | None = None,
             stdout: int | None = 2) -> tuple[list[Sample], int, float]:
    """Run ``cmd`` once, sampling its tree; (samples, exit code, seconds)."""
    samples: list[Sample] = []
    start = time.monotonic()
    proc = subprocess.Popen(list(cmd), start_new_session=True, stdout=stdout)
    tree = _Tree(proc.pid)
    previous = start
    deadline = start + interval
    try:
        while True:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            live, cpu_pct, rss, read, write = tree.sample(now - previous)
            status, note, uses, hidden = attribute_gpu(_safe(gpu_sampler), live)
            sample = Sample(run=run, t=now - start, dt=now - previous, alive=bool(live),
                            pids=len(live), cpu_pct=cpu_pct, rss_bytes=rss, io_read_bytes=read,
                            io_write_bytes=write, gpu_status=status, gpu_note=note, gpu=uses,
                            hidden=hidden)
            samples.append(sample)
            if on_sample is not None:
                on_sample(sample)
            previous = now
            deadline += interval
            if deadline < time.monotonic():  # the sampler is slower than the interval
                deadline = time.monotonic() + interval
    except BaseException:
        _stop_group(proc)
        raise
    seconds = time.monotonic() - start
    left = [p for p in tree.members() if p.pid != proc.pid and _alive(p)]
    if left:
        print(f"praxist-fs profile: {len(left)} process(es) of the command still running after "
              "it exited; not sampled further", file=sys.stderr)
    return samples, proc.returncode, seconds


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


def default_gpu_sampler() -> tuple[GpuSampler, Callable[[], None] | None]:
    """The host's GPU inventory (``praxist_fs.adapters.gpus``) and its close, if any."""
    try:
        from praxist_fs.adapters.gpus import open_inventory
        inventory = open_inventory(None)
    except Exception as exc:  # noqa: BLE001 - reported in every sample, demand stays unknown
        error = f"GPU inventory unavailable: {type(exc).__name__}: {exc}"
        return (lambda: GpuSample(source="unavailable", error=error)), None
    return inventory.sample, getattr(inventory, "close", None)


# --- the command ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="praxist-fs profile",
        description="Observe an unchanged command and propose a task-file profile (R-GPU-4).")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S,
                        help="seconds between samples (default 0.15; 0.1-0.2 is the norm)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run a short command N times and pool the samples (default 1)")
    parser.add_argument("--out", default=None,
                        help="write the sampled series to FILE as JSON lines (default: none)")
    parser.add_argument("--name", default=DEFAULT_NAME,
                        help=f"profile name in the proposal (default {DEFAULT_NAME})")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARG...]")
    return parser


def main_profile(argv: list[str], *, gpu_sampler: GpuSampler | None = None,
                 out: IO[str] | None = None) -> int:
    """``praxist-fs profile [--interval S] [--repeat N] [--out FILE] [--name NAME] -- CMD``.

    Prints the proposal on stdout (or ``out``) and returns the command's last
    exit code (a failing run ends the repetitions); 2 on bad arguments, 127
    when CMD cannot be started, 130 when interrupted.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        parser.print_usage(sys.stderr)
        print("praxist-fs profile: a command is required after --", file=sys.stderr)
        return 2
    if args.interval <= 0 or args.repeat < 1:
        print("praxist-fs profile: --interval must be > 0 and --repeat >= 1", file=sys.stderr)
        return 2
    if not _PROFILE_NAME.fullmatch(args.name):
        print(f"praxist-fs profile: --name {args.name!r} is not a profile name "
              "([A-Za-z0-9][A-Za-z0-9._-]{0,63})", file=sys.stderr)
        return 2
    low, high = NORMAL_INTERVAL_S
    if not low <= args.interval <= high:
        print(f"praxist-fs profile: note: --interval {args.interval} is outside the "
              f"{low}-{high} s norm", file=sys.stderr)
    stream = out if out is not None else sys.stdout
    close = None
    if gpu_sampler is None:
        gpu_sampler, close = default_gpu_sampler()
    samples: list[Sample] = []
    code = 0
    runs = 0
    notes: list[str] = []
    try:
        with (open(args.out, "w", encoding="utf-8", buffering=1) if args.out
              else contextlib.nullcontext()) as series:
            def write(record: dict[str, Any]) -> None:
                if series is not None:
                    series.write(json.dumps(record, sort_keys=True) + "\n")

            write({"kind": "header", "argv": cmd, "interval_s": args.interval,
                   "repeat": args.repeat, "host": socket.gethostname(),
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
            try:
                for run in range(args.repeat):
                    try:
                        got, code, seconds = run_once(
                            cmd, run=run, interval=args.interval, gpu_sampler=gpu_sampler,
                            on_sample=lambda s: write(s.to_dict()))
                    except OSError as exc:
                        print(f"praxist-fs profile: {cmd[0]}: {exc.strerror or exc}",
                              file=sys.stderr)
                        return 127
                    runs += 1
                    samples.extend(got)
                    write({"kind": "run_end", "run": run, "exit_code": code,
                           "seconds": round(seconds, 3), "samples": len(got)})
                    if code != 0:
                        notes.append(f"run {run + 1} exited with code {code}: the samples may "
                                     "not represent a normal run")
                        break
            except KeyboardInterrupt:
                notes.append("interrupted: the series is incomplete")
                code = 130
            proposal = propose(samples, name=args.name, runs=runs)
            proposal.comments[:0] = notes
            write({"kind": "proposal", "name": proposal.name, "fields": proposal.fields,
                   "comments": proposal.comments})
    finally:
        if close is not None:
            close()
    stream.write(render_yaml(proposal))
    stream.flush()
    if args.out:
        print(f"praxist-fs profile: series written to {args.out}", file=sys.stderr)
    return code
