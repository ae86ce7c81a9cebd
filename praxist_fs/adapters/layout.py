"""Every path of the run directory (R-FS-1) in one place; the core never sees a path."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

JOB_DIRECTORIES = ("queued", "running", "done")


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @classmethod
    def at(cls, run_dir: str | os.PathLike) -> RunLayout:
        return cls(Path(os.path.abspath(run_dir)))

    @property
    def scheduler(self) -> Path:
        return self.root / "resource_scheduler"

    @property
    def endpoint(self) -> Path:
        return self.scheduler / "endpoint.json"

    @property
    def owner_lock(self) -> Path:
        return self.scheduler / "owner.lock"

    @property
    def policy(self) -> Path:
        return self.scheduler / "policy.json"

    @property
    def status(self) -> Path:
        return self.scheduler / "status.json"

    @property
    def journal_dir(self) -> Path:
        return self.scheduler / "journal"

    @property
    def journal(self) -> Path:
        return self.journal_dir / "journal.log"

    @property
    def spool(self) -> Path:
        return self.scheduler / "spool"

    @property
    def spool_tmp(self) -> Path:
        return self.spool / "tmp"

    @property
    def incoming(self) -> Path:
        return self.spool / "incoming"

    @property
    def replies(self) -> Path:
        return self.spool / "replies"

    @property
    def rejected(self) -> Path:
        return self.spool / "rejected"

    @property
    def control(self) -> Path:
        return self.scheduler / "control"

    @property
    def attempts(self) -> Path:
        return self.scheduler / "attempts"

    @property
    def logs(self) -> Path:
        return self.root / "logs" / "experiments"

    def jobs(self, directory: str) -> Path:
        return self.scheduler / "jobs" / directory

    def job_file(self, directory: str, job_id: str) -> Path:
        return self.jobs(directory) / f"{job_id}.json"

    def reply(self, request_id: str) -> Path:
        return self.replies / f"{request_id}.json"

    def attempt_dir(self, job_id: str, attempt_id: str) -> Path:
        return self.attempts / job_id / attempt_id

    def log(self, job_id: str, attempt_id: str) -> Path:
        return self.logs / job_id / f"{attempt_id}.log"

    @property
    def stop_sentinel(self) -> Path:
        """Written by ``praxist-fs stop`` when it fenced the run itself: the run stays stopped."""
        return self.scheduler / "STOP"

    @property
    def control_replies(self) -> Path:
        return self.control / "replies"

    @property
    def control_rejected(self) -> Path:
        return self.control / "rejected"

    def generation(self, number: int) -> Path:
        return self.root / f"gen_{number}"

    def results(self, number: int) -> Path:
        return self.generation(number) / "results"

    def idle(self, number: int) -> Path:
        return self.generation(number) / "resource_supply" / "idle"

    def leases(self, number: int) -> Path:
        return self.generation(number) / "resource_supply" / "leases"

    def generation_file(self, number: int, kind: str, name: str) -> Path:
        """Where the coordinator writes a generation's files (lease, stats, peer, closing)."""
        return {
            "lease": self.leases(number) / f"{name}.json",
            "stats": self.generation(number) / "resource_supply" / "stats.json",
            "peer": self.generation(number) / "peers" / f"{name}.json",
            "closing": self.generation(number) / "CLOSING_SIGNAL",
        }[kind]

    def create_generation(self, number: int) -> None:
        for path in (self.results(number), self.idle(number), self.leases(number),
                     self.generation(number) / "peers"):
            path.mkdir(parents=True, exist_ok=True)

    def create(self) -> None:
        for path in (self.journal_dir, self.spool_tmp, self.incoming, self.replies,
                     self.rejected, self.control / "tmp", self.control_replies,
                     self.control_rejected, self.attempts, self.logs,
                     *(self.jobs(d) for d in JOB_DIRECTORIES)):
            path.mkdir(parents=True, exist_ok=True)
