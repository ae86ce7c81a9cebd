"""Where the Slurm-mode shim lived before backends/slurm/ became a package (issue 30).

A Slurm job submitted before that upgrade may still wait in Slurm's queue: its batch
script runs ``from praxist_fs.backends import slurm_shim; slurm_shim.main()`` from the
installed tree once Slurm starts it, so this name stays, and starts the shim as it is
now (slurm/shim.py). It can go once no run can have a Slurm job queued by a release
before the package (docs/OPERATIONS.md, *Upgrade*).
"""

from praxist_fs.backends.slurm.shim import main

__all__ = ["main"]
