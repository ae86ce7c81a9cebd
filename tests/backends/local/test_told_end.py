"""An end the shim told on its pipe (``X``) after a journaled GO is observed from what it
told: the attempt's READY and GO files are not read back on every job's end (issue 31).
Without a journaled GO they are, as the core needs them to tell a lost attempt from one
that never started."""

from __future__ import annotations

import pytest

from tests.backends.conftest import local_rig
from tests.e2e.conftest import wait_for

TIMEOUT = 15.0


@pytest.fixture
def rig(tmp_path):
    rig = local_rig(tmp_path)
    yield rig
    rig.close()


def _ends_without_its_barrier_files(rig, go_journaled: bool):
    """A held command's attempt, GO given; its READY and GO files removed while it runs,
    then let go: the observation of its end."""
    launch = rig.launch("j1", rig.command(3, 0.0, held=True))
    key = (launch.job_id, launch.attempt_id)
    rig.seen.add(rig.backend.start(launch))
    rig.settle(lambda: key in rig.seen.last, TIMEOUT)
    rig.backend.go(key)
    rig.wait_running(key)
    rig.jobs["j1"].current.go = go_journaled  # what the core holds (the rig journals no GO)
    attempt_dir = rig.layout.attempt_dir(*key)
    # the shim writes GO, then attempt.json, as its command starts
    wait_for(lambda: (attempt_dir / "attempt.json").exists(), TIMEOUT, message="attempt.json")
    for name in ("READY", "GO"):
        (attempt_dir / name).unlink()
    rig.release("j1")
    rig.settle(lambda: key in rig.seen.exits, TIMEOUT)
    assert key in rig.seen.exits, "the end was not observed"
    return rig.seen.exits[key][0]


def test_an_end_told_after_a_journaled_go_is_taken_from_the_pipe(rig):
    end = _ends_without_its_barrier_files(rig, go_journaled=True)
    assert (end.exited, end.exit_code, end.error, end.alive) == (True, 3, None, False)
    assert end.ready and end.go  # known from the journaled GO, not read from the files


def test_without_a_journaled_go_the_barrier_files_are_read(rig):
    end = _ends_without_its_barrier_files(rig, go_journaled=False)
    assert (end.exited, end.exit_code) == (True, 3)
    assert not end.ready and not end.go  # read: they are gone
