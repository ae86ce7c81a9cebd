"""The self-pipe a select loop sleeps on: a byte written to it wakes the loop, which
reads it empty before it looks at what the byte stood for (the coordinator's loop, the
Slurm backend's answers, ``praxist-fs top``'s redraws)."""

from __future__ import annotations

import os


def drain(fd: int) -> None:
    """Read the non-blocking pipe ``fd`` empty: however many rings came, one look
    answers them all."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
