"""The local backend: each attempt is a process group on this host, led by a shim (R-EXE-*).

``backend``: the backend the loop drives; ``launcher``: starting shims (supervisors
forked by a shim server, which serve attempt after attempt, or shims started by Popen);
``shim``: the shim itself, standard library only. What it shares with the rest of the
host's code lives in adapters/: ``procs`` (process identity from /proc) and ``fence``
(terminating what a dead shim left running), used by the lock, the stopper and the cli.

This file imports nothing: the Slurm-mode shim imports ``shim`` through this package,
under ``python -S`` (no site-packages: psutil cannot even be found) and on every job's
start. ``LocalBackend`` (the core, psutil, the launcher) is loaded on first use only.
"""

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> object:
    """``LocalBackend``, imported when first asked for (PEP 562)."""
    if name == "LocalBackend":
        from praxist_fs.backends.local.backend import LocalBackend
        return LocalBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
