"""Shared fixtures. Autouse guards fail a test that leaks a thread or a child process."""

from __future__ import annotations

import threading

import psutil
import pytest


@pytest.fixture(autouse=True)
def no_leaked_threads_or_children():
    threads_before = set(threading.enumerate())
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leaked_threads = [t for t in threading.enumerate()
                      if t not in threads_before and t.is_alive()]
    leaked = [p for p in psutil.Process().children(recursive=True)
              if p.pid not in children_before and p.status() != psutil.STATUS_ZOMBIE]
    assert not leaked_threads, f"test leaked threads: {leaked_threads}"
    assert not leaked, f"test leaked child processes: {[p.cmdline() for p in leaked]}"
