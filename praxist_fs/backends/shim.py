"""The launch barrier and attempt supervisor (R-RUN-2). Standard library only.

The shim of both backends that keep attempts in the run directory: the local backend
starts it through its launcher (the pipes, warm shims and supervisors below are its),
and the Slurm-mode shim (slurm_shim.py) reads, runs and records with its functions.

Run as ``python -S shim.py ATTEMPT_DIR GO_FD STATUS_FD`` in a new session, so
a peer's sitecustomize cannot run here (the launcher imports this file with
``python -S -c`` and calls ``main()`` instead, so that its bytecode is cached),
or ahead of need as ``--warm ATTEMPTS_DIR CONTROL_FD GO_FD STATUS_FD``: started
and waiting before there is an attempt, it is told its attempt directory (under
ATTEMPTS_DIR, which also shows in ``ps`` whose shim it is) on CONTROL_FD,
with its spec when that fits the pipe.
It writes READY (its own identity), waits until the coordinator gives GO on its
pipe (telling it READY there only when GO is not waiting already), or writes
the GO file (the intent, pid, allocation and the GO decision
are journaled by then), runs the command with the
submitted environment, and records the exit durably in exit.json, which
survives a coordinator crash. While a full (or failing) disk keeps READY or
exit.json from being written, the shim holds them in memory and tries again
until they are written, never giving up on exit.json (nothing else holds the
exit for a later coordinator); a coordinator still connected is told the exit
on the status pipe meanwhile. If the coordinator dies while we wait, we poll
for GO or ABORT written by the next one, for at most the barrier timeout;
giving up is safe because nothing ran, and the next coordinator then releases
the attempt without consuming it. As a child subreaper we also wait for
orphaned descendants, so the attempt counts as running until its whole tree
is gone.

As ``--server ATTEMPTS_DIR SOCK_FD`` it is a fork server, started once by the
coordinator: each request on SOCK_FD (a SOCK_SEQPACKET socket) carries one fd,
the supervisor's end of a SOCK_SEQPACKET socketpair (its *pool socket*), and the
server forks a child that becomes a supervisor in a session of its own, and
replies with its pid once the child leads that session (pid, process group and
session id are one). A supervisor serves attempt after attempt: each arrives on
its pool socket as the three fds a ``--warm`` shim gets (control, GO, status),
and it serves that attempt as a warm shim would; once the attempt is over
(exit.json durable, or ABORT, or the barrier given up) and its process group
holds only itself (it is the subreaper: it waited for every descendant), it
says ``D`` on the attempt's status pipe, closes it, and waits on its pool
socket again, idle. An idle supervisor exits on SIGTERM, SIGINT or
SIGHUP, and when the pool socket closes (the coordinator closed it, or is
gone): so none outlives its coordinator by more than the attempt it serves.
The server exits when the coordinator closes its end; its children carry on.

Start-up time is on every job's submit-to-start path, so this file imports only
modules built into the interpreter (``posix``, ``_signal``, ``errno``, ``time``,
``marshal``, ``sys``): ``os``, ``signal`` (which pulls in ``enum``), ``json``
(``re``), ``subprocess`` and ``ctypes`` each cost milliseconds. Hence the spec
comes in marshal (on a warm shim's control pipe, or as spec.marshal), READY
and exit.json are written by a small JSON writer,
and the command is started by posix_spawn (no Python runs in its child), or, to
run it as another uid (R-SEC-3), by a fork that switches uid and execs. Only the
server imports an extension module, ``_socket``, once for all its children.
"""

import _signal
import errno
import gc
import marshal
import posix
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.2
DEFAULT_PATH = "/bin:/usr/bin"  # os.defpath: what subprocess searches when env has no PATH
CAUGHT = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# Python ignores these at start-up; an ignored disposition survives exec.
RESTORED = CAUGHT + (_signal.SIGPIPE, _signal.SIGXFSZ)
REQUEST_FDS = 1  # a fork server's request: the pool socket of the supervisor to fork
ATTEMPT_FDS = 3  # an attempt on a pool socket: the control, GO and status fds of a --warm shim
INT_SIZE = 4  # of a C int: an fd in SCM_RIGHTS
# Errors of a full disk or quota, or a failing disk: READY and exit.json are written again
# until they are written, since the shim holds what they say in its memory alone.
RETRIED = (errno.ENOSPC, errno.EDQUOT, errno.EIO)
RETRY_FIRST_S = 0.1  # the first pause between tries; it doubles ...
RETRY_MAX_S = 5.0  # ... up to this
_written = 0  # files this process began to write: their temp names' serial number


def to_json(document):
    """The few JSON documents we write: flat objects of str, int, float and None."""
    return ("{%s}" % ", ".join(
        "%s: %s" % (_json_str(key), _json_value(value)) for key, value in document.items())
    ).encode("ascii")


def _json_value(value):
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return _json_str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"  # as json.dumps writes them; json.loads reads them back
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if isinstance(value, int):
        return int.__repr__(value)
    raise TypeError("cannot write %r as JSON" % (value,))


def _json_str(text):
    """Like json.dumps: ASCII only, so a lone surrogate (surrogateescape) is written too."""
    out = []
    for char in text:
        code = ord(char)
        if char == '"' or char == "\\":
            out.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 | code >> 10, 0xDC00 | code & 0x3FF))
        else:
            out.append("\\u%04x" % code)
    return '"%s"' % "".join(out)


def exists(path):
    try:
        posix.stat(path)
    except OSError:
        return False
    return True


def read_small(path):
    return read_all(posix.open(path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC))


def read_all(fd):
    """Everything until EOF; ``fd`` is closed."""
    try:
        chunks = []
        while True:
            chunk = posix.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        posix.close(fd)


def temp_name(path):
    """The hidden name ``path`` is written under before its rename: ``.NAME.<pid>.<n>.tmp``
    beside it, the form of fsio.temp_name (PROTOCOL.md section 1). Paths here are absolute."""
    global _written
    _written += 1
    directory, _, name = path.rpartition("/")
    return "%s/.%s.%d.%d.tmp" % (directory, name, posix.getpid(), _written)


def write_file(path, data, durable):
    """``data`` as ``path``, atomically; with ``durable``, fsynced, and its directory too.
    A try that fails leaves no temp file behind."""
    tmp = temp_name(path)
    fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view):]
            if durable:
                posix.fsync(fd)
        finally:
            posix.close(fd)
        posix.replace(tmp, path)
    except BaseException:
        try:
            posix.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        dfd = posix.open(path[:path.rindex("/")] or "/", posix.O_RDONLY | posix.O_DIRECTORY)
        try:
            posix.fsync(dfd)
        finally:
            posix.close(dfd)


def write_until_written(path, data, durable):
    """write_file, tried again while the disk is full (or failing): what ``data`` says may
    exist nowhere else. A generator: after each such failure it yields the number of
    failed tries so far, then pauses (RETRY_FIRST_S, doubling up to RETRY_MAX_S); the
    caller may give up by leaving the loop. Any other error propagates. Each try is a new
    temp file, so no fsync is ever repeated on pages a failed one may have dropped."""
    pause, failures = RETRY_FIRST_S, 0
    while True:
        try:
            write_file(path, data, durable)
        except OSError as exc:
            if exc.errno not in RETRIED:
                raise
            failures += 1
            if failures == 1:
                first = exc
            yield failures
            time.sleep(pause)
            pause = min(2 * pause, RETRY_MAX_S)
        else:
            if failures:  # shim.log: why the file came late (the disk has room again)
                tell(2, b"%s written at try %d (the first failed: %s)\n" % (
                    path.encode("utf-8", "surrogateescape"), failures + 1, str(first).encode()))
            return


def tell(fd, message):
    """Write ``message`` to a pipe or log that may be gone: the coordinator may have died
    (the next one reads the files), the disk of shim.log may be full."""
    try:
        posix.write(fd, message)
    except OSError:
        pass


def own_start_time():
    data = read_small("/proc/self/stat")
    return int(data[data.rfind(b")") + 2:].split()[19])


def boot_id():
    try:
        return read_small("/proc/sys/kernel/random/boot_id").decode().strip()
    except (OSError, UnicodeDecodeError):
        return "unknown"


def become_subreaper(prctl=None):
    """PR_SET_CHILD_SUBREAPER, through ``prctl`` as bind_prctl() returns it (bound now
    if not given: a fork server binds it once for all its children)."""
    if prctl is None:
        prctl = bind_prctl()
    return prctl is not None and prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def bind_prctl():
    """libc's prctl through _ctypes, the C core of ctypes; None if it cannot be bound.

    ``import ctypes`` costs about 4 ms (struct, ctypes' Python layer); binding one
    libc function needs only what ctypes.CDLL(None).prctl builds internally."""
    try:
        import _ctypes

        class c_int(_ctypes._SimpleCData):
            _type_ = "i"

        class c_ulong(_ctypes._SimpleCData):
            _type_ = "L"

        class Prctl(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = c_int
            _argtypes_ = (c_int, c_ulong, c_ulong, c_ulong, c_ulong)

        return Prctl(_ctypes.dlsym(_ctypes.dlopen(None, 0x2), "prctl"))  # RTLD_NOW
    except (ImportError, AttributeError, TypeError, OSError):
        try:
            import ctypes  # the documented way, should the private layer ever change

            return ctypes.CDLL(None).prctl
        except (ImportError, OSError, AttributeError):
            return None


def given_go(go_fd):
    """b"G" if the coordinator gave GO on the pipe already (a warm shim's GO is journaled
    with its attempt, and sent right after it), else None: nothing there yet."""
    posix.set_blocking(go_fd, False)
    try:
        return posix.read(go_fd, 1) or None
    except OSError:  # BlockingIOError: not yet; anything else, wait_for_go finds again
        return None
    finally:
        posix.set_blocking(go_fd, True)


def wait_for_go(attempt_dir, go_fd, timeout, word=None):
    """True once GO is given (``word``: what the pipe gave already); False on ABORT or
    when no coordinator gave GO in time."""
    go_path, abort_path = attempt_dir + "/GO", attempt_dir + "/ABORT"
    if word is None:
        try:
            word = posix.read(go_fd, 1)
        except OSError:
            word = b""
    posix.close(go_fd)
    if word == b"G":  # the coordinator journaled GO first; it writes the GO file next
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the coordinator went away: the next one decides
        if exists(abort_path):
            return False
        if exists(go_path):
            return True
        time.sleep(POLL_SECONDS)
    return False  # nothing ran: a later coordinator releases the attempt unconsumed


def run(spec, status_fd, own_group=False, on_start=None):
    """The command's exit record (the body of exit.json). ``own_group``: the command leads
    a process group of its own, which the Slurm-mode shim signals; ``on_start(pid)`` is
    told its pid once it runs."""
    argv = spec["argv"] or ["/bin/sh", "-c", spec["command"]]
    started = time.time()
    try:
        pid = start(argv, spec["env"], spec["cwd"], spec["log"], status_fd, spec.get("user"),
                    own_group)
    except OSError as exc:  # the log
        failure = (exc.errno, str(exc))
    except CouldNotStart as exc:  # cwd, exec, a bad argv or env
        failure = exc.args
    else:
        failure = None
    if failure is not None:
        return {"exit_code": 127 if failure[0] == errno.ENOENT else 126, "signal": None,
                "started_at": started, "ended_at": time.time(),
                "error": "could not start the command: %s" % failure[1]}
    if on_start is not None:
        on_start(pid)
    status = posix.waitpid(pid, 0)[1]  # retried on EINTR (PEP 475): our handlers return
    reap_orphans()
    if posix.WIFSIGNALED(status):
        signum = posix.WTERMSIG(status)
        return {"exit_code": 128 + signum, "signal": signum, "started_at": started,
                "ended_at": time.time(), "error": None}
    return {"exit_code": posix.WEXITSTATUS(status), "signal": None, "started_at": started,
            "ended_at": time.time(), "error": None}


class CouldNotStart(Exception):
    """(errno or 0, message) of a command that could not be started: cwd, exec, a bad
    argv or env."""


def start(argv, env, cwd, log_path, status_fd, user=None, own_group=False):
    """The command's pid, started by posix_spawn: glibc's runs the child in our memory
    (CLONE_VFORK) until its exec and reports an exec failure's errno, so neither our
    pages are copied nor any Python runs in the child. ``user``: (uid, gid, groups) to
    run it as, another uid's (R-SEC-3): see start_as. ``own_group``: in a new process
    group (the local shim leads its own session, whose group the command shares).

    Its dispositions are reset and its signal mask restored before the exec: no signal
    reaches our handlers in the child. posix_spawn has no chdir (Python 3.11), so we
    change to the command's cwd first: the shim uses absolute paths only."""
    log = open_log(log_path, user)
    try:
        if user is not None:
            return start_as(user, argv, env, cwd, log, status_fd, own_group)
        try:
            posix.chdir(cwd)
        except OSError as exc:
            raise CouldNotStart(exc.errno, str(exc)) from None
        actions = [(posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                   (posix.POSIX_SPAWN_DUP2, log, 1), (posix.POSIX_SPAWN_DUP2, log, 2),
                   (posix.POSIX_SPAWN_CLOSE, status_fd)]  # its EOF: the shim exited
        mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, ())
        group = {"setpgroup": 0} if own_group else {}  # None is not "unset" to posix_spawn
        return each_candidate(argv[0], env, lambda candidate: posix.posix_spawn(
            candidate, argv, env, file_actions=actions, setsigmask=mask, setsigdef=RESTORED,
            **group))
    finally:
        posix.close(log)


def open_log(log_path, user=None):
    """The command's log, for appending: never through a symlink, and only a regular file
    with one link that we own (or, once handed over, ``user`` owns), else CouldNotStart:
    the attempt is refused and says why, nothing is written (R-SEC-4). For a command run
    as another uid the log becomes that uid's file: whatever its command prints is that
    uid's to have written, never a file of ours (root's) holding a peer's bytes, which
    could pass for ours wherever a file's owner is its author (the spool). Its directory
    stays ours, so the peer can neither rename nor replace it."""
    try:
        log = posix.open(log_path, posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND
                         | posix.O_NOFOLLOW | posix.O_NONBLOCK | posix.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO no one reads
            raise CouldNotStart(exc.errno, "the log %s is %s: refusing to write through it"
                                % (log_path, "a symbolic link" if exc.errno == errno.ELOOP
                                   else "not a regular file")) from None
        raise
    owners = (posix.geteuid(),) if user is None else (posix.geteuid(), user[0])
    info = posix.fstat(log)
    problem = None
    if (info.st_mode & 0o170000) != 0o100000:
        problem = "is not a regular file"
    elif info.st_nlink != 1:
        problem = "has %d hard links" % info.st_nlink
    elif info.st_uid not in owners:
        problem = "is owned by uid %d" % info.st_uid
    if problem is None and user is not None and info.st_uid != user[0] and \
            posix.geteuid() == 0:  # else the switch to the user fails next, and says so
        try:
            posix.fchown(log, user[0], -1)
        except OSError as exc:
            problem = "cannot be given to uid %d (%s)" % (user[0], exc)
    if problem is not None:
        posix.close(log)
        raise CouldNotStart(0, "the log %s %s: refusing to write through it" % (log_path,
                                                                                problem))
    posix.set_blocking(log, True)  # O_NONBLOCK was for the open alone (a FIFO's)
    return log


def each_candidate(executable, env, launch):
    """``launch(path)`` for each path the command's own PATH gives ``executable`` (as
    subprocess and os.execvpe search) until one succeeds; else CouldNotStart with the
    first error other than "not here", as subprocess reports it."""
    if "/" in executable:
        candidates = [executable]
    else:
        candidates = [(directory + "/" if directory else "") + executable
                      for directory in (env.get("PATH") or DEFAULT_PATH).split(":")]
    saved = last = None
    for candidate in candidates:
        try:
            return launch(candidate)
        except OSError as exc:
            last = exc
            if saved is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                saved = exc
        except (ValueError, TypeError) as exc:  # a bad argv or env: NUL, '=' in a name
            raise CouldNotStart(0, "%s: %s" % (type(exc).__name__, exc)) from None
    code = (saved or last).errno
    raise CouldNotStart(code, "[Errno %d] %s: %r" % (code, posix.strerror(code), executable))


def start_as(user, argv, env, cwd, log, status_fd, own_group=False):
    """The command's pid, run as ``user`` = (uid, gid, groups). posix_spawn cannot change
    uids, so the child is forked: it takes the supplementary groups, the gid, then the
    uid (each step needs the rights the next gives up), changes to ``cwd`` as that user,
    and execs. We keep our own uid, to write exit.json into the coordinator's attempt
    directory. Why the child could not start comes back on a close-on-exec pipe whose
    EOF means the exec succeeded, as subprocess does it."""
    uid, gid, groups = user
    report_read, report_write = posix.pipe2(posix.O_CLOEXEC)
    pid = posix.fork()
    if pid == 0:  # never back into the shim, whatever happens
        failure = b"0:the child failed before its exec"
        try:
            posix.close(report_read)
            for signum in RESTORED:
                _signal.signal(signum, _signal.SIG_DFL)
            null = posix.open("/dev/null", posix.O_RDONLY | posix.O_CLOEXEC)
            posix.dup2(null, 0)
            posix.dup2(log, 1)
            posix.dup2(log, 2)
            posix.close(status_fd)  # its EOF: the shim exited
            if own_group:
                posix.setpgid(0, 0)
            try:
                posix.setgroups(groups)
                posix.setgid(gid)
                posix.setuid(uid)
            except OSError as exc:
                raise CouldNotStart(exc.errno, "could not switch to uid %d: %s"
                                    % (uid, exc)) from None
            try:
                posix.chdir(cwd)
            except OSError as exc:
                raise CouldNotStart(exc.errno, str(exc)) from None
            each_candidate(argv[0], env, lambda candidate: posix.execve(candidate, argv, env))
        except CouldNotStart as exc:
            failure = ("%d:%s" % exc.args).encode("utf-8", "surrogateescape")
        except OSError as exc:
            failure = ("%d:%s" % (exc.errno or 0, exc)).encode("utf-8", "surrogateescape")
        finally:
            tell(report_write, failure)
            posix._exit(127)
    posix.close(report_write)
    report = read_all(report_read)
    if not report:
        return pid
    posix.waitpid(pid, 0)
    code, _, message = report.partition(b":")
    raise CouldNotStart(int(code), message.decode("utf-8", "surrogateescape"))


def reap_orphans():
    while True:
        try:
            posix.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def main():
    if sys.argv[1] == "--server":
        return serve_forks(sys.argv[2], int(sys.argv[3]))
    catch_signals()
    if sys.argv[1] == "--warm":
        become_subreaper()
        serve_warm(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                   own_identity())
        return 0
    return serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))


def catch_signals():
    for signum in CAUGHT:
        # The group's signals reach the command directly; we stay to record its exit.
        _signal.signal(signum, lambda *_: None)


def serve_forks(attempts, sock_fd):
    """The fork server: one supervisor forked per request, until the coordinator closes
    its end. The reply is the child's pid, or minus an errno (the fork failed, or the
    request was not one byte carrying exactly REQUEST_FDS fds)."""
    import _socket  # an extension module: the server pays for it once, its children never

    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)  # the kernel reaps our children
    prctl = bind_prctl()  # _ctypes loaded and prctl bound once, inherited by every child
    gc.freeze()  # a child's collections then skip our objects: their pages stay shared
    sock = _socket.socket(fileno=sock_fd)
    while True:
        data, fds, well_formed = receive_fds(sock, REQUEST_FDS)
        if not data and not fds:
            return 0  # EOF: the coordinator closed its end or is gone
        reply = fork_supervisor(attempts, sock, fds[0], prctl) if well_formed else -errno.EINVAL
        for fd in fds:  # at once: the pool socket's EOF must mean that its supervisor left
            posix.close(fd)
        try:
            sock.send(b"%d" % reply)
        except OSError:
            pass  # the coordinator is gone: the next recvmsg reads EOF


def receive_fds(sock, count):
    """(data, every fd the message brought, whether it was one byte carrying exactly
    ``count`` fds); (b"", [], False) at EOF. The caller closes the fds, well-formed or
    not."""
    import _socket

    space = _socket.CMSG_SPACE(INT_SIZE * (count + 1))  # one more shows too many
    data, ancillary, flags, _ = sock.recvmsg(1, space, _socket.MSG_CMSG_CLOEXEC)
    fds = []
    for level, kind, payload in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += memoryview(payload[:len(payload) - len(payload) % INT_SIZE]).cast("i")
    truncated = flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC)
    return data, fds, len(data) == 1 and len(fds) == count and not truncated


def fork_supervisor(attempts, sock, pool_fd, prctl):
    """The pid of a child that is now a supervisor on ``pool_fd``, or minus the errno of
    what failed. As with Popen's start_new_session, the pid is not handed out before
    the child leads its own session: the coordinator may journal it as a group leader."""
    import _socket

    try:
        settled_read, settled_write = posix.pipe2(posix.O_CLOEXEC)
    except OSError as exc:
        return -exc.errno
    try:
        pid = posix.fork()
    except OSError as exc:
        pid = -exc.errno
    if pid == 0:
        code = 1
        try:  # never back into the server's loop, whatever happens
            sock.close()
            posix.close(settled_read)
            posix.setsid()  # a session and process group of our own
            _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)  # we wait for our commands
            posix.close(settled_write)  # the server may now hand out our pid
            # cwd / and output to /dev/null are the server's own, as a warm shim's would be
            code = supervise(attempts, _socket.socket(fileno=pool_fd), prctl)
        except BaseException:
            sys.excepthook(*sys.exc_info())  # into shim.log once the attempt is known
        finally:
            posix._exit(code)
    posix.close(settled_write)
    posix.read(settled_read, 1)  # EOF: the child has settled (or died: its pidfd tells)
    posix.close(settled_read)
    return pid


def supervise(attempts, pool, prctl):
    """A supervisor: the subreaper, its identity worked out, once for all its attempts;
    then each attempt the pool socket brings, served as a warm shim serves one. Between
    attempts it is idle: its cwd /, its output /dev/null, and SIGTERM, SIGINT and SIGHUP
    end it. It returns (exits) when the pool socket closes, or brings something else."""
    become_subreaper(prctl)
    identity = own_identity()
    null = posix.dup(1)  # /dev/null, as the server's output: ours again between attempts
    while True:
        _, fds, well_formed = receive_fds(pool, ATTEMPT_FDS)
        if not well_formed:
            for fd in fds:
                posix.close(fd)
            return 0
        catch_signals()
        if not serve_warm(attempts, *fds, identity=identity):
            return 0  # told no attempt (dismissed), or one outside the run's attempts
        for signum in CAUGHT:  # idle: nothing of an attempt is left to record
            _signal.signal(signum, _signal.SIG_DFL)
        posix.chdir("/")
        posix.dup2(null, 1)
        posix.dup2(null, 2)


def serve_warm(attempts, control_fd, go_fd, status_fd, identity):
    """A warm shim: the subreaper already, and the rest of its start-up done (its
    ``identity`` worked out), while it waits for its attempt, so that none of it is on
    the launch path. Every fd it is given is closed when it returns; it returns whether
    it was told an attempt."""
    attempt_dir, spec = wait_for_attempt(attempts, control_fd)
    if attempt_dir is None:  # the coordinator went away before it needed us
        posix.close(go_fd)
        posix.close(status_fd)
        return False
    serve(attempt_dir, go_fd, status_fd, identity, spec)
    return True


def wait_for_attempt(attempts, control_fd):
    """A warm shim, started ahead of need: block until the coordinator names our attempt
    and closes the pipe, then become that attempt's shim as if started for it. The
    message is the attempt's directory under ``attempts`` (one line), then its spec in
    marshal, or nothing when the spec did not fit the pipe and waits in spec.marshal.
    (None, None) when the pipe closes first, or names a directory elsewhere. Python
    start-up is then off the launch path."""
    line, newline, spec = read_all(control_fd).partition(b"\n")
    attempt_dir = line.decode("utf-8", "surrogateescape")
    if not newline or not attempt_dir.startswith(attempts + "/"):
        return None, None
    posix.chdir(attempt_dir)
    log = posix.open(attempt_dir + "/shim.log", posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND
                     | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o644)
    posix.dup2(log, 1)
    posix.dup2(log, 2)
    posix.close(log)
    return attempt_dir, spec or None


def own_identity():
    """What READY says of us: how a later coordinator recognises this process."""
    return {"pid": posix.getpid(), "start_time": own_start_time(), "boot_id": boot_id()}


def serve(attempt_dir, go_fd, status_fd, identity=None, spec=None):
    """Run the attempt in ``attempt_dir``. ``identity``: a warm shim's, worked out while
    it waited, as the subreaper already; ``spec``: its spec as the control pipe brought
    it (marshal), else it is read from spec.marshal. Both pipes are closed when it
    returns, the status pipe after ``D``: the attempt is over, exit.json (if it ran) is
    written, and nothing of it runs. A supervisor lives on; without ``D`` before the
    EOF, the shim died."""
    try:
        serve_attempt(attempt_dir, go_fd, status_fd, identity, spec)
        tell(status_fd, b"D")  # over, and nothing of it runs (we waited for every descendant)
    finally:
        posix.close(status_fd)
    return 0


def serve_attempt(attempt_dir, go_fd, status_fd, identity, spec):
    """serve's attempt; every way it returns (an error ends the shim) closes ``go_fd``."""
    spec_path = attempt_dir + "/spec.marshal"
    if exists(attempt_dir + "/ABORT"):
        posix.close(go_fd)
        if spec is None:
            try:
                posix.unlink(spec_path)  # it may hold raw secrets
            except OSError:
                pass
        return
    if spec is None:
        spec = read_small(spec_path)
        posix.unlink(spec_path)  # it may hold raw secrets
    spec = marshal.loads(spec)
    ready = dict(identity or own_identity(), at=time.time())
    for _ in write_until_written(attempt_dir + "/READY", to_json(ready), durable=False):
        if exists(attempt_dir + "/ABORT"):
            posix.close(go_fd)
            return  # nothing ran: a cancel or a stop need not wait for disk space
    word = given_go(go_fd)
    if word is None:  # else the coordinator decided GO already: READY news nobody
        tell(status_fd, b"R")
    if identity is None:
        # Only the command's descendants need us as their subreaper: setting it here,
        # while the coordinator journals before GO, keeps it off the path to READY.
        become_subreaper()
    if not wait_for_go(attempt_dir, go_fd, spec["barrier_timeout_s"], word):  # closes go_fd
        return
    result = to_json(run(spec, status_fd))
    # Until exit.json is durable the exit exists only here: no giving up, whatever it
    # takes (a later coordinator reads nothing else, and cannot tell us it journaled it).
    for failures in write_until_written(attempt_dir + "/exit.json", result, durable=True):
        if failures == 1:  # a coordinator still connected journals it, and acts on it
            tell(status_fd, b"X" + result + b"\n")


if __name__ == "__main__":
    sys.exit(main())
