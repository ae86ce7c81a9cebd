"""Fixtures of the core's tests (their helpers are in helpers.py)."""

from __future__ import annotations

import pytest

from praxist_fs.core.pickers import PICKERS, register_picker

from .helpers import Recorder


@pytest.fixture
def recorder():
    """The ``recorder`` job picker, registered for one test: last job first, and what
    the loop asked of it in ``Recorder.calls``."""
    Recorder.calls = []
    register_picker("job", "recorder", Recorder)
    yield Recorder
    del PICKERS["job"]["recorder"]
