"""The launch barrier and attempt supervisor (R-RUN-2). Standard library only.

Run as ``python -S shim.py ATTEMPT_DIR GO_FD STATUS_FD`` in a new session, so
a peer's sitecustomize cannot run here (the launcher imports this file with
``python -S -c`` and calls ``main()`` instead, so that its bytecode is cached),
or ahead of need as ``--warm ATTEMPTS_DIR CONTROL_FD GO_FD STATUS_FD``: started
and waiting before there is an attempt, it is told its attempt directory (under
ATTEMPTS_DIR, which also shows in ``ps`` whose shim it is) on CONTROL_FD.
It writes READY (its own identity), waits until the coordinator writes GO (the
intent, pid and allocation are journaled by then), runs the command with the
submitted environment, and records the exit durably in exit.json, which
survives a coordinator crash. If the coordinator dies while we wait, we poll
for GO or ABORT written by the next one, for at most the barrier timeout;
giving up is safe because nothing ran, and the next coordinator then releases
the attempt without consuming it. As a child subreaper we also wait for
orphaned descendants, so the attempt counts as running until its whole tree
is gone.

Start-up time is on every job's submit-to-start path, so this file imports only
modules built into the interpreter (``posix``, ``_signal``, ``errno``, ``time``,
``marshal``, ``sys``): ``os``, ``signal`` (which pulls in ``enum``), ``json``
(``re``), ``subprocess`` and ``ctypes`` each cost milliseconds. Hence the spec
comes as spec.marshal, READY and exit.json are written by a small JSON writer,
and the command is started by fork and exec as subprocess would.
"""

import _signal
import errno
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
    fd = posix.open(path, posix.O_RDONLY | posix.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = posix.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        posix.close(fd)


def write_file(path, data, durable):
    tmp = "%s.%d.tmp" % (path, posix.getpid())
    fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[posix.write(fd, view):]
        if durable:
            posix.fsync(fd)
    finally:
        posix.close(fd)
    posix.replace(tmp, path)
    if durable:
        dfd = posix.open(path[:path.rindex("/")] or "/", posix.O_RDONLY | posix.O_DIRECTORY)
        try:
            posix.fsync(dfd)
        finally:
            posix.close(dfd)


def own_start_time():
    data = read_small("/proc/self/stat")
    return int(data[data.rfind(b")") + 2:].split()[19])


def boot_id():
    try:
        return read_small("/proc/sys/kernel/random/boot_id").decode().strip()
    except (OSError, UnicodeDecodeError):
        return "unknown"


def become_subreaper():
    """prctl(PR_SET_CHILD_SUBREAPER) through _ctypes, the C core of ctypes.

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

        prctl = Prctl(_ctypes.dlsym(_ctypes.dlopen(None, 0x2), "prctl"))  # RTLD_NOW
    except (ImportError, AttributeError, TypeError, OSError):
        try:
            import ctypes  # the documented way, should the private layer ever change

            prctl = ctypes.CDLL(None).prctl
        except (ImportError, OSError, AttributeError):
            return False
    return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def wait_for_go(attempt_dir, go_fd, timeout):
    """True once GO is given; False on ABORT or when no coordinator gave GO in time."""
    go_path, abort_path = attempt_dir + "/GO", attempt_dir + "/ABORT"
    try:
        word = posix.read(go_fd, 1)
    except OSError:
        word = b""
    posix.close(go_fd)
    if word == b"G" and exists(go_path):
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the coordinator went away: the next one decides
        if exists(abort_path):
            return False
        if exists(go_path):
            return True
        time.sleep(POLL_SECONDS)
    return False  # nothing ran: a later coordinator releases the attempt unconsumed


def run(spec, status_fd):
    argv = spec["argv"] or ["/bin/sh", "-c", spec["command"]]
    started = time.time()
    try:
        pid = start(argv, spec["env"], spec["cwd"], spec["log"], status_fd)
    except OSError as exc:  # the log, the pipe, fork
        failure = (exc.errno, str(exc))
    except CouldNotStart as exc:  # reported by the child: cwd, exec, a bad argv or env
        failure = exc.args
    else:
        failure = None
    if failure is not None:
        return {"exit_code": 127 if failure[0] == errno.ENOENT else 126, "signal": None,
                "started_at": started, "ended_at": time.time(),
                "error": "could not start the command: %s" % failure[1]}
    status = posix.waitpid(pid, 0)[1]  # retried on EINTR (PEP 475): our handlers return
    reap_orphans()
    if posix.WIFSIGNALED(status):
        signum = posix.WTERMSIG(status)
        return {"exit_code": 128 + signum, "signal": signum, "started_at": started,
                "ended_at": time.time(), "error": None}
    return {"exit_code": posix.WEXITSTATUS(status), "signal": None, "started_at": started,
            "ended_at": time.time(), "error": None}


class CouldNotStart(Exception):
    """(errno or 0, message) of a child that failed before its exec."""


def start(argv, env, cwd, log_path, status_fd):
    """fork + exec, as subprocess.Popen does; the child's pid.

    The child reports a failure before or in exec on a close-on-exec pipe, so
    EOF there without a report means that the exec succeeded."""
    log = posix.open(log_path, posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND | posix.O_CLOEXEC,
                     0o644)
    try:
        err_read, err_write = posix.pipe2(posix.O_CLOEXEC)
        try:
            # Until the child has default dispositions, a signal to the group must
            # wait: our handler would swallow it in the child before exec.
            mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, CAUGHT)
            try:
                pid = posix.fork()
                if pid == 0:
                    exec_child(argv, env, cwd, log, status_fd, err_write, mask)  # no return
            finally:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
                posix.close(err_write)
            report = b""
            while True:
                chunk = posix.read(err_read, 65536)
                if not chunk:
                    break
                report += chunk
        finally:
            posix.close(err_read)
    finally:
        posix.close(log)
    if report:
        posix.waitpid(pid, 0)
        raise CouldNotStart(*marshal.loads(report))
    return pid


def exec_child(argv, env, cwd, log, status_fd, err_write, mask):
    try:
        for signum in RESTORED:
            _signal.signal(signum, _signal.SIG_DFL)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)  # a pending SIGTERM acts now
        posix.close(status_fd)  # its EOF must mean that the shim exited
        posix.chdir(cwd)
        redirect(log, 1)
        redirect(log, 2)
        redirect(posix.open("/dev/null", posix.O_RDONLY | posix.O_CLOEXEC), 0)
        executable = argv[0]
        if "/" in executable:
            candidates = [executable]
        else:  # the command's own PATH decides, as with subprocess and os.execvpe
            candidates = [(directory + "/" if directory else "") + executable
                          for directory in (env.get("PATH") or DEFAULT_PATH).split(":")]
        saved = last = None
        for candidate in candidates:
            try:
                posix.execve(candidate, argv, env)
            except OSError as exc:  # as subprocess: the first error other than "not here"
                last = exc
                if saved is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    saved = exc
        code = (saved or last).errno
        error = (code, "[Errno %d] %s: %r" % (code, posix.strerror(code), executable))
    except OSError as exc:
        error = (exc.errno or 0, str(exc))
    except BaseException as exc:  # a bad argv or env: NUL, '=' in a name, not text
        error = (0, "%s: %s" % (type(exc).__name__, exc))
    try:
        posix.write(err_write, marshal.dumps(error))
    finally:
        posix._exit(255)


def redirect(fd, target):
    if fd == target:
        posix.set_inheritable(fd, True)  # dup2 would leave it close-on-exec
    else:
        posix.dup2(fd, target)


def reap_orphans():
    while True:
        try:
            posix.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def main():
    for signum in CAUGHT:
        # The group's signals reach the command directly; we stay to record its exit.
        _signal.signal(signum, lambda *_: None)
    if sys.argv[1] == "--warm":
        attempt_dir = wait_for_attempt(sys.argv[2], int(sys.argv[3]))
        if attempt_dir is None:
            return 0  # the coordinator went away before it needed us
        go_fd, status_fd = int(sys.argv[4]), int(sys.argv[5])
    else:
        attempt_dir, go_fd, status_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    return serve(attempt_dir, go_fd, status_fd)


def wait_for_attempt(attempts, control_fd):
    """A warm shim, started ahead of need: block until the coordinator names our attempt
    (its directory under ``attempts``, one line), then become that attempt's shim as if
    started for it. None when the pipe closes first, or names a directory elsewhere.
    Python start-up is then off the launch path."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = posix.read(control_fd, 4096)
        if not chunk:
            return None
        data += chunk
    posix.close(control_fd)
    attempt_dir = data[:-1].decode("utf-8", "surrogateescape")
    if not attempt_dir.startswith(attempts + "/"):
        return None
    posix.chdir(attempt_dir)
    log = posix.open(attempt_dir + "/shim.log",
                     posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND | posix.O_CLOEXEC, 0o644)
    posix.dup2(log, 1)
    posix.dup2(log, 2)
    posix.close(log)
    return attempt_dir


def serve(attempt_dir, go_fd, status_fd):
    spec_path = attempt_dir + "/spec.marshal"
    if exists(attempt_dir + "/ABORT"):
        try:
            posix.unlink(spec_path)  # it may hold raw secrets
        except OSError:
            pass
        return 0
    spec = marshal.loads(read_small(spec_path))
    posix.unlink(spec_path)  # it may hold raw secrets
    ready = {"pid": posix.getpid(), "start_time": own_start_time(), "boot_id": boot_id(),
             "at": time.time()}
    write_file(attempt_dir + "/READY", to_json(ready), durable=False)
    try:
        posix.write(status_fd, b"R")
    except OSError:
        pass  # the coordinator is gone; the next one reads READY from disk
    # Only the command's descendants need us as their subreaper: setting it here,
    # while the coordinator journals before GO, keeps it off the path to READY.
    become_subreaper()
    if not wait_for_go(attempt_dir, go_fd, spec["barrier_timeout_s"]):
        return 0
    result = run(spec, status_fd)
    write_file(attempt_dir + "/exit.json", to_json(result), durable=True)
    posix.close(status_fd)  # EOF tells a live coordinator that exit.json is there
    return 0


if __name__ == "__main__":
    sys.exit(main())
