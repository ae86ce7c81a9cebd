"""Functions the executor tests run as jobs: importable by reference, as a call must be."""

from __future__ import annotations

import os
import time
from pathlib import Path


class Diverged(Exception):
    """What a failing sweep point raises: a class of the caller's own, to come back as is."""


def train(config: dict) -> dict:
    """A sweep point: notes that it ran (in ``config['trace']``), then returns a made-up
    loss, or raises ``Diverged`` for ``config['lr'] >= 1``."""
    with open(config["trace"], "a") as trace:
        trace.write(f"{config['lr']} {os.environ['PRAXIST_EXPERIMENT_ID']}\n")
    if config["lr"] >= 1:
        raise Diverged(f"loss is NaN at lr {config['lr']}")
    return {"lr": config["lr"], "loss": round(1.0 / (1.0 + config["lr"]), 6)}


def wait_for_file(path: str, timeout: float = 60.0) -> str:
    """Block until ``path`` exists (a test's gate), then return its text."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.02)
    return Path(path).read_text()


def whoami(x: int) -> tuple[int, int]:
    """The uid the call ran as, and ``x`` squared."""
    return os.getuid(), x * x
