"""Fixtures the shim tests share: a fresh run layout, and a shim server on it."""

from __future__ import annotations

import pytest

from praxist_fs.adapters import launcher
from praxist_fs.adapters.layout import RunLayout


@pytest.fixture
def layout(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    layout.create()
    return layout


@pytest.fixture
def server(layout):
    server = launcher.ShimServer.start(layout)
    yield server
    server.close()
