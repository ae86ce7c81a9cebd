"""Quarantine: what a start set aside rather than trust or delete (R-DUR-1).

Postfix moves unreadable queue files to its ``corrupt`` queue for inspection; we
do the same with a damaged journal record that an operator chose to drop, and
with derived files that prove a record the journal no longer holds, and with
files in ``jobs/*/`` that the journal does not account for (found at a start
or by a later reconcile). Each start or reconcile that finds any sets them
aside in one case, ``quarantine/<UTC time>-<pid>/`` (0700: a
journal record holds whole requests): the bytes or files, at their paths in
the run, and ``note.json``, rewritten durably before each item comes in, so
that nothing is there without its reason. Cases stay until an operator removes them;
status.json lists every case's note.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from .fsio import fsync_dir, makedirs, read_json, rename, write_atomic, write_json
from .layout import RunLayout

log = logging.getLogger("praxist_fs")


class Case:
    def __init__(self, layout: RunLayout, at: float) -> None:
        self.layout = layout
        self.at = at
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))
        self.path = layout.quarantine / f"{stamp}-{os.getpid()}"
        # a case this process opened earlier in the same second goes on: its items stay noted
        note = read_json(self.path / "note.json")
        self.items: list[dict[str, str]] = list(note["items"]) if isinstance(note, dict) \
            and isinstance(note.get("items"), list) else []

    def keep(self, name: str, data: bytes, why: str) -> None:
        """Bytes kept before their source is cut (a journal record) or replaced (a forged
        job file, rewritten from the journal in one rename: it is never missing)."""
        target = self._place(Path(name), why)
        makedirs(target.parent, durable=True, mode=0o700)
        write_atomic(target, data, durable=True, mode=0o600)

    def move(self, path: Path, why: str) -> None:
        """A file or directory of the run, kept at its run-relative path inside the case."""
        target = self._place(path.relative_to(self.layout.root), why)
        makedirs(target.parent, durable=True, mode=0o700)
        rename(path, target)
        fsync_dir(target.parent)
        fsync_dir(path.parent)

    def _place(self, relative: Path, why: str) -> Path:
        """Where an item goes in the case (a name set aside twice in one case gets a
        suffix), noted before it comes."""
        target, serial = self.path / relative, 1
        while os.path.lexists(target):
            serial += 1
            target = self.path / relative.with_name(f"{relative.name}.{serial}")
        self._note(str(target.relative_to(self.path)), why)
        return target

    def _note(self, name: str, why: str) -> None:
        """Before the item moves: nothing is ever in quarantine without its reason."""
        makedirs(self.path, durable=True, mode=0o700)
        self.items.append({"path": name, "why": why})
        write_json(self.path / "note.json", {"at": self.at, "items": self.items}, durable=True,
                   indent=2)
        log.error("set aside %s in %s: %s", name, self.path, why)


def notes(layout: RunLayout) -> list[dict[str, Any]]:
    """Every case still there, oldest first: its directory (run-relative) and its note."""
    try:
        names = sorted(os.listdir(layout.quarantine))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        note = read_json(layout.quarantine / name / "note.json")
        found.append({"case": str((layout.quarantine / name).relative_to(layout.root)),
                      **(note if isinstance(note, dict) else {"items": []})})
    return found
