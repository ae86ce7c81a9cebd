"""GPU placement and pressure admission end to end, on the documented fake inventory
and PSI files the tests write (R-GPU-1..3, R-ADM-1..2, R-RUN-4)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Host, request, scheduler_task, wait_for

TASK = scheduler_task("""\
initial_concurrent_experiments: {slots}
min_concurrent_experiments: 1
max_concurrent_experiments: {max_slots}
calm_samples: 2
default_profile: gpu45
profiles:
  gpu45: {{accelerator: gpu, gpu_count: 1, gpu_memory_gb: 20, gpu_utilization_pct: 45}}
  gpu_pair: {{accelerator: gpu, gpu_count: 2, gpu_memory_gb: 10, gpu_utilization_pct: 30}}
  gpu_unknown: {{accelerator: gpu, gpu_count: 1}}
  cpu_hot: {{accelerator: cpu, pressure_domains: [cpu]}}
  cpu_free: {{accelerator: cpu}}
""")


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


@pytest.fixture
def gpu_run(make_run, host):
    def start(slots=4, max_slots=8, name="run"):
        run = make_run(name=name, task_text=TASK.format(slots=slots, max_slots=max_slots))
        run.start(env=host.env())
        return run
    return start


def blocker(tmp_path, name="gate"):
    gate = tmp_path / name
    return gate, ["sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"]


def queue_reason(run, job_id, says: str) -> str:
    """The job's reason in status.json's queue once it says ``says``: it may first show
    the job without it (a reason from an earlier pass, or none yet)."""
    return wait_for(lambda: next((q["reason"] for q in (run.status() or {}).get("queue", ())
                                  if q["job_id"] == job_id and says in q["reason"]), None),
                    message=f"job {job_id} queued with a reason saying {says!r}")


def test_two_45pct_jobs_share_a_gpu_and_a_third_waits(gpu_run, host, tmp_path):
    host.edit_device(1, utilization_pct=90)  # a colleague keeps device 1 busy
    run = gpu_run()
    gate, argv = blocker(tmp_path)
    jobs = [run.reply(run.submit(request(f"share-{i}", argv)))["job_id"] for i in range(3)]
    first, second = (run.wait_state(j, "running") for j in jobs[:2])
    assert first["attempts"][0]["gpus"] == second["attempts"][0]["gpus"] == ["GPU-fake-0"]
    assert "45%" in queue_reason(run, jobs[2], "utilization")
    wait_for(lambda: "utilization" in run.job(jobs[2])["reason"],  # the job file says why, too
             message="the job file's reason")
    status = run.status()
    [dev0] = [d for d in status["gpus"]["devices"] if d["uuid"] == "GPU-fake-0"]
    assert dev0["declared_utilization_pct"] == 90 and sorted(dev0["jobs"]) == sorted(jobs[:2])
    [dev1] = [d for d in status["gpus"]["devices"] if d["uuid"] == "GPU-fake-1"]
    assert dev1["external_utilization_pct"] == 90
    gate.touch()
    third = run.wait_state(jobs[2], "completed")
    assert third["attempts"][0]["gpus"] == ["GPU-fake-0"]


def test_external_load_is_counted_until_it_drops(gpu_run, host, tmp_path):
    host.edit_device(0, memory_used_mib=130000, utilization_pct=10)  # VRAM taken by a colleague
    host.edit_device(1, memory_used_mib=0, utilization_pct=70)       # compute taken
    run = gpu_run()
    gate, argv = blocker(tmp_path)
    job_id = run.reply(run.submit(request("waits", argv)))["job_id"]
    assert queue_reason(run, job_id, "gpu").startswith("gpu")
    assert run.job(job_id)["state"] == "queued"
    host.edit_device(1, utilization_pct=20)  # the colleague's job finished
    assert run.wait_state(job_id, "running")["attempts"][0]["gpus"] == ["GPU-fake-1"]
    gate.touch()


def test_most_headroom_first_and_multi_gpu_binding(gpu_run, host, tmp_path):
    host.edit_device(0, utilization_pct=30)
    run = gpu_run()
    gate, argv = blocker(tmp_path)
    one = run.wait_state(run.reply(run.submit(request("single", argv)))["job_id"], "running")
    assert one["attempts"][0]["gpus"] == ["GPU-fake-1"]  # device 1 has more headroom
    out = tmp_path / "mask"
    pair = run.reply(run.submit(request(
        "pair", ["sh", "-c", f'echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|'
                             f'$PRAXIST_ASSIGNED_GPU_UUIDS" > {out}'], profile="gpu_pair")))
    job = run.wait_state(pair["job_id"], "completed")
    gpus = job["attempts"][0]["gpus"]
    assert sorted(gpus) == ["GPU-fake-0", "GPU-fake-1"]
    assert out.read_text().strip() == "|".join([",".join(gpus)] * 3)
    gate.touch()


def test_unknown_demand_gets_an_idle_device_of_its_own(gpu_run, host, tmp_path):
    host.edit_device(1, memory_used_mib=8000)  # device 1 is not idle
    run = gpu_run()
    gate, argv = blocker(tmp_path)
    exclusive = run.reply(run.submit(request("excl", argv, profile="gpu_unknown")))["job_id"]
    assert run.wait_state(exclusive, "running")["attempts"][0]["gpus"] == ["GPU-fake-0"]
    small = run.reply(run.submit(request("small", argv)))["job_id"]
    assert run.wait_state(small, "running")["attempts"][0]["gpus"] == ["GPU-fake-1"]
    second = run.reply(run.submit(request("excl-2", argv, profile="gpu_unknown")))["job_id"]
    queue_reason(run, second, "idle device")
    gate.touch()


def test_two_runs_on_one_host_never_overcommit_a_gpu(gpu_run, host, tmp_path):
    host.edit_device(1, utilization_pct=100)  # only device 0 is usable
    first, second = gpu_run(name="run-a"), gpu_run(name="run-b")
    gate, argv = blocker(tmp_path)
    a = [first.reply(first.submit(request(f"a{i}", argv)))["job_id"] for i in range(2)]
    for job_id in a:
        first.wait_state(job_id, "running")
    b = second.reply(second.submit(request("b0", argv)))["job_id"]
    # NVML (the fake) shows device 0 idle, but run-a's envelopes (90%) are in the registry.
    queue_reason(second, b, "utilization")
    status = wait_for(lambda: (s := second.status()) and s["gpus"]["devices"] and s)
    [dev0] = [d for d in status["gpus"]["devices"] if d["uuid"] == "GPU-fake-0"]
    assert dev0["other_runs_allocations"] == 2 and dev0["declared_utilization_pct"] == 90
    gate.touch()
    assert second.wait_state(b, "running", "completed")["attempts"][0]["gpus"] == ["GPU-fake-0"]


def test_job_process_on_the_gpu_is_attributed_to_the_job(gpu_run, host, tmp_path):
    run = gpu_run()
    gate, argv = blocker(tmp_path)
    job_id = run.reply(run.submit(request("seen", argv)))["job_id"]
    shim = run.wait_attempt_field(job_id, "pid")  # recorded just after the launch
    command = wait_for(lambda: _child_of(shim))
    uuid = run.job(job_id)["attempts"][0]["gpus"][0]
    index = 0 if uuid == "GPU-fake-0" else 1
    host.edit_device(index, memory_used_mib=18000, utilization_pct=40, processes=[
        {"pid": command, "used_memory_mib": 18000, "sm_util_pct": 40}])
    status = wait_for(lambda: (s := run.status()) and s["active"]
                      and s["active"][0]["resource_activity"] == "gpu_compute_active" and s)
    assert status["active"][0]["attribution"] == "complete"
    [device] = [d for d in status["gpus"]["devices"] if d["uuid"] == uuid]
    assert device["external_utilization_pct"] == 0 and device["external_memory_mib"] == 0
    gate.touch()


def test_cpu_pressure_holds_profiles_that_declare_cpu(gpu_run, host, tmp_path):
    host.set_pressure(cpu=95.0)
    run = gpu_run()
    hot = run.reply(run.submit(request("hot", profile="cpu_hot")))["job_id"]
    free = run.reply(run.submit(request("free", profile="cpu_free")))["job_id"]
    run.wait_state(free, "completed")
    assert queue_reason(run, hot, "pressure") == "cpu pressure 95% > 80%"
    assert run.status()["pressure"]["domains"]["cpu"]["avg10"] == 95.0
    host.set_pressure(cpu=1.0)
    run.wait_state(hot, "completed")


def test_concurrency_rises_on_calm_samples_and_falls_under_pressure(gpu_run, host, tmp_path):
    run = gpu_run(slots=1, max_slots=3)
    gate, argv = blocker(tmp_path)
    jobs = [run.reply(run.submit(request(f"c{i}", argv, profile="cpu_free")))["job_id"]
            for i in range(4)]
    status = wait_for(lambda: (s := run.status()) and s["running"] == 3 and s, timeout=30)
    assert status["concurrency"]["target"] == 3 and status["counts"]["queued"] == 1
    host.set_pressure(memory=50.0)  # above memory's high threshold (20%)
    status = wait_for(lambda: (s := run.status()) and s["concurrency"]["target"] == 1 and s,
                      timeout=30)
    assert status["running"] == 3  # lowering the target never stops running work
    gate.touch()
    for job_id in jobs:
        run.wait_state(job_id, "completed", timeout=30)


def test_without_an_inventory_gpu_work_waits_and_cpu_work_runs(make_run, host):
    run = make_run(task_text=TASK.format(slots=2, max_slots=4))
    run.start(env={"PRAXIST_PSI_ROOT": str(host.psi), "PRAXIST_HOST_REGISTRY": str(host.registry),
                   "PRAXIST_FAKE_GPUS": str(host.gpus.with_name("missing.json"))})
    gpu = run.reply(run.submit(request("gpu-none")))["job_id"]
    cpu = run.reply(run.submit(request("cpu-ok", profile="cpu_free")))["job_id"]
    run.wait_state(cpu, "completed")
    queue_reason(run, gpu, "no GPU inventory")
    assert run.job(gpu)["attempts"] == []


def _child_of(pid: int) -> int | None:
    """The shim's child that runs the submitted ``sh``: not a candidate of its PATH search
    that failed to exec (a zombie), nor a child caught before its exec (the shim's own
    command line)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and read_stat(entry / "stat") == pid:
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            if argv0.endswith(b"sh"):
                return int(entry.name)
    return None


def read_stat(path: Path) -> int | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return int(data[data.rfind(b")") + 2:].split()[1])


def test_progress_and_status_table_show_the_job_on_its_gpu(gpu_run, host, tmp_path):
    run = gpu_run()
    gate, _ = blocker(tmp_path)
    script = ('echo \'{"done": 3, "total": 10, "unit": "seeds"}\' > '
              '"$PRAXIST_EXPERIMENT_ATTEMPT_DIR/progress.json"; '
              f"while [ ! -e {gate} ]; do sleep 0.05; done")
    job_id = run.reply(run.submit(request("progressing", ["sh", "-c", script])))["job_id"]
    status = wait_for(lambda: (s := run.status()) and s["active"] and s["active"][0]["progress"]
                      and s)
    assert status["active"][0]["progress"] == {"done": 3, "total": 10, "unit": "seeds"}
    table = subprocess.run([sys.executable, "-m", "praxist_fs", "status", "--run-dir",
                            str(run.root)], capture_output=True, text=True, timeout=30).stdout
    assert "GPU-fake-0" in table and "3/10" in table and "pressure (psi avg10)" in table
    gate.touch()
    run.wait_state(job_id, "completed")


def test_mig_devices_are_not_placed_on(gpu_run, host, tmp_path):
    host.edit_device(0, mig_mode=True)
    host.edit_device(1, mig_mode=True)
    run = gpu_run()
    job_id = run.reply(run.submit(request("no-mig")))["job_id"]
    assert queue_reason(run, job_id, "gpu").startswith("gpu")
    assert run.job(job_id)["attempts"] == []
