"""The fork server: supervisors forked on request, each leading a session of its own, whose
pipes and lives are their own and outlast the server; and a supervisor serving attempt
after attempt, alone in its process group between them."""

from __future__ import annotations

import errno
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

from praxist_fs.adapters.fsio import write_atomic
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt
from tests.backends.local.conftest import finish, go_and_wait, group_members, parent_pid, spawn
from tests.e2e.conftest import read_json, wait_for


def fd_targets(pid="self"):
    targets = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:  # the listing's own fd
            pass
    return targets


def proc_status(pid):
    with open(f"/proc/{pid}/status") as status:
        return dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)


def letters(said):
    """A status pipe's messages, one letter each: an ``X``'s exit document dropped."""
    return re.sub(rb"X[^\n]*\n", b"X", said)


def read_to_eof(fd, timeout=15.0):
    """All a non-blocking pipe gives until EOF, waiting on it with poll."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            raise AssertionError(f"no EOF within {timeout}s (read {data!r})")
        chunk = os.read(fd, 64)
        if not chunk:
            return data
        data += chunk


def test_a_forked_shim_leads_its_own_session_under_the_server(server):
    warm = server.prestart()
    pid = warm.handle.popen.pid
    # settled before its pid is handed out, as a Popen'd shim is
    assert os.getpgid(pid) == os.getsid(pid) == pid != os.getsid(server.popen.pid)
    assert parent_pid(pid) == server.popen.pid
    assert os.getpgid(server.popen.pid) == server.popen.pid != os.getpgid(0)
    assert not int(proc_status(pid)["SigIgn"], 16) & 1 << (signal.SIGCHLD - 1)  # it waits
    assert os.readlink(f"/proc/{pid}/cwd") == "/"
    # once it waits for its attempt (it reads /proc for its identity first): its stdio, a
    # /dev/null to return to between attempts, the attempt's three pipes, its pool socket
    fds = wait_for(lambda: (fds := fd_targets(pid)) and sorted(map(kind, fds.values())) ==
                   ["/dev/null"] * 4 + ["pipe"] * 3 + ["socket"] and fds,
                   message=f"the warm shim's fds to settle: {fd_targets(pid)}")
    assert [fds[fd] for fd in (0, 1, 2)] == ["/dev/null"] * 3
    # given its attempt's pipes, it stays to record its command's end
    wait_for(lambda: int(proc_status(pid)["SigCgt"], 16) & 1 << (signal.SIGTERM - 1),
             message="SIGTERM caught")
    # the server keeps no attempt's pipe: only its stdio and its socket
    assert sorted(kind(target) for target in fd_targets(server.popen.pid).values()) == \
        ["/dev/null"] * 3 + ["socket"]
    warm.dismiss()


def kind(target):
    return target.split(":")[0]


def test_a_forked_shim_runs_an_attempt_and_its_eof_is_its_own(layout, tmp_path, server):
    warm, other = server.prestart(), server.prestart()
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 6", warm=warm)
    assert handle is warm.handle
    ready = wait_for(lambda: read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid and not marker.exists()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    said = read_to_eof(handle.status_fd)  # while the server and its other child live
    assert letters(said) == b"RXD" and said.startswith(b'RX{"exit_code": 6, ')
    assert server.alive and other.handle.popen.poll() is None
    assert handle.popen.poll() is None  # idle: it serves the next attempt
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 6 and marker.exists()
    handle.close()
    handle.popen.close()
    other.dismiss()


def test_closing_the_server_leaves_a_running_attempt_to_finish(layout, tmp_path, server):
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    warm = launcher.prestart(layout, server)
    handle, attempt_dir, marker = spawn(layout, tmp_path, body=f"read line < {fifo}; exit 7",
                                        warm=warm)
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    wait_for(marker.exists)
    server.close()
    assert server.popen.returncode == 0 and not server.alive
    assert handle.popen.poll() is None and not (attempt_dir / "exit.json").exists()
    gate = wait_for(lambda: _open_for_writing(fifo), message="the command reading the gate")
    os.write(gate, b"go\n")
    os.close(gate)
    assert letters(read_to_eof(handle.status_fd)) == b"RXD"
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 7
    handle.close()
    handle.popen.close()


def _open_for_writing(fifo):
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # no reader yet
            return None
        raise


def test_the_server_survives_bad_requests_and_dead_children(layout, tmp_path, server):
    pipes = [os.pipe() for _ in range(4)]
    ends = [write for _, write in pipes]
    bad = [(b"F", []), (b"F", ends[:2]), (b"F", ends), (b"FF", ends[:1])]
    for message, fds in bad:
        socket.send_fds(server.sock, [message], fds)
        assert server.sock.recv(32) == b"%d" % -errno.EINVAL
    for read, write in pipes:  # the server closed every fd it was sent
        os.close(write)
        os.set_blocking(read, False)
        assert read_to_eof(read) == b""
        os.close(read)
    dying = server.prestart()
    dying.handle.popen.kill()
    assert dying.handle.popen.wait(timeout=15) == 0
    dying.dismiss()
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=server.prestart())
    assert go_and_wait(handle, attempt_dir)["exit_code"] == 0 and marker.exists()
    assert server.alive
    handle.popen.close()


def test_a_refusal_is_an_oserror_and_leaves_nothing_open(layout):
    """A stand-in for the server that refuses every request, as one whose fork fails."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    refuser = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys\n"
         "sock = socket.socket(fileno=int(sys.argv[1]))\n"
         "while socket.recv_fds(sock, 1, 4)[0]:\n"
         "    sock.send(b'-11')\n", str(theirs.fileno())], pass_fds=(theirs.fileno(),))
    theirs.close()
    server = launcher.ShimServer(refuser, ours)
    before = fd_targets()
    with pytest.raises(OSError) as refused:
        server.prestart()
    assert refused.value.errno == errno.EAGAIN
    assert fd_targets() == before and server.alive  # a refusal is not a broken server
    server.close()
    assert refuser.returncode == 0


def test_fds_do_not_grow_over_many_forked_shims(layout, server):
    server.prestart().dismiss()  # the server is up
    before, server_before = fd_targets(), fd_targets(server.popen.pid)
    for _ in range(50):
        warm = server.prestart()
        warm.dismiss()
    assert fd_targets() == before
    assert fd_targets(server.popen.pid) == server_before


def test_the_server_exits_when_its_socket_closes_and_its_children_stay(layout, server):
    warm = server.prestart()
    server.sock.close()
    assert server.popen.wait(timeout=15) == 0 and not server.alive
    assert warm.handle.popen.poll() is None  # a warm shim leaves when its control pipe closes
    with pytest.raises(OSError):
        server.prestart()
    fallback = launcher.prestart(layout, server)  # a closed server: started by Popen
    assert isinstance(fallback.handle.popen, subprocess.Popen)
    fallback.dismiss()
    warm.dismiss()
    assert warm.handle.popen.returncode == 0


def test_a_killed_server_is_not_alive_and_prestart_says_so(layout, server):
    server.popen.kill()
    server.popen.wait()
    assert not server.alive
    with pytest.raises(OSError):
        server.prestart()


def test_requests_need_not_wait_and_are_answered_in_order(layout, server):
    server.prestart().dismiss()  # the server is up
    before = fd_targets()
    for _ in range(3):
        server.request()
    assert len(server.pending) == 3
    ready, _, _ = select.select([server.sock], [], [], 15)  # a reply makes it readable
    assert ready
    shims = [server.receive().warm() for _ in range(3)]
    assert len({shim.handle.popen.pid for shim in shims}) == 3 and not server.pending
    assert all(shim.handle.popen.poll() is None for shim in shims)
    for shim in shims:
        shim.dismiss()
    assert fd_targets() == before


def test_a_server_killed_with_requests_outstanding_leaves_nothing_open(layout, server):
    server.prestart().dismiss()
    before = fd_targets()
    server.request()
    server.request()
    server.popen.kill()  # it may have answered either, both or neither
    server.popen.wait()
    received = []
    for _ in range(2):
        try:
            received.append(server.receive())
        except OSError:
            break
    assert not server.alive and not server.pending
    for shim in received:
        shim.close()
    assert fd_targets().items() <= before.items()  # nothing new open (the socket may be shut)


def forked(server):
    server.request()
    return server.receive()


def attempt(layout, tmp_path, job_id, body, warm):
    """Hand ``warm`` the attempt ``job_id``/a1 running ``sh -c body`` in ``tmp_path``."""
    effect = SpawnAttempt(job_id=job_id, attempt_id="a1", argv=None, command=body,
                          cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), metadata={"peer": "p"})
    handle = launcher.spawn(layout, effect, attempt_environment(layout, effect), warm)
    return handle, layout.attempt_dir(job_id, "a1")


def test_a_supervisor_serves_attempt_after_attempt_and_is_alone_between_them(
        layout, tmp_path, server):
    supervisor = forked(server)
    orphan = tmp_path / "orphan"
    first, first_dir = attempt(layout, tmp_path, "job-1", f"sleep 1 & echo $! > {orphan}; "
                               "setsid sleep 1 & exit 3", supervisor.warm())
    assert go_and_wait(first, first_dir)["exit_code"] == 3  # finish(): its group is it alone
    assert not os.path.exists(f"/proc/{int(orphan.read_text())}")  # waited for, not left
    # idle: nothing of the attempt is held open, its output and cwd are its own again
    wait_for(lambda: os.readlink(f"/proc/{supervisor.pid}/cwd") == "/",
             message="the supervisor idle")
    assert [os.readlink(f"/proc/{supervisor.pid}/fd/{fd}") for fd in (1, 2)] == \
        ["/dev/null"] * 2
    second, second_dir = attempt(layout, tmp_path, "job-2", "exit 4", supervisor.warm())
    assert go_and_wait(second, second_dir)["exit_code"] == 4
    ready = [read_json(d / "READY") for d in (first_dir, second_dir)]
    assert ready[0]["pid"] == ready[1]["pid"] == supervisor.pid
    assert ready[0]["start_time"] == ready[1]["start_time"]  # one process, no fork between
    supervisor.retire()  # idle: it exits at once
    assert supervisor.wait(timeout=15) == 0
    supervisor.close()


def test_a_group_sigterm_ends_the_command_not_the_supervisor_but_ends_an_idle_one(
        layout, tmp_path, server):
    supervisor = forked(server)
    handle, attempt_dir = attempt(layout, tmp_path, "job-1", "exec sleep 30", supervisor.warm())
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    wait_for(lambda: len(group_members(supervisor.pid)) == 2, message="the command in its group")
    os.killpg(supervisor.pid, signal.SIGTERM)
    finish(handle)  # it recorded the command's end, and is idle
    assert read_json(attempt_dir / "exit.json")["signal"] == signal.SIGTERM
    handle.close()
    os.killpg(supervisor.pid, signal.SIGTERM)  # idle: it has nothing to record
    assert supervisor.wait(timeout=15) == 0
    supervisor.close()


def test_a_retired_supervisor_finishes_its_attempt_then_exits(layout, tmp_path, server):
    supervisor = forked(server)
    gate = tmp_path / "gate"
    handle, attempt_dir = attempt(layout, tmp_path, "job-1",
                                  f"until [ -e {gate} ]; do sleep 0.05; done; exit 5",
                                  supervisor.warm())
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"G")
    supervisor.retire()  # as a coordinator that leaves, or stops the run
    assert supervisor.poll() is None  # it still serves
    gate.touch()
    assert supervisor.wait(timeout=15) == 0  # then exits
    supervisor.close()
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 5
    handle.close()
