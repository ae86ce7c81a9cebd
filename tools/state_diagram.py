#!/usr/bin/env python3
"""Print, check or rewrite the state diagrams of docs/PROTOCOL.md.

Each diagram is generated from its table in ``praxist_fs.core.states.TABLES``
(job, attempt, generation, lease, node, reply), the tables the core steps
through, so the documentation cannot drift from the code:

    python tools/state_diagram.py                           # print every diagram
    python tools/state_diagram.py --machine node            # print one
    python tools/state_diagram.py --check docs/PROTOCOL.md  # exit 1 if a drawing is stale
    python tools/state_diagram.py --write docs/PROTOCOL.md  # rewrite the drawings in place

A machine's drawing sits between the lines ``<!-- state-diagram:NAME:begin -->``
and ``<!-- state-diagram:NAME:end -->``, fenced as ```` ```mermaid ````; the check
ignores the fence, indentation and blank lines, nothing else. Every table has
exactly one drawing, and every drawing a table. A reply to a request whose tag
names no job starts from the state ``none``. Standard library only (plus
praxist_fs).
Exit codes: 0 ok, 1 a drawing differs from its table, 2 usage error (missing
file, missing, doubled, misplaced or unknown markers).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# Run as a script from a checkout: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from praxist_fs.adapters.fsio import write_atomic  # noqa: E402
from praxist_fs.core.states import TABLES  # noqa: E402

MARKER = re.compile(r"<!-- state-diagram:([a-z_]+):(begin|end) -->")


def begin(name: str) -> str:
    return f"<!-- state-diagram:{name}:begin -->"


def end(name: str) -> str:
    return f"<!-- state-diagram:{name}:end -->"


def _shown(state: object) -> str:
    return "none" if state is None else state.value  # type: ignore[attr-defined]


def diagram_lines(name: str) -> list[str]:
    """``stateDiagram-v2`` then one ``source --> target: trigger`` line per table entry."""
    lines = ["stateDiagram-v2"]
    for (state, trigger), target in TABLES[name].items():
        lines.append(f"{_shown(state)} --> {_shown(target)}: {trigger.value}")
    return lines


def block(name: str) -> str:
    """The text that belongs between a machine's markers: a fenced Mermaid diagram."""
    return "\n".join(["```mermaid", *diagram_lines(name), "```"])


def normalized(text: str) -> list[str]:
    """The diagram lines of a block, ignoring the fence, indentation and blank lines."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("```")]


class MarkerError(Exception):
    pass


def blocks(text: str) -> dict[str, tuple[int, int]]:
    """Each machine's drawing as (index of its begin line, index of its end line) in
    ``text.splitlines()``; MarkerError unless every table has exactly one, well formed."""
    found: dict[str, dict[str, list[int]]] = {}
    for i, line in enumerate(text.splitlines()):
        if match := MARKER.fullmatch(line.strip()):
            found.setdefault(match[1], {"begin": [], "end": []})[match[2]].append(i)
    if unknown := sorted(found.keys() - TABLES.keys()):
        raise MarkerError(f"no table for the drawing(s) {', '.join(unknown)} "
                          f"(tables: {', '.join(TABLES)})")
    spans = {}
    for name in TABLES:
        marks = found.get(name, {"begin": [], "end": []})
        if len(marks["begin"]) != 1 or len(marks["end"]) != 1:
            raise MarkerError(f"expected exactly one {begin(name)} line and one {end(name)} "
                              f"line (found {len(marks['begin'])} and {len(marks['end'])})")
        b, e = marks["begin"][0], marks["end"][0]
        if e < b:
            raise MarkerError(f"{end(name)} comes before {begin(name)}")
        spans[name] = (b, e)
    return spans


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MarkerError(f"cannot read {path}: {exc.strerror}") from None


def stale(text: str) -> list[str]:
    """The machines whose drawing in ``text`` differs from their table."""
    lines = text.splitlines()
    return [name for name, (b, e) in blocks(text).items()
            if normalized("\n".join(lines[b + 1:e])) != diagram_lines(name)]


def check(path: Path) -> int:
    names = stale(_read(path))
    for name in names:
        print(f"{path}: the {name} state diagram is out of date with its table "
              f"(praxist_fs.core.states.TABLES[{name!r}]); run: "
              f"python tools/state_diagram.py --write {path}", file=sys.stderr)
        print("expected:\n" + block(name), file=sys.stderr)
    return 1 if names else 0


def write(path: Path) -> int:
    text = _read(path)
    names = stale(text)
    if not names:
        return 0
    lines = text.splitlines(keepends=True)
    # from the last drawing up, so the earlier ones' line numbers stand
    for name, (b, e) in sorted(blocks(text).items(), key=lambda item: -item[1][0]):
        lines[b + 1:e] = [block(name) + "\n"]
    write_atomic(path, "".join(lines).encode("utf-8"))
    print(f"{path}: state diagram(s) rewritten: {', '.join(names)}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--machine", choices=list(TABLES),
                       help="print only this machine's diagram")
    group.add_argument("--check", metavar="DOC", type=Path,
                       help="exit 1 if one of DOC's drawings differs from its table")
    group.add_argument("--write", metavar="DOC", type=Path,
                       help="rewrite DOC's drawings from the tables")
    args = parser.parse_args(argv)
    try:
        if args.check:
            return check(args.check)
        if args.write:
            return write(args.write)
    except MarkerError as exc:
        print(f"state_diagram: {exc}", file=sys.stderr)
        return 2
    for name in [args.machine] if args.machine else TABLES:
        print(f"%% {name}\n" + "\n".join(diagram_lines(name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
