"""The launch barrier and attempt supervisor (R-RUN-2). Standard library only.

Run as ``python -S shim.py ATTEMPT_DIR GO_FD STATUS_FD`` in a new session, so
a peer's sitecustomize cannot run here. It writes READY (its own identity),
waits until the coordinator writes GO (the intent, pid and allocation are
journaled by then), runs the command with the submitted environment, and
records the exit durably in exit.json, which survives a coordinator crash.
If the coordinator dies while we wait, we poll for GO or ABORT written by the
next one, for at most the barrier timeout; giving up is safe because nothing
ran, and the next coordinator then releases the attempt without consuming it. As a child subreaper we also wait for orphaned descendants, so the
attempt counts as running until its whole tree is gone.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.2


def write_file(path, data, durable):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def own_start_time():
    with open("/proc/self/stat", "rb") as handle:
        data = handle.read()
    return int(data[data.rfind(b")") + 2:].split()[19])


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"


def wait_for_go(attempt_dir, go_fd, timeout):
    """True once GO is given; False on ABORT or when no coordinator gave GO in time."""
    go_path, abort_path = os.path.join(attempt_dir, "GO"), os.path.join(attempt_dir, "ABORT")
    try:
        word = os.read(go_fd, 1)
    except OSError:
        word = b""
    os.close(go_fd)
    if word == b"G" and os.path.exists(go_path):
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # the coordinator went away: the next one decides
        if os.path.exists(abort_path):
            return False
        if os.path.exists(go_path):
            return True
        time.sleep(POLL_SECONDS)
    return False  # nothing ran: a later coordinator releases the attempt unconsumed


def run(attempt_dir, spec):
    argv = spec["argv"] or ["/bin/sh", "-c", spec["command"]]
    started = time.time()
    log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        child = subprocess.Popen(argv, env=spec["env"], cwd=spec["cwd"], stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=log)
    except OSError as exc:
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        return {"exit_code": code, "signal": None, "started_at": started,
                "ended_at": time.time(), "error": "could not start the command: %s" % exc}
    finally:
        os.close(log)
    returncode = child.wait()
    reap_orphans()
    if returncode < 0:
        return {"exit_code": 128 - returncode, "signal": -returncode, "started_at": started,
                "ended_at": time.time(), "error": None}
    return {"exit_code": returncode, "signal": None, "started_at": started,
            "ended_at": time.time(), "error": None}


def reap_orphans():
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def main():
    attempt_dir, go_fd, status_fd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        # The group's signals reach the command directly; we stay to record its exit.
        signal.signal(signum, lambda *_: None)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.path.exists(os.path.join(attempt_dir, "ABORT")):
        return 0
    with open(os.path.join(attempt_dir, "spec.json")) as handle:
        spec = json.load(handle)
    os.unlink(os.path.join(attempt_dir, "spec.json"))  # it may hold raw secrets
    ready = {"pid": os.getpid(), "start_time": own_start_time(), "boot_id": boot_id(),
             "at": time.time()}
    write_file(os.path.join(attempt_dir, "READY"), json.dumps(ready).encode(), durable=False)
    try:
        os.write(status_fd, b"R")
    except OSError:
        pass  # the coordinator is gone; the next one reads READY from disk
    if not wait_for_go(attempt_dir, go_fd, spec["barrier_timeout_s"]):
        return 0
    result = run(attempt_dir, spec)
    write_file(os.path.join(attempt_dir, "exit.json"), json.dumps(result).encode(), durable=True)
    os.close(status_fd)  # EOF tells a live coordinator that exit.json is there
    return 0


if __name__ == "__main__":
    sys.exit(main())
