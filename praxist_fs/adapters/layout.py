"""Every path of the run directory (R-FS-1) in one place; the core never sees a path."""

from __future__ import annotations

import os
import stat
from functools import cached_property
from pathlib import Path

from . import ownership
from .crashpoints import reach
from .fsio import fsync_dir, makedirs

JOB_DIRECTORIES = ("queued", "running", "done")
ATTEMPT_PATHS_KEPT = 1024  # attempts whose paths a layout keeps joined (``_attempt_paths``)

# R-SEC-2, R-SEC-4: who may write where, for peers that run under other uids of the run's
# group (the run directory's group; with its setgid bit every directory below inherits it).
# Every directory is the coordinator's own (adapters/ownership.py).
DROPBOX = 0o3730        # setgid + sticky, group -wx: a peer adds files and reaches its own by
                        # name, but cannot list the others' (Postfix's maildrop) nor remove them
PEER_WRITABLE = 0o3770  # setgid + sticky, group rwx: shared inboxes, listed by design
SHARED = 0o2750         # the group reads; only the coordinator writes
SEALED = 0o2710         # the group reaches its own files by name; only the coordinator lists
PRIVATE = 0o700         # the coordinator alone: the journal, the snapshot, raw secrets
# made when first needed (a start that sets nothing aside makes no quarantine/), and
# checked like the others wherever they are
MADE_WHEN_NEEDED = frozenset({"resource_scheduler/quarantine"})


class RunLayout:
    """The paths of one run directory. They are worked out once per layout (pathlib
    costs microseconds a join, and a launch joins dozens).

    A value like a frozen dataclass of its ``root``, written out because every CLI call
    makes one: ``dataclasses`` imports ``inspect`` (and ``ast``, ``dis``, ``tokenize``),
    about 10 ms of each verb's start (R-PERF-3)."""

    def __init__(self, root: Path) -> None:
        object.__setattr__(self, "root", root)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"RunLayout is immutable: cannot set {name!r}")

    def __eq__(self, other: object) -> bool:
        return self.root == other.root if other.__class__ is self.__class__ else NotImplemented

    def __hash__(self) -> int:
        return hash(self.root)

    def __repr__(self) -> str:
        return f"RunLayout(root={self.root!r})"

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
        return Path(self.reply_str(request_id))

    def reply_str(self, request_id: str) -> str:
        """A request's reply, as a string: written once a job (views.path), where a
        ``Path`` per job costs more than the join."""
        return f"{self._replies_str}/{request_id}.json"

    @cached_property
    def _replies_str(self) -> str:
        return str(self.replies)

    @cached_property
    def root_str(self) -> str:
        """``root`` as a string, made once: a launch writes it into its spec, its
        environment and its description."""
        return str(self.root)

    def attempt_dir(self, job_id: str, attempt_id: str) -> Path:
        return self._attempt_paths(job_id, attempt_id)[0]

    def log(self, job_id: str, attempt_id: str) -> Path:
        return self._attempt_paths(job_id, attempt_id)[1]

    def attempt_dir_str(self, job_id: str, attempt_id: str) -> str:
        return self._attempt_strings(job_id, attempt_id)[0]

    def log_str(self, job_id: str, attempt_id: str) -> str:
        return self._attempt_strings(job_id, attempt_id)[1]

    def _attempt_strings(self, job_id: str, attempt_id: str) -> tuple[str, str]:
        """An attempt's directory and log, the one place that spells them, joined once as
        strings: a launch writes them into its spec, its environment, its description
        and its shim's control pipe, before the commit that journals it, where pathlib's
        joins and a ``Path``'s first ``str`` cost tens of microseconds. Kept for the
        attempts of late only (``ATTEMPT_PATHS_KEPT``): a run goes through millions."""
        key = (job_id, attempt_id)
        found = self._attempt_strings_joined.get(key)
        if found is None:
            if len(self._attempt_strings_joined) >= ATTEMPT_PATHS_KEPT:
                self._attempt_strings_joined.clear()
            found = self._attempt_strings_joined[key] = (
                f"{self._attempts_str}/{job_id}/{attempt_id}",
                f"{self._logs_str}/{job_id}/{attempt_id}.log")
        return found

    def _attempt_paths(self, job_id: str, attempt_id: str) -> tuple[Path, Path]:
        """``_attempt_strings`` as ``Path``s, made once: GO, ABORT and each observation
        ask for them. Kept like the strings."""
        key = (job_id, attempt_id)
        found = self._attempts_joined.get(key)
        if found is None:
            if len(self._attempts_joined) >= ATTEMPT_PATHS_KEPT:
                self._attempts_joined.clear()
            directory, log = self._attempt_strings(job_id, attempt_id)
            found = self._attempts_joined[key] = (Path(directory), Path(log))
        return found

    @cached_property
    def _attempts_joined(self) -> dict[tuple[str, str], tuple[Path, Path]]:
        return {}

    @cached_property
    def _attempt_strings_joined(self) -> dict[tuple[str, str], tuple[str, str]]:
        return {}

    @cached_property
    def _attempts_str(self) -> str:
        return str(self.attempts)

    @cached_property
    def _logs_str(self) -> str:
        return str(self.logs)

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
        coordinator killed before that fsync, or by a peer, could still vanish. Made and
        checked as the start's are (``create``): one another uid made is refused."""
        generation = f"gen_{number}"
        self._secure({generation: SHARED, f"{generation}/resource_supply": SHARED,
                      f"{generation}/results": PEER_WRITABLE,
                      f"{generation}/resource_supply/idle": PEER_WRITABLE,
                      f"{generation}/resource_supply/leases": SHARED,
                      f"{generation}/peers": SHARED}, "generation.before_fsync")

    def create_protected_pids(self) -> None:
        """Legacy peer-local launches, under any uid of the group, record themselves here."""
        makedirs(self.protected_pids, durable=True)
        try:
            if stat.S_IMODE(os.stat(self.protected_pids).st_mode) != PEER_WRITABLE:
                os.chmod(self.protected_pids, PEER_WRITABLE)
        except PermissionError:
            pass  # another uid of the group made it: its owner keeps its mode

    def tree(self) -> dict[str, int]:
        """The run's directories, relative to the run directory, each parent before its
        children, with the mode each is kept at (docs/OPERATIONS.md)."""
        return {
            "resource_scheduler": SHARED, "resource_scheduler/journal": PRIVATE,
            "resource_scheduler/private": PRIVATE, "resource_scheduler/quarantine": PRIVATE,
            "resource_scheduler/index": SHARED,
            "resource_scheduler/spool": SHARED, "resource_scheduler/spool/tmp": DROPBOX,
            "resource_scheduler/spool/incoming": DROPBOX,
            "resource_scheduler/spool/replies": SHARED,
            "resource_scheduler/spool/rejected": SEALED,
            "resource_scheduler/control": DROPBOX, "resource_scheduler/control/tmp": DROPBOX,
            "resource_scheduler/control/replies": SHARED,
            "resource_scheduler/control/rejected": SEALED,
            "resource_scheduler/attempts": SHARED, "resource_scheduler/jobs": SHARED,
            **{f"resource_scheduler/jobs/{d}": SHARED for d in JOB_DIRECTORIES},
            "logs": SHARED, "logs/experiments": SHARED, "logs/hooks": SHARED,
        }

    def create(self) -> None:
        """Make the run's directories at their modes, each checked to be the coordinator's
        own (adapters/ownership.py: ``UnsafeLayout`` refuses the start), and fsync every one
        of them into its parent, at every start: the journal and GO files are fsynced into
        them, and a coordinator killed between a mkdir and its fsync leaves one a power cut
        could still take."""
        ownership.check_ancestors(str(self.root), os.geteuid())
        if not os.path.lexists(self.root):
            makedirs(self.root, durable=True, mode=0o755)  # with its missing ancestors
            ownership.check_ancestors(str(self.root), os.geteuid())  # none made by another
        self._secure(self.tree())

    def layout_problems(self, uid: int) -> list[str]:
        """What would keep a coordinator of ``uid`` from starting on this run now (status)."""
        return ownership.layout_problems(str(self.root), self.tree(), uid)

    def _secure(self, tree: dict[str, int], crash_point: str | None = None) -> None:
        ownership.secure_tree(str(self.root), tree, os.geteuid(), MADE_WHEN_NEEDED)
        if crash_point:
            reach(crash_point)
        parents = {self.root / relative.rpartition("/")[0] for relative in tree
                   if relative not in MADE_WHEN_NEEDED}
        for parent in sorted(parents):
            fsync_dir(parent)
