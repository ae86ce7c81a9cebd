"""The spool reader's judgement of young files: wait for one that may still be written,
never for one that is too large already."""

from __future__ import annotations

import json
import os

import pytest

from praxist_fs.adapters.spool import SHARED_BATCH, pending, read_request
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


# -- R-SEC-5: the order the spool is read in, and a uid's quota --------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="files of other uids need root")


def drop(directory, name: str, uid: int, size: int = 10, mtime: float | None = None) -> None:
    """A request file of ``uid``'s, renamed into ``directory`` as a peer would, once the
    file clock (coarse: a few ms) has moved past the last one's: it arrives after it."""
    tmp = directory / f".{name}.tmp"
    tmp.write_bytes(b" " * size)
    os.chown(tmp, uid, -1)
    last = max((p.stat().st_ctime_ns for p in directory.glob("*.json")), default=0)
    while tmp.stat().st_ctime_ns <= last:
        os.chmod(tmp, 0o644)  # a new ctime, once the clock ticks
    os.rename(tmp, directory / name)
    if mtime is not None:  # what the owner of a file may set, unlike its ctime
        os.utime(directory / name, (mtime, mtime))


@needs_root
def test_the_uids_take_turns_so_a_flood_delays_another_uid_by_one_turn(tmp_path):
    for i in range(50):
        drop(tmp_path, f"flood-{i:02}.json", 1001)
    drop(tmp_path, "mine.json", 1002)
    drop(tmp_path, "flood-late.json", 1001)
    chosen, more = pending(tmp_path, batch=4)
    assert more and [(w.name, w.uid, w.position) for w in chosen] == [
        ("flood-00.json", 1001, 1), ("mine.json", 1002, 1),
        ("flood-01.json", 1001, 2), ("flood-02.json", 1001, 3)]


@needs_root
def test_while_several_uids_wait_a_batch_is_short(tmp_path):
    for i in range(SHARED_BATCH + 10):
        drop(tmp_path, f"a-{i:03}.json", 1001)
    assert len(pending(tmp_path)[0]) == SHARED_BATCH + 10  # one uid: the whole batch
    drop(tmp_path, "b.json", 1002)
    chosen, more = pending(tmp_path)
    assert more and len(chosen) == SHARED_BATCH and chosen[1].name == "b.json"


@needs_root
def test_a_back_dated_mtime_does_not_jump_the_queue(tmp_path):
    drop(tmp_path, "first.json", 1001)
    drop(tmp_path, "second.json", 1001, mtime=1.0)  # "written" in 1970
    drop(tmp_path, "another.json", 1002, mtime=1.0)
    assert [w.name for w in pending(tmp_path)[0]] == [
        "first.json", "another.json", "second.json"]


@needs_root
def test_files_over_a_uids_quota_are_chosen_at_once_with_their_position(tmp_path):
    for i in range(6):
        drop(tmp_path, f"a-{i}.json", 1001, size=100)
    drop(tmp_path, "b.json", 1002, size=100)
    chosen, more = pending(tmp_path, batch=2, quota=(4, 1000))
    assert [(w.name, w.position, w.bytes) for w in chosen] == [
        ("a-0.json", 1, 100), ("b.json", 1, 100),  # the fair turn: within the quota
        ("a-4.json", 5, 500), ("a-5.json", 6, 600)]  # over it: for the core to reject now
    assert more  # a-1 .. a-3 wait for the next turn
    assert [w.name for w in pending(tmp_path, quota=(10, 250))[0]][-4:] == [
        "a-2.json", "a-3.json", "a-4.json", "a-5.json"]  # over its bytes
