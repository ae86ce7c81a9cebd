"""The local backend: each attempt is a process group on this host, led by a shim (R-EXE-*).

``backend``: the backend the loop drives; ``launcher``: starting shims (supervisors
forked by a shim server, which serve attempt after attempt, or shims started by Popen).
What it shares lives elsewhere: with the Slurm backend, how a shim starts the command and
records its exit (backends/shim_command.py), and the attempt directory's barrier timeout,
description and fsync (backends/attempt_dir.py; here only for a re-adopted shim, since our
shim fsyncs its own directory before its exit.json); with the rest of the host's code, in
adapters/, ``procs`` (process identity from /proc) and ``fence`` (terminating what a dead
shim left running).
"""

from praxist_fs.backends.local.backend import LocalBackend, shim_handle, shim_of

__all__ = ["LocalBackend", "shim_handle", "shim_of"]
