"""The host-wide run registry: which run directories live on this host, for ``stop --all``.

One file per run directory under ``<host registry>/runs/`` (the GPU registry's
directory, hostclaims.default_directory), named by a hash of the run's absolute
path and written atomically and durably under ``runs/runs.lock``: by the run's
coordinator when it starts, and by each legacy peer-local launch. An entry says
only that a run lives there, so nobody removes it while the run directory does:
work outlives the process that registered it. An entry whose run directory (its
``resource_scheduler/``) is gone is skipped and pruned.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import filelock

from .fsio import makedirs, read_json, unlink, write_json
from .hostclaims import default_directory

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


def registered(host_registry: str | os.PathLike | None = None) -> list[Path]:
    """The registered runs whose directories still exist, in path order; entries whose run
    is gone are pruned. Unreadable entries (another user's, hand-damaged) are skipped."""
    where = directory(host_registry)
    if not where.is_dir():
        return []
    runs = []
    with _locked(where):
        for path in sorted(where.glob("*.json")):
            doc = read_json(path)
            if not (isinstance(doc, dict) and isinstance(doc.get("run_dir"), str)):
                continue
            run_dir = Path(doc["run_dir"])
            if (run_dir / "resource_scheduler").is_dir():
                runs.append(run_dir)
            else:
                unlink(path)
    return sorted(set(runs))


@contextlib.contextmanager
def _locked(where: Path) -> Iterator[None]:
    """Register and prune one at a time: a prune must not remove a run registered meanwhile."""
    with filelock.FileLock(str(where / "runs.lock"), timeout=LOCK_TIMEOUT):
        yield
