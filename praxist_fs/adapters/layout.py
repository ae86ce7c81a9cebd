"""Every path of the run directory (R-FS-1) in one place; the core never sees a path."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .crashpoints import reach
from .fsio import fsync_dir, makedirs

JOB_DIRECTORIES = ("queued", "running", "done")

# R-SEC-2: who may write where, for peers that run under other uids of the run's group (the
# run directory's group; with its setgid bit every directory below inherits it).
PEER_WRITABLE = 0o3770  # setgid + sticky: the group adds files; only a file's owner removes it
SHARED = 0o2750         # the group reads; only the coordinator writes
PRIVATE = 0o700         # the coordinator alone: the journal, the snapshot, raw secrets


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory. They are worked out once per layout (pathlib
    costs microseconds a join, and a launch joins dozens)."""
    root: Path

    @classmethod
    def at(cls, run_dir: str | os.PathLike) -> RunLayout:
        return cls(Path(os.path.abspath(run_dir)))

    @cached_property
    def scheduler(self) -> Path:
        return self.root / "resource_scheduler"

    @cached_property
    def endpoint(self) -> Path:
        return self.scheduler / "endpoint.json"

    @cached_property
    def owner_lock(self) -> Path:
        return self.scheduler / "owner.lock"

    @cached_property
    def policy(self) -> Path:
        return self.scheduler / "policy.json"

    @cached_property
    def status(self) -> Path:
        return self.scheduler / "status.json"

    @property
    def metrics(self) -> Path:
        return self.scheduler / "metrics.prom"

    @cached_property
    def journal_dir(self) -> Path:
        return self.scheduler / "journal"

    @cached_property
    def journal(self) -> Path:
        return self.journal_dir / "journal.log"

    @cached_property
    def snapshot(self) -> Path:
        """The scheduler state the journal had built when it was last compacted."""
        return self.journal_dir / "snapshot.jsonl"

    @cached_property
    def clean_stop(self) -> Path:
        """Written at a clean stop: the derived files were all durable at this journal seq."""
        return self.journal_dir / "clean_stop.json"

    @cached_property
    def index_dir(self) -> Path:
        return self.scheduler / "index"

    @cached_property
    def job_index(self) -> Path:
        """The job index (``praxist-fs jobs``): derived from the journal like the job files."""
        return self.index_dir / "jobs.sqlite"

    @cached_property
    def quarantine(self) -> Path:
        """What a start set aside rather than trust or delete (adapters/quarantine.py)."""
        return self.scheduler / "quarantine"

    @cached_property
    def spool(self) -> Path:
        return self.scheduler / "spool"

    @cached_property
    def spool_tmp(self) -> Path:
        return self.spool / "tmp"

    @cached_property
    def incoming(self) -> Path:
        return self.spool / "incoming"

    @cached_property
    def replies(self) -> Path:
        return self.spool / "replies"

    @cached_property
    def rejected(self) -> Path:
        return self.spool / "rejected"

    @cached_property
    def control(self) -> Path:
        return self.scheduler / "control"

    @cached_property
    def attempts(self) -> Path:
        return self.scheduler / "attempts"

    @cached_property
    def logs(self) -> Path:
        return self.root / "logs" / "experiments"

    @property
    def hook_logs(self) -> Path:
        return self.root / "logs" / "hooks"

    def jobs(self, directory: str) -> Path:
        return self._jobs[directory]

    @cached_property
    def _jobs(self) -> dict[str, Path]:
        return {directory: self.scheduler / "jobs" / directory for directory in JOB_DIRECTORIES}

    def job_file(self, directory: str, job_id: str) -> Path:
        return self.jobs(directory) / f"{job_id}.json"

    def reply(self, request_id: str) -> Path:
        return self.replies / f"{request_id}.json"

    def attempt_dir(self, job_id: str, attempt_id: str) -> Path:
        return self.attempts / job_id / attempt_id

    def log(self, job_id: str, attempt_id: str) -> Path:
        return self.logs / job_id / f"{attempt_id}.log"

    @cached_property
    def stop_sentinel(self) -> Path:
        """Written by ``praxist-fs stop`` when it fenced the run itself: the run stays stopped."""
        return self.scheduler / "STOP"

    @cached_property
    def protected_pids(self) -> Path:
        """Per-peer manifests of legacy peer-local launches (``<peer>.json``)."""
        return self.scheduler / "protected_pids"

    @cached_property
    def peer_workspaces(self) -> Path:
        """The peers' framework-owned working directories (``stop --all``'s cwd fallback)."""
        return self.root / "peer_workspaces"

    @cached_property
    def control_replies(self) -> Path:
        return self.control / "replies"

    @cached_property
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
        """Durable: peers' results and idle registrations must not vanish with them. Every
        directory is fsynced into its parent even when it was there already: one made by a
        coordinator killed before that fsync, or by a peer, could still vanish."""
        supply = self.generation(number) / "resource_supply"
        modes = {self.generation(number): SHARED, supply: SHARED,
                 self.results(number): PEER_WRITABLE, self.idle(number): PEER_WRITABLE,
                 self.leases(number): SHARED, self.generation(number) / "peers": SHARED}
        for path, mode in modes.items():
            makedirs(path)
            set_mode(path, mode)
        reach("generation.before_fsync")
        for parent in sorted({path.parent for path in modes}):
            fsync_dir(parent)

    def create_protected_pids(self) -> None:
        """Legacy peer-local launches, under any uid of the group, record themselves here."""
        makedirs(self.protected_pids, durable=True)
        set_mode(self.protected_pids, PEER_WRITABLE)

    def modes(self) -> dict[Path, int]:
        """The run's directories and the mode each is kept at (docs/OPERATIONS.md)."""
        return {
            self.scheduler: SHARED, self.journal_dir: PRIVATE, self.spool: SHARED,
            self.spool_tmp: PEER_WRITABLE, self.incoming: PEER_WRITABLE,
            self.replies: SHARED, self.rejected: SHARED,
            self.control: PEER_WRITABLE, self.control / "tmp": PEER_WRITABLE,
            self.control_replies: SHARED, self.control_rejected: SHARED,
            self.attempts: SHARED, self.logs.parent: SHARED, self.logs: SHARED,
            self.scheduler / "jobs": SHARED, **{self.jobs(d): SHARED for d in JOB_DIRECTORIES},
            self.index_dir: SHARED,
        }

    def create(self) -> None:
        """Make the run's directories at their modes and fsync every one of them into its
        parent, at every start: the journal and GO files are fsynced into them, and a
        coordinator killed between a mkdir and its fsync leaves one a power cut could
        still take."""
        modes = self.modes()
        for path in modes:
            makedirs(path)
        for path, mode in modes.items():
            set_mode(path, mode)
        parents = {parent for path in modes for parent in path.parents
                   if parent == self.root or self.root in parent.parents}
        for parent in sorted(parents):
            fsync_dir(parent)


def set_mode(path: Path, mode: int) -> None:
    """Keep a directory at ``mode``; one that another uid made is left to its owner."""
    try:
        if stat.S_IMODE(os.stat(path).st_mode) != mode:
            os.chmod(path, mode)
    except PermissionError:
        pass
