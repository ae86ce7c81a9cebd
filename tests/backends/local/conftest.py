"""The shim tests' shim server, on a fresh run layout (tests/conftest.py's ``layout``)."""

from __future__ import annotations

import pytest

from praxist_fs.backends.local import launcher


@pytest.fixture
def server(layout):
    server = launcher.ShimServer.start(layout)
    yield server
    server.close()
