"""The launch barrier and attempt supervisor (R-RUN-2). Standard library only.

The local backend's shim, started through its launcher: the pipes, warm shims and
supervisors below are the local backend's alone. Starting the command and recording its
exit, which the Slurm-mode shim (slurm/shim.py) does too, are in shim_command.py.

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
submitted environment, tells its exit on the status pipe (``X``: the coordinator
journals it and acts on it at once), then records it in exit.json: durably, which
survives a coordinator crash, unless a supervisor's coordinator said on the pool
socket that the end is journaled (end_journaled). While a full (or failing) disk keeps READY or
exit.json from being written, the shim holds them in memory and tries again
until they are written, never giving up on exit.json (nothing else holds the
exit for a coordinator that died before it journaled it). If the coordinator
dies while we wait, we poll for GO or ABORT written by the next one, for at
most the barrier timeout; giving up is safe because nothing ran, and the next
coordinator then releases the attempt without consuming it. As a child subreaper we also wait for
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
(exit.json written, durably unless the end was confirmed journaled; or ABORT,
or the barrier given up) and its process group
holds only itself (it is the subreaper: it waited for every descendant), it
says ``D`` on the attempt's status pipe, closes it, and waits on its pool
socket again, idle. An idle supervisor exits on SIGTERM, SIGINT or
SIGHUP (one that came once its attempt was over counts), and when the pool socket closes (the coordinator closed it, or is
gone): so none outlives its coordinator by more than the attempt it serves.
The server exits when the coordinator closes its end; its children carry on.

Start-up time is on every job's submit-to-start path, so this file imports only
modules built into the interpreter (``posix``, ``_signal``, ``errno``, ``time``,
``marshal``, ``sys``) and shim_command.py, which starts the command and records its
exit for this shim and the Slurm-mode one alike (why it imports so little is said
there). Hence the spec comes in marshal (on a warm shim's control pipe, or as
spec.marshal). Only the server imports an extension module, ``_socket``, once for all
its children.
"""

import _signal
import errno
import gc
import marshal
import posix
import sys
import time

if __package__:  # praxist_fs.backends.shim, as the tests import it
    from praxist_fs.backends import shim_command
else:  # the shim itself: ``import shim``, its directory sys.path[0] and no package
    import shim_command

PR_SET_CHILD_SUBREAPER = 36
REQUEST_FDS = 1  # a fork server's request: the pool socket of the supervisor to fork
ATTEMPT_FDS = 3  # an attempt on a pool socket: the control, GO and status fds of a --warm shim
END_JOURNALED = b"J"  # on a pool socket: the end the supervisor told (X) is journaled
INT_SIZE = 4  # of a C int: an fd in SCM_RIGHTS
INFRA_EXIT_CODE = 75  # core.budget's: an infrastructure failure, retried


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


def read_go(go_fd):
    """What the coordinator says on the GO pipe, waiting for it: b"G", b"A", or b"" (it
    closed the pipe, or went away)."""
    try:
        return posix.read(go_fd, 1)
    except OSError:
        return b""


def record_go(directory):
    """The GO file in the attempt's ``directory`` (its fd), for a GO told on the pipe
    (journaled first): empty, created in place, not fsynced (the journal holds the
    decision); for the tools that read the handshake (client.enclosing_attempt) and a
    later coordinator's look. One already there (a later coordinator's) is as good; a
    failure (a full disk) is told to shim.log."""
    try:
        posix.close(posix.open("GO", posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL
                               | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o644, dir_fd=directory))
    except FileExistsError:
        pass
    except OSError as exc:
        shim_command.complain(b"could not write GO: %s\n" % str(exc).encode())


def wait_for_go(directory, go_fd, timeout, word, told_ahead=False):
    """True once GO is given (``word``: what the pipe gave, read_go); False on ABORT (either
    in the attempt's ``directory``, its fd) or when no coordinator gave GO in time.

    ``told_ahead``: we were told the attempt before the commit that journals it with its
    GO (launcher.tell); a pipe closed without a word then means the coordinator died
    before it sent GO, maybe before that commit. We take back READY and give the attempt
    up at once (None): nothing ran, and without READY the next coordinator releases the
    attempt if it was journaled, or launches it anew if not; no shim of ours waits on
    for a GO file meant for another."""
    posix.close(go_fd)
    if word == b"G":  # the coordinator journaled GO first; we write the GO file
        return True
    if word == b"A":  # ABORT: its file too, unless our directory was not made yet
        return False
    if told_ahead:
        try:
            posix.unlink("READY", dir_fd=directory)
        except OSError as exc:  # then the attempt reads lost, never run twice
            shim_command.complain(b"could not take READY back: %s\n" % str(exc).encode())
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the coordinator went away: the next one decides
        if shim_command.exists("ABORT", directory):
            return False
        if shim_command.exists("GO", directory):
            return True
        time.sleep(shim_command.POLL_SECONDS)
    return False  # nothing ran: a later coordinator releases the attempt unconsumed


def main():
    sys.excepthook = excepthook
    if sys.argv[1] == "--server":
        return serve_forks(sys.argv[2], int(sys.argv[3]))
    catch_signals()
    if sys.argv[1] == "--warm":
        become_subreaper()
        serve_warm(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                   identity_of_ours())
        return 0
    return serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))


# the signals that came once the attempt was over (``serve``: from just before ``D``),
# before a supervisor is idle again: they are the idle supervisor's, raised again then
_after_attempt = []
_attempt_over = [False]


def catch_signals():
    _attempt_over[0] = False
    del _after_attempt[:]
    for signum in shim_command.CAUGHT:
        _signal.signal(signum, _caught)


def _caught(signum, _frame):
    """The group's signals reach the command directly; we stay to record its exit."""
    if _attempt_over[0]:
        _after_attempt.append(signum)


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
    end it. It returns (exits) when the pool socket closes, or brings something else
    than an attempt or a late END_JOURNALED (one that came after we stopped waiting for
    it: end_journaled)."""
    become_subreaper(prctl)
    ours = identity_of_ours()
    null = posix.dup(1)  # /dev/null, as the server's output: ours again between attempts
    while True:
        data, fds, well_formed = receive_fds(pool, ATTEMPT_FDS)
        if data == END_JOURNALED and not fds:
            continue  # the attempt it confirms is over: exit.json was fsynced all the same
        if not well_formed:
            for fd in fds:
                posix.close(fd)
            return 0
        catch_signals()
        if not serve_warm(attempts, *fds, identity=ours, pool=pool):
            return 0  # told no attempt (dismissed), or one outside the run's attempts
        for signum in shim_command.CAUGHT:  # idle: nothing of an attempt is left to record
            _signal.signal(signum, _signal.SIG_DFL)
        for signum in _after_attempt:  # sent to an idle supervisor: it ends as one would
            posix.kill(posix.getpid(), signum)
        posix.chdir("/")
        posix.dup2(null, 1)
        posix.dup2(null, 2)


def serve_warm(attempts, control_fd, go_fd, status_fd, identity, pool=None):
    """A warm shim: the subreaper already, and the rest of its start-up done (its
    ``identity`` worked out and encoded: identity_of_ours), while it waits for its
    attempt, so that none of it is on the launch path. Every fd it is given is closed
    when it returns; it returns whether it was told an attempt. ``pool``: a
    supervisor's pool socket (end_journaled). It waits standing aside
    (shim_command.stand_aside): told its attempt ahead of the coordinator's commit, it
    must not be woken before that commit's fsync. Once it runs it is itself again:
    should GO come before it has prepared, the spawn waits on it."""
    shim_command.stand_aside(True)
    attempt_dir, spec = wait_for_attempt(attempts, control_fd)
    shim_command.stand_aside(False)
    if attempt_dir is None:  # the coordinator went away before it needed us
        posix.close(go_fd)
        posix.close(status_fd)
        return False
    serve(attempt_dir, go_fd, status_fd, identity, spec, pool)
    return True


def wait_for_attempt(attempts, control_fd):
    """A warm shim, started ahead of need: block until the coordinator names our attempt
    and closes the pipe. The message is the attempt's directory
    ``attempts/<job_id>/<attempt_id>`` (one line), then its spec in marshal, or nothing
    when the spec did not fit the pipe and waits in spec.marshal. (None, None) when the
    pipe closes first, or names a directory elsewhere. Python start-up is then off the
    launch path."""
    line, newline, spec = shim_command.read_all(control_fd).partition(b"\n")
    attempt_dir = line.decode("utf-8", "surrogateescape")
    job_id, _, attempt_id = attempt_dir[len(attempts) + 1:].partition("/")
    if not newline or not attempt_dir.startswith(attempts + "/") or "/" in attempt_id or \
            {job_id, attempt_id} & {"", ".", ".."}:
        return None, None
    return attempt_dir, spec or None


def open_attempt_directory(attempt_dir):
    """Make ``attempts/<job_id>/`` and the attempt's directory in it, or find them made
    (a retry's job directory; the coordinator's, when the spec waits in spec.marshal or
    it started us for the attempt), and open each, the attempt's relative to its job's:
    real directories of ours, as the coordinator's own_directories would have them
    (R-SEC-4), checked as opened, so that every file of the attempt is written relative
    to what was checked (a link put in place of either later leads nowhere). Made
    here, not by the coordinator, to keep two mkdirs per job off its loop; each mkdir
    is told to the power-loss ledger, and make_durable fsyncs both into their parents
    once the exit is told. ((job fd, attempt fd), None, whether we made the attempt's
    directory just now) once they are there and open, else (None, the exit record of an
    attempt refused (126: not ours to write through) or failed (75: a full disk, say;
    the job is retried as after an infrastructure failure), False)."""
    fds = []
    try:
        for directory in (attempt_dir[:attempt_dir.rindex("/")], attempt_dir):
            parent = fds[-1] if fds else None
            made = shim_command.make_directory(directory, shim_command.ATTEMPT_DIR_MODE,
                                               recorded=True, parent_fd=parent)
            fd, problem = shim_command.open_directory(directory, parent)
            if problem is not None:  # as the coordinator's own_directories says it
                code, error = 126, "refused to start it: %s: %s" % (directory, problem)
                break
            fds.append(fd)
        else:
            return tuple(fds), None, made
    except OSError as exc:
        code, error = INFRA_EXIT_CODE, "could not make its attempt directory: %s" % exc
    for fd in fds:
        posix.close(fd)
    now = time.time()
    return None, {"exit_code": code, "signal": None, "started_at": now, "ended_at": now,
                  "error": error}, False


def identity_of_ours():
    """What READY says of us (shim_command.own_identity), encoded as READY's document
    begins, but for its closing brace: a warm shim or supervisor works it out once, before
    its attempts. Encoded with READY, the identity took ~25 us of the ~0.3 ms from the
    tell to GO awaited (a shim woken from idle runs cold: ~35 us where a hot loop takes 9)."""
    return shim_command.to_json(shim_command.own_identity())[:-1]


def ready_document(identity):
    """READY's bytes: our ``identity`` (identity_of_ours) and when it is written, as
    to_json writes the flat object of both."""
    return b"%s, \"at\": %s}" % (identity, float.__repr__(time.time()).encode("ascii"))


def enter(directory):
    """Become the attempt's shim as if started for it: its ``directory`` (fd) our cwd,
    shim.log our output, made once there is something to say in it (a complaint, or an
    uncaught exception: excepthook)."""
    posix.fchdir(directory)
    shim_command.log_into(directory)


def excepthook(kind, value, traceback):
    """An uncaught exception's traceback, into the attempt's shim.log (made for it)."""
    shim_command.complain(b"")
    sys.__excepthook__(kind, value, traceback)


def serve(attempt_dir, go_fd, status_fd, identity=None, spec=None, pool=None):
    """Run the attempt in ``attempt_dir``, every file of it written relative to that
    directory as opened and checked (open_attempt_directory). ``identity``: a warm
    shim's, worked out and encoded while it waited (identity_of_ours), as the subreaper
    already (it then enters the directory); ``spec``: its spec as the control pipe
    brought it (marshal), else it is read from spec.marshal; ``pool``: a supervisor's
    pool socket, on which the coordinator may confirm the end journaled
    (end_journaled). Both pipes are closed when it returns, the status pipe after
    ``D``: the attempt is over, exit.json (if it ran) is written, and nothing of it
    runs. A supervisor lives on; without ``D`` before the EOF, the shim died."""
    fds, told = None, b""
    try:
        fds, refusal, made = open_attempt_directory(attempt_dir)
        if fds is None:  # nothing ran: the coordinator hears why, as of a full disk
            posix.close(go_fd)
            told = b"X" + shim_command.to_json(refusal) + b"\n"
        else:
            if identity is not None:
                enter(fds[1])
            serve_attempt(attempt_dir, fds, go_fd, status_fd, identity, spec, pool, made)
        # over, and nothing of it runs (we waited for every descendant)
        _attempt_over[0] = True
        shim_command.tell(status_fd, told + b"D")
    except BaseException:
        shim_command.complain(b"")  # shim.log made, for the traceback on its way
        raise
    finally:
        shim_command.log_into(None)  # the directory's fd is closed next
        posix.close(status_fd)
        for fd in fds or ():
            posix.close(fd)
    return 0


def serve_attempt(attempt_dir, fds, go_fd, status_fd, identity, spec, pool=None,
                  made=False):
    """serve's attempt, in the directories ``fds`` (the job's and the attempt's, open);
    every way it returns (an error ends the shim) closes ``go_fd``. ``made``: we made the
    attempt's directory just now, so no ABORT was there to look for (a coordinator
    that aborts us once it is made tells ABORT on our pipe too, which wait_for_go
    reads): the look is a cold stat on the way from the tell to GO awaited."""
    directory = fds[1]
    if not made and shim_command.exists("ABORT", directory):
        posix.close(go_fd)
        if spec is None:
            try:
                posix.unlink("spec.marshal", dir_fd=directory)  # it may hold raw secrets
            except OSError:
                pass
        return
    if spec is None:
        spec = shim_command.read_small("spec.marshal", directory)
        posix.unlink("spec.marshal", dir_fd=directory)  # it may hold raw secrets
    spec = marshal.loads(spec)
    for _ in shim_command.write_until_written(attempt_dir + "/READY", ready_document(
            identity or identity_of_ours()), durable=False, dir_fd=directory):
        if shim_command.exists("ABORT", directory):
            posix.close(go_fd)
            return  # nothing ran: a cancel or a stop need not wait for disk space
    told_ahead = bool(spec.get("go_coming"))  # of the attempt before its commit with GO
    word = None  # told ahead, GO comes with the commit of the attempt, and is read once the
    # command's start is prepared: READY news nobody; else it may be decided already
    if not told_ahead and (word := given_go(go_fd)) is None:
        shim_command.tell(status_fd, b"R")
    if identity is None:
        # Only the command's descendants need us as their subreaper: setting it here,
        # while the coordinator journals before GO, keeps it off the path to READY.
        become_subreaper()
    # What the command's start needs (its log, its cwd) is done while that commit is on
    # its way: GO is then followed by the spawn alone.
    prepared = shim_command.prepare(spec) if told_ahead else None
    described = []  # attempt.json is written
    if word is None:
        if told_ahead:  # prepared: GO must not put us before the coordinator's next GO
            shim_command.stand_aside(True)
        word = read_go(go_fd)
    went = wait_for_go(directory, go_fd, spec["barrier_timeout_s"], word,
                       told_ahead)  # closes go_fd
    if not went:
        if prepared is not None and prepared[0] is not None:
            take_back_log(spec["log"], prepared[0])
        if went is False:  # nothing ran, but it was there (None: given up, READY taken back)
            describe(attempt_dir, directory, spec, described)
        return
    started = []  # the command's pid, once it runs

    def on_start(pid):
        started.append(pid)
        if word == b"G":  # told on the pipe: the GO file is ours to write
            record_go(directory)
        describe(attempt_dir, directory, spec, described)  # while the command runs, as is

    result = shim_command.run(spec, status_fd, on_start=on_start, prepared=prepared,
                              aside=True)
    if not started and word == b"G":
        record_go(directory)
    describe(attempt_dir, directory, spec, described)  # if the command could not start,
    # or a full disk kept it out then
    result = shim_command.to_json(result)
    # The exit on the status pipe first: a coordinator still connected journals it (its
    # commit is then the end's durable record) and acts on it, and on a supervisor's pool
    # socket says once that commit is durable. Nothing of exit.json is on the path from
    # one command's end to the next one's start.
    shim_command.tell(status_fd, b"X" + result + b"\n")
    # What is left (the confirmation, exit.json, D) is on no job's path, and the
    # coordinator that journals our end launches the next job meanwhile.
    shim_command.stand_aside(True)
    journaled = end_journaled(pool, spec.get("end_wait_s"))
    if not journaled:  # exit.json is then the end's only durable record, once written
        make_durable(attempt_dir, fds[0])
    # exit.json, for people and tools, and, unless the journal holds the end, for a
    # coordinator that never heard us (it died before its commit: the next one re-adopts
    # the attempt and reads the file). Until it is durable the exit may exist only here:
    # no giving up, whatever it takes.
    for _ in shim_command.write_until_written(attempt_dir + "/exit.json", result,
                                              durable=not journaled, dir_fd=directory):
        pass


def end_journaled(pool, wait):
    """Whether the coordinator said on our pool socket, within ``wait`` seconds of our
    ``X``, that the end we told it is journaled (END_JOURNALED, sent once that commit is
    durable): exit.json then needs no fsync, of itself or of its directories, as the
    journal is the end's record. False when it said nothing in time (it is slow, or its
    commit failed on a full disk), closed the socket (it stopped, or died: the next
    coordinator reads exit.json), or we have no pool socket (a shim started for its
    attempt, or a --warm one): exit.json is then fsynced, as the end's only durable
    record. The wait costs no CPU, and the confirmation comes when the end's commit is,
    within a loop turn."""
    if pool is None or not wait:
        return False
    pool.settimeout(wait)
    try:
        return pool.recv(1) == END_JOURNALED
    except OSError:  # TimeoutError: too late; any other, as a closed socket
        return False
    finally:
        pool.settimeout(None)


def take_back_log(path, log):
    """The command's log at ``path``, made and opened (``log``) ahead of a GO that never
    came (told ahead): removed again while it is still that empty file, so that an
    attempt released or aborted leaves no log of a command that never ran; ``log`` is
    closed. Its directory is opened as prepare opened it (never through a link, checked);
    whatever fails leaves the log as it is."""
    directory = None
    try:
        made = posix.fstat(log)
        directory, _ = shim_command.open_directory(path[:path.rindex("/")])
        if directory is not None and made.st_size == 0:
            name = path[path.rindex("/") + 1:]
            found = posix.stat(name, dir_fd=directory, follow_symlinks=False)
            if (found.st_dev, found.st_ino) == (made.st_dev, made.st_ino):
                posix.unlink(name, dir_fd=directory)
    except OSError:
        pass
    finally:
        posix.close(log)
        if directory is not None:
            posix.close(directory)


def describe(attempt_dir, directory, spec, described):
    """attempt.json in the attempt's ``directory`` (its fd), as the coordinator rendered it
    into the spec (``attempt_json``), once
    the barrier is passed (the command runs, or GO never came): the attempt for people and
    tools, written here so that its file creation is off the coordinator's loop. Not fsynced (a power cut ends us too); a failure (a full
    disk) is told to shim.log and tried again once the command is over. ``described``
    holds True once it is written."""
    data = spec.get("attempt_json")
    if described or data is None:
        return
    try:
        shim_command.write_file(attempt_dir + "/attempt.json", data, durable=False,
                                dir_fd=directory)
    except OSError as exc:
        shim_command.complain(b"could not write attempt.json: %s\n" % str(exc).encode())
        return
    described.append(True)


def make_durable(attempt_dir, job_fd):
    """fsync the attempt directory into ``attempts/<job_id>/`` (``job_fd``, as opened by
    open_attempt_directory) and that into ``attempts/``,
    before exit.json is written, so that the exit.json we fsync into it cannot vanish with
    the directory in a power cut. We made both (open_attempt_directory), or the
    coordinator did and left their fsyncs to us, off its loop; we do them once the exit is told on the status pipe, and only when the
    coordinator did not confirm the end journaled (end_journaled), so that they are
    not between the command's end and the coordinator's hearing of it (nothing but
    exit.json needs the directory durable: the journal holds the rest). A failure is told
    to shim.log: the exit is still written, but a power cut may take it along (the
    attempt then reads lost, unless the coordinator journaled the exit it was told)."""
    job_dir = attempt_dir[:attempt_dir.rindex("/")]
    for directory, fd in ((job_dir, job_fd), (job_dir[:job_dir.rindex("/")], None)):
        try:
            shim_command.fsync_directory(directory, fd)
        except OSError as exc:
            shim_command.complain(b"could not make %s durable: %s\n" % (
                directory.encode("utf-8", "surrogateescape"), str(exc).encode()))


if __name__ == "__main__":
    sys.exit(main())
