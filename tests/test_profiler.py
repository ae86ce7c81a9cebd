"""praxist-fs profile (R-GPU-4): the estimation table, GPU attribution, one real run."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest
import yaml

from praxist_fs.config import policy_from_mapping
from praxist_fs.core.observations import GpuDevice, GpuProcess, GpuSample
from praxist_fs.profiler import (
    GPU_NONE,
    GPU_UNAVAILABLE,
    DeviceUse,
    Sample,
    attribute_gpu,
    main_profile,
    mean_plus_stderr,
    nearest_rank,
    pressure_domains,
    propose,
    render_yaml,
    utilization_estimate,
    vram_estimate_gb,
)

GIB = 1 << 30
A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def series(utils, *, mem=20000.0, run=0, dev=A, cpu=10.0, rss=100 << 20, io=0, dt=0.15,
           status="ok", devices=None):
    """One run's samples; a None util means the tree is not on the GPU in that sample."""
    out = []
    for i, util in enumerate(utils):
        gpu = {}
        if util is not None:
            gpu = {d: DeviceUse(memory_mib=mem, util_pct=util) for d in (devices or [dev])}
        out.append(Sample(run=run, t=(i + 1) * dt, dt=dt, cpu_pct=cpu, rss_bytes=rss,
                          io_read_bytes=io, gpu_status=status, gpu=gpu))
    return out


def parsed(proposal):
    text = render_yaml(proposal)
    return text, yaml.safe_load(text)[proposal.name]


# --- the small functions ----------------------------------------------------------------


@pytest.mark.parametrize("values, expected", [
    ([], 0.0), ([45.0], 45.0), ([45.0] * 20, 45.0), ([40.0, 50.0], 50.0),
])
def test_mean_plus_stderr(values, expected):
    assert mean_plus_stderr(values) == pytest.approx(expected)


@pytest.mark.parametrize("values, pct, expected", [
    ([3.0], 90, 3.0), ([1.0, 2.0, 3.0], 90, 3.0), (list(range(1, 11)), 90, 9),
    (list(range(1, 21)), 90, 18), (list(range(1, 11)), 50, 5),
])
def test_nearest_rank(values, pct, expected):
    assert nearest_rank(values, pct) == expected


@pytest.mark.parametrize("peak_mib, gb", [
    (20000, 21.5),  # +10% = 22000 MiB = 21.48 GiB -> 21.5
    (1000, 1.5),  # +512 MiB wins: 1512 MiB = 1.48 GiB -> 1.5
    (4096, 4.5),  # +512 = 4608 MiB = 4.5 GiB exactly
    (0.5, 1.0),
    (70000, 75.5),
])
def test_vram_headroom(peak_mib, gb):
    assert vram_estimate_gb(peak_mib) == gb


def test_utilization_is_an_upper_estimate_of_run_means():
    assert utilization_estimate([[45.0] * 50]) == 45
    assert utilization_estimate([[44.5] * 50]) == 45  # rounded up
    noisy = [[40.0, 50.0] * 25, [30.0, 60.0] * 25]
    assert 46 <= utilization_estimate(noisy) <= 50
    assert utilization_estimate([[0.2] * 20]) == 1  # clamped to the task-file range
    assert utilization_estimate([[100.0] * 5, [120.0] * 5]) == 100


@pytest.mark.parametrize("cpu, rss, io_bytes, expected", [
    ([10.0] * 10, [GIB // 2] * 10, [0] * 10, []),
    ([90.0] * 10, [GIB // 2] * 10, [0] * 10, ["cpu"]),
    ([50.0] * 10, [GIB // 2] * 10, [0] * 10, []),  # exactly half a core: not above
    ([10.0] * 10, [GIB // 2] * 9 + [2 * GIB], [0] * 10, ["memory"]),
    ([10.0] * 10, [0] * 10, [2 << 20] * 10, ["io"]),  # 2 MiB per 0.1 s = 20 MiB/s
    ([10.0] * 10, [0] * 10, [512 << 10] * 10, []),  # 5 MiB/s
    ([200.0] * 10, [3 * GIB] * 10, [4 << 20] * 10, ["cpu", "memory", "io"]),
])
def test_pressure_domains(cpu, rss, io_bytes, expected):
    assert pressure_domains(cpu, [0.1] * len(cpu), rss, io_bytes) == expected


# --- the proposal table -------------------------------------------------------------------


def test_steady_gpu_job():
    samples = series([45.0] * 40, mem=20000.0, cpu=95.0, rss=3 * GIB)
    text, body = parsed(propose(samples, name="gpu_job"))
    assert body["accelerator"] == "gpu" and body["gpu_count"] == 1
    assert 45 <= body["gpu_utilization_pct"] <= 50
    assert 21.5 <= body["gpu_memory_gb"] <= 22.5
    assert body["pressure_domains"] == ["cpu", "memory"]
    assert text.startswith("# proposed by praxist-fs profile: 40 samples over 6.0 s (1 run)")


def test_lifetime_mean_counts_cpu_phases_and_takes_the_busier_run():
    run0 = series([None] * 10 + [80.0] * 10, run=0)  # setup on CPU, then 80%: mean 40
    run1 = series([None] * 5 + [80.0] * 15, run=1)  # mean 60
    _, body = parsed(propose(run0 + run1))
    assert 60 <= body["gpu_utilization_pct"] <= 70
    assert body["gpu_memory_gb"] == 21.5


def test_multi_gpu_counts_devices_and_declares_per_device():
    samples = series([70.0] * 12, mem=10000.0, devices=[A, B])
    _, body = parsed(propose(samples))
    assert body["gpu_count"] == 2
    assert body["gpu_memory_gb"] == 11.0  # 11000 MiB = 10.74 GiB -> 11
    assert 70 <= body["gpu_utilization_pct"] <= 71


def test_runs_on_different_devices_are_one_gpu():
    samples = series([50.0] * 6, run=0, dev=A) + series([50.0] * 6, run=1, dev=B)
    _, body = parsed(propose(samples))
    assert body["gpu_count"] == 1


@pytest.mark.parametrize("utils, why", [
    ([45.0] * 9, "only 9 useful samples"),
    ([0.0] * 29 + [30.0], "except a teardown sample"),
    ([0.0] * 30, "except a teardown sample"),
])
def test_gpu_demand_unknown(utils, why):
    text, body = parsed(propose(series(utils)))
    assert body["accelerator"] == "gpu" and body["gpu_count"] == 1
    assert "gpu_memory_gb" not in body and "gpu_utilization_pct" not in body
    assert why in text and "exclusive" in text


def test_teardown_rule_applies_to_each_run_last_sample():
    samples = series([0.0] * 9 + [40.0], run=0) + series([0.0] * 9 + [35.0], run=1)
    _, body = parsed(propose(samples))
    assert "gpu_utilization_pct" not in body
    samples = series([0.0] * 8 + [40.0, 0.0], run=0) + series([0.0] * 10, run=1)
    _, body = parsed(propose(samples))
    assert body["gpu_utilization_pct"] >= 4  # 40% in a working sample is real demand


def test_short_runs_pool_to_ten_samples():
    samples = series([45.0] * 5, run=0) + series([45.0] * 5, run=1)
    proposal = propose(samples)
    assert proposal.useful_samples == 10 and proposal.runs == 2
    assert "gpu_utilization_pct" in proposal.fields


def test_dead_tree_samples_are_not_useful():
    samples = series([45.0] * 9) + [Sample(run=0, t=2.0, dt=0.15, alive=False, pids=0)]
    assert "gpu_utilization_pct" not in propose(samples).fields


def test_missing_readings_are_skipped_until_they_are_the_majority():
    samples = series([45.0] * 20)
    for i in (3, 4, 5):
        samples[i] = Sample(run=0, t=0.1 * i, dt=0.15,
                            gpu={A: DeviceUse(memory_mib=None, util_pct=None)})
    _, body = parsed(propose(samples))
    assert 45 <= body["gpu_utilization_pct"] <= 46 and body["gpu_memory_gb"] == 21.5
    for i in range(11):
        samples[i] = Sample(run=0, t=0.1 * i, dt=0.15,
                            gpu={A: DeviceUse(memory_mib=19000.0, util_pct=None)})
    text, body = parsed(propose(samples))
    assert "gpu_memory_gb" not in body and "no per-process GPU memory or utilization" in text
    assert "observed VRAM peak 20000 MiB" in text


def test_no_gpu_with_working_inventory_is_cpu():
    samples = series([None] * 20, cpu=150.0)
    _, body = parsed(propose(samples))
    assert body == {"accelerator": "cpu", "pressure_domains": ["cpu"]}


def test_no_gpu_on_host_is_cpu():
    samples = series([None] * 4, status=GPU_NONE)
    text, body = parsed(propose(samples))
    assert body["accelerator"] == "cpu" and "no GPU inventory on this host" in text


def test_undersampled_without_gpu_on_gpu_host_is_unknown_not_cpu():
    _, body = parsed(propose(series([None] * 5)))
    assert body["accelerator"] == "gpu" and "gpu_utilization_pct" not in body


def test_inventory_that_never_answered_is_unknown():
    text, body = parsed(propose(series([None] * 20, status=GPU_UNAVAILABLE)))
    assert body["accelerator"] == "gpu" and "never answered" in text


def test_hidden_processes_are_unknown():
    samples = [Sample(run=0, t=i * 0.1, dt=0.1, hidden=(A,)) for i in range(1, 21)]
    text, body = parsed(propose(samples))
    assert body["accelerator"] == "gpu" and "did not list processes" in text


def test_proposals_load_as_task_file_profiles():
    for samples in (series([45.0] * 40), series([0.0] * 30), series([None] * 20)):
        proposal = propose(samples, name="observed")
        body = yaml.safe_load(render_yaml(proposal))
        policy = policy_from_mapping({"compute_budget": {"resource_scheduler": {
            "mode": "central", "default_profile": "observed", "profiles": body}}})
        assert policy.profiles["observed"].accelerator == proposal.fields["accelerator"]


def test_sample_round_trips_through_json():
    sample = series([45.0])[0]
    assert Sample.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample


# --- attributing the inventory's devices to the tree -----------------------------------


def _device(uuid, processes, *, util=60.0, used=9000.0, visible=True):
    return GpuDevice(uuid=uuid, index=0, name="H200", memory_total_mib=143000.0,
                     memory_used_mib=used, utilization_pct=util, processes=tuple(processes),
                     processes_visible=visible)


def test_attribute_gpu_sums_tree_pids_on_a_shared_device():
    sample = GpuSample(source="nvml", devices=(
        _device(A, [GpuProcess(pid=10, used_memory_mib=1000, sm_util_pct=20),
                    GpuProcess(pid=11, used_memory_mib=500, sm_util_pct=15),
                    GpuProcess(pid=99, used_memory_mib=7000, sm_util_pct=50)]),
        _device(B, [GpuProcess(pid=99, used_memory_mib=100, sm_util_pct=1)]),
    ))
    status, _, uses, hidden = attribute_gpu(sample, {10, 11})
    assert status == "ok" and hidden == ()
    assert uses == {A: DeviceUse(memory_mib=1500, util_pct=35)}
    partial = GpuSample(source="nvml", devices=(_device(A, [
        GpuProcess(pid=10, used_memory_mib=1000, sm_util_pct=None), GpuProcess(pid=99)]),))
    assert attribute_gpu(partial, {10})[2] == {A: DeviceUse(memory_mib=1000, util_pct=None)}


def test_attribute_gpu_sole_owner_reads_the_device():
    mine = GpuProcess(pid=10, used_memory_mib=None, sm_util_pct=None)
    alone = GpuSample(source="nvml", devices=(_device(A, [mine]),))
    assert attribute_gpu(alone, {10})[2] == {A: DeviceUse(memory_mib=9000.0, util_pct=60.0)}
    known = GpuProcess(pid=10, used_memory_mib=4000.0, sm_util_pct=30.0)
    alone = GpuSample(source="nvml", devices=(_device(A, [known]),))
    assert attribute_gpu(alone, {10})[2] == {A: DeviceUse(memory_mib=4000.0, util_pct=60.0)}
    shared = GpuSample(source="nvml", devices=(_device(A, [mine, GpuProcess(pid=99)]),))
    assert attribute_gpu(shared, {10})[2] == {A: DeviceUse(memory_mib=None, util_pct=None)}


def test_attribute_gpu_statuses():
    assert attribute_gpu(GpuSample(source="none", error="no GPU"), {1})[0] == "no_gpu"
    assert attribute_gpu(GpuSample(source="nvml", error="NVML gone"), {1})[0] == "unavailable"
    assert attribute_gpu(GpuSample(source="nvml"), {1})[0] == "no_gpu"
    hidden = GpuSample(source="nvml", devices=(_device(A, [], visible=False),))
    assert attribute_gpu(hidden, {1})[3] == (A,)


# --- one real run -------------------------------------------------------------------------


def _no_gpu() -> GpuSample:
    return GpuSample(source="none", error="no GPU")


def test_profile_a_real_cpu_command(tmp_path):
    """The CPU seconds the profile sees are the ones the command spent, however loaded the
    machine: the command burns a fixed amount of CPU time and says how long that took."""
    out_file, own = tmp_path / "series.jsonl", tmp_path / "own"
    burn = ("import time\nwall = time.monotonic()\n"
            "while time.process_time() < 0.8: pass\n"
            f"open({str(own)!r}, 'a').write(f'{{time.monotonic() - wall}}\\n')")
    stdout = io.StringIO()
    code = main_profile(["--repeat", "2", "--interval", "0.1", "--out", str(out_file),
                         "--name", "burner", "--", sys.executable, "-c", burn],
                        gpu_sampler=_no_gpu, out=stdout)
    assert code == 0
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "header" and kinds[-1] == "proposal" and kinds.count("run_end") == 2
    samples = [r for r in records if r["kind"] == "sample"]
    useful = [r for r in samples if r["alive"]]
    assert len(useful) >= 10
    assert {r["run"] for r in useful} == {0, 1}
    assert all(r["gpu_status"] == "no_gpu" for r in samples)
    for run in (0, 1):  # each run spent 0.8 s of CPU (plus its start): the samples saw it
        seen = sum(r["cpu_pct"] * r["dt"] for r in samples if r["run"] == run) / 100
        assert 0.6 < seen < 1.6, (run, seen)
    assert all(r["rss_bytes"] > 0 for r in useful)
    text = stdout.getvalue()
    assert text.startswith("# proposed by praxist-fs profile: ")
    body = yaml.safe_load(text)["burner"]
    assert body["accelerator"] == "cpu"
    share = 0.8 / max(float(w) for w in own.read_text().split())  # the busier run's share
    if share > 0.6:  # clearly more than half a core: a loaded machine may give it less
        assert "cpu" in body["pressure_domains"]


def test_profile_returns_the_command_exit_code(tmp_path):
    stdout = io.StringIO()
    code = main_profile(["--repeat", "3", "--interval", "0.1", "--out",
                         str(tmp_path / "s.jsonl"), "--", "sh", "-c", "sleep 0.3; exit 4"],
                        gpu_sampler=_no_gpu, out=stdout)
    assert code == 4
    assert "run 1 exited with code 4" in stdout.getvalue()
    ends = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()
            if '"run_end"' in line]
    assert len(ends) == 1  # a failing run ends the repetitions


def test_profile_samples_the_whole_tree(tmp_path):
    stdout = io.StringIO()
    cmd = f"{sys.executable} -c 'import time; time.sleep(0.6)' & wait"
    main_profile(["--interval", "0.1", "--out", str(tmp_path / "s.jsonl"),
                  "--", "sh", "-c", cmd], gpu_sampler=_no_gpu, out=stdout)
    samples = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert max(r.get("pids", 0) for r in samples) >= 2


def test_profile_usage_errors():
    assert main_profile([], gpu_sampler=_no_gpu, out=io.StringIO()) == 2
    assert main_profile(["--repeat", "0", "--", "true"], gpu_sampler=_no_gpu) == 2
    assert main_profile(["--name", "bad name", "--", "true"], gpu_sampler=_no_gpu) == 2
    assert main_profile(["--", "praxist-no-such-command-xyz"], gpu_sampler=_no_gpu) == 127


def test_profile_writes_a_series_only_where_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    stdout = io.StringIO()
    assert main_profile(["--interval", "0.1", "--name", "quiet", "--", "sleep", "0.3"],
                        gpu_sampler=_no_gpu, out=stdout) == 0
    assert "quiet" in yaml.safe_load(stdout.getvalue())  # the proposal, as ever
    assert os.listdir(tmp_path) == []  # nothing left in the caller's directory
    assert "series written" not in capsys.readouterr().err
