"""A snapshot's header line (core/snapshot.py ``render``) read without an object per
shelved entry.

The header lists the id and the line length of every finished job and reply of the run
(its ``shelf``): at 100,000 finished jobs, 200,000 strings and as many ints that
``json.loads`` builds only for a start (or ``report``, ``simulate --from-run``) to pack
them into a ``Shelved`` index and let them go: ~33 MB at its peak, to keep 9. Where the
ids hold no escape (job ids and request ids never do, in practice), they are taken from
the line's bytes as they are (already ``encoded``, one ``","`` between two) and the
lengths read into an array; the rest of the header is parsed as JSON. Any other shape
(an escape, an older or hand-made file) is parsed as JSON whole, as before.

Pure: bytes in, a dict out.
"""

from __future__ import annotations

import json
from array import array
from typing import Any

from .shelf import PackedKeys

_SHELF = b'"shelf":{"finished":['
_IDS, _LENGTHS, _STATES, _END = b'{"ids":[', b'],"lengths":[', b'],"states":"', b'"}'


def read_header(first: bytes) -> dict[str, Any]:
    """``json.loads(first)``, but the shelf's sections' ``ids`` a ``PackedKeys`` and their
    ``lengths`` an ``array`` where the line is as ``render`` writes it."""
    start = first.find(_SHELF)  # its quotes are no string's: a string's are escaped
    if start < 0:
        return json.loads(first)
    finished = first.find(b"]", start + len(_SHELF)) + 1  # state names hold no bracket
    at, sections = finished, {}
    for name in ("jobs", "replies"):
        at = _section(first, at, name, sections) if at > 0 else -1
    if at <= 0 or not first.startswith(b"}", at):
        return json.loads(first)
    header = json.loads(first[:start] + b'"shelf":{"finished":' +
                        first[start + len(_SHELF) - 1:finished] + b"}" + first[at + 1:])
    header["shelf"].update(sections)
    return header


_CHUNK = 64 << 10  # ``_numbers`` reads this many bytes of numbers at a time


def _numbers(line: bytes, start: int, end: int) -> array | None:
    """The comma-separated numbers of ``line[start:end]`` in an array, read a chunk at a
    time (a list of every one, ~4 MB at 100,000 lengths, is never made); None where
    something else is there."""
    numbers, at = array("Q"), start
    while at < end:
        stop = end if end - at <= _CHUNK else line.rfind(b",", at, at + _CHUNK)
        chunk = line[at:max(stop, at)]
        if stop <= at or chunk.strip(b"0123456789,") or chunk.startswith(b",") or \
                chunk.endswith(b",") or b",," in chunk:
            return None
        numbers.extend(map(int, chunk.split(b",")))
        at = stop + 1
    return numbers


def _section(line: bytes, at: int, name: str, sections: dict[str, Any]) -> int:
    """Read the section ``name`` that begins at ``at`` into ``sections``; where it ends,
    or -1 where it is not as ``render`` writes it with no escape in an id."""
    key = f',"{name}":'.encode() + _IDS
    if not line.startswith(key, at):
        return -1
    ids_at = at + len(key)
    lengths_at = line.find(_LENGTHS, ids_at)  # an id holds no unescaped quote
    states_at = line.find(_STATES, max(lengths_at, ids_at))
    end = line.find(_END, states_at + len(_STATES))
    if min(lengths_at, states_at, end) < 0:
        return -1
    if line.find(b"\\", ids_at, lengths_at) >= 0 or (lengths_at > ids_at and not (
            line.startswith(b'"', ids_at) and line.endswith(b'"', ids_at, lengths_at))):
        return -1
    count = line.count(b'"', ids_at, lengths_at) // 2
    keys = line[ids_at + 1:lengths_at - 1].replace(b'","', b"\n")
    lengths = _numbers(line, lengths_at + len(_LENGTHS), states_at)
    states = line[states_at + len(_STATES):end]
    if lengths is None or (lengths_at > ids_at and keys.count(b"\n") != count - 1) or \
            states.strip(b"0123456789"):
        return -1  # a quote that is no delimiter, or not numbers: parsed as JSON instead
    sections[name] = {"ids": PackedKeys(keys, count), "lengths": lengths,
                      "states": states.decode()}
    return end + len(_END)
