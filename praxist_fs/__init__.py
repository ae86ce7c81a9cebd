"""praxist_fs: a filesystem-mailbox experiment scheduler for GPU research runs."""

__version__ = "0.1.0"
