"""Start an attempt's shim: attempt files, environment, new session, barrier pipes (R-RUN-1).

The coordinator owns the final Popen. The shim gets two pipes: it reads GO
from one and reports READY on the other, whose EOF also tells us it exited.
Both pipes are only a fast path: READY, GO, ABORT and exit.json are files, so
a restarted coordinator can carry on where the pipes were lost.
"""

from __future__ import annotations

import marshal
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.effects import SpawnAttempt
from .fsio import create, fsync_dir, makedirs, unlink, write_json
from .layout import RunLayout

SHIM = Path(__file__).with_name("shim.py")
# -S: no site, so a peer's sitecustomize cannot run in the shim (and start-up is faster).
PYTHON_FLAGS = ("-S",)
# The shim is imported rather than run as ``python -S shim.py``: a script is compiled
# at every start (about 2 ms, a fifth of the shim's start-up), a module loads from
# __pycache__. sys.path[0] is then the shim's directory, as it would be for the script.
SHIM_BOOTSTRAP = "import sys; sys.path[0] = %r; import shim; sys.exit(shim.main())" % str(
    SHIM.parent)
# How long a shim whose coordinator vanished waits for the next one to give GO.
BARRIER_TIMEOUT_S = 600


@dataclass
class ShimHandle:
    """A shim we started ourselves (re-adopted shims have no handle, only a pidfd)."""

    popen: subprocess.Popen
    go_fd: int | None
    status_fd: int

    def release_barrier(self, word: bytes) -> None:
        if self.go_fd is None:
            return
        try:
            os.write(self.go_fd, word)
        except OSError:
            pass
        os.close(self.go_fd)
        self.go_fd = None

    def close(self) -> None:
        self.release_barrier(b"")
        os.close(self.status_fd)


def attempt_environment(layout: RunLayout, effect: SpawnAttempt) -> dict[str, str]:
    """The submitted environment plus the attempt's identity and GPU binding."""
    gpus = ",".join(effect.gpus)
    return {
        **effect.env,
        "PRAXIST_RUN_DIR": str(layout.root),
        "PRAXIST_PEER_ID": effect.metadata.get("peer", ""),
        "PRAXIST_EXPERIMENT_ID": effect.job_id,
        "PRAXIST_EXPERIMENT_ATTEMPT_ID": effect.attempt_id,
        "PRAXIST_EXPERIMENT_ATTEMPT_DIR": str(layout.attempt_dir(effect.job_id, effect.attempt_id)),
        "PRAXIST_RESOURCE_PROFILE": effect.profile,
        "PRAXIST_ASSIGNED_GPU_UUIDS": gpus,
        "CUDA_VISIBLE_DEVICES": gpus,
        "NVIDIA_VISIBLE_DEVICES": gpus,
    }


@dataclass
class WarmShim:
    """A shim started ahead of need, waiting to be told its attempt directory."""

    handle: ShimHandle
    control_fd: int

    def take(self, attempt_dir: Path) -> ShimHandle | None:
        """Hand it its attempt; None if it is gone (then start one the usual way)."""
        try:
            if self.handle.popen.poll() is None:
                os.write(self.control_fd, os.fsencode(attempt_dir) + b"\n")
                return self.handle
        except OSError:
            pass
        finally:
            os.close(self.control_fd)
        self.handle.popen.wait()
        self.handle.close()
        return None

    def dismiss(self) -> None:
        """Closing its control pipe tells it no attempt is coming: it exits."""
        os.close(self.control_fd)
        try:
            self.handle.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.handle.popen.kill()
            self.handle.popen.wait()
        self.handle.close()


def prestart(layout: RunLayout) -> WarmShim:
    """Start a shim before any attempt needs it: Python's start-up (most of a launch's
    latency) then happens while the coordinator waits, not between decision and GO."""
    control_read, control_write = os.pipe()
    try:
        handle = _start_shim(["--warm", str(layout.attempts), str(control_read)], os.devnull,
                             "/", keep=(control_read,))
    except OSError:
        os.close(control_write)
        raise
    finally:
        os.close(control_read)
    return WarmShim(handle=handle, control_fd=control_write)


def _start_shim(leading: list[str], log: str | os.PathLike, cwd: str | os.PathLike,
                keep: tuple[int, ...] = ()) -> ShimHandle:
    """A shim in a new session (its own process group) with its GO and status pipes."""
    go_read, go_write = os.pipe()
    status_read, status_write = os.pipe()
    try:
        with open(log, "ab") as shim_log:
            popen = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, "-c", SHIM_BOOTSTRAP, *leading,
                 str(go_read), str(status_write)],
                pass_fds=(*keep, go_read, status_write), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=shim_log, stderr=subprocess.STDOUT,
                cwd=cwd, env={"PATH": os.environ.get("PATH", os.defpath)})
    except OSError:
        for fd in (go_write, status_read):
            os.close(fd)
        raise
    finally:
        os.close(go_read)
        os.close(status_write)
    os.set_blocking(status_read, False)
    return ShimHandle(popen=popen, go_fd=go_write, status_fd=status_read)


def spawn(layout: RunLayout, effect: SpawnAttempt, env: dict[str, str],
          warm: WarmShim | None = None) -> ShimHandle:
    """Write the attempt's files and give them to a shim (``warm`` if it is still there,
    else a new one); raises OSError if no shim can be started.

    ``env`` is the environment the command gets (secrets revealed); it goes only into
    spec.marshal (0600), which the shim removes once it has read it."""
    attempt_dir = layout.attempt_dir(effect.job_id, effect.attempt_id)
    makedirs(attempt_dir)
    log = layout.log(effect.job_id, effect.attempt_id)
    makedirs(log.parent)
    write_json(attempt_dir / "attempt.json", {  # a description: a power cut ends the shim too
        **effect.metadata, "argv": list(effect.argv) if effect.argv else None,
        "command": effect.command, "cwd": effect.cwd or str(layout.root), "log": str(log),
    }, sync=False)
    spec = {"argv": list(effect.argv) if effect.argv else None, "command": effect.command,
            "cwd": effect.cwd or str(layout.root), "env": env,
            "log": str(log), "barrier_timeout_s": BARRIER_TIMEOUT_S}
    spec_path = attempt_dir / "spec.marshal"
    write_spec(spec_path, spec)
    handle = warm.take(attempt_dir) if warm is not None else None
    if handle is None:
        try:
            handle = _start_shim([str(attempt_dir)], attempt_dir / "shim.log", attempt_dir)
        except OSError:
            unlink(spec_path)  # no shim will read it: do not leave the secrets behind
            raise
    # GO, fsynced into attempt_dir, is what says after a power cut that the command may
    # have run, so attempt_dir must be durable before GO; made so while the shim starts,
    # every time: the job's directory may come from a coordinator killed before its fsync.
    for directory in (layout.attempts, attempt_dir.parent):
        fsync_dir(directory)
    return handle


def write_spec(path: Path, spec: dict) -> None:
    """What the shim runs, for the shim only (0600), in marshal: it loads without imports.

    The shim runs on this same interpreter (``sys.executable``), so the marshal format
    matches. Neither fsync nor rename: the shim is started only after the write and
    unlinks the file at once, a machine crash ends the shim as well, and raw secrets had
    better not be forced onto the disk. It is created afresh (O_EXCL) with mode 0600."""
    unlink(path)  # left by a coordinator that crashed before starting this attempt's shim
    create(path, marshal.dumps(spec), mode=0o600)
