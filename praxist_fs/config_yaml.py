"""The task file's YAML, read strictly: only true/false are booleans, a key twice in one
mapping is an error naming its path (SPEC R-CFG-1).

Apart from config.py, which turns the parsed document into a ``Policy``: this is the
file's syntax, that is its meaning. ``join_path`` spells a key path the way every
``PolicyError`` of the task file names one.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from praxist_fs.errors import PolicyError

FILE_PATH = "<file>"  # key_path of errors about the file as a whole
_BOOL_TAG = "tag:yaml.org,2002:bool"


class _Loader(yaml.SafeLoader):
    """SafeLoader whose booleans are YAML 1.2's, so ``yes``/``on`` stay strings.

    PyYAML follows YAML 1.1, where ``yes/no/on/off`` are booleans; a task that
    says ``supply_signal_enabled: off`` would silently load. With this resolver
    such a value is the string "off" and fails the boolean check by name.
    """


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def join_path(path: str, key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _check_duplicate_keys(node: yaml.Node, path: str, seen: set[int]) -> None:
    """Walk the composed node tree: a key twice in one mapping is ambiguous.

    Done on nodes rather than in the constructor so the error can name the
    key path; ``seen`` keeps aliases (and alias cycles) to one visit.
    """
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, Any], int] = {}
        for key_node, value_node in node.value:
            label = key_node.value if isinstance(key_node, yaml.ScalarNode) else "<complex key>"
            if isinstance(key_node, yaml.ScalarNode):
                ident = (key_node.tag, key_node.value)
                if ident in first_line:
                    raise PolicyError(
                        join_path(path, label),
                        label,
                        f"each key once per mapping (also at line {first_line[ident]}, "
                        f"again at line {key_node.start_mark.line + 1})",
                    )
                first_line[ident] = key_node.start_mark.line + 1
            _check_duplicate_keys(value_node, join_path(path, label), seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _check_duplicate_keys(item, join_path(path, index), seen)


def parse_task_text(text: str, source: str = "<text>") -> Any:
    """Parse one YAML document with the strict loader; YAML errors -> PolicyError."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError(FILE_PATH, source, f"valid YAML ({problem}{where})") from None
    finally:
        loader.dispose()
