"""The host-wide GPU allocation registry: one file per run, under one filelock.

Two coordinators on one host must not promise the same GPU headroom between
NVML samples. Each run publishes the envelopes its running jobs hold; a run
that places GPU work holds the registry lock from reading the others' files
until its own file shows the new allocation. An allocation counts while its
shim is alive, whether or not its coordinator is (running work outlives a
coordinator crash). A lease's claim is speculative: it counts, until it
expires, while the coordinator that granted it is alive; other runs do not
promise that capacity again, but their real work may take it (and the claim's
owner then revokes the lease).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock

from . import procs
from ..core.observations import Envelope
from .fsio import makedirs, read_json, unlink, write_json


def default_directory() -> Path:
    """PRAXIST_HOST_REGISTRY, else /run/praxist_fs, the user's runtime dir, or /tmp."""
    if explicit := os.environ.get("PRAXIST_HOST_REGISTRY"):
        return Path(explicit)
    if os.access("/run", os.W_OK):
        return Path("/run/praxist_fs")
    if runtime := os.environ.get("XDG_RUNTIME_DIR"):
        return Path(runtime) / "praxist_fs"
    return Path(tempfile.gettempdir()) / f"praxist_fs-{os.getuid()}"


class HostRegistry:
    def __init__(self, directory: Path, run_dir: Path) -> None:
        self.directory = directory
        makedirs(self.directory)
        self.run_key = hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]
        self.run_dir = run_dir
        self._lock = filelock.FileLock(str(directory / "registry.lock"))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def others(self) -> tuple[list[Envelope], dict[int, str]]:
        """Other runs' live envelopes, and their shim pids -> owner (for GPU attribution)."""
        envelopes, shims = [], {}
        for path in self.directory.glob("*.json"):
            if path.stem == self.run_key:
                continue
            doc = read_json(path)
            if not isinstance(doc, dict):
                continue
            envelopes += _live_claims(doc)
            for item in doc.get("allocations", []):
                try:
                    owner = f"{doc.get('run_dir')}:{item['job_id']}"
                    if not procs.is_alive(item["shim_pid"], item["shim_start"], item["boot_id"]):
                        continue
                    envelope = Envelope(uuid=str(item["uuid"]),
                                        utilization_pct=float(item["utilization_pct"]),
                                        memory_mib=float(item["memory_mib"]),
                                        exclusive=bool(item["exclusive"]), owner=owner)
                except (KeyError, TypeError, ValueError):
                    continue  # another run's damaged entry: ignore it, never crash on it
                shims[item["shim_pid"]] = owner
                envelopes.append(envelope)
        return envelopes, shims

    def publish(self, allocations: list[dict[str, Any]], claims: list[dict[str, Any]]) -> None:
        """Replace this run's file (call with the lock held when placing). Raises OSError
        when the registry cannot be written; the caller retries on its next pass."""
        path = self.directory / f"{self.run_key}.json"
        if allocations or claims:
            pid, started, boot = procs.own_identity()
            write_json(path, {"run_dir": str(self.run_dir), "allocations": allocations,
                              "claims": claims, "coordinator": {
                                  "pid": pid, "start_time": started, "boot_id": boot}})
        else:
            unlink(path)


def _live_claims(doc: dict[str, Any]) -> list[Envelope]:
    """Another run's lease claims, while its coordinator lives and they have not expired."""
    owner = doc.get("coordinator") or {}
    if not procs.is_alive(owner.get("pid"), owner.get("start_time"), owner.get("boot_id")):
        return []
    claims = []
    for item in doc.get("claims", []):
        try:
            if float(item["expires_at"]) <= time.time():
                continue
            claims.append(Envelope(uuid=str(item["uuid"]),
                                   utilization_pct=float(item["utilization_pct"]),
                                   memory_mib=float(item["memory_mib"]),
                                   exclusive=bool(item["exclusive"]),
                                   owner=f"{doc.get('run_dir')}:{item['lease_id']}",
                                   speculative=True))
        except (KeyError, TypeError, ValueError):
            continue
    return claims
