"""The coordinator-private side of secrets (R-SEC-2).

The run's HMAC key and the raw values of credential-shaped environment
variables live only under resource_scheduler/private/ (0700, files 0600). A
request's raw values are kept there, by request id, while its job can still
launch, so a queued job still starts with its secret after a restart; they are
scrubbed once the job is terminal. Everything else sees keyed hashes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import replace
from pathlib import Path

from ..core import secrets
from ..core.request import Request
from .fsio import dumps, makedirs, read_json, unlink, write_atomic
from .layout import RunLayout


class Vault:
    def __init__(self, layout: RunLayout) -> None:
        self.directory = layout.scheduler / "private"
        # Durable: the key and raw values below are fsynced into it, and a key lost to a
        # power cut would change every digest, so a re-read request would look altered.
        makedirs(self.directory, durable=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        key_file = self.directory / "hmac.key"
        if not key_file.exists():
            write_atomic(key_file, os.urandom(32), durable=True, mode=0o600)
        self.key = key_file.read_bytes()

    def digest(self, data: bytes) -> str:
        """A request file's identity for retransmission checks, keyed so that a low-entropy
        secret inside it cannot be recovered by hashing guesses."""
        return hmac.new(self.key, data, hashlib.sha256).hexdigest()

    def redact(self, request: Request) -> Request:
        """The request with secret values replaced by keyed hashes; raw ones kept here."""
        raw = {name: value for name, value in request.env.items()
               if secrets.is_secret(name, value)}
        if not raw:
            return request
        write_atomic(self._path(request.request_id), dumps(raw), durable=True, mode=0o600)
        env = {name: secrets.placeholder(self.key, raw[name]) if name in raw else value
               for name, value in request.env.items()}
        return replace(request, env=env)

    def reveal(self, request_id: str, env: dict[str, str]) -> dict[str, str]:
        """The environment a launch really gets: placeholders replaced by their raw values.
        An environment without one has nothing kept here: no file is looked for (a failed
        open per launch, on the loop)."""
        if not any(secrets.is_placeholder(value) for value in env.values()):
            return env
        raw = read_json(self._path(request_id)) or {}
        return {name: raw[name] if secrets.is_placeholder(value) and name in raw
                and secrets.placeholder(self.key, raw[name]) == value else value
                for name, value in env.items()}

    def scrub(self, request_id: str) -> None:
        unlink(self._path(request_id))

    def sweep(self, keep: set[str]) -> None:
        """Remove raw values of requests whose jobs can no longer launch."""
        for path in self.directory.glob("*.env.json"):
            if path.name[: -len(".env.json")] not in keep:
                unlink(path)

    def _path(self, request_id: str) -> Path:
        return self.directory / f"{request_id}.env.json"
