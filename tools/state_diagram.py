#!/usr/bin/env python3
"""Print, check or rewrite the job state diagram of docs/PROTOCOL.md.

The diagram is generated from ``praxist_fs.core.states.TRANSITIONS``, the one
table the scheduler uses, so the documentation cannot drift from the code:

    python tools/state_diagram.py                         # print the Mermaid diagram
    python tools/state_diagram.py --check docs/PROTOCOL.md  # exit 1 if the doc is stale
    python tools/state_diagram.py --write docs/PROTOCOL.md  # rewrite the block in place

The block in the document sits between the lines ``<!-- state-diagram:begin -->``
and ``<!-- state-diagram:end -->``, fenced as ```` ```mermaid ````; the check
ignores the fence, indentation and blank lines, nothing else. Standard library
only (plus praxist_fs).
Exit codes: 0 ok, 1 the document's block differs from the table, 2 usage error
(missing file, missing or misplaced markers).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run as a script from a checkout: make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from praxist_fs.adapters.fsio import write_atomic  # noqa: E402
from praxist_fs.core.states import TRANSITIONS  # noqa: E402

BEGIN = "<!-- state-diagram:begin -->"
END = "<!-- state-diagram:end -->"


def diagram_lines() -> list[str]:
    """``stateDiagram-v2`` then one ``source --> target: trigger`` line per table entry."""
    lines = ["stateDiagram-v2"]
    for (state, trigger), target in TRANSITIONS.items():
        lines.append(f"{state.value} --> {target.value}: {trigger.value}")
    return lines


def block() -> str:
    """The text that belongs between the markers: a fenced Mermaid diagram."""
    return "\n".join(["```mermaid", *diagram_lines(), "```"])


def normalized(text: str) -> list[str]:
    """The diagram lines of a block, ignoring the fence, indentation and blank lines."""
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.strip().startswith("```")]


class MarkerError(Exception):
    pass


def split(text: str) -> tuple[str, str, str]:
    """(before and including BEGIN line, current block, END line and after)."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1:
        raise MarkerError(f"expected exactly one {BEGIN} line and one {END} line "
                          f"(found {len(begins)} and {len(ends)})")
    b, e = begins[0], ends[0]
    if e < b:
        raise MarkerError(f"{END} comes before {BEGIN}")
    return "".join(lines[:b + 1]), "".join(lines[b + 1:e]), "".join(lines[e:])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MarkerError(f"cannot read {path}: {exc.strerror}") from None


def check(path: Path) -> int:
    _, current, _ = split(_read(path))
    if normalized(current) == diagram_lines():
        return 0
    print(f"{path}: the state diagram is out of date with praxist_fs.core.states.TRANSITIONS;"
          f" run: python tools/state_diagram.py --write {path}", file=sys.stderr)
    print("expected:\n" + block(), file=sys.stderr)
    return 1


def write(path: Path) -> int:
    text = _read(path)
    head, current, tail = split(text)
    if current.strip() == block():
        return 0
    new = head + block() + "\n" + tail
    write_atomic(path, new.encode("utf-8"))
    print(f"{path}: state diagram rewritten", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", metavar="DOC", type=Path,
                       help="exit 1 if DOC's diagram block differs from the generated one")
    group.add_argument("--write", metavar="DOC", type=Path,
                       help="rewrite DOC's diagram block from the table")
    args = parser.parse_args(argv)
    try:
        if args.check:
            return check(args.check)
        if args.write:
            return write(args.write)
    except MarkerError as exc:
        print(f"state_diagram: {exc}", file=sys.stderr)
        return 2
    print("\n".join(diagram_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
