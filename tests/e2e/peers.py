"""Peers under other uids, for the tests of the shared-box set-up (R-SEC-2..6).

The coordinator runs as root (pytest's uid here); a peer is a forked child that dropped
to its uid, its group and nothing else, and returns what it found as JSON. Real users
(``users``) are made in a group of their own for a test module and removed after it,
since a peer's job runs as its user, whose entry the shim reads.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run

NOBODY = 65534  # nobody:nogroup, whose entries every Debian-like host has


@dataclass(frozen=True)
class Peer:
    uid: int
    gid: int
    name: str


def as_peer(peer: Peer, function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a forked child that dropped to ``peer`` (its group alone);
    its JSON-able result. The child never returns into pytest."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.setgroups([peer.gid])
            os.setgid(peer.gid)
            os.setuid(peer.uid)
            os.write(write_end, json.dumps(function(*args)).encode())
            code = 0
        except BaseException as exc:  # what the peer met, for the test's message
            os.write(write_end, json.dumps({"__error__": repr(exc)}).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    _, status = os.waitpid(pid, 0)
    result = json.loads(data) if data else None
    assert os.waitstatus_to_exitcode(status) == 0, f"the peer child failed: {result}"
    return result


def attempt(action: Callable[[], Any]) -> str:
    """What happened when a peer tried ``action``: allowed, or the error's name."""
    try:
        action()
    except OSError as exc:
        return type(exc).__name__
    return "allowed"


@contextmanager
def users(count: int) -> Iterator[list[Peer]]:
    """``count`` users, members of one new group, for as long as the block runs; skips
    (with the reason) where they cannot be made: not root, or no useradd."""
    if os.geteuid() != 0:
        pytest.skip("switching uid needs root")
    if not (shutil.which("useradd") and shutil.which("groupadd")):
        pytest.skip("making test users needs useradd and groupadd (Debian's passwd package)")
    tag = f"{os.getpid() % 100000:05d}"
    group, names = f"pxg{tag}", [f"px{chr(97 + i)}{tag}" for i in range(count)]
    subprocess.run(["groupadd", group], check=True)
    made: list[str] = []
    try:
        for name in names:
            subprocess.run(["useradd", "-M", "-N", "-g", group, "-d", "/nonexistent",
                            "-s", "/usr/sbin/nologin", name], check=True)
            made.append(name)
        gid = grp.getgrnam(group).gr_gid
        yield [Peer(pwd.getpwnam(name).pw_uid, gid, name) for name in names]
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", group], check=False)


@contextmanager
def shared_run(gid: int, task: str, prefix: str = "praxist-shared-") -> Iterator[Run]:
    """A run of the documented set-up for the peers of group ``gid``: theirs to read and
    search (setgid, mode 2750), the coordinator's to write; in a directory others can
    search (pytest's own tmp dir is 0700 root). Its coordinator, if one was started, is
    stopped after the block, and every command of the run ended."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        base.chmod(0o755)
        root = base / "run"
        root.mkdir()
        os.chown(root, 0, gid)
        root.chmod(0o2750)
        (base / "task.yaml").write_text(task)
        run = Run(root, base / "task.yaml")
        yield run
        if run.proc is not None and run.proc.poll() is None:
            run.stop()
        run.kill_attempt_groups()
    finally:
        shutil.rmtree(base, ignore_errors=True)
