"""Atomic writes and the hostile-file reader of the spool."""

from __future__ import annotations

import ast
import errno
import fnmatch
import os
import re
from pathlib import Path

import pytest

from praxist_fs.adapters.fsio import (
    TEMP_PATTERN, create, makedirs, read_spool_file, rename, temp_name, write_atomic, write_json,
)
from praxist_fs.backends import shim_command
from praxist_fs.errors import BadRequest
from tests.disks import small_tmpfs

ROOT = Path(__file__).resolve().parents[2]


def test_a_write_that_fails_on_a_full_disk_names_the_file_meant(tmp_path):
    """os.write's ENOSPC names no file: the coordinator's log must say where the disk is
    full, by the file it meant to write, not its temp name; no temp file is left."""
    with small_tmpfs(tmp_path / "disk") as disk:
        disk.fill()
        target = disk.root / "reply.json"
        with pytest.raises(OSError) as failed:
            write_atomic(target, bytes(65536))
        assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(target))
        assert sorted(os.listdir(disk.root)) == ["filler"]


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    target = tmp_path / "status.json"
    write_json(target, {"v": 1})
    write_atomic(target, b'{"v": 2}\n', durable=True)
    assert target.read_text() == '{"v": 2}\n'
    assert os.listdir(tmp_path) == ["status.json"]


def test_temporary_names_are_hidden_beside_their_file_and_never_repeat(tmp_path):
    """PROTOCOL.md section 1 promises ``.NAME.*.tmp``: readers skip dot-files, the start
    sweeps the pattern. The shim cannot import fsio, so it makes the same form itself."""
    target = str(tmp_path / "exit.json")
    form = re.compile(r"\.exit\.json\.%d\.\d+\.tmp" % os.getpid())
    for make in (temp_name, shim_command.temp_name):
        names = [make(target) for _ in range(3)]
        assert len(set(names)) == 3
        for name in names:
            assert os.path.dirname(name) == str(tmp_path)
            assert form.fullmatch(os.path.basename(name))
            assert fnmatch.fnmatch(os.path.basename(name), TEMP_PATTERN)


def test_only_the_two_temp_name_functions_spell_a_temporary_name():
    """Every writer of ours goes through fsio.temp_name (write_atomic), or in the shim its
    twin: a string with ``.tmp`` anywhere else is a temporary file named by hand."""
    allowed = {("praxist_fs/adapters/fsio.py", "temp_name"),
               ("praxist_fs/adapters/fsio.py", None),  # TEMP_PATTERN, the sweep's glob
               ("praxist_fs/backends/shim_command.py", "temp_name")}
    found = set()
    for path in sorted([*(ROOT / "praxist_fs").rglob("*.py"), *(ROOT / "tools").glob("*.py")]):
        name = str(path.relative_to(ROOT))
        found |= {(name, function) for function in _functions_spelling(
            ast.parse(path.read_text()), ".tmp")}
    assert found == allowed


def _functions_spelling(tree, text):
    """The functions (None: module level) with a string holding ``text``, docstrings aside."""
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else function
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and \
                    text in child.value and id(child) not in docstrings:
                yield inner
            yield from visit(child, inner)

    return set(visit(tree, None))


@pytest.fixture
def spool(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, fd
    os.close(fd)


def test_reads_a_regular_file(spool):
    path, fd = spool
    (path / "ok.json").write_bytes(b"{}")
    assert read_spool_file(fd, "ok.json", 100) == b"{}"


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory", "hardlink", "too_large"])
def test_refuses_what_is_not_a_small_regular_file(spool, kind):
    path, fd = spool
    target = path / "x.json"
    if kind == "symlink":
        (path / "real").write_text("{}")
        target.symlink_to(path / "real")
    elif kind == "fifo":
        os.mkfifo(target)  # opened non-blocking: no hang
    elif kind == "directory":
        target.mkdir()
    elif kind == "hardlink":
        (path / "real").write_text("{}")
        os.link(path / "real", target)
    else:
        target.write_bytes(b" " * 101)
    with pytest.raises(BadRequest) as info:
        read_spool_file(fd, "x.json", 100)
    assert info.value.field == "<file>"


def test_sparse_file_is_refused_from_its_size_without_reading(spool):
    path, fd = spool
    with open(path / "big.json", "wb") as handle:
        handle.truncate(1 << 40)
    with pytest.raises(BadRequest, match="limit"):
        read_spool_file(fd, "big.json", 65536)


def test_vanished_file_is_not_an_error_of_the_peer(spool):
    _, fd = spool
    with pytest.raises(FileNotFoundError):
        read_spool_file(fd, "gone.json", 100)


def test_makedirs_makes_what_is_missing_and_refuses_a_file_in_the_way(tmp_path):
    (tmp_path / "a").mkdir()
    makedirs(tmp_path / "a" / "b" / "c", durable=True, mode=0o700)
    makedirs(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").stat().st_mode & 0o777 == 0o700
    (tmp_path / "file").write_text("")
    with pytest.raises(FileExistsError):
        makedirs(tmp_path / "file")


def test_create_makes_a_new_file_only(tmp_path):
    create(tmp_path / "spec", b"x", mode=0o600)
    assert (tmp_path / "spec").read_bytes() == b"x"
    assert (tmp_path / "spec").stat().st_mode & 0o777 == 0o600
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    for existing in ("spec", "link"):
        with pytest.raises(FileExistsError):
            create(tmp_path / existing, b"y")
    assert not (tmp_path / "elsewhere").exists()


def test_rename_moves_a_link_as_a_link(tmp_path):
    (tmp_path / "in.json").symlink_to("/etc/passwd")
    rename(tmp_path / "in.json", tmp_path / "kept")
    assert os.readlink(tmp_path / "kept") == "/etc/passwd"
