"""A launch's command environment: what the command of an attempt gets, on any backend.

The submitted environment with its secrets revealed (adapters/vault.py), plus the
attempt's identity and GPU binding (PROTOCOL.md section 6). A backend is given the
builder when it is made (backends/base.py's ``RunContext.environment``) and asks it only
when it uses the environment: the local backend when it starts a shim, Slurm when it
submits, the memory backend never.
"""

from __future__ import annotations

import errno
import os
import pwd

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.vault import Vault
from praxist_fs.core.effects import SpawnAttempt


class CommandEnvironment:
    """The run's builder of launch environments (``builder(launch)``), secrets revealed.

    The run's vault is opened on first use: a backend is made before the coordinator
    holds its run directory, and asks for an environment only once it serves."""

    def __init__(self, layout: RunLayout) -> None:
        self.layout = layout
        self._vault: Vault | None = None

    def __call__(self, launch: SpawnAttempt) -> dict[str, str]:
        if self._vault is None:
            self._vault = Vault(self.layout)
        return self._vault.reveal(launch.metadata["request_id"],
                                  attempt_environment(self.layout, launch))


def attempt_environment(layout: RunLayout, effect: SpawnAttempt) -> dict[str, str]:
    """The submitted environment plus the attempt's identity and GPU binding.

    A request whose ``env`` has no ``PATH`` gets the coordinator's own: a peer that
    submits ``["python3", ...]`` with printf and mv should not have to spell one out
    (PROTOCOL.md section 6). It is added here, at launch, so the request, its
    fingerprint and the journal stay as submitted. A command that runs as another
    uid (R-SEC-3) gets that user's HOME, USER and LOGNAME the same way."""
    gpus = ",".join(effect.gpus)
    default = {} if "PATH" in effect.env or "PATH" not in os.environ else {
        "PATH": os.environ["PATH"]}
    if effect.uid is not None:  # as login and cron set them (the request's own win)
        user = account(effect.uid)
        default.update(HOME=user.pw_dir, USER=user.pw_name, LOGNAME=user.pw_name)
    return {
        **default,
        **effect.env,
        "PRAXIST_RUN_DIR": layout.root_str,
        "PRAXIST_PEER_ID": effect.metadata.get("peer", ""),
        "PRAXIST_EXPERIMENT_ID": effect.job_id,
        "PRAXIST_EXPERIMENT_ATTEMPT_ID": effect.attempt_id,
        "PRAXIST_EXPERIMENT_ATTEMPT_DIR": layout.attempt_dir_str(effect.job_id, effect.attempt_id),
        "PRAXIST_RESOURCE_PROFILE": effect.profile,
        "PRAXIST_ASSIGNED_GPU_UUIDS": gpus,
        "CUDA_VISIBLE_DEVICES": gpus,
        "NVIDIA_VISIBLE_DEVICES": gpus,
    }


def account(uid: int) -> pwd.struct_passwd:
    """The user database's entry of the uid a command runs as; OSError if it has none
    (its gid and groups, hence its rights, would be guesswork)."""
    try:
        return pwd.getpwuid(uid)
    except KeyError:
        raise OSError(errno.ENOENT, f"uid {uid}, whose command this is, has no entry in "
                      "the user database: it cannot run as that user") from None
