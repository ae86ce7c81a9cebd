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
- names the coordinator never touched (peers' requests, files a shim wrote)
  stay as they are, as do paths outside the run directory.

``apply(ledger, root)`` rewrites ``root`` to that state after the coordinator
(and, to be a power cut, every process it started) was killed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(eq=False)
class Node:
    """One inode: its current content and the content an fsync made durable."""

    kind: str                    # "file", "dir", "symlink" or "other"
    data: bytes = b""
    synced: bytes | None = None  # None: never fsynced
    mode: int = 0o644
    target: str = ""             # of a symlink

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
class Model:
    live: dict[str, Node | None] = field(default_factory=dict)     # what a reader saw
    durable: dict[str, Node | None] = field(default_factory=dict)  # what a power cut leaves

    def _touch(self, path: str, before: Node | None) -> None:
        if path not in self.live:
            self.live[path] = self.durable[path] = before

    def _before(self, record: dict, key: str) -> Node | None:
        return Node.found(record[key]) if key in record else None

    def step(self, record: dict) -> None:
        op, path = record["op"], record["path"]
        if op == "mkdir":
            self._touch(path, None)
            self.live[path] = Node("dir", synced=b"")
        elif op == "create":
            self._touch(path, None)
            self.live[path] = Node("file", base64.b64decode(record["data"]),
                                   mode=record["mode"])
        elif op == "open_append":
            self._touch(path, self._before(record, "old"))
            if self.live[path] is None:
                self.live[path] = Node("file", mode=record["mode"])
        elif op == "append":
            self.live[path].data += base64.b64decode(record["data"])
        elif op == "truncate":
            self.live[path].data = self.live[path].data[:record["size"]]
        elif op == "fsync":
            node = self.live.get(path)
            if node is not None:
                node.synced = node.data
        elif op == "rename":
            src = record["src"]
            self._touch(src, self._before(record, "moved"))
            self._touch(path, self._before(record, "replaced"))
            self.live[path], self.live[src] = self.live[src], None
        elif op == "unlink":
            self._touch(path, self._before(record, "old"))
            self.live[path] = None
        elif op == "fsync_dir":
            self._sync_directory(path, set(record["names"]))
        elif op == "sync":  # sync(2): every file and every directory entry, as it stands
            for node in self.live.values():
                if node is not None:
                    node.synced = node.data
            self.durable.update(self.live)
        else:
            raise ValueError(f"unknown ledger op {op!r}")

    def _sync_directory(self, directory: str, names: set[str]) -> None:
        """The directory's entries become durable. ``names`` is what it held: a name of
        ours that another process removed is gone, one another process made is theirs."""
        for path in [p for p in self.live if os.path.dirname(p) == directory]:
            present = os.path.basename(path) in names
            if present and self.live[path] is None:
                del self.live[path], self.durable[path]
                continue
            if not present:
                self.live[path] = None
            self.durable[path] = self.live[path]


def replay(ledger: Path) -> Model:
    model = Model()
    for line in ledger.read_bytes().splitlines():
        model.step(json.loads(line))
    return model


def apply(ledger: Path, root: Path) -> list[str]:
    """Rewrite ``root`` to the worst surviving state; returns what was changed, for messages."""
    model = replay(ledger)
    root_text = os.path.abspath(root) + os.sep
    changes = []
    for path in sorted(model.durable, key=lambda p: (p.count(os.sep), p)):
        if not path.startswith(root_text):
            continue
        node = model.durable[path]
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
            changes += _restore_file(path, node.synced or b"", node.mode)
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
