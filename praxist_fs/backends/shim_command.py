"""What every shim does, whichever backend runs it: start the attempt's command, wait
for it and its orphans, and record its exit durably. Standard library only.

The local backend's shim (shim.py) and the Slurm-mode shim (slurm/shim.py) both run an
attempt's command and write READY and exit.json with these functions; what only the local
shim does (the barrier on a pipe, warm shims, the fork server and its supervisors) stays
in shim.py, so the Slurm shim loads none of it. The local shim imports this module as
``shim_command`` (its directory is sys.path[0], with no package), the Slurm shim and the
tests as ``praxist_fs.backends.shim_command``: it imports nothing of the package.

Start-up time is on every job's submit-to-start path, so this file imports only
modules built into the interpreter (``posix``, ``_signal``, ``errno``, ``time``):
``os``, ``signal`` (which pulls in ``enum``), ``json`` (``re``), ``subprocess`` and
``ctypes`` each cost milliseconds. Hence READY and exit.json are written by a small JSON
writer, and the command is started by posix_spawn (no Python runs in its child), or, to
run it as another uid (R-SEC-3), by a fork that switches uid and execs. While a full (or
failing) disk keeps READY or exit.json from being written, the shim holds them in memory
and tries again until they are written (write_until_written).
"""

import _signal
import errno
import posix
import time

POLL_SECONDS = 0.2
DEFAULT_PATH = "/bin:/usr/bin"  # os.defpath: what subprocess searches when env has no PATH
CAUGHT = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
# Python ignores these at start-up; an ignored disposition survives exec.
RESTORED = CAUGHT + (_signal.SIGPIPE, _signal.SIGXFSZ)
# Errors of a full disk or quota, or a failing disk: READY and exit.json are written again
# until they are written, since the shim holds what they say in its memory alone.
RETRIED = (errno.ENOSPC, errno.EDQUOT, errno.EIO)
RETRY_FIRST_S = 0.1  # the first pause between tries; it doubles ...
RETRY_MAX_S = 5.0  # ... up to this
# attempts/<job_id>/ and its attempts', as the coordinator's own_directories makes its own:
# the shims refuse one that others may write to (R-SEC-4)
ATTEMPT_DIR_MODE = 0o755
_written = 0  # files this process began to write: their temp names' serial number


def _open_ledger():
    """The power-loss ledger a test names (fsio.LEDGER_ENV; the launcher passes it on to
    the shims it starts), open for appending; else None."""
    path = posix.environ.get(b"PRAXIST_POWERLOSS_LEDGER")
    if not path:
        return None
    return posix.open(path, posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND | posix.O_CLOEXEC,
                      0o600)


LEDGER = _open_ledger()


def _can_stand_aside():
    """Whether ``stand_aside`` may change our policy: only from SCHED_OTHER, the default (a
    shim run under another policy keeps it), and only where the kernel lets us read it."""
    try:
        return posix.sched_getscheduler(0) == posix.SCHED_OTHER
    except (AttributeError, OSError):
        return False


_standing_aside = [_can_stand_aside(), False]  # whether we may; whether we do now


def stand_aside(aside):
    """Run as SCHED_BATCH while ``aside``, else as SCHED_OTHER again.

    A shim shares a small machine's CPUs with its coordinator and its command, and a
    SCHED_OTHER task that wakes up preempts the one running where it can; a SCHED_BATCH
    one never does: it runs on a CPU that is free, or once the running task sleeps (an
    fsync) or its slice ends. Measured on 2 CPUs: told its attempt ahead of the commit
    (launcher.tell), a warm shim preempted the coordinator on its way to that commit's
    fsync, and woken as its command's vfork ended, it preempted the command on its way to
    its exec. So a shim stands aside while it waits to be told its attempt, while it
    records its start (GO, attempt.json) and once it told the exit (exit.json, ``D``),
    and is itself to prepare the attempt (GO may come before it is done) and to wait
    for the command's end, which the job waits on. (Standing aside through the
    preparation too let GO wait behind the coordinator's work after its commit: GO sent
    -> read 0.72 -> 1.15 ms, p50 of 60 paired jobs.) Once prepared, a shim told ahead
    waits for GO standing aside: a GO woke it as SCHED_OTHER on the coordinator's CPU
    (a pipe's write is a sync wake-up) and it took that CPU at once, so a batch of GOs
    (16 slots) went out one spawn at a time while the other CPU could idle; the
    coordinator gives its CPU to the shim after a GO when nothing else is runnable
    (LocalBackend.go), so a lone job's GO is heard as soon as before (interleaved
    submit-to-start p50 0.999-1.007x of hearing it as SCHED_OTHER; 10,000 trivial jobs
    at 16 slots 1.08-1.19x of task-spooler's wall against 1.25-1.72x, 4 runs each). A
    policy the kernel refuses (a sandbox's seccomp) is never asked for again."""
    if not _standing_aside[0] or _standing_aside[1] == aside:
        return
    try:
        posix.sched_setscheduler(0, posix.SCHED_BATCH if aside else posix.SCHED_OTHER,
                                 posix.sched_param(0))
    except OSError:
        _standing_aside[0] = False
        return
    _standing_aside[1] = aside


def to_json(document):
    """The few JSON documents we write: flat objects of str, int, float, None and lists of
    them."""
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
    if isinstance(value, list):
        return "[%s]" % ", ".join(_json_value(item) for item in value)
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


def exists(path, dir_fd=None):
    """Whether ``path`` exists; with ``dir_fd``, ``path`` is a name in that directory."""
    try:
        posix.stat(path, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def read_small(path, dir_fd=None):
    return read_all(posix.open(path, posix.O_RDONLY | posix.O_NOFOLLOW | posix.O_CLOEXEC,
                               dir_fd=dir_fd))


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


def write_file(path, data, durable, dir_fd=None):
    """``data`` as ``path``, atomically; with ``durable``, fsynced, and its directory too.
    With ``dir_fd``, an open directory (``path`` its path, for messages and the ledger),
    the file is written as its name in that very directory, whatever its path leads to
    by now, and nothing is opened through a link. A try that fails leaves no temp file
    behind."""
    tmp = temp_name(path)
    directory = path[:path.rindex("/")] or "/"
    named = path
    if dir_fd is not None:
        tmp, path = tmp[len(directory) + 1:], path[len(directory) + 1:]
    fd = posix.open(tmp, posix.O_WRONLY | posix.O_CREAT | posix.O_EXCL | posix.O_NOFOLLOW
                    | posix.O_CLOEXEC, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[posix.write(fd, view):]
            if durable:
                posix.fsync(fd)
        finally:
            posix.close(fd)
        posix.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            posix.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if LEDGER is not None:
        _record_write(named, data, durable)
    if durable:
        fsync_directory(directory, dir_fd)


def _record_write(path, data, durable):
    """Tell the power-loss ledger (fsio's format) that ``path`` now holds ``data``, and
    whether it was fsynced, so that the model loses a file its shim never fsynced (an
    exit.json whose end the coordinator confirmed journaled: the journal holds it) unless
    its directory was. ``base64`` is imported here: only a test has a ledger."""
    import base64

    posix.write(LEDGER, to_json({"op": "create", "path": path, "mode": 0o644,
                                 "data": base64.b64encode(data).decode("ascii")}) + b"\n")
    if durable:
        posix.write(LEDGER, to_json({"op": "fsync", "path": path}) + b"\n")


def fsync_directory(path, fd=None):
    """fsync the directory ``path`` (or ``fd``, that directory open already): the entries it
    holds now survive a power cut. Told to the power-loss ledger when a test gave us one
    (fsio's format: tests/powerloss.py learns a shim's fsyncs from it as it learns the
    coordinator's)."""
    dfd = posix.open(path, posix.O_RDONLY | posix.O_DIRECTORY | posix.O_CLOEXEC) \
        if fd is None else fd
    try:
        posix.fsync(dfd)
        if LEDGER is not None:
            names = sorted(posix.listdir(dfd))
            posix.write(LEDGER, to_json({"op": "fsync_dir", "path": path, "names": names})
                        + b"\n")
    finally:
        if fd is None:
            posix.close(dfd)


def write_until_written(path, data, durable, dir_fd=None):
    """write_file, tried again while the disk is full (or failing): what ``data`` says may
    exist nowhere else. A generator: after each such failure it yields the number of
    failed tries so far, then pauses (RETRY_FIRST_S, doubling up to RETRY_MAX_S); the
    caller may give up by leaving the loop. Any other error propagates. Each try is a new
    temp file, so no fsync is ever repeated on pages a failed one may have dropped."""
    pause, failures = RETRY_FIRST_S, 0
    while True:
        try:
            write_file(path, data, durable, dir_fd)
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
                complain(b"%s written at try %d (the first failed: %s)\n" % (
                    path.encode("utf-8", "surrogateescape"), failures + 1, str(first).encode()))
            return


_unmade_log = [None]  # the attempt directory (fd) whose shim.log complain() makes first


def log_into(directory):
    """From now on ``complain`` writes to shim.log in the attempt's ``directory`` (its fd),
    which it makes only then, as our output: an attempt that goes well (most do) leaves
    none, one file creation fewer per job. None: our output stays as it is."""
    _unmade_log[0] = directory


def complain(message):
    """Tell our log (fd 2) ``message``: the attempt's shim.log, made first where
    ``log_into`` named it (also when ``message`` is empty: what follows goes there)."""
    directory = _unmade_log[0]
    if directory is not None:
        try:
            log = posix.open("shim.log", posix.O_WRONLY | posix.O_CREAT | posix.O_APPEND
                             | posix.O_NOFOLLOW | posix.O_CLOEXEC, 0o644, dir_fd=directory)
        except OSError:
            return  # (a full disk) as a write to it would have failed; tried again next time
        _unmade_log[0] = None
        posix.dup2(log, 1)
        posix.dup2(log, 2)
        posix.close(log)
    tell(2, message)


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


def own_identity():
    """What READY says of us: how a later coordinator recognises this process."""
    return {"pid": posix.getpid(), "start_time": own_start_time(), "boot_id": boot_id()}


def run(spec, status_fd, own_group=False, on_start=None, prepared=None, aside=False):
    """The command's exit record (the body of exit.json). ``own_group``: the command leads
    a process group of its own, which the Slurm-mode shim signals; ``on_start(pid)`` is
    told its pid once it runs; ``prepared``: what ``prepare`` did ahead of GO (else it is
    done here); ``aside``: we stand aside (``stand_aside``) from just before the spawn
    until ``on_start`` returns, so that neither our waking from its vfork nor our
    recording its start delays the command's exec, and wait for its end as ourselves."""
    argv = spec["argv"] or ["/bin/sh", "-c", spec["command"]]
    started = time.time()
    log, failure = prepare(spec) if prepared is None else prepared
    if log is not None:
        try:
            pid = start(argv, spec["env"], spec["cwd"], log, status_fd, spec.get("user"),
                        own_group, entered=prepared is not None, aside=aside)
        except CouldNotStart as exc:  # cwd, exec, a bad argv or env
            failure = exc.args
    if failure is not None:
        stand_aside(False)
        return {"exit_code": 127 if failure[0] == errno.ENOENT else 126, "signal": None,
                "started_at": started, "ended_at": time.time(),
                "error": "could not start the command: %s" % failure[1]}
    if on_start is not None:
        on_start(pid)
    stand_aside(False)  # its end is what the job waits on next
    status = posix.waitpid(pid, 0)[1]  # retried on EINTR (PEP 475): our handlers return
    reap_orphans()
    if posix.WIFSIGNALED(status):
        signum = posix.WTERMSIG(status)
        return {"exit_code": 128 + signum, "signal": signum, "started_at": started,
                "ended_at": time.time(), "error": None}
    return {"exit_code": posix.WEXITSTATUS(status), "signal": None, "started_at": started,
            "ended_at": time.time(), "error": None}


def prepare(spec):
    """What comes before the command's start and needs no GO: its log's directory made
    (with ``log_dir_mode`` in ``spec``: own_directory), its log opened (open_log) and, for
    a command run as ourselves, its cwd entered. The local shim does it while the
    coordinator's commit of GO is on its way, so that GO is followed by the spawn alone.
    (log fd, None), or (None, (errno or 0, message)) of what failed: told as the
    command's failure to start, once GO is given."""
    log_dir = None
    try:
        if spec.get("log_dir_mode") is not None:  # the local shim's: its log's directory
            log_dir = own_directory(spec["log"][:spec["log"].rindex("/")], spec["log_dir_mode"])
        log = open_log(spec["log"], spec.get("user"), log_dir)
    except OSError as exc:  # the log
        return None, (exc.errno, str(exc))
    except CouldNotStart as exc:
        return None, exc.args
    finally:
        if log_dir is not None:
            posix.close(log_dir)
    if spec.get("user") is None:
        try:
            posix.chdir(spec["cwd"])
        except OSError as exc:
            posix.close(log)
            return None, (exc.errno, str(exc))
    return log, None


class CouldNotStart(Exception):
    """(errno or 0, message) of a command that could not be started: cwd, exec, a bad
    argv or env."""


def start(argv, env, cwd, log, status_fd, user=None, own_group=False, entered=False,
          aside=False):
    """The command's pid, started by posix_spawn: glibc's runs the child in our memory
    (CLONE_VFORK) until its exec and reports an exec failure's errno, so neither our
    pages are copied nor any Python runs in the child. ``log``: its output, open
    (prepare), closed here. ``user``: (uid, gid, groups) to run it as, another uid's
    (R-SEC-3): see start_as. ``own_group``: in a new process group (the local shim leads
    its own session, whose group the command shares). ``entered``: we are in ``cwd``
    already (prepare). ``aside``: we stand aside (stand_aside) from just before the
    spawn, and the command is spawned as SCHED_OTHER, the policy we had (a command run
    as another uid is forked, not spawned: its parent does not wait for its exec).

    Its dispositions are reset and its signal mask restored before the exec: no signal
    reaches our handlers in the child. posix_spawn has no chdir (Python 3.11), so we
    change to the command's cwd first: the shim uses absolute paths only."""
    try:
        if user is not None:
            return start_as(user, argv, env, cwd, log, status_fd, own_group)
        if not entered:
            try:
                posix.chdir(cwd)
            except OSError as exc:
                raise CouldNotStart(exc.errno, str(exc)) from None
        actions = [(posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0),
                   (posix.POSIX_SPAWN_DUP2, log, 1), (posix.POSIX_SPAWN_DUP2, log, 2),
                   (posix.POSIX_SPAWN_CLOSE, status_fd)]  # its EOF: the shim exited
        mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, ())
        options = {"setpgroup": 0} if own_group else {}  # None is not "unset" to posix_spawn
        if aside:
            stand_aside(True)
            if _standing_aside[1]:
                options["scheduler"] = (posix.SCHED_OTHER, posix.sched_param(0))
        return each_candidate(argv[0], env, lambda candidate: posix.posix_spawn(
            candidate, argv, env, file_actions=actions, setsigmask=mask, setsigdef=RESTORED,
            **options))
    finally:
        posix.close(log)


def own_directory(path, mode):
    """Make the directory ``path`` (its parent is one of the run's, which the coordinator
    checked), or find it, and open it: its fd, once it is checked as opened to be a real
    directory of ours that nobody else may write to, never a link (open_directory), so
    that what is opened in it is opened in what was checked; else CouldNotStart, and
    nothing is written through it (R-SEC-4). Made here so that the mkdir is off the
    coordinator's loop."""
    make_directory(path, mode)
    fd, problem = open_directory(path)
    if problem is not None:
        raise CouldNotStart(0, "the log directory %s %s: refusing to write through it"
                            % (path, problem))
    return fd


def make_directory(path, mode, recorded=False, parent_fd=None):
    """mkdir ``path``, or find the name taken (directory_problem then looks at it); with
    ``parent_fd``, its last name in that open directory. ``recorded``: the mkdir is told
    to the power-loss ledger (fsio's format), for a directory whose files must survive
    a power cut only with it (an attempt's). Whether it made it."""
    try:
        posix.mkdir(_name_in(path, parent_fd), mode, dir_fd=parent_fd)
    except FileExistsError:
        return False
    if recorded and LEDGER is not None:
        posix.write(LEDGER, to_json({"op": "mkdir", "path": path}) + b"\n")
    return True


def open_directory(path, parent_fd=None):
    """``path`` opened to write through, never through a link (O_DIRECTORY|O_NOFOLLOW),
    and checked as opened (directory_problem's checks on its fstat), so that nothing can
    swap it between the check and the writes made relative to it: (fd, None), or (None,
    what makes it unfit). With ``parent_fd``, its last name in that open directory.
    OSError if it cannot be opened for another reason."""
    try:
        fd = posix.open(_name_in(path, parent_fd), posix.O_RDONLY | posix.O_DIRECTORY
                        | posix.O_NOFOLLOW | posix.O_CLOEXEC, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        return None, directory_problem(path, parent_fd) or "is not a directory"
    problem = _stat_problem(posix.fstat(fd))
    if problem is not None:
        posix.close(fd)
        return None, problem
    return fd, None


def _name_in(path, dir_fd):
    """What names ``path`` for a call relative to ``dir_fd``: its last name, or the path
    itself when there is no such directory."""
    return path if dir_fd is None else path[path.rindex("/") + 1:]


def directory_problem(path, parent_fd=None):
    """What makes ``path`` unfit to write through, or None: the coordinator's test for its
    state directories (ownership.state_directory_problem), in our few words. With
    ``parent_fd``, ``path``'s last name in that open directory."""
    return _stat_problem(posix.stat(_name_in(path, parent_fd), dir_fd=parent_fd,
                                    follow_symlinks=False))


def _stat_problem(info):
    """directory_problem's checks of what lstat or fstat says."""
    kind = info.st_mode & 0o170000
    if kind == 0o120000:
        return "is a symbolic link"
    if kind != 0o040000:
        return "is not a directory"
    if info.st_uid != posix.geteuid():
        return "is owned by uid %d" % info.st_uid
    if info.st_mode & 0o022 and not info.st_mode & 0o1000:
        return "is writable by others (mode %04o) and not sticky" % (info.st_mode & 0o7777)
    return None


def open_log(log_path, user=None, dir_fd=None):
    """The command's log, for appending: never through a symlink, and only a regular file
    with one link that we own (or, once handed over, ``user`` owns), else CouldNotStart:
    the attempt is refused and says why, nothing is written (R-SEC-4). For a command run
    as another uid the log becomes that uid's file: whatever its command prints is that
    uid's to have written, never a file of ours (root's) holding a peer's bytes, which
    could pass for ours wherever a file's owner is its author (the spool). Its directory
    stays ours, so the peer can neither rename nor replace it. With ``dir_fd``, its
    directory as opened and checked (own_directory): the log is its name in there."""
    try:
        log = posix.open(_name_in(log_path, dir_fd), posix.O_WRONLY | posix.O_CREAT
                         | posix.O_APPEND | posix.O_NOFOLLOW | posix.O_NONBLOCK
                         | posix.O_CLOEXEC, 0o644, dir_fd=dir_fd)
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
