"""The Slurm backend (R-DIST-1): each attempt is one Slurm job running the Slurm-mode shim.

``backend``: the ``ExecutionBackend`` the loop drives (and what Slurm refuses of a task
file before ``serve``); ``config``: the task file's ``slurm`` mapping, checked;
``client``: Slurm's commands (sbatch, squeue, sacct, scancel) and the batch script;
``jobs``: what the backend knows of each attempt's Slurm job and of each node's probe;
``new_nodes``: probing nodes that join the partition; ``doorbell``: where shims ring
the coordinator; ``shim``: the Slurm-mode shim, run on the node by the batch script;
``stop``: ending a run's Slurm jobs without its coordinator (``praxist-fs stop``).

Nothing is imported here: the batch script imports ``shim`` on a compute node with
``python -S``, and must not pay for the backend's imports.
"""
