"""The host-wide run registry: which run directories live on this host, for ``stop --all``.

One file per run directory under ``<host registry>/runs/`` (the GPU registry's
directory, hostclaims.default_directory), named by a hash of the run's absolute
path and written atomically and durably under ``runs/runs.lock``: by the run's
coordinator when it starts, and by each legacy peer-local launch. Both take the
run's owner lock first, which creates ``resource_scheduler/owner.lock`` for good
(the file outlives every holder), so an entry names a run we own while that file
exists. Work outlives the process that registered it, so nobody removes an entry
on exit; instead every reading prunes the entries that can no longer name work:

- the run's ``resource_scheduler/`` is gone (a deleted temporary run);
- it has no ``owner.lock`` (nothing of ours ever ran there, or the directory was
  emptied) and nothing the run recorded is alive: no unfinished attempt's shim
  group, no protected-PID manifest launch that is not ``gone``. That is what
  keeps a legacy run whose lock file was deleted while its launches still run.

Only the run's owner (or root) can read all that a run recorded: another user's
run is pruned only once its directory is gone, and one we cannot look at is kept.
Both are marked ``skipped``: ``stop --all`` lists them and leaves them alone (it
could not signal their processes anyway). Pruning runs whenever ``stop --all``
reads the registry, and at every coordinator's start (``prune``); not in a legacy
launch, which holds its run's owner lock meanwhile and must stay quick.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import filelock

from . import fence, manifests
from .fsio import makedirs, read_json, unlink, write_json
from .hostclaims import default_directory
from .layout import RunLayout

log = logging.getLogger("praxist_fs")
LOCK_TIMEOUT = 10.0


def directory(host_registry: str | os.PathLike | None = None) -> Path:
    """``<host registry>/runs``; the host registry defaults as for GPU claims."""
    return (Path(host_registry) if host_registry else default_directory()) / "runs"


def register(run_dir: Path, by: str, host_registry: str | os.PathLike | None = None) -> bool:
    """Record the run once (``by``: who registered it first). A registry that cannot be
    written costs only ``stop --all``'s view of this run, so it is a warning, not a failure."""
    where = directory(host_registry)
    path = where / f"{hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]}.json"
    try:
        makedirs(where, durable=True)
        with _locked(where):
            doc = read_json(path)
            if not (isinstance(doc, dict) and doc.get("run_dir") == str(run_dir)):
                write_json(path, {"run_dir": str(run_dir), "registered_at": time.time(),
                                  "registered_by": by}, durable=True)
    except (OSError, filelock.Timeout) as exc:
        log.warning("could not register %s in the run registry %s: %s", run_dir, where, exc)
        return False
    return True


@dataclass(frozen=True)
class Entry:
    """One registered run: ``pruned`` says why its entry was deleted, ``skipped`` why
    ``stop --all`` leaves the run alone; neither: a run of ours to stop."""
    run_dir: Path
    pruned: str | None = None
    skipped: str | None = None

    @property
    def to_stop(self) -> bool:
        return not (self.pruned or self.skipped)


def registered(host_registry: str | os.PathLike | None = None) -> list[Entry]:
    """Every registered run in path order, after pruning the stale ones (logged). Entry
    files that cannot be read (another user's, hand-damaged) are ignored."""
    where = directory(host_registry)
    if not where.is_dir():
        return []
    found: dict[Path, Entry] = {}
    with _locked(where):
        for path in sorted(where.glob("*.json")):
            doc = read_json(path)
            if not (isinstance(doc, dict) and isinstance(doc.get("run_dir"), str)):
                continue
            entry = _judge(Path(doc["run_dir"]))
            if entry.pruned:
                try:
                    unlink(path)
                    log.info("run registry: forgot %s: %s", entry.run_dir, entry.pruned)
                except OSError as exc:  # another user's entry in a shared registry
                    entry = Entry(entry.run_dir, skipped=f"{entry.pruned}, but its entry "
                                  f"{path} cannot be deleted: {exc.strerror}")
            found.setdefault(entry.run_dir, entry)
    return sorted(found.values(), key=lambda e: e.run_dir)


def prune(host_registry: str | os.PathLike | None = None) -> None:
    """At a coordinator's start: forget stale entries, so that a host where temporary runs
    come and go keeps a short registry. A failure is a warning, as for ``register``."""
    try:
        registered(host_registry)
    except (OSError, filelock.Timeout) as exc:
        log.warning("could not prune the run registry %s: %s", directory(host_registry), exc)


def _judge(run_dir: Path) -> Entry:
    """Prune, skip or stop. Only the run's owner (or root) can see all that it recorded, so
    another user's run is forgotten only once its directory is gone."""
    layout = RunLayout.at(run_dir)
    gone = Entry(run_dir, pruned="its resource_scheduler/ is gone")
    try:
        info = os.stat(layout.scheduler)
        if not stat.S_ISDIR(info.st_mode):
            return gone
        if info.st_uid != os.geteuid() and os.geteuid() != 0:
            return Entry(run_dir, skipped=f"another user's (uid {info.st_uid})")
        try:
            os.lstat(layout.owner_lock)
        except FileNotFoundError:
            if not alive(layout):
                return Entry(run_dir, pruned="it has no resource_scheduler/owner.lock and "
                             "nothing it recorded is alive")
    except (FileNotFoundError, NotADirectoryError):
        return gone
    except OSError as exc:
        return Entry(run_dir, skipped=f"cannot be read ({exc.strerror})")
    return Entry(run_dir)


def alive(layout: RunLayout) -> bool:
    """Whether anything the run recorded still runs: a live member of an unfinished
    attempt's shim group, or a manifest launch that is not ``gone``."""
    if any(launch["state"] != manifests.GONE for launch in manifests.launches(layout)):
        return True
    shims = fence.unfinished(layout.attempts)
    return bool(shims) and bool(fence.holders(tuple(shims)))


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    """Register and prune one at a time: a prune must not remove a run registered meanwhile."""
    with filelock.FileLock(str(where / "runs.lock"), timeout=LOCK_TIMEOUT):
        yield
