"""`praxist-fs demo`: a guided tour on a scratch run directory, in under a minute.

It starts a real coordinator, submits through the same files a shell script
would use, shows dedup, a failure and its explicit retry, an exit-75
infrastructure retry, a hostile request, a GPU job held without a GPU, a short
generation with idle-supply leases, and a kill -9 of the coordinator with the
running attempt re-adopted; it ends by writing the run's HTML report.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

from .. import client, supply_client
from ..adapters.fsio import dumps, read_json, write_atomic
from ..adapters.layout import RunLayout
from ..adapters.lock import live_endpoint
from .render import format_status
from ..report import report_of, write

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
EXAMPLE_TASK = FIXTURES / "tasks" / "example.yaml"
FAKE_GPUS = FIXTURES / "gpus" / "two_h200.json"
COHORT = ("peer-a", "peer-b", "peer-c")
LEASE_WAIT_S = 20.0  # idle samples (3 x 1 s) plus room for a loaded CI machine


class Tour:
    def __init__(self, run_dir: str, config: str | None) -> None:
        self.layout = RunLayout.at(run_dir)
        self.config = config or (str(EXAMPLE_TASK) if EXAMPLE_TASK.exists() else None)
        self.proc: subprocess.Popen | None = None
        self.serial = 0
        self.gpus = self.layout.root / "fake-gpus.json"
        self.psi = self.layout.root / "fake-pressure"

    def say(self, text: str) -> None:
        print(f"\n== {text}", flush=True)

    def start(self) -> None:
        command = [sys.executable, "-m", "praxist_fs", "serve", "--run-dir", str(self.layout.root),
                   "--fake-gpus", str(self.gpus), "--psi-root", str(self.psi),
                   "--host-registry", str(self.layout.root / "host-registry")]
        if self.config:
            command += ["--config", self.config]
        log = open(self.layout.root / "coordinator.log", "ab")
        self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        log.close()
        self.wait(lambda: (e := live_endpoint(self.layout)) and e["pid"] == self.proc.pid,
                  "the coordinator to start")
        print(f"   coordinator pid {self.proc.pid} serves {self.layout.root}")

    def submit(self, tag: str, command: str, **fields) -> dict:
        """Exactly what `printf ... > spool/tmp/X.json && mv` does."""
        self.serial += 1
        request = {"request_id": f"demo-{self.serial}", "peer": "demo-peer", "tag": tag,
                   "command": command, "cwd": str(self.layout.root), **fields}
        client.submit(self.layout, request)
        reply = client.wait_for_reply(self.layout, request["request_id"], 10)
        print(f"   {tag:<22} -> {reply['outcome']:<18} {reply['reason']}")
        return reply

    def wait_job(self, job_id: str, *states: str) -> dict:
        return self.wait(lambda: (d := client.job_document(self.layout, job_id))
                         and d["state"] in states and d, f"job {job_id} to be {states}")

    def wait(self, predicate, what: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"demo: timed out waiting for {what}")
            time.sleep(0.05)
        return value

    def set_gpu(self, index: int, **observed) -> None:
        """A colleague's load appears or goes away: rewrite the fake inventory."""
        doc = json.loads(self.gpus.read_text())
        doc["devices"][index].update(observed)
        write_atomic(self.gpus, dumps(doc))

    def reason(self, job_id: str) -> str:
        return self.wait(lambda: next((q["reason"] for q in (client.status_document(
            self.layout) or {}).get("queue", []) if q["job_id"] == job_id
            and q["reason"].startswith("gpu")), None), f"a reason for {job_id}")

    def gpu_tour(self) -> None:
        self.say("GPU placement by declared envelope and observed load (fake 2 x H200)")
        self.set_gpu(1, utilization_pct=90, memory_used_mib=30000)
        self.wait(lambda: any(d["external_utilization_pct"] == 90 for d in (
            client.status_document(self.layout) or {}).get("gpus", {}).get("devices", [])),
            "the coordinator to sample the colleague's load")
        print("   a colleague's job (not ours) keeps GPU-fake-1 at 90% utilization")
        jobs = [self.submit(f"finetune-seed{i}", "sleep 4", profile="gpu_work")["job_id"]
                for i in range(3)]
        for job_id in jobs[:2]:
            doc = self.wait_job(job_id, "running")
            print(f"   {job_id} runs on {doc['attempts'][0]['gpus']} (45% / 20 GiB declared)")
        print(f"   {jobs[2]} waits: {self.reason(jobs[2])}")
        big = self.submit("llm-eval-large", "sleep 1", profile="gpu_large")["job_id"]
        print(f"   {big} waits: {self.reason(big)}")
        self.set_gpu(1, utilization_pct=0, memory_used_mib=0)
        print("   the colleague's job ends: GPU-fake-1 is free again")
        doc = self.wait_job(jobs[2], "running", "completed")
        print(f"   {jobs[2]} now runs on {doc['attempts'][0]['gpus']}")
        doc = self.wait_job(big, "completed")
        print(f"   {big} ran on {doc['attempts'][0]['gpus']} once 120 GiB fit")
        for job_id in jobs:
            self.wait_job(job_id, "completed")

    def generation_tour(self) -> None:
        self.say("A generation: idle peers get leases, one consumes, one declines")
        # Leases need unused slots for supply_idle_samples samples: nothing else may run.
        self.wait(lambda: (s := client.status_document(self.layout)) and s["running"] == 0
                  and s["queue_length"] == 0, "the earlier work to finish")
        root, number = self.layout.root, 1
        leases: dict[str, dict] = {}
        errors: dict[str, BaseException] = {}

        def wait_for_lease(peer: str) -> None:  # what `praxist-fs lease wait` does
            try:
                leases[peer] = supply_client.lease_wait(root, peer, number, LEASE_WAIT_S,
                                                        out=StringIO())
            except BaseException as exc:  # reported below, in the demo's thread
                errors[peer] = exc

        waiters = [threading.Thread(target=wait_for_lease, args=(peer,), daemon=True)
                   for peer in COHORT]
        for waiter in waiters:
            waiter.start()
        # All three are idle before the generation opens, so its first wave sees them all.
        self.wait(lambda: all(supply_client.idle_file(self.layout, number, peer).exists()
                              or peer in leases or peer in errors for peer in COHORT),
                  "the peers to register as idle", timeout=10)
        print(f"   {', '.join(COHORT)} wait idle (lease wait: "
              f"gen_{number}/resource_supply/idle/<peer>.json)")
        reply = supply_client.generation_command(root, "open", number, cohort=COHORT,
                                                 timeout=10)
        maturity = reply["generation"]["maturity"]
        print(f"   generation open {number} --cohort {' '.join(COHORT)} -> {reply['outcome']}: "
              f"{reply['reason']} (Q={maturity['Q']}, A_target={maturity['A_target']})")
        for waiter in waiters:
            waiter.join(LEASE_WAIT_S + 10)
        if errors or len(leases) != len(COHORT):
            raise RuntimeError(f"demo: no lease for {sorted(set(COHORT) - set(leases))}: "
                               f"{errors or 'the waiting threads did not finish'}")
        for peer in COHORT:
            print(f"   {peer} granted {leases[peer]['lease_id']:<14} "
                  f"priority {leases[peer]['priority']}")
        explorers = [p for p in COHORT if leases[p]["priority"] != "mature"]
        print(f"   first wave: {len(COHORT) - len(explorers)} mature lease(s) for "
              f"Q={maturity['Q']}; {len(explorers)} peer(s) keep exploring")

        mature = next(p for p in COHORT if leases[p]["priority"] == "mature")
        decliner, idler = [p for p in COHORT if p != mature]
        lease_id = leases[mature]["lease_id"]
        used = self.submit("mature-eval", "echo evaluating the mature candidate", peer=mature,
                           work_class="mature", lease=lease_id)
        print(f"   {mature} submits with lease={lease_id}: lease {used['lease']['outcome']}")
        supply_client.lease_decline(root, decliner, generation=number)
        declined = self.wait(lambda: (d := read_json(supply_client.lease_file(
            self.layout, number, decliner))) and d.get("state") == "declined" and d,
            f"{decliner}'s decline")
        print(f"   {decliner} declines {declined['lease_id']}: {declined['reason']}")
        self.wait_job(used["job_id"], "completed")
        results = self.layout.results(number)
        results.mkdir(parents=True, exist_ok=True)
        write_atomic(results / "r1.json", dumps({"peer": mature, "mature": True,
                                                 "score": 0.91}))
        self.wait(lambda: ((client.status_document(self.layout) or {}).get("generation")
                           or {}).get("results", {}).get("mature"), "the result to be counted")
        print(f"   {mature} publishes a mature result: gen_{number}/results/r1.json")

        reply = supply_client.generation_command(root, "close", number, timeout=10)
        print(f"   generation close {number} -> {reply['outcome']}: {reply['reason']}")
        signal_file = self.layout.generation(number) / "CLOSING_SIGNAL"
        self.wait(signal_file.exists, "CLOSING_SIGNAL")
        print(f"   wrote {signal_file.relative_to(root)}")
        revoked = self.wait(lambda: (d := read_json(supply_client.lease_file(
            self.layout, number, idler))) and d.get("state") == "revoked" and d,
            f"{idler}'s unused lease to be revoked")
        print(f"   {idler}'s unused {revoked['lease_id']} is revoked: {revoked['reason']}")
        stats_file = self.layout.generation(number) / "resource_supply" / "stats.json"
        stats = self.wait(lambda: (d := read_json(stats_file)) and d.get("revoked") and d,
                          "the revoked lease in stats.json")
        self.wait(lambda: any(g["number"] == number and g["phase"] == "closed" for g in (
            client.status_document(self.layout) or {}).get("generations", [])),
            f"generation {number} to close")
        print(f"   {stats_file.relative_to(root)}: granted {stats['granted']}, consumed "
              f"{stats['consumed']}, declined {stats['declined']}, revoked {stats['revoked']}, "
              f"conversion_rate {stats['conversion_rate']}")

    def run(self) -> int:
        shutil.rmtree(self.layout.root, ignore_errors=True)
        self.layout.root.mkdir(parents=True)
        # The demo's host: a fake two-H200 inventory and calm PSI files, both rewritten
        # by the tour (a real coordinator reads NVML and /proc/pressure).
        shutil.copy(FAKE_GPUS, self.gpus)
        self.psi.mkdir()
        for domain in ("cpu", "memory", "io"):
            (self.psi / domain).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        self.say("Start a coordinator (praxist-fs serve)")
        self.start()
        try:
            self.tour()
        finally:
            if self.proc and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=10)
        return 0

    def tour(self) -> None:
        self.say("Submit an experiment, then the same one again: one job, one run")
        first = self.submit("resnet-lr0.1-seed1", "echo training; sleep 1; echo done")
        self.submit("resnet-lr0.1-seed1", "echo training; sleep 1; echo done")
        self.submit("resnet-lr0.1-seed1", "echo a changed command")
        job = self.wait_job(first["job_id"], "completed")
        print(f"   {first['job_id']} completed with exit code {job['exit_code']} "
              f"after {len(job['attempts'])} attempt(s)")

        self.say("A failure is final until resubmitted with retry_terminal")
        failed = self.submit("vit-bad-config", "echo 'bad config' >&2; exit 3")
        print(f"   -> {self.wait_job(failed['job_id'], 'failed')['reason']}")
        self.submit("vit-bad-config", "echo 'bad config' >&2; exit 3")
        self.submit("vit-bad-config", "echo fixed", retry_terminal=True)
        job = self.wait_job(failed["job_id"], "completed")
        print("   attempts: " + ", ".join(f"{a['attempt_id']}={a['exit_code']}"
                                          for a in job["attempts"]))

        self.say("Exit code 75 means 'infrastructure': retried under the same identity")
        flaky = self.submit("flaky-node", "[ -e flaky.once ] || { touch flaky.once; exit 75; }")
        job = self.wait_job(flaky["job_id"], "completed")
        print("   attempts: " + ", ".join(f"{a['attempt_id']}={a['exit_code']}({a['outcome']})"
                                          for a in job["attempts"]))

        self.say("A hostile request is rejected with the field named; nothing crashes")
        name = "hostile.json"
        (self.layout.spool_tmp / name).write_text('{"peer": "x", "tag": "../../etc", "argv": ["true"]}')
        (self.layout.spool_tmp / name).rename(self.layout.incoming / name)
        reply = client.wait_for_reply(self.layout, "hostile", 10)
        print(f"   hostile -> {reply['outcome']}: {reply['reason']}")
        print(f"   kept in {self.layout.rejected / name} with {name}.error.json")

        self.gpu_tour()
        self.generation_tour()

        self.say("kill -9 the coordinator while an experiment runs, then restart it")
        long = self.submit("long-eval", "echo started; sleep 3; echo finished; exit 0")
        self.wait_job(long["job_id"], "running")
        before = self.wait(lambda: (d := client.job_document(self.layout, long["job_id"]))
                           and d["attempts"][0]["pid"], "the long job's pid")
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        print(f"   killed coordinator; the attempt (shim pid {before}) keeps running")
        self.start()
        job = self.wait_job(long["job_id"], "completed")
        print(f"   re-adopted pid {job['attempts'][0]['pid']}, exit code {job['exit_code']}, "
              f"{len(job['attempts'])} attempt: it ran exactly once")

        self.say("Status (praxist-fs status --run-dir %s)" % self.layout.root)
        self.wait(lambda: (s := client.status_document(self.layout))
                  and s["counts"]["completed"] >= 4 and s, "status.json to catch up")
        print(format_status(client.status_document(self.layout)))
        self.say("Where to look")
        root = self.layout.root
        print(f"   jobs:      {self.layout.jobs('done')}/*.json")
        print(f"   replies:   {self.layout.replies}/")
        print(f"   logs:      {root / 'logs' / 'experiments'}/<job>/<attempt>.log")
        print(f"   attempts:  {self.layout.attempts}/<job>/<attempt>/ (READY, GO, exit.json)")
        print(f"   journal:   {self.layout.journal}")
        print(f"   status:    {self.layout.status}  (json: praxist-fs status --json)")
        report = root / "report.html"
        write(report, report_of(self.layout)[0])
        self.say(f"The run's report (praxist-fs report --run-dir {root} -o {report})")
        print(f"   open {report} in a browser: every GPU's timeline, the queue, failures")
        print(json.dumps({"demo": "ok", "run_dir": str(root), "report": str(report)}))


def run_demo(run_dir: str, config: str | None) -> int:
    return Tour(run_dir, config).run()
