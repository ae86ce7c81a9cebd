"""tests/disks.py's own rule (issue 30): a full-disk test is skipped only where this
environment cannot mount at all; a mount that fails anywhere else fails the test."""

from __future__ import annotations

import pytest

from tests.disks import _mount, cannot_mount


def test_a_mount_that_fails_where_mounting_works_fails_the_test(tmp_path):
    if (why := cannot_mount()) is not None:
        pytest.skip(why)
    with pytest.raises(BaseException) as caught:
        _mount(["-t", "praxist-no-such-fs", "none", str(tmp_path)])
    assert caught.type is pytest.fail.Exception, caught.value  # not skipped
    assert "praxist-no-such-fs" in str(caught.value)
