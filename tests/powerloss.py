"""Simulated power loss: rebuild the worst state a power cut could leave, from a ledger.

The coordinator, started with ``PRAXIST_POWERLOSS_LEDGER=<path>``, appends one
JSON line per disk-changing operation to the ledger (the format is in the
docstring of praxist_fs/adapters/fsio.py). This module replays the ledger under
a model weaker than any real file system, as ALICE's is, written without the
coordinator's code:

- a file's content is durable only up to its last fsync (an append beyond it
  is lost; a file never fsynced survives, if at all, empty);
- a directory entry made by create, rename, unlink or mkdir is durable only
  once its parent directory is fsynced; the two halves of a rename are
  independent (an unsynced move may leave the file in both places or back
  where it was);
- a directory that is lost takes everything in it along, whoever wrote it;
- names the ledger never mentions (peers' requests, a shim's `GO` and the
  command's log) stay as they are, as do paths outside the run directory; a
  shim tells the ledger the attempt directories it makes, the files it writes
  (`READY`, `attempt.json`, `exit.json`: as a create, with an fsync when it
  made one) and the directories it fsyncs. A supervisor told that its end is
  journaled leaves `exit.json` unsynced, so a power cut may take it (the
  journal holds the end); one never told fsyncs it and its directories.

``apply(ledger, root)`` rewrites ``root`` to that worst state after the coordinator
(and, to be a power cut, every process it started) was killed. ``apply(ledger, root,
seed=S)`` draws one of the states a real disk could leave instead, reproducibly:

- each file keeps its fsynced content plus any prefix of the writes made after it
  (whole writes, then part of the next one: a torn append, or the old bytes with a
  part of the new ones over them: a torn overwrite), and the part of a write that is
  there may read as zeros (the size reached the disk, the data did not);
- each directory entry changed since its directory's last fsync (a create, an
  unlink, a mkdir, either half of a rename) independently is or is not there, except
  that a moved file is never in neither place (the source's removal reaches the disk
  only with the destination's entry, as every journaling file system does it).
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path


def _written(data: bytes, kind: str, value: bytes | int) -> bytes:
    """A file's bytes after one write: appended, written over from its start (the old
    bytes past the new ones stay), or cut to a size."""
    if kind == "append":
        return data + value
    if kind == "overwrite":
        return value + data[len(value):]
    return data[:value]


@dataclass(eq=False)
class Node:
    """One inode: its current content and the content an fsync made durable."""

    kind: str                    # "file", "dir", "symlink" or "other"
    data: bytes = b""
    synced: bytes | None = None  # None: never fsynced
    mode: int = 0o644
    target: str = ""             # of a symlink
    writes: list = field(default_factory=list)  # ("append" | "overwrite", bytes) |
                                                # ("truncate", size), since the last
                                                # fsync, in order

    def write(self, kind: str, value: bytes | int) -> None:
        self.writes.append((kind, value))
        self.data = _written(self.data, kind, value)

    def fsynced(self) -> None:
        self.synced, self.writes = self.data, []

    def worst(self) -> bytes:
        return self.synced or b""

    def drawn(self, rng: random.Random) -> bytes:
        """The fsynced content, then a prefix of the later writes; the last one in part,
        perhaps as zeros."""
        data = self.worst()
        done = rng.randint(0, len(self.writes))
        for kind, value in self.writes[:done]:
            data = _written(data, kind, value)
        if done < len(self.writes) and self.writes[done][0] != "truncate":
            kind, value = self.writes[done]
            part = value[:rng.randint(0, len(value))]
            data = _written(data, kind, bytes(len(part)) if rng.random() < 0.25 else part)
        return data

    @classmethod
    def found(cls, description: dict) -> Node | None:
        """What a name held before the ledger touched it: durable as it stands."""
        kind = description["kind"]
        if kind == "absent":
            return None
        data = base64.b64decode(description.get("data", ""))
        return cls(kind, data, data, description.get("mode", 0o644),
                   description.get("target", ""))


@dataclass
class Change:
    """A directory entry set since its directory's last fsync: it may reach the disk."""

    path: str
    node: Node | None
    carried_by: int | None = None  # a rename's destination: there if its source's removal is
    pid: int | None = None         # of the process that set it, where the ledger says


@dataclass
class Model:
    live: dict[str, Node | None] = field(default_factory=dict)     # what a reader saw
    durable: dict[str, Node | None] = field(default_factory=dict)  # what a power cut leaves
    pending: list[Change] = field(default_factory=list)            # in the order made

    def _touch(self, path: str, before: Node | None) -> None:
        if path not in self.live:
            self.live[path] = self.durable[path] = before

    def _set(self, path: str, node: Node | None, pid: int | None = None) -> None:
        self.live[path] = node
        self.pending.append(Change(path, node, pid=pid))

    def _before(self, record: dict, key: str) -> Node | None:
        return Node.found(record[key]) if key in record else None

    def step(self, record: dict) -> None:
        op, path = record["op"], record["path"]
        if op == "mkdir":
            self._touch(path, None)
            self._set(path, Node("dir", synced=b""))
        elif op == "create":
            self._touch(path, None)
            node = Node("file", mode=record["mode"])
            node.write("append", base64.b64decode(record["data"]))
            self._set(path, node, record.get("pid"))
        elif op == "open_append":
            self._touch(path, self._before(record, "old"))
            if self.live[path] is None:
                self._set(path, Node("file", mode=record["mode"]))
        elif op == "append":
            self.live[path].write("append", base64.b64decode(record["data"]))
        elif op == "overwrite":
            self.live[path].write("overwrite", base64.b64decode(record["data"]))
        elif op == "truncate":
            self.live[path].write("truncate", record["size"])
        elif op == "chmod":
            self.live[path].mode = record["mode"]
        elif op == "fsync":
            node = self.live.get(path)
            if node is not None:
                node.fsynced()
        elif op == "rename":
            src = record["src"]
            self._touch(src, self._before(record, "moved"))
            self._touch(path, self._before(record, "replaced"))
            self._set(path, self.live[src], record.get("pid"))
            self._set(src, None, record.get("pid"))
            self.pending[-2].carried_by = len(self.pending) - 1
        elif op == "unlink":
            self._touch(path, self._before(record, "old"))
            self._set(path, None)
        elif op == "fsync_dir":
            self._sync_directory(path, set(record["names"]), record.get("pid"))
        elif op == "sync":  # sync(2): every file and every directory entry, as it stands
            for node in self.live.values():
                if node is not None:
                    node.fsynced()
            self.durable.update(self.live)
            self.pending = []
        else:
            raise ValueError(f"unknown ledger op {op!r}")

    def _sync_directory(self, directory: str, names: set[str], pid: int | None) -> None:
        """The directory's entries become durable. ``names`` is what it held: a name of
        ours that another process removed is gone, one another process made is theirs.
        A name another ledger writer set before this line but after ``pid`` listed the
        directory (a compaction child's listing, its loop's rename) is in neither: its
        change stays pending, to reach the disk with a later fsync."""
        last = {change.path: change for change in self.pending
                if os.path.dirname(change.path) == directory}
        unlisted = {path for path, change in last.items()
                    if None not in (pid, change.pid) and change.pid != pid and
                    change.node is not None and os.path.basename(path) not in names}
        for path in [p for p in self.live if os.path.dirname(p) == directory]:
            if path in unlisted:
                continue
            present = os.path.basename(path) in names
            if present and self.live[path] is None:
                del self.live[path], self.durable[path]
                continue
            if not present:
                self.live[path] = None
            self.durable[path] = self.live[path]
        self._settle(lambda change: os.path.dirname(change.path) == directory and
                     change.path not in unlisted)

    def _settle(self, made_durable) -> None:
        """Drop pending changes now durable; keep the links of the rest by position."""
        kept, where = [], {}
        for index, change in enumerate(self.pending):
            if not made_durable(change):
                where[index] = len(kept)
                kept.append(change)
        for change in kept:
            if change.carried_by is not None:
                change.carried_by = where.get(change.carried_by)
        self.pending = kept

    def drawn(self, rng: random.Random) -> tuple[dict[str, Node | None], dict[int, bytes]]:
        """One state a real disk could leave: each pending change there or not, and the
        content of each inode in it (by ``id``), drawn once wherever it is linked."""
        there = [rng.random() < 0.5 for _ in self.pending]
        for index, change in enumerate(self.pending):
            if change.carried_by is not None and there[change.carried_by]:
                there[index] = True
        state = dict(self.durable)
        for change, landed in zip(self.pending, there):
            if landed:
                state[change.path] = change.node
        contents = {}
        for node in state.values():
            if node is not None and node.kind == "file" and id(node) not in contents:
                contents[id(node)] = node.drawn(rng)
        return state, contents


def replay(ledger: Path) -> Model:
    model = Model()
    for line in ledger.read_bytes().splitlines():
        model.step(json.loads(line))
    return model


def apply(ledger: Path, root: Path, seed: int | str | None = None) -> list[str]:
    """Rewrite ``root`` to the worst surviving state, or with ``seed`` to a drawn one;
    returns what was changed, for messages."""
    model = replay(ledger)
    if seed is None:
        state, content = model.durable, Node.worst
    else:
        state, contents = model.drawn(random.Random(seed))

        def content(node: Node) -> bytes:
            return contents[id(node)]
    root_text = os.path.abspath(root) + os.sep
    changes = []
    for path in sorted(state, key=lambda p: (p.count(os.sep), p)):
        if not path.startswith(root_text):
            continue
        node = state[path]
        if node is None:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
                changes.append(f"lost directory {path}")
            elif os.path.lexists(path):
                os.unlink(path)
                changes.append(f"lost {path}")
        elif not os.path.isdir(os.path.dirname(path)):
            continue  # lost with its directory
        elif node.kind == "dir":
            if not os.path.isdir(path):
                os.mkdir(path)
                changes.append(f"restored directory {path}")
        elif node.kind == "file":
            changes += _restore_file(path, content(node), node.mode)
        elif node.kind == "symlink" and not os.path.lexists(path):
            os.symlink(node.target, path)
            changes.append(f"restored link {path}")
    return changes


def _restore_file(path: str, content: bytes, mode: int) -> list[str]:
    try:
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as handle:
                if handle.read() == content:
                    return []
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
    return [f"reverted {path} to {len(content)} bytes"]
