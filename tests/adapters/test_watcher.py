"""The doorbell on real inotify: what rings it in an inbox the coordinator empties itself."""

from __future__ import annotations

import os
import time

from praxist_fs.adapters.watcher import INBOX_CHANGES, start_observer


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_an_inbox_rings_for_a_request_renamed_in_and_not_for_its_consumption(tmp_path):
    """Each request consumed from spool/incoming/ (its file removed by the coordinator) rang
    the doorbell a second time, and the loop woke to list every inbox again for nothing."""
    inbox, outside = tmp_path / "incoming", tmp_path / "tmp"
    inbox.mkdir()
    outside.mkdir()
    rings: list[float] = []
    observer = start_observer([inbox], lambda: rings.append(time.monotonic()), polling=False,
                              changes=INBOX_CHANGES)
    try:
        (outside / "a.json").write_bytes(b"{}")
        os.rename(outside / "a.json", inbox / "a.json")
        assert wait_for(lambda: len(rings) == 1, 10), "a request renamed in rings"
        os.unlink(inbox / "a.json")  # consumed
        (outside / "b.json").write_bytes(b"{}")
        os.rename(outside / "b.json", inbox / "b.json")
        # one inotify queue, delivered in order: a ring for the removal would come before
        # b's, so a third ring within seconds means the removal rang
        assert wait_for(lambda: len(rings) >= 2, 10), "the next request rings"
        assert not wait_for(lambda: len(rings) >= 3, 2), "the removal rang the doorbell"
    finally:
        observer.stop()
        observer.join()
