"""The launch barrier: the command starts only after GO, and its exit is recorded durably."""

from __future__ import annotations

import errno
import fcntl
import json
import marshal
import os
import pwd
import signal
import stat

import pytest

from praxist_fs.adapters.fsio import write_atomic
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt
from tests.backends.local.conftest import (
    finish, go_and_wait, live_pids, parent_pid, prestarter, spawn, stat_fields,
)
from tests.disks import Deletions, small_tmpfs
from tests.e2e.conftest import read_json, wait_for

NOBODY = 65534
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="switching uid needs root")


@pytest.fixture(params=["cold", "popen", "server"])
def shim_for(request, layout):
    """spawn's ``warm`` for each kind of shim: None (a cold one), or a warm one of either kind."""
    return prestarter(request, layout)


def test_command_waits_for_go_then_exit_is_recorded(layout, tmp_path, shim_for):
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 5", warm=shim_for())
    ready = wait_for(lambda: read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid and ready["start_time"]
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    finish(handle)
    record = read_json(attempt_dir / "exit.json")
    assert record["exit_code"] == 5 and record["signal"] is None and marker.exists()
    handle.close()


def test_abort_exits_without_running_the_command(layout, tmp_path):
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "ABORT", b"")
    handle.release_barrier(b"A")
    finish(handle)
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    handle.close()


def test_barrier_survives_the_coordinator_going_away(layout, tmp_path):
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"")  # the pipe closes as if the coordinator died
    assert handle.popen.poll() is None and not marker.exists()
    write_atomic(attempt_dir / "GO", b"")  # the next coordinator resumes the barrier
    finish(handle)
    assert marker.exists()
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 0
    handle.close()


def test_environment_carries_identity_and_gpu_binding(layout, tmp_path):
    dump = tmp_path / "env.json"
    body = f"python3 -c 'import json,os; json.dump(dict(os.environ), open(\"{dump}\", \"w\"))'"
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=body, gpus=("GPU-a", "GPU-b"),
                                   env={"PATH": os.environ["PATH"], "SEED": "3"})
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    finish(handle)
    env = json.loads(dump.read_text())
    assert env["SEED"] == "3"
    assert env["PRAXIST_EXPERIMENT_ID"] == "job-1" and env["PRAXIST_EXPERIMENT_ATTEMPT_ID"] == "a1"
    assert env["PRAXIST_EXPERIMENT_ATTEMPT_DIR"] == str(attempt_dir)
    assert env["PRAXIST_RESOURCE_PROFILE"] == "cpu"
    for name in ("PRAXIST_ASSIGNED_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        assert env[name] == "GPU-a,GPU-b"
    assert "PYTHONPATH" not in env  # nothing of ours leaks in beyond the contract
    assert not (attempt_dir / "spec.json").exists()  # read once, then removed (raw secrets)
    handle.close()


def test_command_runs_in_a_new_session_under_the_shim(layout, tmp_path):
    out = tmp_path / "ids"
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=f"ps -o sid=,pgid= -p $$ > {out}")
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    finish(handle)
    sid, pgid = map(int, out.read_text().split())
    assert sid == pgid == handle.popen.pid != os.getsid(0)
    handle.close()


def test_a_warm_shim_becomes_the_attempts_shim(layout, tmp_path, prestart):
    warm = prestart()
    out = tmp_path / "ids"
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=warm,
                                        body=f"ps -o sid=,pgid= -p $$ > {out}; exit 4")
    assert handle.popen.pid == warm.handle.popen.pid  # no new process was started
    ready = wait_for(lambda: read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid and not marker.exists()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    finish(handle)
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 4 and marker.exists()
    sid, pgid = map(int, out.read_text().split())
    assert sid == pgid == handle.popen.pid != os.getsid(0)  # its own session, as a cold one
    handle.close()


def test_a_warm_shim_makes_its_attempt_directory_not_the_coordinator(layout, tmp_path,
                                                                      prestart):
    """The launch makes no directory on the coordinator's loop: a warm shim given its attempt
    (stopped here, so that it cannot have made them yet) makes attempts/<job>/ and the
    attempt's directory itself, then runs the attempt in them as before."""
    warm = prestart()
    os.kill(warm.handle.popen.pid, signal.SIGSTOP)
    try:
        handle, attempt_dir, marker = spawn(layout, tmp_path, warm=warm, body="exit 3")
        assert not attempt_dir.parent.exists()  # nothing made by spawn (the coordinator)
    finally:
        os.kill(warm.handle.popen.pid, signal.SIGCONT)
    ready = wait_for(lambda: read_json(attempt_dir / "READY"))
    assert ready["pid"] == handle.popen.pid
    for directory in (attempt_dir.parent, attempt_dir):
        info = directory.lstat()
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        assert info.st_mode & 0o777 == 0o755 & ~current_umask()
    assert go_and_wait(handle, attempt_dir)["exit_code"] == 3 and marker.exists()
    # a shim with nothing to say makes no shim.log: one file creation fewer per job (one
    # with something to say makes it then: the full disk's test below)
    assert sorted(path.name for path in attempt_dir.iterdir()) == [
        "GO", "READY", "attempt.json", "exit.json"]


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_warm_shim_refuses_an_attempt_directory_planted_as_a_link(layout, tmp_path,
                                                                   prestart):
    """R-SEC-4, now the shim's to check: attempts/<job>/ found as a link is never written
    through; the coordinator hears the refusal (126) on the status pipe, as it heard the
    launcher's before, and nothing runs."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, layout.attempts / "job-1")
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=prestart())
    handle.release_barrier(b"G")  # GO, as journaled with a warm shim's launch
    assert finish(handle) == b"X"
    assert handle.exit_record["exit_code"] == 126
    assert handle.exit_record["error"] == (
        f"refused to start it: {layout.attempts / 'job-1'}: is a symbolic link")
    handle.close()
    assert not marker.exists() and not os.listdir(elsewhere)


def test_a_link_put_in_place_of_the_attempt_directory_after_its_check_leads_nowhere(
        layout, tmp_path, shim_for):
    """R-SEC-4 after the check: the shim opened and checked its attempt directory before
    READY; swapped for a link to elsewhere while it waits at the barrier, nothing goes
    through the link: GO, attempt.json and exit.json land in the directory it checked."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 6", warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    checked = attempt_dir.with_name("a1.checked")
    os.rename(attempt_dir, checked)
    os.symlink(elsewhere, attempt_dir)
    handle.release_barrier(b"G")
    assert finish(handle) == b"RX"
    handle.close()
    assert marker.exists() and os.listdir(elsewhere) == []
    assert read_json(checked / "exit.json") == handle.exit_record
    assert handle.exit_record["exit_code"] == 6
    assert {"GO", "READY", "attempt.json"} <= set(os.listdir(checked))


def test_an_abort_told_on_the_pipe_ends_the_barrier_without_its_file(layout, tmp_path,
                                                                    prestart):
    """A cancel may come before the shim made its directory: the coordinator can then write
    no ABORT file, and tells it on the pipe alone. The shim leaves at once, running
    nothing (it used to wait for the file, up to the barrier timeout)."""
    warm = prestart()
    os.kill(warm.handle.popen.pid, signal.SIGSTOP)
    try:
        handle, attempt_dir, marker = spawn(layout, tmp_path, warm=warm)
        handle.release_barrier(b"A")
    finally:
        os.kill(warm.handle.popen.pid, signal.SIGCONT)
    assert finish(handle, timeout=10) in (b"", b"R")
    handle.close()
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    assert not (attempt_dir / "ABORT").exists()


def test_a_warm_shim_nobody_needs_exits_when_dismissed(prestart):
    warm = prestart()
    pid = warm.handle.popen.pid
    warm.dismiss()
    assert warm.handle.popen.returncode == 0
    wait_for(lambda: parent_pid(pid) is None, message="the shim reaped")


def test_a_dead_warm_shim_fails_the_spawn_and_leaves_no_spec(layout, tmp_path, prestart):
    warm = prestart()
    warm.handle.popen.kill()
    warm.handle.popen.wait()
    with pytest.raises(OSError):  # its pid may be journaled already: no other shim stands in
        spawn(layout, tmp_path, warm=warm)
    assert not (layout.attempt_dir("job-1", "a1") / "spec.marshal").exists()
    assert not (tmp_path / "marker").exists()


def test_a_warm_shim_runs_nothing_outside_its_runs_attempts(layout, tmp_path, prestart):
    warm = prestart()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "spec.marshal").write_bytes(marshal.dumps({"argv": ["touch", "x"]}))
    os.write(warm.control_fd, os.fsencode(elsewhere) + b"\n")
    os.close(warm.control_fd)  # the end of the message
    assert warm.handle.popen.wait(timeout=15) == 0
    assert not (elsewhere / "READY").exists()
    warm.handle.close()


def test_a_warm_shim_gets_its_spec_and_secrets_through_its_pipe_not_the_disk(
        layout, tmp_path, prestart):
    attempt_dir = layout.attempt_dir("job-1", "a1")
    (attempt_dir / "spec.marshal").mkdir(parents=True)  # any write of the file would fail
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=prestart(),
                                        env={"PATH": "/usr/bin:/bin", "API_TOKEN": "s3cret"},
                                        body='printf %s "$API_TOKEN" > token')
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 0 and (tmp_path / "token").read_text() == "s3cret"


def test_a_spec_too_big_for_the_pipe_goes_through_spec_marshal(layout, tmp_path, prestart):
    big = {f"BIG{i}": "x" * 60_000 for i in range(5)}  # more than a pipe holds by default
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=prestart(),
                                        env={"PATH": "/usr/bin:/bin", **big},
                                        body='printf %s "$BIG0$BIG1$BIG2$BIG3$BIG4" | wc -c > size')
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 0 and int((tmp_path / "size").read_text()) == 300_000
    assert not (attempt_dir / "spec.marshal").exists()  # read, then removed by the shim


def test_a_spec_too_big_for_a_one_page_pipe_goes_through_spec_marshal(
        layout, tmp_path, prestart, monkeypatch):
    """A user over pipe-user-pages-soft gets pipes of a page or two: a spec of some KiB,
    which a pipe of the default size holds, must then not go into the control pipe (a
    write that could block the coordinator on the launch path) but through spec.marshal,
    and the command gets its environment all the same."""
    made_pipe = os.pipe

    def one_page_pipe():
        fds = made_pipe()
        fcntl.fcntl(fds[1], fcntl.F_SETPIPE_SZ, os.sysconf("SC_PAGE_SIZE"))
        return fds
    monkeypatch.setattr(os, "pipe", one_page_pipe)
    written, write_spec = [], launcher.write_spec
    monkeypatch.setattr(launcher, "write_spec",
                        lambda path, spec: written.append(path) or write_spec(path, spec))
    handle, attempt_dir, marker = spawn(layout, tmp_path, warm=prestart(),
                                        env={"PATH": "/usr/bin:/bin", "MID": "x" * 12_000},
                                        body='printf %s "$MID" | wc -c > size')
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 0 and int((tmp_path / "size").read_text()) == 12_000
    assert written == [attempt_dir / "spec.marshal"]


def test_a_shim_that_finds_go_waiting_does_not_wake_the_coordinator(layout, tmp_path,
                                                                      prestart):
    warm = prestart()
    warm.handle.release_barrier(b"G")  # journaled with the attempt: sent before it is known
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 3", warm=warm)
    assert finish(handle) == b"X"  # no "R": only the end of its attempt
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 3 and marker.exists()
    assert read_json(attempt_dir / "READY")["pid"] == handle.popen.pid  # READY all the same
    handle.close()


@pytest.fixture
def attempts_disk(layout):
    """The run's attempts/ on a small tmpfs of their own, to fill."""
    with small_tmpfs(layout.attempts) as disk:
        yield disk


def temporary(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".")
                  or p.name.endswith(".tmp"))


def test_an_exit_the_full_disk_keeps_out_is_told_then_written_when_room_returns(
        layout, tmp_path, shim_for, attempts_disk):
    """ENOSPC on exit.json: the shim holds the exit, tells the coordinator on its pipe,
    leaves no temp file, and writes exit.json once there is room."""
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 3", warm=shim_for())
    assert wait_for(handle.read_status, message="READY on the status pipe") == b"R"
    attempts_disk.fill()
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    assert wait_for(handle.read_status, message="the exit on the status pipe") == b"X"
    assert marker.exists()
    assert handle.exit_record["exit_code"] == 3 and handle.exit_record["error"] is None
    assert handle.popen.poll() is None and not (attempt_dir / "exit.json").exists()
    assert temporary(attempt_dir) == []  # its failed try cleaned up after itself

    attempts_disk.free()
    assert finish(handle) == b""  # nothing more was said
    assert read_json(attempt_dir / "exit.json") == handle.exit_record
    assert temporary(attempt_dir) == []
    assert "exit.json written at try " in (attempt_dir / "shim.log").read_text()
    handle.close()


def test_the_status_pipe_puts_an_exit_record_split_across_reads_together():
    """A read may end inside an X record: it counts only once its newline has come."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    handle = launcher.ShimHandle(popen=None, go_fd=None, status_fd=read_fd)
    os.write(write_fd, b'RX{"exit_code": 0, ')
    assert handle.read_status() == b"R" and handle.exit_record is None
    assert handle.read_status() is None
    os.write(write_fd, b'"signal": null}\n')
    assert handle.read_status() == b"X"
    assert handle.exit_record == {"exit_code": 0, "signal": None}
    os.close(write_fd)
    assert handle.read_status() == b""
    os.close(read_fd)


def test_a_d_with_its_eof_already_behind_it_ends_the_attempt_in_one_read():
    """``D`` is the shim's last word, and its end of file follows at once: when both are
    waiting, one call says the attempt is over (one loop turn, not two), the exit told
    before it kept; while the EOF has not come, ``D`` alone says nothing yet."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    handle = launcher.ShimHandle(popen=None, go_fd=None, status_fd=read_fd)
    os.write(write_fd, b'X{"exit_code": 3, "signal": null}\nD')
    os.close(write_fd)
    assert handle.read_status() == b"" and handle.over
    assert handle.exit_record == {"exit_code": 3, "signal": None}
    os.close(read_fd)

    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    handle = launcher.ShimHandle(popen=None, go_fd=None, status_fd=read_fd)
    os.write(write_fd, b"D")
    assert handle.read_status() is None and handle.over
    os.close(write_fd)
    assert handle.read_status() == b""
    os.close(read_fd)


@pytest.mark.parametrize("then", ["room", "abort"])
def test_a_shim_that_cannot_write_ready_runs_nothing_until_room_or_abort(
        layout, tmp_path, prestart, attempts_disk, then):
    """READY too is written again until it is: a warm shim, GO journaled with its attempt,
    must not die having run nothing while the GO file says it may have run (``lost``).
    ABORT ends the wait: a cancel or a stop does not wait for disk space."""
    warm = prestart()
    attempt_dir = layout.attempt_dir("job-1", "a1")
    attempt_dir.mkdir(parents=True)
    deletions = Deletions(attempt_dir)
    attempts_disk.fill()
    if then == "room":
        warm.handle.release_barrier(b"G")
    handle, _, marker = spawn(layout, tmp_path, warm=warm)
    wait_for(lambda: deletions.seen(".READY.") or handle.popen.poll() is not None,
             message="a failed try at READY")
    deletions.close()
    assert handle.popen.poll() is None and not marker.exists()
    if then == "room":
        attempts_disk.free()
        finish(handle)
        assert read_json(attempt_dir / "exit.json")["exit_code"] == 0 and marker.exists()
    else:
        write_atomic(attempt_dir / "ABORT", b"")
        handle.release_barrier(b"A")
        finish(handle)
        assert not marker.exists() and not (attempt_dir / "READY").exists()
    assert temporary(attempt_dir) == []
    handle.close()


def test_orphaned_shim_gives_up_without_running_the_command(layout, tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "BARRIER_TIMEOUT_S", 0.5)
    handle, attempt_dir, marker = spawn(layout, tmp_path)
    wait_for(lambda: (attempt_dir / "READY").exists())
    handle.release_barrier(b"")  # the coordinator is gone and none comes back
    finish(handle)
    assert not marker.exists() and not (attempt_dir / "exit.json").exists()
    handle.close()


def spawn_argv(layout, argv, cwd, env=None, warm=None, uid=None):
    effect = SpawnAttempt(job_id="job-1", attempt_id="a1", argv=tuple(argv), command=None,
                          cwd=str(cwd), env=env or {"PATH": "/usr/bin:/bin"}, profile="cpu",
                          gpus=(), uid=uid, metadata={"peer": "p"})
    handle = launcher.spawn(layout, effect, attempt_environment(layout, effect), warm)
    return handle, layout.attempt_dir("job-1", "a1")


def attempt_log(layout):
    return layout.log("job-1", "a1").read_text()


@pytest.mark.parametrize("argv, code, words", [
    (["no-such-command-praxist"], 127, ["No such file or directory", "'no-such-command-praxist'"]),
    (["/no/such/dir/prog"], 127, ["No such file or directory", "'/no/such/dir/prog'"]),
    (["{tmp}/data"], 126, ["Permission denied", "/data'"]),  # not executable
    (["{tmp}/garbage"], 126, ["Exec format error", "/garbage'"]),
    (["true", "\0"], 126, ["ValueError"]),  # cannot be passed to exec at all
])
def test_a_command_that_cannot_start_is_recorded(layout, tmp_path, argv, code, words):
    (tmp_path / "data").write_text("x")
    (tmp_path / "garbage").write_bytes(b"\x7fELF\x00garbage")
    (tmp_path / "garbage").chmod(0o755)
    argv = [arg.format(tmp=tmp_path) for arg in argv]
    handle, attempt_dir = spawn_argv(layout, argv, tmp_path)
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == code and record["signal"] is None
    assert record["error"].startswith("could not start the command: ")
    for word in words:
        assert word in record["error"]


@pytest.mark.parametrize("name, code", [("missing", 127), ("file", 126)])
def test_a_bad_cwd_is_recorded(layout, tmp_path, name, code):
    (tmp_path / "file").write_text("")
    handle, attempt_dir = spawn_argv(layout, ["true"], tmp_path / name)
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == code and str(tmp_path / name) in record["error"]
    assert record["error"].startswith("could not start the command: [Errno ")


@pytest.mark.parametrize("plant, words", [
    (lambda logs, elsewhere: os.symlink(elsewhere, logs), "is a symbolic link"),
    (lambda logs, elsewhere: logs.write_text(""), "is not a directory"),
    (lambda logs, elsewhere: logs.mkdir(mode=0o777) or logs.chmod(0o777),
     "is writable by others (mode 0777) and not sticky"),
])
def test_the_shim_refuses_a_log_directory_it_did_not_make_its_own(layout, tmp_path, plant,
                                                                 words):
    """The shim makes logs/experiments/<job_id>/ (off the coordinator's loop): one planted
    there that is not a private directory of ours is never written through."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plant(layout.log("job-1", "a1").parent, elsewhere)
    handle, attempt_dir = spawn_argv(layout, ["sh", "-c", "echo ran > %s/ran" % tmp_path],
                                     tmp_path)
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 126 and words in record["error"], record
    assert record["error"].startswith("could not start the command: the log directory ")
    assert not os.listdir(elsewhere) and not (tmp_path / "ran").exists()


def test_a_command_killed_by_a_signal(layout, tmp_path):
    handle, attempt_dir, _ = spawn(layout, tmp_path, body="kill -KILL $$")
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 137 and record["signal"] == 9 and record["error"] is None


def test_a_group_sigterm_kills_the_command_and_the_shim_records_it(layout, tmp_path, shim_for):
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exec sleep 30", warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    wait_for(marker.exists)
    wait_for(lambda: any(parent_pid(pid) == handle.popen.pid and _comm(pid) == "sleep"
                         for pid in live_pids()))
    os.killpg(handle.popen.pid, signal.SIGTERM)
    finish(handle)
    record = read_json(attempt_dir / "exit.json")
    assert record["exit_code"] == 143 and record["signal"] == signal.SIGTERM
    handle.close()


# our own uid (posix_spawn), and another's (fork, switch, exec): R-SEC-3
@pytest.mark.parametrize("uid", [None, pytest.param(NOBODY, marks=NEEDS_ROOT)])
def test_the_command_gets_default_signal_dispositions_and_only_its_own_fds(layout, shim_for,
                                                                          uid):
    handle, attempt_dir = spawn_argv(layout, ["sh", "-c", "cat /proc/self/status; "
                                              "ls -l /proc/self/fd/ >&2"], "/",
                                     warm=shim_for(), uid=uid)
    go_and_wait(handle, attempt_dir)
    log = attempt_log(layout)
    fields = dict(line.split(":\t", 1) for line in log.splitlines() if ":\t" in line)
    ignored, blocked = int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)
    for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGINT, signal.SIGHUP,
                   signal.SIGCHLD):  # the fork server ignores SIGCHLD: its children must not
        assert not ignored & (1 << (signum - 1)), signum
        assert not blocked & (1 << (signum - 1)), signum
    fds = {line.split()[-3]: line.split()[-1] for line in log.splitlines() if " -> " in line}
    assert fds["0"] == "/dev/null"
    assert fds["1"] == fds["2"] == str(layout.log("job-1", "a1"))
    assert "pipe:" not in " ".join(fds.values())  # the status pipe's EOF means the shim exited
    assert "socket:" not in " ".join(fds.values())  # nor the fork server's


@NEEDS_ROOT
def test_a_command_of_another_uid_runs_as_that_user(layout, shim_for):
    """As at(1) and cron: the user's uid, gid and groups, HOME, USER and LOGNAME (the
    request's own env would win); the shim itself stays ours, to write exit.json."""
    handle, attempt_dir = spawn_argv(
        layout, ["sh", "-c", 'id -u; id -g; id -G; echo "$HOME $USER $LOGNAME"; pwd'], "/",
        warm=shim_for(), uid=NOBODY)
    assert go_and_wait(handle, attempt_dir)["exit_code"] == 0
    user = pwd.getpwuid(NOBODY)
    groups = " ".join(map(str, os.getgrouplist(user.pw_name, user.pw_gid)))
    assert attempt_log(layout).splitlines() == [
        str(NOBODY), str(user.pw_gid), groups, f"{user.pw_dir} {user.pw_name} {user.pw_name}",
        "/"]
    assert os.stat(attempt_dir / "exit.json").st_uid == os.geteuid()


@NEEDS_ROOT
@pytest.mark.parametrize("argv, cwd, code, words", [
    (["true"], "{tmp}", 126, ["Permission denied", "{tmp}"]),  # the user's rights, not ours
    (["no-such-command-praxist"], "/", 127, ["No such file or directory",
                                             "'no-such-command-praxist'"]),
    (["true", "\0"], "/", 126, ["ValueError"]),
])
def test_a_command_of_another_uid_that_cannot_start_is_recorded(layout, tmp_path, argv, cwd,
                                                                code, words):
    tmp_path.chmod(0o700)
    handle, attempt_dir = spawn_argv(layout, argv, cwd.format(tmp=tmp_path), uid=NOBODY)
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == code and record["signal"] is None
    assert record["error"].startswith("could not start the command: ")
    for word in words:
        assert word.format(tmp=tmp_path) in record["error"]


def test_sigpipe_kills_a_writer_as_in_a_shell(layout, tmp_path):
    handle, attempt_dir, _ = spawn(layout, tmp_path, body="yes | head -1 >/dev/null; "
                                                        "yes | (exec head -1); exit 0")
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 0
    assert "Broken pipe" not in attempt_log(layout)  # yes died of SIGPIPE, not EPIPE


def test_the_shim_is_the_subreaper_and_waits_for_orphans(layout, tmp_path, shim_for):
    pidfile = tmp_path / "orphan"
    handle, attempt_dir, _ = spawn(layout, tmp_path, body=f"(sleep 2 & echo $! > {pidfile})",
                                   warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    write_atomic(attempt_dir / "GO", b"")
    handle.release_barrier(b"G")
    orphan = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip()))
    wait_for(lambda: parent_pid(orphan) == handle.popen.pid, message="the orphan reparented")
    assert not (attempt_dir / "exit.json").exists() and handle.popen.poll() is None
    finish(handle)
    assert parent_pid(orphan) is None  # reaped before exit.json was written
    assert read_json(attempt_dir / "exit.json")["exit_code"] == 0
    handle.close()


def test_a_dead_shim_tells_its_signal_only_to_its_parent(layout, tmp_path, shim_for):
    """A shim killed outright leaves no exit record: the attempt's reason names the signal
    where the coordinator is its parent (Popen); a forked shim's status went to the server."""
    handle, attempt_dir, _ = spawn(layout, tmp_path, warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    os.kill(handle.popen.pid, signal.SIGKILL)
    handle.popen.wait(timeout=15)
    forked = isinstance(handle.popen, launcher.Supervisor)
    assert handle.death() == ("supervisor died" if forked else "supervisor died: signal 9")
    handle.close()


def test_the_spec_is_private_and_never_left_behind(layout, tmp_path, monkeypatch):
    seen = {}

    def refuse(argv, **kwargs):
        spec = layout.attempt_dir("job-1", "a1") / "spec.marshal"
        seen["mode"] = spec.stat().st_mode & 0o777
        seen["spec"] = marshal.loads(spec.read_bytes())
        raise OSError(errno.EAGAIN, "no processes")

    with monkeypatch.context() as patch:
        patch.setattr(launcher.subprocess, "Popen", refuse)
        with pytest.raises(OSError):
            spawn(layout, tmp_path, env={"PATH": "/bin", "TOKEN": "s3cret"})
    attempt_dir = layout.attempt_dir("job-1", "a1")
    assert seen["mode"] == 0o600 and seen["spec"]["env"]["TOKEN"] == "s3cret"
    assert not (attempt_dir / "spec.marshal").exists()  # the shim could not start
    # ABORT found at start: the shim exits without READY, and still removes the spec
    write_atomic(attempt_dir / "ABORT", b"")
    handle, _, marker = spawn(layout, tmp_path)
    finish(handle)
    assert not (attempt_dir / "READY").exists() and not marker.exists()
    assert not (attempt_dir / "spec.marshal").exists()
    handle.close()
    # the ordinary path: read, then removed before READY
    os.unlink(attempt_dir / "ABORT")
    handle, _, _ = spawn(layout, tmp_path)
    record = go_and_wait(handle, attempt_dir)
    assert record["exit_code"] == 0 and not (attempt_dir / "spec.marshal").exists()
    assert sorted(p.name for p in attempt_dir.iterdir() if p.name.startswith(".")) == []


def test_the_shim_imports_only_what_it_must(layout, tmp_path, monkeypatch):
    """Start-up is on every job's path: no json (re), subprocess, signal (enum), ctypes."""
    monkeypatch.setattr(launcher, "PYTHON_FLAGS", ("-S", "-X", "importtime"))
    handle, attempt_dir, _ = spawn(layout, tmp_path, body="exit 3")
    assert go_and_wait(handle, attempt_dir)["exit_code"] == 3
    lines = (attempt_dir / "shim.log").read_text().splitlines()
    modules = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert {"shim", "_ctypes"} <= modules  # the whole life ran, the subreaper included
    assert not modules & {"json", "re", "subprocess", "signal", "enum", "ctypes", "os",
                          "_socket"}, modules


@pytest.mark.parametrize("value", [
    "", "plain", 'quote " and \\ backslash', "\x00\x01\n\r\t\x1f\x7f", "é ü 日本", "\U0001f600",
    "\udcff lone surrogate", 0, -3, 2**40, 1.5, 1733000000.123456, 1e-7, 1e22, None, True, False,
])
def test_the_shim_json_writer_matches_json(value):
    from praxist_fs.backends import shim_command

    document = {"key": value, "k\"\\\n": value}
    assert json.loads(shim_command.to_json(document)) == json.loads(json.dumps(document))
    assert json.loads(shim_command.to_json(document)) == document
    assert shim_command.to_json({"a": 1, "b": None}) == json.dumps({"a": 1, "b": None}).encode()


def test_ready_says_what_the_shim_is_and_when_as_the_json_writer_would(monkeypatch):
    """READY, whose identity a warm shim encodes before it is told its attempt, holds the
    same bytes as the JSON writer makes of the whole document: a later coordinator and
    the tools read the shim's pid, start time, boot and the time it was written."""
    from praxist_fs.backends import shim, shim_command

    identity = shim.identity_of_ours()
    for at in (1733000000.123456, 1e22, 1765000000.0):
        monkeypatch.setattr(shim.time, "time", lambda: at)
        ready = shim.ready_document(identity)
        document = dict(shim_command.own_identity(), at=at)
        assert ready == shim_command.to_json(document)
        assert json.loads(ready) == document and document["pid"] == os.getpid()


def _comm(pid):
    fields = stat_fields(pid)
    return fields[0] if fields else None


@pytest.mark.parametrize("argv", [["true"], ["no-such-command-praxist"]])
def test_the_shim_writes_attempt_json_once_past_the_barrier(layout, tmp_path, shim_for, argv):
    """attempt.json comes from the shim, not the coordinator's loop (PROTOCOL.md section 6):
    the description spawn rendered, once GO is given, whether the command could start or
    not; nothing of the command's environment."""
    handle, attempt_dir = spawn_argv(layout, argv, tmp_path, env={
        "PATH": "/usr/bin:/bin", "SECRET_TOKEN": "hunter2"}, warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    assert not (attempt_dir / "attempt.json").exists()  # nothing written before GO
    go_and_wait(handle, attempt_dir)
    described = read_json(attempt_dir / "attempt.json")
    assert described == {"peer": "p", "argv": argv, "command": None, "cwd": str(tmp_path),
                         "log": str(layout.log("job-1", "a1"))}
    assert b"hunter2" not in (attempt_dir / "attempt.json").read_bytes()


def test_a_shim_told_go_on_its_pipe_writes_the_go_file(layout, tmp_path, shim_for):
    """GO told on the pipe (journaled first) is recorded by the shim, as its command
    starts, in the GO file the handshake's readers look for (client.enclosing_attempt):
    the coordinator's loop no longer creates it."""
    handle, attempt_dir, marker = spawn(layout, tmp_path, body="exit 0", warm=shim_for())
    wait_for(lambda: (attempt_dir / "READY").exists())
    assert not (attempt_dir / "GO").exists()
    handle.release_barrier(b"G")
    finish(handle)
    assert marker.exists() and (attempt_dir / "GO").read_bytes() == b""
    handle.close()
