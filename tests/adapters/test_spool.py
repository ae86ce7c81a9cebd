"""The spool reader's judgement of young files: wait for one that may still be written,
never for one that is too large already."""

from __future__ import annotations

import json
import os

import pytest

from praxist_fs.adapters.spool import read_request
from praxist_fs.core.request import MAX_REQUEST_BYTES


@pytest.fixture
def incoming(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def seen(incoming, name: str, data: bytes):
    path, fd = incoming
    (path / name).write_bytes(data)
    return read_request(path, fd, name, (path / name).stat().st_mtime, lambda b: "digest")


def test_a_young_unfinished_request_is_left_for_the_next_scan(incoming):
    assert seen(incoming, "partial.json", b'{"peer": "p", "tag": ') is None


def test_a_young_request_too_large_for_its_env_is_refused_at_once(incoming):
    env = {f"VAR_{i}": "v" * 100 for i in range(700)}
    data = json.dumps({"peer": "p", "tag": "t", "argv": ["true"], "env": env}).encode()
    event = seen(incoming, "crowded.json", data)
    assert event is not None and event.error_field == "<file>"
    assert event.error_problem.startswith(f"larger than {MAX_REQUEST_BYTES} bytes; its env")
