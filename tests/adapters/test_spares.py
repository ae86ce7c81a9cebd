"""Job files written into the inodes of the ones they replaced (adapters/spares.py), on
real files: the kernel's write lease decides whether a spare is free."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from praxist_fs.adapters import spares
from praxist_fs.adapters.spares import Spares


def dirs(tmp_path: Path) -> tuple[Path, Path, Path]:
    private, queued, running = tmp_path / "private", tmp_path / "queued", tmp_path / "running"
    for directory in (private, queued, running):
        directory.mkdir()
    return private, queued, running


def test_a_job_file_that_moves_on_is_written_into_the_inode_it_replaced(tmp_path):
    """Issue 31 item 1: a state change of a job allocates no inode and frees none (on
    ext4 without a journal every creation walks the inodes freed lately)."""
    private, queued, running = dirs(tmp_path)
    kept = Spares(private)
    first = kept.write(str(queued / "a.json"), b'{"job_id": "a", "state": "queued"}')
    kept.retire(str(queued / "a.json"))
    assert not (queued / "a.json").exists() and len(kept) == 1
    made = kept.write(str(running / "b.json"), b'{"job_id": "b", "state": "running"}')
    assert made.st_ino == first.st_ino == os.stat(running / "b.json").st_ino
    assert (running / "b.json").read_bytes() == b'{"job_id": "b", "state": "running"}'
    assert made.st_size == len(b'{"job_id": "b", "state": "running"}')
    assert not os.listdir(private) and len(kept) == 0


def test_a_reader_that_opened_a_replaced_job_file_reads_it_whole_as_it_was(tmp_path):
    """A file a peer (or ``jobs``) opened before its job moved on is never written into:
    it reads what it opened, and the next file gets an inode of its own."""
    private, queued, running = dirs(tmp_path)
    kept = Spares(private)
    before = b'{"job_id": "a", "state": "queued", "padding": "' + b"x" * 4000 + b'"}'
    first = kept.write(str(queued / "a.json"), before)
    with open(queued / "a.json", "rb") as reader:
        kept.retire(str(queued / "a.json"))
        made = kept.write(str(running / "b.json"), b'{"job_id": "b"}')
        assert made.st_ino != first.st_ino
        assert reader.read() == before
    assert not os.listdir(private)  # the held spare was let go, not kept


def test_spares_beyond_the_cap_are_unlinked_and_the_next_start_writes_into_the_rest(
        tmp_path, monkeypatch):
    private, queued, running = dirs(tmp_path)
    monkeypatch.setattr(spares, "KEPT", 2)
    kept = Spares(private)
    for name in "abc":
        kept.write(str(queued / f"{name}.json"), b"{}")
    for name in "abc":  # a batch that moves three jobs on
        kept.retire(str(queued / f"{name}.json"))
    assert len(os.listdir(private)) == 2 and not os.listdir(queued)
    inodes = {os.stat(private / name).st_ino for name in os.listdir(private)}
    (private / "hmac.key").write_bytes(b"k")  # the vault's: not a spare
    adopted = Spares(private)  # the next coordinator's start frees none (a full disk)
    assert len(adopted) == 2
    made = {adopted.write(str(running / f"{name}.json"), b"{}").st_ino for name in "de"}
    assert made == inodes and os.listdir(private) == ["hmac.key"]


def test_a_spare_that_is_not_ours_alone_is_never_written_into(tmp_path):
    """A spare with a second link (which another name could read) is freed instead."""
    private, queued, running = dirs(tmp_path)
    kept = Spares(private)
    first = kept.write(str(queued / "a.json"), b'{"job_id": "a"}')
    kept.retire(str(queued / "a.json"))
    [spare] = os.listdir(private)
    os.link(private / spare, tmp_path / "other-name")
    made = kept.write(str(running / "b.json"), b'{"job_id": "b"}')
    assert made.st_ino != first.st_ino
    assert (tmp_path / "other-name").read_bytes() == b'{"job_id": "a"}'


def test_a_spare_others_may_write_is_written_into_only_with_our_mode(tmp_path):
    """What a spare becomes must not keep a mode that lets others rewrite a job file: one
    made group-writable (not by us) is given a job file's mode as it is written into."""
    private, queued, running = dirs(tmp_path)
    kept = Spares(private)
    first = kept.write(str(queued / "a.json"), b'{"job_id": "a"}')
    kept.retire(str(queued / "a.json"))
    [spare] = os.listdir(private)
    os.chmod(private / spare, 0o6664)
    made = kept.write(str(running / "b.json"), b'{"job_id": "b"}')
    assert made.st_ino == first.st_ino
    assert stat.S_IMODE(made.st_mode) == stat.S_IMODE(os.stat(running / "b.json").st_mode) \
        == 0o644
    assert not os.listdir(private)


def test_a_consumed_request_of_our_own_becomes_the_next_file_with_our_mode(tmp_path):
    """An answered request of the coordinator's own uid is kept aside (``adopt``), not
    unlinked, and the next file is written into it: with the mode a new file gets, cut
    to its own length."""
    private, incoming, replies = dirs(tmp_path)
    kept = Spares(private)
    request = incoming / "r.json"
    fd = os.open(request, os.O_WRONLY | os.O_CREAT, 0o600)  # as ``praxist-fs submit``
    os.write(fd, b'{"peer": "alice", "tag": "t", "argv": ["true"], "padding": "xxxxxxxx"}')
    os.close(fd)
    inode = os.stat(request).st_ino
    kept.adopt(str(request))
    assert not request.exists() and len(kept) == 1
    made = kept.write(str(replies / "r.json"), b'{"outcome": "accepted"}\n')
    assert made.st_ino == inode == os.stat(replies / "r.json").st_ino
    assert (replies / "r.json").read_bytes() == b'{"outcome": "accepted"}\n'
    assert stat.S_IMODE(os.stat(replies / "r.json").st_mode) == 0o644
    assert not os.listdir(private)


def test_a_request_that_is_a_link_or_has_a_second_name_is_unlinked_not_kept(tmp_path):
    """Only a plain file with one name is kept: a link is removed (its target untouched),
    and of a file with a second name only the request's name goes."""
    private, incoming, _ = dirs(tmp_path)
    kept = Spares(private)
    target = tmp_path / "elsewhere.json"
    target.write_bytes(b"theirs")
    (incoming / "link.json").symlink_to(target)
    (incoming / "linked.json").write_bytes(b"{}")
    os.link(incoming / "linked.json", tmp_path / "second-name")
    kept.adopt(str(incoming / "link.json"))
    kept.adopt(str(incoming / "linked.json"))
    assert not os.listdir(incoming) and not os.listdir(private) and len(kept) == 0
    assert target.read_bytes() == b"theirs" and (tmp_path / "second-name").read_bytes() == b"{}"


def test_keeping_replaced_files_and_requests_aside_asks_the_kernel_nothing_it_told_before(
        tmp_path, monkeypatch):
    """Issue 31 (many jobs back to back): a job file retired and a request adopted ask no
    pid, uid or gid per file (they were 3 to 4 of the coordinator's ~90 system calls a
    job); the names kept apart are still new and this process's own."""
    private, queued, incoming = dirs(tmp_path)
    kept = Spares(private)
    asked = []
    for name in ("getpid", "geteuid", "getegid"):
        monkeypatch.setattr(os, name, lambda name=name, real=getattr(os, name): (
            asked.append(name), real())[1])
    for job in ("a", "b"):
        (queued / f"{job}.json").write_bytes(b"{}")
        kept.retire(str(queued / f"{job}.json"))
    (incoming / "r.json").write_bytes(b"{}")
    kept.adopt(str(incoming / "r.json"))
    monkeypatch.undo()
    assert asked == []
    names = sorted(os.listdir(private))
    assert len(kept) == 3 and len(set(names)) == 3
    assert all(name.startswith(f"{spares.PREFIX}{os.getpid()}-") for name in names)
