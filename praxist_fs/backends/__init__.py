"""Execution backends: where an admitted attempt runs (R-DIST-1). ``slurm``: one Slurm
job per attempt, the run directory on a filesystem the nodes share."""
