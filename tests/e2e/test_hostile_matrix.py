"""The hostile-input matrix H01..H38 (shared/research/anchors-reliability.md, section 6)
against a real coordinator, for the cases tests/e2e/test_hostile.py does not cover.

Most cases share one coordinator (module scope): every hostile file is dropped at once,
then each test checks what a peer would see for its own file (the reply, the file kept in
spool/rejected/ and its .error.json naming the field), that the coordinator is still alive,
and that the next good request is accepted. The run has one slot, held by a sleeping
blocker job, so the good requests are only accepted and queued: no process is started
while a test runs (the leak guard of tests/conftest.py stays quiet).

Cases that crashed (or still crash) the coordinator get a coordinator of their own; one
still crashing is a strict xfail. "Skipped safely" is never the outcome here: a FIFO, a
directory, a socket or a device named *.json is opened O_NONBLOCK|O_NOFOLLOW, refused by
fstat, and moved as it is into spool/rejected/ with a reply, without blocking the loop.
Not covered: H09 (the coordinator has no owner check), H28 (secret handling), H35's
vanish-between-list-and-open race (not deterministic from outside).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import pytest

from praxist_fs.adapters.spool import GRACE_SECONDS

from .conftest import TASK, Run, read_json, request, wait_for

ONE_SLOT = TASK.format(slots=1, retries=1).replace("max_concurrent_experiments: 8",
                                                    "max_concurrent_experiments: 1")
GOOD = json.dumps(request("good-tag")).encode()


def good(tag: str, **fields) -> bytes:
    return json.dumps(request(tag, **fields)).encode()


def with_raw(tag: str, key: str, raw_json: str) -> bytes:
    """A valid request plus one key whose value is written as raw JSON text."""
    body = json.dumps(request(tag))[:-1]
    return f'{body}, "{key}": {raw_json}}}'.encode()


def log_tail(run: Run) -> str:
    path = run.root.parent / f"coordinator-{run.root.name}.log"
    try:
        return path.read_text(errors="replace")[-1500:]
    except OSError:
        return ""


def alive(run: Run) -> None:
    if run.proc.poll() is not None:
        raise AssertionError(f"the coordinator exited with code {run.proc.returncode}:\n"
                             + log_tail(run))


def written(run: Run, path: str, timeout: float = 20.0) -> dict:
    """The JSON file at ``path`` under the run's spool once written; fails at once if the
    coordinator died meanwhile."""

    def ready():
        alive(run)
        return read_json(run.sched / "spool" / path)
    return wait_for(ready, timeout, message=path)


def answer(run: Run, request_id: str, timeout: float = 20.0) -> dict:
    """The reply to ``request_id``."""
    return written(run, f"replies/{request_id}.json", timeout)


def filed(run: Run, name: str, timeout: float = 20.0) -> dict:
    """The .error.json of a rejected file."""
    return written(run, f"rejected/{name}.error.json", timeout)


def next_good_is_accepted(run: Run, tag: str) -> None:
    alive(run)
    assert answer(run, run.submit(request(tag)))["outcome"] == "accepted"
    alive(run)


# -- the shared coordinator ------------------------------------------------------------


@dataclass
class Matrix:
    run: Run
    base: Path
    mtimes: dict[str, float] = field(default_factory=dict)  # file name -> mtime when dropped
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def incoming(self) -> Path:
        return self.run.sched / "spool" / "incoming"

    @property
    def rejected(self) -> Path:
        return self.run.sched / "spool" / "rejected"

    def drop(self, name: str, data: bytes, mode: int | None = None) -> None:
        """tmp/ then rename into incoming/, as a peer should; the mtime is remembered."""
        tmp = self.run.sched / "spool" / "tmp" / name
        tmp.write_bytes(data)
        if mode is not None:
            os.chmod(tmp, mode)
        self.mtimes[name] = os.stat(tmp).st_mtime
        os.rename(tmp, self.incoming / name)


@dataclass(frozen=True)
class Case:
    id: str          # the file is <id>.json unless ``setup`` says otherwise
    anchor: str      # H-number(s) of the research matrix
    # the field the reply and .error.json name (or a test of it); None: accepted
    field: str | Callable[[str], bool] | None
    words: tuple[str, ...] = ()   # must all appear in the problem (case-insensitive)
    data: bytes | None = None     # dropped as <id>.json through tmp/ when given
    setup: Callable[[Matrix, "Case"], None] | None = None
    check: Callable[[Matrix, "Case"], None] | None = None
    graced: bool = False          # a <file>-level parse error: judged only after 2 s

    @property
    def name(self) -> str:
        return f"{self.id}.json"


# -- special files ---------------------------------------------------------------------


def make_fifo(m: Matrix, case: Case) -> None:
    os.mkfifo(m.incoming / case.name)


def make_directory(m: Matrix, case: Case) -> None:
    os.mkdir(m.incoming / case.name)
    (m.incoming / case.name / "inside.json").write_bytes(good("inside-dir"))


def make_socket(m: Matrix, case: Case) -> None:
    # AF_UNIX paths are limited to 108 bytes: bind in a short directory, then move it in.
    short = Path(tempfile.mkdtemp(prefix="sock", dir="/tmp"))
    path = short / "s"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(path))
    finally:
        sock.close()
    try:
        os.rename(path, m.incoming / case.name)
    except OSError:  # /tmp on another filesystem than tmp_path
        m.notes[case.id] = "cannot place a socket in incoming/"
    os.rmdir(short)


def make_device(m: Matrix, case: Case) -> None:
    try:
        os.mknod(m.incoming / case.name, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null
    except OSError as exc:
        m.notes[case.id] = f"mknod not permitted here: {exc}"


def make_hardlink(m: Matrix, case: Case) -> None:
    precious = m.base / "precious.json"
    precious.write_bytes(good("hardlinked"))
    os.link(precious, m.incoming / case.name)


def check_hardlink(m: Matrix, case: Case) -> None:
    precious = m.base / "precious.json"
    assert precious.read_bytes() == good("hardlinked")
    assert os.stat(m.rejected / case.name).st_ino == os.stat(precious).st_ino


TERABYTE = 1 << 40


def make_sparse(m: Matrix, case: Case) -> None:
    tmp = m.run.sched / "spool" / "tmp" / case.name
    with open(tmp, "wb") as handle:
        handle.write(b'{"peer": ')
        handle.truncate(TERABYTE)
    os.rename(tmp, m.incoming / case.name)


def check_sparse(m: Matrix, case: Case) -> None:
    info = os.stat(m.rejected / case.name)
    assert info.st_size == TERABYTE and info.st_blocks < 1024  # kept, still sparse


def make_mode_0000(m: Matrix, case: Case) -> None:
    m.drop(case.name, good("mode-0000"), mode=0)


def make_symlink_to_directory(m: Matrix, case: Case) -> None:
    target = m.base / "a-directory"
    target.mkdir()
    (target / "inner.json").write_bytes(good("behind-a-link"))
    os.symlink(target, m.incoming / case.name)


def check_symlink_to_directory(m: Matrix, case: Case) -> None:
    kept = m.rejected / case.name
    assert kept.is_symlink() and os.readlink(kept) == str(m.base / "a-directory")
    assert (m.base / "a-directory" / "inner.json").read_bytes() == good("behind-a-link")


def make_symlink_to_journal(m: Matrix, case: Case) -> None:
    journal = m.run.sched / "journal" / "journal.log"
    m.notes["journal"] = (os.stat(journal).st_ino, journal.read_bytes())
    os.symlink(journal, m.incoming / case.name)


def check_symlink_to_journal(m: Matrix, case: Case) -> None:
    journal = m.run.sched / "journal" / "journal.log"
    inode, before = m.notes["journal"]
    info = os.lstat(journal)
    assert stat.S_ISREG(info.st_mode) and info.st_ino == inode  # not moved, not replaced
    assert journal.read_bytes().startswith(before)  # only the coordinator's own appends
    kept = m.rejected / case.name
    assert kept.is_symlink() and os.readlink(kept) == str(journal)


def make_dangling_symlink(m: Matrix, case: Case) -> None:
    os.symlink(m.base / "nothing-here.json", m.incoming / case.name)


def check_kind(kind: Callable[[int], bool]) -> Callable[[Matrix, Case], None]:
    def check(m: Matrix, case: Case) -> None:
        assert kind(os.lstat(m.rejected / case.name).st_mode)
    return check


def check_directory(m: Matrix, case: Case) -> None:
    assert stat.S_ISDIR(os.lstat(m.rejected / case.name).st_mode)
    assert (m.rejected / case.name / "inside.json").read_bytes() == good("inside-dir")


def write_in_place_partial(m: Matrix, case: Case) -> None:
    """Written in place (no tmp + rename) and never finished: judged after the grace."""
    path = m.incoming / case.name
    path.write_bytes(good("never-finished")[:20])
    m.mtimes[case.name] = os.stat(path).st_mtime


BAD_NAMES = {
    "leading-dash": "-dash.json",
    "newline": "new\nline.json",
    "not-utf8": os.fsdecode(b"bytes-\xff\xfe.json"),
    "unicode-rtl": "a\u202eb.json",
}


def drop_bad_name(m: Matrix, case: Case) -> None:
    m.drop(BAD_NAMES[case.id.removeprefix("name-")], good(f"tag-{case.id}"))


BIG_ENV = json.dumps({f"V{i}": "" for i in range(1025)})

CASES = [
    # H01/H02/H24/H16/H21/H20/H22: file-level parse errors, left alone for 2 s, then refused
    Case("empty", "H02", "<file>", ("empty",), b"", graced=True),
    Case("top-list", "H24", "<file>", ("list", "object"), b"[" + GOOD + b"]", graced=True),
    Case("top-string", "H24", "<file>", ("string", "object"), b'"hello"', graced=True),
    Case("top-null", "H24", "<file>", ("null", "object"), b"null", graced=True),
    Case("top-number", "H24", "<file>", ("object",), b"42", graced=True),
    Case("utf8-bom", "H16", "<file>", ("byte order mark",), b"\xef\xbb\xbf" + GOOD, graced=True),
    Case("utf16", "H16", "<file>", ("byte order mark",), GOOD.decode().encode("utf-16"),
         graced=True),
    Case("utf16le-no-bom", "H16", "<file>", ("json",), GOOD.decode().encode("utf-16-le"),
         graced=True),
    Case("utf32", "H16", "<file>", ("byte order mark",), GOOD.decode().encode("utf-32"),
         graced=True),
    Case("infinity", "H21", "<file>", ("infinity",), with_raw("inf", "eta_s", "Infinity"),
         graced=True),
    Case("minus-infinity", "H21", "<file>", ("-infinity",),
         with_raw("minf", "eta_s", "-Infinity"), graced=True),
    Case("int-5000-digits", "H20", "<file>", ("json",),
         with_raw("bigint", "generation", "1" + "0" * 5000), graced=True),
    Case("nesting-30000", "H22", "<file>", ("nested",),
         with_raw("deep", "env", "[" * 30000 + "]" * 30000), graced=True),
    Case("in-place-unfinished", "H34/H01", "<file>", ("json",), setup=write_in_place_partial,
         graced=True),
    # H19/H20/H21: wrong types and ranges
    Case("eta-true", "H19", "eta_s", ("seconds",), good("eta-true", eta_s=True)),
    Case("eta-string", "H19", "eta_s", ("seconds",), good("eta-string", eta_s="5")),
    Case("eta-1e400", "H21", "eta_s", ("seconds",), with_raw("e400", "eta_s", "1e400")),
    Case("eta-over-a-year", "H20", "eta_s", ("seconds",), good("eta-year", eta_s=10**9)),
    Case("generation-float", "H19", "generation", ("integer",),
         good("gen-float", generation=2.0)),
    Case("generation-negative", "H20", "generation", ("non-negative",),
         good("gen-neg", generation=-1)),
    Case("retry-string", "H19", "retry_terminal", ("true or false",),
         good("retry-str", retry_terminal="true")),
    Case("tag-number", "H19", "tag", ("string",), b'{"peer": "p", "tag": 7, "argv": ["true"]}'),
    # H14/H12: surrogates, NUL, newline in strings
    Case("tag-surrogate", "H14", "tag", ("surrogate",),
         b'{"peer": "p", "tag": "\\ud800", "argv": ["true"]}'),
    Case("argv-surrogate", "H14", "argv[0]", ("surrogate",),
         b'{"peer": "p", "tag": "argv-sur", "argv": ["\\udfff"]}'),
    Case("env-value-surrogate", "H14", "env.A", ("surrogate",),
         b'{"peer": "p", "tag": "env-sur", "argv": ["true"], "env": {"A": "\\ud800"}}'),
    Case("argv-nul", "H12", "argv[1]", ("nul",), good("argv-nul", argv=["echo", "a\x00b"])),
    Case("tag-nul", "H12", "tag", ("nul",), good("a\x00b")),
    Case("tag-newline", "H12", "tag", ("not allowed",), good("a\nb")),
    # H27: environment names
    Case("env-name-equals", "H27", "env.A=B", ("variable name",), good("env-eq", env={"A=B": "1"})),
    Case("env-name-nul", "H27", "env.A\x00B", ("variable name",),
         good("env-nul", env={"A\x00B": "1"})),
    Case("env-name-empty", "H27", lambda f: f.startswith("env.") and f != "env.",
         ("variable name",), good("env-empty", env={"": "1"})),
    Case("env-value-nul", "H27", "env.A", ("nul",), good("env-vnul", env={"A": "x\x00y"})),
    # H25: missing or null required fields
    Case("missing-peer", "H25", "peer", ("missing",), b'{"tag": "t", "argv": ["true"]}'),
    Case("peer-null", "H25", "peer", ("missing",),
         b'{"peer": null, "tag": "t", "argv": ["true"]}'),
    Case("missing-tag", "H25", "tag", ("missing",), b'{"peer": "p", "argv": ["true"]}'),
    Case("no-command", "H25", "argv", ("command",), b'{"peer": "p", "tag": "t"}'),
    Case("argv-and-command", "H25/H26", "argv", ("command",),
         good("both", command="echo hi; rm -rf /")),
    # H23: per-field limits under the file size cap
    Case("argv-4097-items", "H23", "argv", ("4096",), good("many", argv=["x"] * 4097)),
    Case("env-1025-vars", "H23", "env", ("1024",), with_raw("big-env", "env", BIG_ENV)),
    Case("command-over-32k", "H23", "command", ("longer",),
         json.dumps({"peer": "p", "tag": "long-cmd", "command": "x" * (32 * 1024 + 1)}).encode()),
    # H10/H11/H13: names
    Case("tag-dotdot", "H11", "tag", ("not allowed",), good("..")),
    Case("tag-absolute", "H11", "tag", ("not allowed",), good("/etc/passwd")),
    Case("tag-empty", "H11", "tag", ("empty",), good("")),
    Case("tag-leading-dash", "H11", "tag", ("not allowed",), good("-rf")),
    Case("tag-129-chars", "H11", "tag", ("128",), good("a" * 129)),
    Case("tag-rtl-override", "H13", "tag", ("not allowed",), good("abc\u202etxt")),
    Case("tag-nfd", "H13", "tag", ("not allowed",), good("cafe\u0301")),
    Case("request-id-traversal", "H10", "request_id", ("not allowed",),
         good("rid-trav", request_id="../../journal")),
    Case("cwd-relative", "H29", "cwd", ("absolute",), good("cwd-rel", cwd="work/dir")),
    Case("unknown-profile", "H30", "profile", ("unknown profile",),
         good("no-such-profile", profile="gpu_x1000")),
    # H05/H06/H07/H08/H04/H36: not a small regular file with one link
    Case("fifo", "H06", "<file>", ("not a regular file",), setup=make_fifo,
         check=check_kind(stat.S_ISFIFO)),
    Case("directory", "H07", "<file>", ("not a regular file",), setup=make_directory,
         check=check_directory),
    Case("socket", "H07", "<file>", ("cannot be opened",), setup=make_socket,
         check=check_kind(stat.S_ISSOCK)),
    Case("char-device", "H07", "<file>", ("not a regular file",), setup=make_device,
         check=check_kind(stat.S_ISCHR)),
    Case("hardlink", "H08", "<file>", ("hard link",), setup=make_hardlink, check=check_hardlink),
    Case("sparse-1tb", "H04", "<file>", (str(TERABYTE), "limit"), setup=make_sparse,
         check=check_sparse),
    Case("symlink-to-directory", "H05", "<file>", ("symbolic link",),
         setup=make_symlink_to_directory, check=check_symlink_to_directory),
    Case("symlink-to-journal", "H05", "<file>", ("symbolic link",),
         setup=make_symlink_to_journal, check=check_symlink_to_journal),
    Case("symlink-dangling", "H05", "<file>", ("symbolic link",), setup=make_dangling_symlink,
         check=check_kind(stat.S_ISLNK)),
    # root reads a mode-0000 file anyway: then it is simply a good request
    Case("mode-0000", "H36", None if os.geteuid() == 0 else "<file>",
         () if os.geteuid() == 0 else ("cannot be opened",), setup=make_mode_0000),
    # H33: file names without a usable request id: filed in rejected/, no reply
    *[Case(f"name-{key}", "H33", "request_id", ("not a safe id",), setup=drop_bad_name)
      for key in BAD_NAMES],
]


def case_params():
    return [pytest.param(case, id=f"{case.anchor}-{case.id}") for case in CASES]


def running_command(run: Run, argv: list[str]) -> bool:
    for child in psutil.Process(run.proc.pid).children(recursive=True):
        try:
            if child.cmdline() == argv:
                return True
        except psutil.Error:
            continue
    return False


def renamed_over(m: Matrix) -> None:
    """H35: a request renamed over another one before the coordinator saw either."""
    for rid in ("over-first", "over-second"):
        tmp = m.run.sched / "spool" / "tmp" / f"{rid}.json"
        tmp.write_bytes(good(rid, request_id=rid))
        os.rename(tmp, m.incoming / "over.json")


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    base = tmp_path_factory.mktemp("matrix")
    task = base / "task.yaml"
    task.write_text(ONE_SLOT)
    run = Run(base / "run", task)
    run.root.mkdir()
    for sub in ("spool/tmp", "spool/incoming"):
        (run.sched / sub).mkdir(parents=True)
    m = Matrix(run=run, base=base)
    renamed_over(m)
    try:
        run.start()
        blocker = answer(run, run.submit(request("blocker", ["sleep", "600"])))
        assert blocker["outcome"] == "accepted"
        wait_for(lambda: running_command(run, ["sleep", "600"]),
                 message="the blocker job's command")
        for case in CASES:
            if case.setup is not None:
                case.setup(m, case)
            else:
                m.drop(case.name, case.data)
        yield m
    finally:
        if run.proc is not None and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        run.kill_attempt_groups()


@pytest.mark.parametrize("case", case_params())
def test_hostile_file(matrix, case):
    m, run = matrix, matrix.run
    if case.id in m.notes:
        pytest.skip(str(m.notes[case.id]))
    name = BAD_NAMES.get(case.id.removeprefix("name-"), case.name)
    if case.field is None:
        reply = answer(run, case.id)
        assert reply["outcome"] == "accepted", reply
        assert not os.path.lexists(m.incoming / name)  # consumed
    else:
        error = filed(run, name)
        assert (case.field(error["field"]) if callable(case.field)
                else error["field"] == case.field), error
        for word in case.words:
            assert word.lower() in error["problem"].lower(), error["problem"]
        assert os.path.lexists(m.rejected / name) and not os.path.lexists(m.incoming / name)
        if case.id.startswith("name-"):  # no usable request id: no reply at all
            assert error["request_id"] is None
            assert not os.path.exists(run.sched / "spool" / "replies" / f"{case.id}.json")
        else:
            reply = answer(run, case.id)
            assert reply["outcome"] == "rejected" and reply["job_id"] is None, reply
            assert reply["field"] == error["field"] and reply["problem"] == error["problem"]
            assert error["request_id"] == case.id
        if case.data is not None:  # kept byte for byte
            assert (m.rejected / name).read_bytes() == case.data
        if case.graced:  # a young unparseable file is left alone for the grace period
            judged = os.stat(m.rejected / f"{name}.error.json").st_mtime
            assert judged >= m.mtimes[name] + GRACE_SECONDS - 0.05
    if case.check is not None:
        case.check(m, case)
    next_good_is_accepted(run, f"after-{case.id}")


def test_renamed_over_before_seen_only_the_survivor_is_answered(matrix):
    run = matrix.run
    reply = answer(run, "over-second")
    assert reply["outcome"] == "accepted"
    next_good_is_accepted(run, "after-renamed-over")  # processed after over.json
    assert not (run.sched / "spool" / "replies" / "over-first.json").exists()
    assert not os.path.lexists(matrix.rejected / "over.json")


def test_unsafe_file_name_rescued_by_request_id(matrix):
    matrix.drop("-rescued name.json", good("rescued", request_id="rescued-1"))
    assert answer(matrix.run, "rescued-1")["outcome"] == "accepted"
    assert not os.path.lexists(matrix.incoming / "-rescued name.json")
    next_good_is_accepted(matrix.run, "after-rescued")


def test_written_in_place_and_completed_within_the_grace_is_accepted(matrix):
    """H34: a peer writes straight into incoming/ in two steps; the coordinator sees the
    partial body (inotify rings on create and write), leaves it, and takes the whole."""
    run, path = matrix.run, matrix.incoming / "grow.json"
    body = good("grown-in-place")
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, body[:25])
        time.sleep(0.8)  # several scans happen meanwhile
        alive(run)
        assert path.exists(), "the partial file was taken"
        assert not os.path.lexists(matrix.rejected / "grow.json"), "rejected while young"
        assert not (run.sched / "spool" / "replies" / "grow.json").exists()
        os.write(fd, body[25:])
    finally:
        os.close(fd)
    assert time.monotonic() - started < GRACE_SECONDS
    reply = answer(run, "grow")
    assert reply["outcome"] == "accepted", reply
    job = wait_for(lambda: run.job(reply["job_id"]))
    assert "grown-in-place" in json.dumps(job)
    next_good_is_accepted(run, "after-grow")


def test_retransmission_is_answered_again_without_a_new_job(matrix):
    """H31: the same bytes under the same name after the answer: the same reply again."""
    run = matrix.run
    first = answer(run, run.submit(request("retransmitted"), name="again.json"))
    assert first["outcome"] == "accepted"
    replies = run.sched / "spool" / "replies"
    os.unlink(replies / "again.json")  # so that the second answer is visible
    run.submit(request("retransmitted"), name="again.json")
    assert answer(run, "again") == first
    assert not os.path.lexists(matrix.incoming / "again.json")
    assert not os.path.lexists(matrix.rejected / "again.json")
    next_good_is_accepted(run, "after-again")


def test_rewriting_through_a_kept_descriptor_has_no_effect(matrix):
    """H38: the peer keeps the file open after the rename and rewrites it once answered."""
    run = matrix.run
    tmp = run.sched / "spool" / "tmp" / "kept.json"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, good("kept-original"))
        os.rename(tmp, matrix.incoming / "kept.json")
        reply = answer(run, "kept")
        assert reply["outcome"] == "accepted"
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, good("kept-evil", argv=["sh", "-c", "echo evil"]))
        os.fsync(fd)
    finally:
        os.close(fd)
    assert not os.path.lexists(matrix.incoming / "kept.json")  # consumed: the inode is orphaned
    next_good_is_accepted(run, "after-kept")
    job = json.dumps(run.job(reply["job_id"]))
    assert "kept-original" in job and "evil" not in job
    assert "kept-evil" not in json.dumps(run.status())


# -- a flood (own coordinator) ------------------------------------------------------------


def journal_records(run: Run) -> list[dict]:
    lines = (run.sched / "journal" / "journal.log").read_bytes().splitlines()
    return [json.loads(line.split(b" ", 2)[2]) for line in lines]


def test_flood_of_2000_requests_each_answered_once(make_run):
    """H37: 2,000 valid requests dropped at once (four full scan batches): every one is
    answered exactly once, in bounded time, and the coordinator keeps serving."""
    run = make_run(task_text=ONE_SLOT)
    run.start()
    assert answer(run, run.submit(request("flood-blocker", ["sleep", "600"])))["outcome"] \
        == "accepted"
    tmp, incoming = run.sched / "spool" / "tmp", run.sched / "spool" / "incoming"
    ids = [f"flood-{i:04d}" for i in range(2000)]
    for rid in ids:
        tag = f"tag-{rid}" if int(rid[-4:]) % 2 else "tag-shared"  # 1,001 jobs, 999 dups
        (tmp / f"{rid}.json").write_bytes(good(tag))
    started = time.monotonic()
    for rid in ids:
        os.rename(tmp / f"{rid}.json", incoming / f"{rid}.json")
    replies, expected = run.sched / "spool" / "replies", {f"{rid}.json" for rid in ids}

    def all_answered() -> bool:
        alive(run)
        return expected <= set(os.listdir(replies)) and not os.listdir(incoming)
    wait_for(all_answered, timeout=60, interval=0.2, message="2,000 replies")
    elapsed = time.monotonic() - started
    outcomes = [read_json(replies / f"{rid}.json")["outcome"] for rid in ids]
    assert outcomes.count("accepted") == 1001 and outcomes.count("duplicate") == 999
    # exactly one journaled sighting (hence one reply) per request
    seen = [r["request_id"] for r in journal_records(run) if r["type"] == "request_seen"]
    assert sorted(r for r in seen if r.startswith("flood-")) == ids
    rejected = run.sched / "spool" / "rejected"
    assert not rejected.exists() or not os.listdir(rejected)
    assert elapsed < 45, f"2,000 requests took {elapsed:.1f} s"
    next_good_is_accepted(run, "after-flood")


# -- keys of the peer's own (own coordinator each: these once killed it) ------------------

# An empty key gave field "" and SubmissionDesk._reply (`if field`) then read job.job_id of
# None; a key with a lone surrogate made fsio.dumps raise UnicodeEncodeError in
# spool.reject. Either killed the coordinator, and again at each restart (the file stays
# in incoming/). Now the key is named printably.
PEER_KEYS = [
    ("H18-unknown-empty-key", b'{"peer": "p", "tag": "t", "argv": ["true"], "": 1}'),
    ("H17-duplicate-empty-key", b'{"peer": "p", "tag": "t", "argv": ["true"], "": 1, "": 2}'),
    ("H18-unknown-surrogate-key", b'{"peer": "p", "tag": "t", "argv": ["true"], "\\ud800": 1}'),
    ("H27-env-name-surrogate",
     b'{"peer": "p", "tag": "t", "argv": ["true"], "env": {"\\udc00": "1"}}'),
]


@pytest.mark.parametrize("data", [c[1] for c in PEER_KEYS], ids=[c[0] for c in PEER_KEYS])
def test_odd_key_is_rejected_and_the_coordinator_lives(make_run, data):
    run = make_run()
    run.start()
    run.drop_raw("odd-key.json", data)
    reply = answer(run, "odd-key")
    assert reply["outcome"] == "rejected", reply
    assert reply["field"].strip() not in ("", "env."), reply
    error = filed(run, "odd-key.json")
    assert error["field"] == reply["field"]
    assert (run.sched / "spool" / "rejected" / "odd-key.json").read_bytes() == data
    next_good_is_accepted(run, "after-odd-key")


def test_255_byte_file_name_is_rejected_and_the_coordinator_lives(make_run):
    """H33: a file name of 255 bytes (the longest Linux allows) has no usable id."""
    run = make_run()
    run.start()
    name = "n" * 250 + ".json"
    run.drop_raw(name, good("long-name"))
    incoming = run.sched / "spool" / "incoming"
    wait_for(lambda: alive(run) or not os.path.lexists(incoming / name), timeout=20,
             message="the long-named file to be filed")
    errors = [read_json(p) for p in (run.sched / "spool" / "rejected").glob("*.error.json")]
    assert [e["field"] for e in errors] == ["request_id"]
    next_good_is_accepted(run, "after-long-name")
