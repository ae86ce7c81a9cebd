"""Coordinator end to end on the GPU machine; run by tests/gpu/run_gpu_check.sh.

Not a pytest file on purpose (no ``test_`` prefix): it needs a GPU, or the dry
run's fake inventory. It prints one line per finding, starting with PASS, FAIL,
WARN or INFO; the shell script counts them. Every wait is bounded.

``coordinator``: start ``praxist_fs serve`` on a fresh run directory (real NVML
unless ``--dry``), submit two ``torch_small`` jobs (45 % / 4 GB each) with
``praxist_fs launch --detach`` and check that they share device 0 at the same
time, that status.json lists both on the device and attributes their GPU
processes, that both exit 0 with the binding they were given; then submit a
``too_big`` job (200 GB), check it stays queued with a "gpu memory" reason,
and stop the coordinator with SIGTERM.

``profile``: ``praxist_fs profile`` of one torch job bound to device 0 by
``CUDA_VISIBLE_DEVICES=<uuid>``; the proposal must say ``accelerator: gpu``
and ``gpu_memory_gb >= 4`` (unknown demand is a WARN).

``--dry`` (``GPU_CHECK_DRY=1`` in the shell script) is for a machine without a
GPU: the coordinator reads the fake inventory file given by ``--fake-gpus``
(this script rewrites it while jobs run, listing their processes the way NVML
would), and the job is a shell command that sleeps and prints the binding it
got instead of the torch job.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
JOB = "tests/gpu/torch_binding_job.py"  # relative to ROOT, the jobs' cwd
TASK = ROOT / "tests" / "gpu" / "task.yaml"
TERMINAL = ("completed", "failed", "rejected", "cancelled", "drained_unknown", "expired")
ATTRIBUTED = ("gpu_compute_active", "gpu_context_idle", "gpu_context_present")
UNATTRIBUTED = ("no_gpu_process_observed", "gpu_process_attribution_unavailable")
# The dry run's stand-in for the torch job: sleep, then report the binding it was given.
DRY_JOB = (
    'sleep "$1"; '
    'ok=false; if [ -n "$CUDA_VISIBLE_DEVICES" ] && { [ -z "$PRAXIST_ASSIGNED_GPU_UUIDS" ] || '
    '[ "$CUDA_VISIBLE_DEVICES" = "$PRAXIST_ASSIGNED_GPU_UUIDS" ]; }; then ok=true; fi; '
    "printf '{\"dry_run\": true, \"binding_ok\": %s, \"device_count\": 1, \"torch_uuid\": \"%s\", "
    "\"cuda_visible_devices\": \"%s\", \"pid\": %d}\\n' "
    '"$ok" "$CUDA_VISIBLE_DEVICES" "$CUDA_VISIBLE_DEVICES" "$$"'
)

sys.path.insert(0, str(ROOT))
from praxist_fs.adapters import procs  # noqa: E402


def say(kind: str, message: str) -> None:
    print(f"{kind} {message}", flush=True)


def check(ok: bool, message: str, otherwise: str = "FAIL") -> bool:
    say("PASS" if ok else otherwise, message)
    return ok


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def shown(argv: list[str]) -> str:
    return " ".join("<dry job>" if a == DRY_JOB else a for a in argv)


def job_argv(args: argparse.Namespace) -> list[str]:
    if args.dry:
        return ["sh", "-c", DRY_JOB, "dry-job", f"{args.job_seconds:g}"]
    return [args.python, JOB]


def job_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ, GPU_CHECK_JOB_SECONDS=f"{args.job_seconds:g}")
    env.pop("PRAXIST_ASSIGNED_GPU_UUIDS", None)
    return env


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: stop the coordinator, clean up


# --- the run directory ----------------------------------------------------------------


class Run:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.root = base / "run"
        self.registry = base / "registry"
        self.sched = self.root / "resource_scheduler"

    def job(self, job_id: str) -> tuple[str | None, dict | None]:
        for directory in ("done", "running", "queued"):
            doc = read_json(self.sched / "jobs" / directory / f"{job_id}.json")
            if isinstance(doc, dict):
                return directory, doc
        return None, None

    def status(self) -> dict | None:
        doc = read_json(self.sched / "status.json")
        return doc if isinstance(doc, dict) else None

    def endpoint(self) -> dict | None:
        doc = read_json(self.sched / "endpoint.json")
        return doc if isinstance(doc, dict) else None

    def attempt_processes(self) -> list[int]:
        """Live shims of this run (found by their command line) and their session members."""
        needle = str(self.sched / "attempts")
        shims = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if needle in cmdline and procs.is_alive(int(entry.name),
                                                    procs.start_time(int(entry.name))):
                shims.append(int(entry.name))
        return sorted({*shims, *(p for s in shims for p in session_members(s))})


def session_members(session: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != session:
            if procs.session_id(int(entry.name)) == session:
                members.append(int(entry.name))
    return members


def kill_groups(pids: list[int]) -> None:
    for pid in pids:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# --- GPU observation: NVML, or the fake inventory this script keeps up to date -------------


class GpuWatch:
    """Samples device ``uuid`` independently of the coordinator. In a dry run it first
    rewrites the fake inventory so each job's processes show 4 GiB and 40 % SM."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.uuid = args.uuid
        self.fake = Path(args.fake_gpus) if args.dry else None
        self.inventory = None
        self.error = None
        self._listed: list[int] | None = None
        from praxist_fs.adapters.gpus import FakeInventory, InventoryUnavailable, NvmlInventory
        try:
            self.inventory = FakeInventory(self.fake) if self.fake else NvmlInventory()
        except InventoryUnavailable as exc:
            self.error = str(exc)

    def simulate(self, job_pids: list[int]) -> None:
        if self.fake is None or job_pids == self._listed:
            return
        doc = json.loads(self.fake.read_text())
        for device in doc["devices"]:
            if device["uuid"] == self.uuid:
                device["processes"] = [{"pid": p, "used_memory_mib": 4096, "sm_util_pct": 40}
                                       for p in job_pids]
                device["memory_used_mib"] = 4096 * len(job_pids)
                device["utilization_pct"] = min(100, 40 * len(job_pids))
        tmp = self.fake.with_name(self.fake.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.rename(self.fake)
        self._listed = list(job_pids)

    def sample(self):
        if self.inventory is None:
            return None
        sample = self.inventory.sample()
        return next((d for d in sample.devices if d.uuid == self.uuid), None), sample.error

    def close(self) -> None:
        if self.inventory is not None:
            self.inventory.close()


# --- coordinator end to end --------------------------------------------------------------


def start_coordinator(args: argparse.Namespace, run: Run, log_path: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("PRAXIST_HOST_REGISTRY", None)
    if args.dry:
        env["PRAXIST_FAKE_GPUS"] = args.fake_gpus
    else:
        env.pop("PRAXIST_FAKE_GPUS", None)  # the real path: NVML, never a fake file
    command = [args.python, "-m", "praxist_fs", "serve", "--run-dir", str(run.root),
               "--config", str(TASK), "--host-registry", f"{run.root}/../registry"]
    say("INFO", "coordinator: " + " ".join(command)
        + (f" (PRAXIST_FAKE_GPUS={args.fake_gpus})" if args.dry else " (real NVML)"))
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def launch(args: argparse.Namespace, run: Run, tag: str, profile: str | None = None
           ) -> subprocess.Popen:
    command = [args.python, "-m", "praxist_fs", "launch", "--detach", f"--run-dir={run.root}",
               "--peer=gpu-check", f"--tag={tag}"]
    if profile:
        command.append(f"--profile={profile}")
    command += ["--", *job_argv(args)]
    if tag == "torch-a":  # the others differ only in the tag (and too_big's --profile)
        say("INFO", "launch: " + shown(command))
    return subprocess.Popen(command, cwd=ROOT, env=job_env(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)


def job_id_of(tag: str, popen: subprocess.Popen) -> str | None:
    try:
        out, err = popen.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        popen.kill()
        out, err = popen.communicate()
    job_id = out.strip().splitlines()[-1] if out.strip() else None
    if check(popen.returncode == 0 and bool(job_id),
             f"launch --detach --tag={tag}: exit {popen.returncode}, job id {job_id}"):
        return job_id
    say("INFO", f"launch stderr: {err.strip()[-800:]}")
    return None


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<{exc}>"


def cmd_coordinator(args: argparse.Namespace) -> int:
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="praxist_gpu_e2e."))
    run = Run(base)
    run.root.mkdir()
    coordinator_log = logs / "coordinator.log"
    observations: dict[str, Any] = {"run_dir": str(run.root), "uuid0": args.uuid,
                                    "dry": args.dry, "job_seconds": args.job_seconds}
    coordinator = None
    watch = None
    try:
        coordinator = start_coordinator(args, run, coordinator_log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and coordinator.poll() is None:
            if (run.endpoint() or {}).get("pid") == coordinator.pid and run.status():
                break
            time.sleep(0.1)
        if not check(coordinator.poll() is None and (run.endpoint() or {}).get("pid")
                     == coordinator.pid, "coordinator serving: endpoint.json names its pid "
                     f"{coordinator.pid} (exit status {coordinator.poll()})"):
            say("INFO", "coordinator log:\n" + tail(coordinator_log))
            return 1
        gpus = (run.status() or {}).get("gpus") or {}
        devices = gpus.get("devices") or []
        check(gpus.get("source") == ("fake" if args.dry else "nvml") and not gpus.get("error"),
              f"status.json gpus.source={gpus.get('source')} error={gpus.get('error')} "
              f"devices={[d['uuid'] for d in devices]}")
        if len(devices) != 1:
            say("WARN", f"{len(devices)} devices in the inventory: the two jobs may be spread "
                "over devices; the co-location checks below expect one device")
        watch = GpuWatch(args)
        if watch.error:
            say("WARN", f"this check cannot watch NVML itself ({watch.error}); the "
                "attribution cross-check is skipped")

        # -- two torch_small jobs share device 0 ------------------------------------
        launchers = {tag: launch(args, run, tag) for tag in ("torch-a", "torch-b")}
        ids = {tag: job_id_of(tag, popen) for tag, popen in launchers.items()}
        if not all(ids.values()):
            say("INFO", "coordinator log:\n" + tail(coordinator_log))
            return 1
        jobs = list(ids.values())
        tag_of = {job_id: tag for tag, job_id in ids.items()}
        seen_running = {j: False for j in jobs}
        directories: dict[str, list[str]] = {j: [] for j in jobs}
        both_running_since = both_running_until = None
        dev0_lists_both = False
        status_samples: list[dict[str, Any]] = []
        gpu_sightings: dict[str, list[tuple[float, int, float | None, float | None]]] = {
            j: [] for j in jobs}
        last_status = None
        next_gpu = 0.0
        finals: dict[str, dict] = {}
        start = time.time()
        deadline = time.monotonic() + args.job_seconds + 150
        while True:
            now = time.time()
            docs = {}
            for j in jobs:
                directory, doc = run.job(j)
                docs[j] = doc
                if directory and (not directories[j] or directories[j][-1] != directory):
                    directories[j].append(directory)
                if doc and doc["state"] == "running" and directory == "running":
                    seen_running[j] = True
                if doc and doc["state"] in TERMINAL:
                    finals[j] = doc
            if all(d and d["state"] == "running" for d in docs.values()):
                both_running_since = both_running_since or now
                both_running_until = now
            status = run.status()
            if status and status.get("updated_at") != last_status:
                last_status = status.get("updated_at")
                active = {a["job_id"]: a for a in status.get("active", []) if a["job_id"] in jobs}
                device = next((d for d in (status.get("gpus") or {}).get("devices", [])
                               if d["uuid"] == args.uuid), None)
                if device and all(j in device["jobs"] for j in jobs):
                    dev0_lists_both = True
                status_samples.append({
                    "t": round(last_status - start, 2),
                    "jobs": {j: [a["resource_activity"], a["attribution"], a["gpus"], a["pid"]]
                             for j, a in active.items()},
                    "device0": device and {k: device[k] for k in (
                        "jobs", "utilization_pct", "memory_used_mib", "declared_utilization_pct",
                        "external_utilization_pct", "external_memory_mib", "attribution")},
                })
            if watch.inventory is not None and time.monotonic() >= next_gpu:
                next_gpu = time.monotonic() + 1.0
                shims = {j: d["attempts"][-1]["pid"] for j, d in docs.items()
                         if d and d["state"] == "running" and d["attempts"]
                         and d["attempts"][-1]["pid"]}
                if args.dry:
                    watch.simulate(sorted(p for s in shims.values() for p in session_members(s)))
                device, _error = watch.sample()
                owner_of = {shim: j for j, shim in shims.items()}
                for process in device.processes if device else ():
                    owner = owner_of.get(procs.session_id(process.pid))
                    if owner:
                        gpu_sightings[owner].append((round(time.time() - start, 2), process.pid,
                                                     process.used_memory_mib,
                                                     process.sm_util_pct))
            if len(finals) == len(jobs):
                break
            if not any(seen_running.values()) and now - start > 30:
                queue = {q["job_id"]: q["reason"] for q in (status or {}).get("queue", [])}
                say("FAIL", "neither job started within 30 s; queue reasons: "
                    + ", ".join(f"{tag_of[j]}: {queue.get(j)!r}" for j in jobs))
                break
            if coordinator.poll() is not None:
                say("FAIL", f"the coordinator exited ({coordinator.returncode}) while the jobs ran")
                break
            if time.monotonic() > deadline:
                queue = {q["job_id"]: q["reason"] for q in (status or {}).get("queue", [])}
                say("FAIL", f"jobs not finished after {args.job_seconds + 150:g} s: "
                    + ", ".join(f"{tag_of[j]} {(d or {}).get('state')} {queue.get(j, '')}"
                                for j, d in docs.items()))
                break
            time.sleep(0.2)
        if args.dry:
            watch.simulate([])
        observations.update(jobs=ids, directories=directories, status_samples=status_samples,
                            gpu_sightings=gpu_sightings)

        for j in jobs:
            check(seen_running[j], f"{tag_of[j]} ({j}) reached running (jobs/ dirs seen: "
                  f"{' -> '.join(directories[j])})")
            _, doc = run.job(j)
            gpus = doc["attempts"][0]["gpus"] if doc and doc["attempts"] else None
            check(gpus == [args.uuid], f"{tag_of[j]} attempts[0].gpus == {gpus} "
                  f"(want [{args.uuid}], the NVML UUID of device 0)")
        overlap = (both_running_until - both_running_since) if both_running_since else 0.0
        check(both_running_since is not None,
              f"both jobs running at the same time (for about {overlap:.1f} s)")
        check(dev0_lists_both, "status.json gpus.devices[uuid0].jobs listed both jobs "
              f"while they ran ({len(status_samples)} status writes sampled)")
        check_activity(jobs, tag_of, status_samples, gpu_sightings, watch, args)
        for j in jobs:
            check_log(run, j, tag_of[j], finals.get(j), args)

        # -- a job larger than any device stays queued ---------------------------------------
        big = job_id_of("too-big", launch(args, run, "too-big", profile="too_big"))
        if big:
            reason, queued_doc = None, None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                status = run.status() or {}
                entry = next((q for q in status.get("queue", []) if q["job_id"] == big), None)
                reason = entry and entry["reason"]
                if reason and "gpu memory" in reason.lower():
                    time.sleep(2.0)  # and it is still queued a little later
                    break
                if (run.job(big)[1] or {}).get("state", "queued") != "queued":
                    break  # it was started: wrong
                time.sleep(0.25)
            directory, queued_doc = run.job(big)
            check(bool(reason) and "gpu memory" in reason.lower(),
                  f"too_big (200 GB) queue reason in status.json: {reason!r}")
            check(directory == "queued" and queued_doc is not None
                  and queued_doc["state"] == "queued" and queued_doc["attempts"] == [],
                  f"too_big stays queued: jobs/{directory}/, state "
                  f"{(queued_doc or {}).get('state')}, attempts on "
                  f"{[a['gpus'] for a in (queued_doc or {}).get('attempts', [])]}, "
                  f"job file reason {(queued_doc or {}).get('reason')!r}")
            observations["too_big"] = {"job_id": big, "reason": reason, "doc": queued_doc}

        # -- SIGTERM ---------------------------------------------------------------------
        coordinator.send_signal(signal.SIGTERM)
        try:
            code = coordinator.wait(timeout=20)
        except subprocess.TimeoutExpired:
            code = None
        check(code == 0, f"coordinator exited {code} after SIGTERM (want 0)")
        final_status = run.status() or {}
        check((final_status.get("coordinator") or {}).get("state") == "stopped"
              and not (run.sched / "endpoint.json").exists(),
              "status.json says stopped and endpoint.json is gone after SIGTERM")
        left = run.attempt_processes()
        check(not left, f"no shim or job process of the run left (found {left})")
        observations["final_status"] = final_status
        return 0
    finally:
        if watch is not None:
            watch.close()
        if coordinator is not None and coordinator.poll() is None:
            coordinator.terminate()
            try:
                coordinator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                coordinator.kill()
                coordinator.wait()
        kill_groups(run.attempt_processes())
        (logs / "e2e_observations.json").write_text(json.dumps(observations, indent=1,
                                                               default=str))
        shutil.copytree(base, logs / "e2e_run", dirs_exist_ok=True, symlinks=True,
                        ignore_dangling_symlinks=True)
        shutil.rmtree(base, ignore_errors=True)


def check_activity(jobs: list[str], tag_of: dict[str, str], samples: list[dict],
                   sightings: dict[str, list], watch: GpuWatch,
                   args: argparse.Namespace) -> None:
    """PASS when a status write shows gpu_compute_active with complete/partial attribution;
    FAIL only when this script saw a job's process on the device (same session mapping as
    the coordinator) and the status writes well inside that window attributed it to no job."""
    compute_seen = False
    for j in jobs:
        seen = Counter(tuple(s["jobs"][j][:2]) for s in samples if j in s["jobs"])
        say("INFO", f"{tag_of[j]} status (resource_activity, attribution) counts: "
            + (", ".join(f"{a}/{b} x{n}" for (a, b), n in seen.items()) or "none"))
        rows = sightings[j]
        if rows:
            say("INFO", f"{tag_of[j]} on the device per this script's "
                f"{'fake' if args.dry else 'NVML'} sampling: {len(rows)} samples from "
                f"t={rows[0][0]} to t={rows[-1][0]} s; (t, pid, MiB, sm%) first {rows[:2]} "
                f"last {rows[-2:]}")
        if any(a == "gpu_compute_active" and b in ("complete", "partial") for a, b in seen):
            compute_seen = True
    timeline = [f"t={s['t']}: " + "; ".join(f"{tag_of[j]} {v[0]}/{v[1]}"
                                            for j, v in s["jobs"].items())
                for s in samples if s["jobs"]]
    say("INFO", "status timeline: " + (" | ".join(timeline[:14]) or "no active job sampled"))
    if compute_seen:
        say("PASS", "status showed resource_activity gpu_compute_active with attribution "
            "complete or partial for at least one job")
        return
    blamed = []
    for j in jobs:
        rows = sightings[j]
        if not rows:
            continue
        first, last = rows[0][0], rows[-1][0]
        inside = [s for s in samples if j in s["jobs"] and first + 2.0 <= s["t"] <= last]
        if inside and not any(s["jobs"][j][0] in ATTRIBUTED for s in samples if j in s["jobs"]) \
                and any(s["jobs"][j][0] in UNATTRIBUTED for s in inside):
            blamed.append(tag_of[j])
    if blamed:
        say("FAIL", f"the device listed the processes of {', '.join(blamed)} but status.json "
            "attributed them to no job (see the timeline above)")
    elif watch.inventory is None:
        say("WARN", "no gpu_compute_active seen, and NVML could not be watched to tell why")
    elif not any(sightings.values()):
        say("WARN", "no gpu_compute_active seen; NVML never listed a process of the jobs' "
            "sessions on the device (PID namespace, or the driver hides processes): "
            "attribution cannot be complete here")
    else:
        say("WARN", "no gpu_compute_active seen although NVML listed the jobs' processes: "
            "per-process SM utilization missing or 0 in the coordinator's samples, or no "
            "status write fell inside the window (see the counts and timeline above)")


def check_log(run: Run, job_id: str, tag: str, final: dict | None,
              args: argparse.Namespace) -> None:
    if final is None:
        say("FAIL", f"{tag} did not finish")
        return
    attempt = final["attempts"][-1] if final["attempts"] else {}
    check(final["state"] == "completed" and attempt.get("exit_code") == 0 and
          len(final["attempts"]) == 1, f"{tag} {final['state']} with exit code "
          f"{attempt.get('exit_code')} after {len(final['attempts'])} attempt(s): {final['reason']}")
    log = run.root / "logs" / "experiments" / job_id / f"{attempt.get('attempt_id', 'a1')}.log"
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        say("FAIL", f"{tag} log {log}: {exc}")
        return
    say("INFO", f"{tag} log ({log.relative_to(run.root)}):\n" + text[-2000:].rstrip())
    report: dict = {}
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                report = json.loads(line)
                break
            except ValueError:
                continue
    check(report.get("binding_ok") is True, f"{tag} binding_ok={report.get('binding_ok')}")
    torch_uuid = (report.get("torch_uuid") or "").lower()
    check(torch_uuid == args.uuid.lower() and report.get("device_count") == 1,
          f"{tag} sees one device, uuid {report.get('torch_uuid')} == {args.uuid} "
          f"(CUDA_VISIBLE_DEVICES={report.get('cuda_visible_devices')})")


# --- profile -----------------------------------------------------------------------------


def cmd_profile(args: argparse.Namespace) -> int:
    import yaml

    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    env = job_env(args)
    env["CUDA_VISIBLE_DEVICES"] = args.uuid
    command = [args.python, "-m", "praxist_fs", "profile", "--interval", "0.15", "--out",
               args.out, "--", *job_argv(args)]
    say("INFO", f"CUDA_VISIBLE_DEVICES={args.uuid} " + shown(command))
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=args.job_seconds + 90, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        say("FAIL", f"praxist_fs profile did not finish in {exc.timeout:g} s")
        return 1
    (logs / "profile.yaml").write_text(done.stdout)
    (logs / "profile.stderr").write_text(done.stderr)
    say("INFO", "profile stderr (the job's output and notes):\n" + done.stderr.strip()[-1500:])
    say("INFO", "proposed profile:\n" + done.stdout.rstrip())
    check(done.returncode == 0, f"praxist_fs profile exit code {done.returncode}")
    try:
        proposal = yaml.safe_load(done.stdout) or {}
        (name, fields), = proposal.items()
    except (yaml.YAMLError, ValueError, AttributeError) as exc:
        say("FAIL", f"the proposal is not one YAML profile block: {exc}")
        return 1
    comments = [line[2:] for line in done.stdout.splitlines() if line.startswith("# ")]
    accelerator = fields.get("accelerator")
    memory, utilization = fields.get("gpu_memory_gb"), fields.get("gpu_utilization_pct")
    if args.dry:
        say("PASS", f"dry run: profile {name} proposed (accelerator: {accelerator})")
        say("WARN", "dry run: no GPU, the proposal's GPU demand is not checked")
        return 0
    if accelerator != "gpu":
        say("FAIL", f"proposal says accelerator: {accelerator} for a job that used the GPU; "
            f"notes: {comments}")
    elif memory is None or utilization is None:
        say("WARN", f"accelerator: gpu but GPU demand unknown (exclusive device); why: {comments}")
    else:
        check(float(memory) >= 4, f"proposal accelerator: gpu, gpu_memory_gb: {memory} (>= 4), "
              f"gpu_utilization_pct: {utilization}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("coordinator", "profile"))
    parser.add_argument("--uuid", required=True, help="the UUID of device 0")
    parser.add_argument("--logs", required=True, help="directory for logs and observations")
    parser.add_argument("--job-seconds", type=float, default=15.0)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dry", action="store_true", help="fake inventory, no torch job")
    parser.add_argument("--fake-gpus", help="dry run: the fake inventory file to serve and edit")
    parser.add_argument("--out", help="profile: the JSON-lines series")
    args = parser.parse_args(argv)
    if args.dry and not args.fake_gpus:
        parser.error("--dry needs --fake-gpus")
    signal.signal(signal.SIGTERM, _on_sigterm)
    if args.what == "coordinator":
        return cmd_coordinator(args)
    if not args.out:
        parser.error("profile needs --out")
    return cmd_profile(args)


if __name__ == "__main__":
    sys.exit(main())
