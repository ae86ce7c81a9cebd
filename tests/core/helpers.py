"""A small driver for the sans-IO scheduler: builds events the way the daemon does.

Requests go through ``parse_request`` (real bytes, real digest); the harness
keeps a fake "disk" (the last WriteJob / WriteReply per id) so tests can assert
the job and reply files a user would read.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from praxist_fs.core.effects import Effect, WriteJob, WriteReply
from praxist_fs.core.events import AttemptObserved, Event, RequestSeen
from praxist_fs.core.policy import Policy, Profile
from praxist_fs.core.request import parse_request, request_id_from_filename
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.errors import BadRequest

CPU = Profile(name="cpu", accelerator="cpu")
GPU = Profile(name="gpu", accelerator="gpu", gpu_count=1, gpu_memory_gb=10.0,
              gpu_utilization_pct=40.0)


def make_policy(**overrides: Any) -> Policy:
    values: dict[str, Any] = {"profiles": {"cpu": CPU, "gpu": GPU}, "default_profile": "cpu"}
    values.update(overrides)
    return Policy(**values)


class Harness:
    def __init__(self, policy: Policy | None = None) -> None:
        self.sched = Scheduler(policy or make_policy())
        self.now = 1000.0
        self.counter = 0
        self.job_files: dict[str, WriteJob] = {}
        self.reply_files: dict[str, dict[str, Any]] = {}
        self.last_effects: list[Effect] = []
        self.pids = 4000

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    # -- feeding events -------------------------------------------------

    def handle(self, event: Event) -> list[Effect]:
        effects = self.sched.handle(event)
        for effect in effects:
            if isinstance(effect, WriteJob):
                self.job_files[effect.job_id] = effect
            elif isinstance(effect, WriteReply):
                self.reply_files[effect.request_id] = effect.document
        self.last_effects = effects
        return effects

    def request_event(self, doc: dict[str, Any], name: str | None = None,
                      uid: int | None = None) -> RequestSeen:
        """``uid``: the request file's owner, as the daemon sees it (R-SEC-3)."""
        if name is None:
            self.counter += 1
            name = f"req-{self.counter}.json"
        data = json.dumps(doc, sort_keys=True).encode()
        digest = hashlib.sha256(data).hexdigest()
        try:
            request = parse_request(name, data)
        except BadRequest as exc:
            # the daemon answers under the explicit id, else the file name's, if safe
            rid = doc.get("request_id")
            if not (isinstance(rid, str) and request_id_from_filename(rid + ".json")):
                rid = request_id_from_filename(name)
            return RequestSeen(at=self.tick(), name=name, digest=digest, request_id=rid,
                               error_field=exc.field, error_problem=exc.problem, uid=uid)
        return RequestSeen(at=self.tick(), name=name, digest=digest,
                           request_id=request.request_id, request=request, uid=uid)

    def submit(self, tag: str, *, argv: Any = ("python", "train.py"), peer: str = "peer-a",
               name: str | None = None, uid: int | None = None,
               **fields: Any) -> dict[str, Any]:
        """Submit one request; return the reply document it produced (or {})."""
        doc: dict[str, Any] = {"peer": peer, "tag": tag}
        if argv is not None:
            doc["argv"] = list(argv)
        doc.update(fields)
        event = self.request_event(doc, name, uid)
        effects = self.handle(event)
        replies = [e.document for e in effects if isinstance(e, WriteReply)]
        return replies[0] if replies else {}

    def launch_all(self) -> list[tuple[str, str]]:
        """One scheduling pass as the daemon runs it: launches, then reason rewrites."""
        launched = []
        for event in self.sched.next_launches(self.tick()):
            self.handle(event)
            launched.append((event.job_id, event.attempt_id))
        for effect in self.sched.reason_updates():
            self.job_files[effect.job_id] = effect
        return launched

    def observe(self, job_id: str, attempt_id: str, **fields: Any) -> list[Effect]:
        fields.setdefault("alive", True)
        return self.handle(AttemptObserved(at=self.tick(), job_id=job_id,
                                           attempt_id=attempt_id, **fields))

    def spawn(self, job_id: str, attempt_id: str) -> list[Effect]:
        self.pids += 1
        return self.observe(job_id, attempt_id, pid=self.pids, pid_start=77, boot_id="boot")

    def go(self, job_id: str, attempt_id: str) -> list[Effect]:
        """Spawn the shim, see READY; return the effects of the READY sighting."""
        self.spawn(job_id, attempt_id)
        return self.observe(job_id, attempt_id, ready=True)

    def exit(self, job_id: str, attempt_id: str, code: int, signal: int | None = None,
             error: str | None = None) -> list[Effect]:
        ended_at = self.now + 0.5  # before the observation's own tick
        return self.observe(job_id, attempt_id, alive=False, ready=True, go=True, exited=True,
                            exit_code=code, signal=signal, error=error, ended_at=ended_at)

    # -- views -------------------------------------------------------------

    def job(self, job_id: str) -> dict[str, Any]:
        """The job file as last written (R-FS-6), checked against the live state."""
        written = self.job_files[job_id]
        live = self.sched.jobs[job_id]
        expected = live.to_dict()
        if live.state.value == "queued" and job_id in self.sched.pending:
            expected["reason"] = self.sched.pending[job_id]  # the soft "why pending"
        assert written.document == expected, "job file is stale"
        assert written.directory == live.state.directory
        return written.document

    def directory(self, job_id: str) -> str:
        return self.job_files[job_id].directory
