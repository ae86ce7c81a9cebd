"""A declared value's fields as a record: the plain part of its ``to_dict``.

The ``to_dict`` of a frozen dataclass the task file or a peer declares (a policy, a
profile, a request) is its fields in declaration order, the journal's and the job
file's key order, with a few values converted to JSON's (a tuple to a list, a nested
value to its own record) and a few keys left out while unset. ``field_values`` gives
the plain part, so that each ``to_dict`` names only what it converts: its fields are
not listed a second time, where a field added to one list and not the other would be
lost on the way to the journal.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any


def field_values(value: Any, *, omit: tuple[str, ...] = (),
                 omit_none: tuple[str, ...] = ()) -> dict[str, Any]:
    """The public fields of the dataclass ``value`` by name, in declaration order, less
    those in ``omit`` and those in ``omit_none`` whose value is None. A caller converts
    values with ``|``, which keeps each key where it stands."""
    values = {name: getattr(value, name) for name in _public_fields(type(value))
              if name not in omit}
    for name in omit_none:
        if values[name] is None:
            del values[name]
    return values


@cache
def _public_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if not f.name.startswith("_"))
