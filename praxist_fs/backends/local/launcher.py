"""Start an attempt's shim: attempt files, environment, new session, barrier pipes (R-RUN-1).

The coordinator owns the final Popen. The shim gets two pipes: it reads GO
from one and reports on the other: ``R`` (READY is written), ``X`` with
exit.json's document and a newline once the command and its descendants are
gone (before exit.json is written), ``D`` once the attempt is over (exit.json
written, and durable unless its end was confirmed journaled) and nothing of it
runs, then EOF (the shim exited, or a supervisor went idle; without ``D``, it
died). Both pipes are
only a fast path: READY, GO, ABORT and exit.json are files, so a restarted coordinator can
carry on where the pipes were lost. A supervisor is also told on its pool socket when the
end it told is journaled (``confirm_end``), and then leaves exit.json unsynced.

A shim may be started ahead of need (``prestart``), by Popen or, cheaper, by a
``ShimServer``: one shim process started once, which forks supervisors on request,
so that no interpreter starts per attempt. A ``Supervisor`` serves attempt after
attempt: each is handed its pipes on the supervisor's pool socket (``Supervisor.warm``),
so that neither a fork nor an exit is on any attempt's path. Supervisors are not our
children, so we watch them through a pidfd instead of a Popen.
"""

from __future__ import annotations

import errno
import fcntl
import json
import marshal
import os
import select
import signal
import socket
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from praxist_fs.adapters import procs
from praxist_fs.adapters.fsio import LEDGER_ENV, create, open_log, unlink
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.ownership import own_directories
from praxist_fs.backends.attempt_dir import BARRIER_TIMEOUT_S, description
from praxist_fs.backends.environment import account
from praxist_fs.core.effects import SpawnAttempt

SHIM = Path(__file__).parent.parent / "shim.py"  # it imports shim_command.py beside it
# -S: no site, so a peer's sitecustomize cannot run in the shim (and start-up is faster).
PYTHON_FLAGS = ("-S",)
# The shim is imported rather than run as ``python -S shim.py``: a script is compiled
# at every start (about 2 ms, a fifth of the shim's start-up), a module loads from
# __pycache__. sys.path[0] is then the shim's directory, as it would be for the script.
SHIM_BOOTSTRAP = "import sys; sys.path[0] = %r; import shim; sys.exit(shim.main())" % str(
    SHIM.parent)
LOG_DIR_MODE = 0o755  # logs/experiments/<job_id>/, made by the shim (own_directories' mode)
# A fork takes a millisecond: a server that has not answered by then is wedged.
SERVER_REPLY_TIMEOUT_S = 5
FORK_REQUEST = b"F"  # to the server: fork a supervisor on this pool socket
NEXT_ATTEMPT = b"N"  # to a supervisor: these are your next attempt's pipes
END_JOURNALED = b"J"  # to a supervisor: the end you told (X) is journaled (shim.end_journaled)
# How long a supervisor that told its attempt's end waits for END_JOURNALED before it
# fsyncs exit.json and its directories after all: far longer than a loop turn with its
# commit takes, even on a loaded host, so that only a coordinator that is stuck (or
# whose commit failed: a full disk) leaves the fsyncs to it. A coordinator that exits or
# dies closes the pool socket, which ends the wait at once.
END_WAIT_S = 2.0


class Supervisor:
    """What ShimHandle needs of a Popen, for a supervisor the server forked: it is not our
    child, so we watch it through a pidfd, and its exit status goes to the server (the
    kernel reaps the server's children). ``poll`` and ``wait`` return 0 once it exited,
    whatever its status (exit.json, not the supervisor's status, is the attempt's
    record), or once it is ``close``d: no longer ours to watch.

    Its pool socket brings it each attempt's pipes (``warm``); closing it (``retire``)
    tells it to exit once the attempt it serves, if any, is over."""

    def __init__(self, pid: int, pool: socket.socket) -> None:
        self.pid = pid
        self.pool = pool
        self.pidfd = os.pidfd_open(pid)
        self.start_time = procs.start_time(pid)  # once: the pidfd pins the process
        self.exited = select.poll()  # made once: each launch polls it (bind, then take)
        self.exited.register(self.pidfd, select.POLLIN)  # readable once it exited
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._wait(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._wait(timeout) is None:
            raise subprocess.TimeoutExpired(f"supervisor {self.pid}", timeout)
        return self.returncode

    def _wait(self, timeout: float | None) -> int | None:
        if self.pidfd == -1:
            self.returncode = 0  # closed: no longer watched, it leaves by itself
        if self.returncode is None:
            if self.exited.poll(None if timeout is None else timeout * 1000):
                self.returncode = 0
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it exited already

    @property
    def reusable(self) -> bool:
        """Whether it can take another attempt: not retired, and running."""
        return self.pool.fileno() != -1 and self.poll() is None

    def warm(self) -> WarmShim:
        """Make it a warm shim again: hand it the pipes of its next attempt (control, GO
        and status) on its pool socket. Raises OSError if it is gone (or retired)."""
        control_read, control_write = os.pipe()
        go_read, go_write = os.pipe()
        status_read, status_write = os.pipe()
        theirs = (control_read, go_read, status_write)
        try:
            socket.send_fds(self.pool, [NEXT_ATTEMPT], theirs, socket.MSG_NOSIGNAL)
        except OSError:
            for fd in (control_write, go_write, status_read):
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        os.set_blocking(status_read, False)
        return WarmShim(handle=ShimHandle(popen=self, go_fd=go_write, status_fd=status_read),
                        control_fd=control_write)

    def retire(self) -> None:
        """Close its pool socket: it exits once its attempt, if any, is over."""
        self.pool.close()

    def close(self) -> None:
        """Retire it and stop watching it."""
        self.retire()
        if self.pidfd != -1:
            os.close(self.pidfd)
            self.pidfd = -1


@dataclass
class ShimHandle:
    """A shim we started ourselves (re-adopted shims have no handle, only a pidfd)."""

    popen: subprocess.Popen | Supervisor
    go_fd: int | None
    status_fd: int
    # the exit the shim told on its status pipe, as exit.json holds it (told before that
    # file is written, which a full disk may hold up); and the start of a message still coming
    exit_record: dict | None = None
    # it said ``D``: done with the attempt, of which nothing runs any more (then EOF)
    over: bool = False
    # its end's commit was confirmed to it (``confirm_end``), or it has no pool socket to
    # hear it on
    end_confirmed: bool = False
    # the CPUs to give it back before its GO or ABORT, having kept it off ours while it
    # prepared ahead of our commit (keep_off_our_cpu)
    every_cpu: frozenset[int] | None = None
    _heard: bytes = b""

    def read_status(self) -> bytes | None:
        """What the shim said on its status pipe since the last call, a letter for each
        message: ``R`` (READY is written), ``X`` (the command ended, exit.json may not be
        written yet, and ``exit_record`` now holds it). ``D`` (the attempt is over and
        nothing of it runs) is not returned but sets ``over``. b"" at EOF: the shim is
        done with the attempt (a supervisor that said ``D`` is idle, any other shim
        exited); an EOF already waiting behind ``D`` is read in the same call, so that
        the shim's last words take one loop turn, not two. None when nothing whole has
        come."""
        try:
            data = os.read(self.status_fd, 4096)
        except BlockingIOError:
            return None
        if not data:
            return b""
        heard, said = self._heard + data, b""
        while heard:
            word = heard[:1]
            if word == b"X":
                record, newline, rest = heard[1:].partition(b"\n")
                if not newline:
                    break  # its rest is on its way
                self.exit_record = json.loads(record)
            else:
                rest = heard[1:]
            if word == b"D":
                self.over = True  # news with the EOF that follows it
            else:
                said += word
            heard = rest
        self._heard = heard
        if self.over and self._ended():
            return b""  # what it said before ``D`` is in ``exit_record`` or no longer news
        return said or None

    def _ended(self) -> bool:
        """Whether the EOF that follows ``D`` is already there (the shim closes its end
        right after saying it)."""
        try:
            return not os.read(self.status_fd, 1)
        except BlockingIOError:
            return False

    def release_barrier(self, word: bytes) -> None:
        if self.go_fd is None:
            return
        if self.every_cpu is not None:  # before the word: the command inherits them
            try:
                os.sched_setaffinity(self.popen.pid, self.every_cpu)
            except OSError:
                pass  # gone: nothing of it will run
            self.every_cpu = None
        try:
            os.write(self.go_fd, word)
        except OSError:
            pass
        os.close(self.go_fd)
        self.go_fd = None

    def confirm_end(self) -> None:
        """Tell a supervisor that the end it told (``X``) is journaled, durably: the caller
        knows it committed (LocalBackend.settle). The supervisor then writes exit.json
        without an fsync, of the file or of its directories. Once, and for supervisors
        alone (a shim we started has no pool socket, and fsyncs as ever); one gone or
        retired meanwhile fsyncs as without it."""
        if self.end_confirmed:
            return
        self.end_confirmed = True
        if isinstance(self.popen, Supervisor):
            try:
                self.popen.pool.send(END_JOURNALED, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
            except OSError:
                pass

    def death(self) -> str:
        """How the exited shim ended, for an attempt it left without an exit record: the
        signal or exit code where we are its parent (Popen); a supervisor's status went to
        the shim server."""
        code = self.popen.returncode
        if isinstance(self.popen, subprocess.Popen) and code:
            return f"supervisor died: {f'signal {-code}' if code < 0 else f'exit code {code}'}"
        return "supervisor died"

    def close(self) -> None:
        """Our ends of the attempt's pipes; a supervisor lives on (``Supervisor.retire``)."""
        self.release_barrier(b"")
        os.close(self.status_fd)


def credentials(uid: int | None) -> tuple[int, int, list[int]] | None:
    """(uid, gid, supplementary groups) the shim switches the command to, or None: ours."""
    if uid is None:
        return None
    user = account(uid)
    return uid, user.pw_gid, os.getgrouplist(user.pw_name, user.pw_gid)


@dataclass
class WarmShim:
    """A shim started ahead of need, waiting to be told its attempt directory."""

    handle: ShimHandle
    control_fd: int
    capacity: int = field(init=False)

    def __post_init__(self) -> None:
        """The control pipe's capacity, asked once, as the shim is started ahead of need:
        it is fixed when the pipe is made (64 KiB, or a page or two for a user over
        pipe-user-pages-soft), and a syscall fewer on the launch path (``carries``)."""
        try:
            self.capacity = fcntl.fcntl(self.control_fd, fcntl.F_GETPIPE_SZ)
        except OSError:
            self.capacity = 0  # nothing fits: spec.marshal

    def carries(self, attempt_dir: str | os.PathLike, spec: bytes) -> bool:
        """Whether ``take`` can bring the spec along: the whole message fits in the
        control pipe, so that its one write into that empty pipe cannot block."""
        return len(os.fsencode(attempt_dir)) + 1 + len(spec) <= self.capacity

    def take(self, attempt_dir: str | os.PathLike, spec: bytes = b"") -> ShimHandle | None:
        """Hand it its attempt, with its spec (marshal) if ``carries`` said it fits, else
        the shim reads spec.marshal; None if it is gone. Closing the pipe ends the
        message."""
        try:
            if self.handle.popen.poll() is None:
                os.write(self.control_fd, os.fsencode(attempt_dir) + b"\n" + spec)
                return self.handle
        except OSError:
            pass
        finally:
            os.close(self.control_fd)
        self.handle.popen.wait()
        self._let_go()
        return None

    def dismiss(self) -> None:
        """Closing its control pipe (and a supervisor's pool socket) tells it no attempt is
        coming: it exits."""
        os.close(self.control_fd)
        if isinstance(self.handle.popen, Supervisor):
            self.handle.popen.retire()
        try:
            self.handle.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.handle.popen.kill()
            self.handle.popen.wait()
        self._let_go()

    def _let_go(self) -> None:
        self.handle.close()
        if isinstance(self.handle.popen, Supervisor):
            self.handle.popen.close()


class ShimServer:
    """A fork server: one shim (``--server``) started once, that forks supervisors on
    request, each in a session of its own. A fork costs a fraction of a millisecond
    where a new interpreter costs several, and a supervisor serves many attempts.

    Requests go over a SOCK_SEQPACKET socketpair: one byte carrying the supervisor's end
    of its pool socket (the server closes its copy right after the fork), answered in
    order by the child's pid or minus an errno. A coordinator need not wait for the
    answer (``request``, then ``receive`` once the socket is readable): a fork and its
    child's setsid take about a millisecond. Its output goes to /dev/null, which its
    children keep while idle. Closing our end tells it to exit; its children stay."""

    def __init__(self, popen: subprocess.Popen, sock: socket.socket) -> None:
        self.popen = popen
        self.sock = sock
        # our end of the pool socket of each request not yet answered, oldest first
        self.pending: deque[socket.socket] = deque()

    @classmethod
    def start(cls, layout: RunLayout) -> ShimServer:
        """Start one for this run's attempts; raises OSError if it cannot start."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            popen = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, "-c", SHIM_BOOTSTRAP, "--server",
                 str(layout.attempts), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, cwd="/",
                env=shim_environment())
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(SERVER_REPLY_TIMEOUT_S)
        return cls(popen, ours)

    @property
    def alive(self) -> bool:
        """Whether it can still answer: not closed, not broken, still running."""
        return self.sock.fileno() != -1 and self.popen.poll() is None

    def prestart(self) -> WarmShim:
        """A warm shim: a supervisor forked by the server, already leading its own session,
        given its first attempt's pipes; raises OSError if the server is gone or refuses.
        (Any will do: with requests outstanding this is the oldest one's.)"""
        self.request()
        return self.receive().warm()

    def request(self) -> None:
        """Ask for a supervisor without waiting for it: the server's reply makes the socket
        readable, and ``receive`` then hands it out. Raises OSError if the server is gone."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if self.sock.fileno() == -1:
                raise BrokenPipeError(errno.EPIPE, "the shim server was closed")
            try:
                socket.send_fds(self.sock, [FORK_REQUEST], [theirs.fileno()],
                                socket.MSG_NOSIGNAL)
            except OSError:
                self._broken()
                raise
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pending.append(ours)

    def receive(self) -> Supervisor:
        """The supervisor of the oldest outstanding request, waiting for its reply if need
        be; raises OSError if the server refused it (a failed fork) or is gone."""
        pool = self.pending.popleft()
        try:
            try:
                reply = self.sock.recv(32)
                if not reply:
                    raise ConnectionResetError(errno.ECONNRESET, "the shim server exited")
            except OSError:
                self._broken()
                raise
            pid = int(reply)
            if pid < 0:
                raise OSError(-pid, f"the shim server could not fork: {os.strerror(-pid)}")
            # It waits on its pool socket, whose other end we hold: short of a kill and
            # the pid's reuse in between, the pid is still its own when we open the pidfd.
            return Supervisor(pid, pool)
        except OSError:
            pool.close()
            raise

    def _broken(self) -> None:
        """Out of step (a reply lost or late would answer the wrong request): no more
        requests, and the outstanding ones are dropped (their supervisors exit with our
        ends)."""
        self.sock.close()
        while self.pending:
            self.pending.popleft().close()

    def close(self, timeout: float = 5) -> None:
        """Tell it to exit (closing our end) and wait; killed if it does not. Only the
        server is ever signalled: its children are supervisors, which exit once their
        pool socket closes and they are idle."""
        self._broken()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()  # its pid alone, never its group
            self.popen.wait()


def prestart(layout: RunLayout, server: ShimServer | None = None) -> WarmShim:
    """Start a shim before any attempt needs it: Python's start-up (most of a launch's
    latency) then happens while the coordinator waits, not between decision and GO.

    With a live ``server`` it is forked there, with no start-up at all, and raises OSError
    if that fails. A server found closed, exited or out of step is no longer ``alive``,
    so later calls start shims with Popen; one that only refused (its fork failed) is
    asked again."""
    if server is not None and server.alive:
        return server.prestart()
    control_read, control_write = os.pipe()
    try:
        handle = _start_shim(["--warm", str(layout.attempts), str(control_read)], None,
                             "/", keep=(control_read,))
    except OSError:
        os.close(control_write)
        raise
    finally:
        os.close(control_read)
    return WarmShim(handle=handle, control_fd=control_write)


def _start_shim(leading: list[str], log: str | os.PathLike | None, cwd: str | os.PathLike,
                keep: tuple[int, ...] = ()) -> ShimHandle:
    """A shim in a new session (its own process group) with its GO and status pipes; its
    output goes to ``log`` (None: nowhere, until it knows its attempt)."""
    go_read, go_write = os.pipe()
    status_read, status_write = os.pipe()
    try:
        with open(os.devnull if log is None else open_log(log), "ab") as shim_log:
            popen = subprocess.Popen(
                [sys.executable, *PYTHON_FLAGS, "-c", SHIM_BOOTSTRAP, *leading,
                 str(go_read), str(status_write)],
                pass_fds=(*keep, go_read, status_write), start_new_session=True,
                stdin=subprocess.DEVNULL, stdout=shim_log, stderr=subprocess.STDOUT,
                cwd=cwd, env=shim_environment())
    except OSError:
        for fd in (go_write, status_read):
            os.close(fd)
        raise
    finally:
        os.close(go_read)
        os.close(status_write)
    os.set_blocking(status_read, False)
    return ShimHandle(popen=popen, go_fd=go_write, status_fd=status_read)


def shim_environment() -> dict[str, str]:
    """A shim's whole environment: ``PATH``, and in a power-loss test its ledger, in which
    the shim records its directory fsyncs beside ours (shim_command.fsync_directory)."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    if ledger := os.environ.get(LEDGER_ENV):
        env[LEDGER_ENV] = ledger
    return env


def spec_of(layout: RunLayout, effect: SpawnAttempt, env: dict[str, str],
            go_coming: bool = False) -> bytes:
    """What the shim runs (marshal). ``env`` is the environment the command gets (secrets
    revealed); ``go_coming``: the shim is told its attempt before the commit that journals
    it with its GO, which then comes on its pipe (``tell``)."""
    return marshal.dumps({  # the shim makes the log's directory (log_dir_mode) and
        # writes attempt.json (its bytes here), off our loop
        "argv": list(effect.argv) if effect.argv else None, "command": effect.command,
        "cwd": effect.cwd or layout.root_str, "env": env,
        "log": layout.log_str(effect.job_id, effect.attempt_id),
        "log_dir_mode": LOG_DIR_MODE, "attempt_json": description(layout, effect),
        "user": credentials(effect.uid), "barrier_timeout_s": BARRIER_TIMEOUT_S,
        "end_wait_s": END_WAIT_S, **({"go_coming": True} if go_coming else {})})


def tell(layout: RunLayout, effect: SpawnAttempt, env: dict[str, str],
         warm: WarmShim) -> ShimHandle | None:
    """Tell ``warm`` its attempt ahead of the commit that journals the launch, its pid and
    its GO, when the spec fits its control pipe: while that commit is on its way the shim
    makes the attempt's directories, writes READY, opens the command's log and enters
    its cwd, so that GO, sent once the commit is durable, is followed by the spawn alone.
    Its handle; None when the spec does not fit (``warm`` is untouched: ``spawn`` after
    the commit, with spec.marshal). Raises OSError if ``warm`` is gone.

    Safe if that commit never comes: a coordinator that carries on (the commit failed)
    tells the shim ABORT on its pipe (``LocalBackend.roll_back``); one that died closes
    the pipe with no word, and the shim takes its READY back and leaves at once
    (shim.wait_for_go), so the next coordinator releases the attempt if the commit was
    journaled, or launches it anew if not: nothing runs twice."""
    attempt_dir = layout.attempt_dir_str(effect.job_id, effect.attempt_id)
    spec = spec_of(layout, effect, env, go_coming=True)
    if not warm.carries(attempt_dir, spec):
        return None
    every_cpu = keep_off_our_cpu(warm.handle.popen.pid)
    if (handle := warm.take(attempt_dir, spec)) is None:
        raise OSError("the shim started ahead of need has exited")
    handle.every_cpu = every_cpu
    return handle


_probes: list = []  # once needed: libc's sched_getcpu, and /proc/loadavg open (each or None)


def keep_off_our_cpu(pid: int) -> frozenset[int] | None:
    """Let the shim ``pid``, about to be told its attempt ahead of our commit, run
    anywhere but on the CPU we run on until that commit is done, where nothing else is
    runnable to keep the other CPUs busy; the CPUs it had, to give back then, before its
    GO (or ABORT: ``ShimHandle.release_barrier``), so that its command inherits them;
    None if none were taken.

    A pipe's write is a sync wakeup: the kernel queues the reader on the writer's CPU,
    counting on the writer to sleep, and our commit's fsync was still ~0.25 ms of work
    away. So the shim prepared only once we slept in that fsync, on our CPU, while the
    other idled, and our wake-up from the fsync's first I/O waited for it: inside 22-27 %
    of the commits' fsyncs, p90 0.41-0.46 ms (bench/timeline.py, the interleaved latency
    scenario). Where other work keeps the other CPUs busy, the one we sleep on in the
    fsync is the shim's best (kept from it, 1,000 trivial jobs at 2 slots took 15-30 %
    longer), and nothing is changed: the kernel's count of runnable tasks now
    (/proc/loadavg's fourth field, us included) must leave a CPU idle beside ours. Nor
    for a shim with one CPU, or where the kernel does not say which is ours."""
    getcpu = _bound()[0]
    if getcpu is None:
        return None
    try:
        had = frozenset(os.sched_getaffinity(pid))
        if runnable_now() >= len(had) or (cpu := getcpu()) not in had:
            return None
        os.sched_setaffinity(pid, had - {cpu})
    except OSError:
        return None  # gone: it is let go
    return had


def runnable_now() -> int:
    """The tasks runnable on the machine now, as the kernel counts them (we are one:
    /proc/loadavg's fourth field, one pread of a kept fd, ~1.6 us); where it cannot be
    read, one more than there are CPUs: busy, so that neither the keep-off nor the yield
    after GO, which need an idle CPU, is made on a guess."""
    loadavg = _bound()[1]
    if loadavg is not None:
        try:
            return int(os.pread(loadavg, 128, 0).split()[3].partition(b"/")[0])
        except (OSError, ValueError, IndexError):
            pass
    return (os.cpu_count() or 1) + 1


def _bound() -> list:
    """libc's sched_getcpu and /proc/loadavg open (each pread at 0 reads it anew), each
    None where it cannot be had; made once."""
    if not _probes:
        try:
            loadavg = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            loadavg = None
        _probes.extend((_sched_getcpu(), loadavg))
    return _probes


def _sched_getcpu():
    """libc's sched_getcpu (the os module has none), bound once; None where it cannot be.
    The coordinator has ctypes loaded already (daemon.py)."""
    try:
        import ctypes

        getcpu = ctypes.CDLL(None).sched_getcpu
        getcpu.restype, getcpu.argtypes = ctypes.c_int, ()
        return getcpu
    except (ImportError, OSError, AttributeError):
        return None


def spawn(layout: RunLayout, effect: SpawnAttempt, env: dict[str, str],
          warm: WarmShim | None = None) -> ShimHandle:
    """Give the attempt to a shim: ``warm``, one started ahead of need (whose pid the
    caller may have journaled already), else a new one. Raises OSError if that shim
    cannot be started, or ``warm`` is gone.

    ``env`` is the environment the command gets (secrets revealed). It goes only to
    the shim: through a warm shim's control pipe when it fits, else into spec.marshal
    (0600), which the shim removes once it has read it. A warm shim that carries its
    spec makes the attempt's directory itself (``attempts/<job_id>/`` too), off our
    loop, as it makes its log's and writes attempt.json; for spec.marshal, or a shim
    started for the attempt (its cwd and shim.log are there), it is made here."""
    attempt_dir = layout.attempt_dir(effect.job_id, effect.attempt_id)
    spec = spec_of(layout, effect, env)
    spec_path = attempt_dir / "spec.marshal"
    carried = warm is not None and warm.carries(attempt_dir, spec)
    if not carried:
        own_directories(str(layout.attempts), effect.job_id, effect.attempt_id)
        write_spec(spec_path, spec)
    try:
        if warm is None:
            handle = _start_shim([str(attempt_dir)], attempt_dir / "shim.log", attempt_dir)
        elif (handle := warm.take(attempt_dir, spec if carried else b"")) is None:
            raise OSError("the shim started ahead of need has exited")
    except OSError:
        if not carried:
            unlink(spec_path)  # no shim will read it: do not leave the secrets behind
        raise
    return handle


def write_spec(path: Path, spec: bytes) -> None:
    """What the shim runs (marshal: it loads without imports), for the shim only (0600).

    The shim runs on this same interpreter (``sys.executable``), so the marshal format
    matches. Neither fsync nor rename: the shim is started only after the write and
    unlinks the file at once, a machine crash ends the shim as well, and raw secrets had
    better not be forced onto the disk. It is created afresh (O_EXCL) with mode 0600."""
    unlink(path)  # left by a coordinator that crashed before starting this attempt's shim
    create(path, spec, mode=0o600)
