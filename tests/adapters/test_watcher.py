"""The doorbell on real inotify: what rings it in an inbox the coordinator empties itself."""

from __future__ import annotations

import os
import select
import threading
import time
from contextlib import contextmanager

import pytest

from praxist_fs.adapters.watcher import INBOX_CHANGES, start_doorbell, start_observer, watch


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@contextmanager
def doorbell(inbox):
    """watchdog's doorbell (a peer's waits, ``top``; the coordinator's on a network file
    system polls) on ``inbox`` (real inotify): the times it rang."""
    rings: list[float] = []
    observer = start_observer([inbox], lambda: rings.append(time.monotonic()), polling=False,
                              changes=INBOX_CHANGES)
    try:
        yield rings
    finally:
        observer.stop()
        observer.join()


def renamed_in(outside, inbox, name: str) -> None:
    """A request written beside ``inbox`` and renamed into it, as a peer drops one."""
    (outside / name).write_bytes(b"{}")
    os.rename(outside / name, inbox / name)


def test_an_inbox_rings_for_a_request_renamed_in_and_not_for_its_consumption(tmp_path):
    """Each request consumed from spool/incoming/ (its file removed by the coordinator) rang
    the doorbell a second time, and the loop woke to list every inbox again for nothing."""
    inbox, outside = tmp_path / "incoming", tmp_path / "tmp"
    inbox.mkdir()
    outside.mkdir()
    with doorbell(inbox) as rings:
        renamed_in(outside, inbox, "a.json")
        assert wait_for(lambda: len(rings) == 1, 10), "a request renamed in rings"
        os.unlink(inbox / "a.json")  # consumed
        renamed_in(outside, inbox, "b.json")
        # one inotify queue, delivered in order: a ring for the removal would come before
        # b's, so a third ring within seconds means the removal rang
        assert wait_for(lambda: len(rings) >= 2, 10), "the next request rings"
        assert not wait_for(lambda: len(rings) >= 3, 2), "the removal rang the doorbell"



IN_MOVED_FROM, IN_MOVED_TO = 0x40, 0x80  # <sys/inotify.h>


def kernel_masks(directory) -> list[int]:
    """The masks this process's inotify watches on ``directory`` hold, as the kernel says
    (/proc/self/fdinfo: ``inotify wd:.. ino:<hex> sdev:.. mask:<hex>``)."""
    inode, masks = f"{os.stat(directory).st_ino:x}", []
    for fd in os.listdir("/proc/self/fdinfo"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as info:
                lines = info.read().splitlines()
        except OSError:  # closed since listed
            continue
        for line in lines:
            fields = dict(f.split(":", 1) for f in line.split()[1:] if ":" in f)
            if line.startswith("inotify ") and fields.get("ino") == inode:
                masks.append(int(fields["mask"], 16))
    return masks


def test_a_request_set_aside_out_of_an_inbox_holds_back_no_later_arrival(tmp_path):
    """watchdog holds an unpaired IN_MOVED_FROM (a request the coordinator renames out of
    control/ into rejected/) half a second to pair it, and every event behind it waits:
    the next request rang the doorbell ~0.5 s late (`generation open` answered "already
    exists" in 0.5 s after another). The doorbell's watches ask the kernel for no
    IN_MOVED_FROM, and a request renamed in still rings."""
    inbox, aside = tmp_path / "control", tmp_path / "rejected"
    inbox.mkdir()
    aside.mkdir()
    with doorbell(inbox) as rings:
        assert wait_for(lambda: kernel_masks(inbox), 10), "the inbox is watched"
        (mask,) = kernel_masks(inbox)
        assert mask & IN_MOVED_TO and not mask & IN_MOVED_FROM, hex(mask)
        renamed_in(aside, inbox, "a.json")
        assert wait_for(lambda: len(rings) == 1, 10), "a request renamed in rings"
        os.rename(inbox / "a.json", aside / "a.json")  # set aside: renamed out
        renamed_in(aside, inbox, "b.json")
        assert wait_for(lambda: len(rings) >= 2, 10), "the next request rings"
        assert not wait_for(lambda: len(rings) >= 3, 2), "the move out rang the doorbell"


IN_DELETE = 0x200


def readable(bell) -> bool:
    """Whether the doorbell has rung, looked at once: the kernel queues an inotify event
    within the system call that made it, so no waiting is needed."""
    return bool(select.select([bell], [], [], 0)[0])


def test_the_coordinators_doorbell_is_readable_by_its_loop_the_moment_a_request_lands(tmp_path):
    """watchdog handed each event through three threads (reader, emitter, dispatcher)
    before the loop's pipe was written: most of the 0.4 ms from a rename to the request
    read, and threads that woke while idle. The coordinator's doorbell is an inotify
    descriptor its own selector waits on: readable as the rename returns, no thread
    started; a consumption or a move out does not ring it."""
    inbox, outside = tmp_path / "incoming", tmp_path / "tmp"
    inbox.mkdir()
    outside.mkdir()
    threads = threading.active_count()
    bell = start_doorbell([inbox], lambda: pytest.fail("rang through a thread"),
                          polling=False, changes=INBOX_CHANGES)
    try:
        assert threading.active_count() == threads, "the doorbell started a thread"
        (mask,) = kernel_masks(inbox)
        assert mask & IN_MOVED_TO and not mask & (IN_MOVED_FROM | IN_DELETE), hex(mask)
        assert not readable(bell)
        renamed_in(outside, inbox, "a.json")
        assert readable(bell), "a request renamed in rings at once"
        bell.drain()
        assert not readable(bell), "read empty"
        os.unlink(inbox / "a.json")  # consumed
        renamed_in(outside, inbox, "b.json")
        os.rename(inbox / "b.json", outside / "b.json")  # set aside: renamed out
        bell.drain()
        os.unlink(outside / "b.json")
        assert not readable(bell)
        (inbox / "c.json").write_bytes(b"{}")  # written in place: created, then closed
        assert readable(bell)
    finally:
        bell.stop()


def test_a_generation_inbox_of_the_coordinators_doorbell_rings_for_a_removal_too(tmp_path):
    """Outside the inboxes the coordinator empties itself (a generation's results/ and
    idle/), a removal is news: a peer that takes its idle registration back."""
    idle = tmp_path / "idle"
    idle.mkdir()
    (idle / "peer.json").write_bytes(b"{}")
    bell = start_doorbell([], lambda: None, polling=False)
    try:
        watch(bell, idle)
        os.unlink(idle / "peer.json")
        assert readable(bell)
    finally:
        bell.stop()


def test_the_coordinators_doorbell_never_watches_through_a_link(tmp_path):
    """R-SEC-4: a link put where a watched directory should be is refused, not followed
    into whatever it names."""
    from praxist_fs.adapters.inotify_bell import InotifyBell
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "inbox").symlink_to(elsewhere)
    bell = InotifyBell()
    try:
        with pytest.raises(NotADirectoryError):
            bell.watch(tmp_path / "inbox")
        bell.watch(elsewhere)  # a real directory is watched
    finally:
        bell.stop()


def test_the_coordinators_doorbell_says_which_of_its_inboxes_rang(tmp_path):
    """A request renamed into spool/incoming/ made the loop list control/ and every
    generation's inboxes too, between its GO and its command's start: each event names
    its watch, and the doorbell says which directories rang, so the loop lists those.
    An overflowed queue names none: then it says "anything" (None), and all are listed."""
    incoming, control, outside = tmp_path / "incoming", tmp_path / "control", tmp_path / "tmp"
    for directory in (incoming, control, outside):
        directory.mkdir()
    bell = start_doorbell([incoming, control], lambda: pytest.fail("rang through a thread"),
                          polling=False, changes=INBOX_CHANGES)
    try:
        renamed_in(outside, incoming, "a.json")
        assert bell.drain() == {incoming}
        renamed_in(outside, control, "c.json")
        renamed_in(outside, incoming, "b.json")
        assert bell.drain() == {incoming, control}
        assert bell.drain() == set() and not readable(bell)
        with open("/proc/sys/fs/inotify/max_queued_events") as queue:
            limit = int(queue.read())
        for i in range(limit // 2 + 1):  # a creation and its close: two events each
            os.close(os.open(incoming / f"{i}.json", os.O_CREAT | os.O_WRONLY, 0o600))
        assert bell.drain() is None
    finally:
        bell.stop()


def test_the_coordinators_doorbell_reads_its_queue_empty_however_many_reads_it_takes(tmp_path):
    """``drain`` stops reading once a read leaves room for one more event (the kernel
    queue was empty), not at a read that finds nothing: a burst of arrivals larger than
    one read is still read to its end, and a request that lands after a drain rings the
    loop again, so no arrival waits for the periodic scan."""
    incoming, outside = tmp_path / "incoming", tmp_path / "tmp"
    for directory in (incoming, outside):
        directory.mkdir()
    bell = start_doorbell([incoming], lambda: pytest.fail("rang through a thread"),
                          polling=False, changes=INBOX_CHANGES)
    try:
        for i in range(600):  # 208-byte events: about twice what one read takes
            renamed_in(outside, incoming, f"{i:04d}-{'r' * 180}.json")
        assert bell.drain() == {incoming}
        assert not readable(bell), "a burst longer than one read is read to its end"
        assert bell.drain() == set()
        renamed_in(outside, incoming, "late.json")
        assert readable(bell), "a request after the drain rings again"
        assert bell.drain() == {incoming} and not readable(bell)
    finally:
        bell.stop()
