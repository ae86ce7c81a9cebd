"""The package's layers (issue 30; ../shared/DESIGN.md): who may import whom.

Computed from the source, every import counted: at the top of a module, inside a
function (a lazy import still ties the two at run time) and under ``TYPE_CHECKING``.

- No loop between folders: ``core``, ``adapters``, ``backends`` (with ``local/``),
  ``commands`` and each top-level module are one node each. A loop there means two
  layers that cannot be read, tested or replaced apart.
- No loop between modules, counting the imports that run. A loop made only of
  ``TYPE_CHECKING`` imports is allowed: it never executes, and it is how the
  scheduler's desks name each other's types on their boards (the attempt desk hands
  a cancelled attempt's end to the job-control desk, which settles it back there).
- No arrow up: ``core`` imports only ``core`` (and ``errors``, the package's leaf);
  ``adapters`` only ``core`` and ``adapters``; nothing under ``backends`` imports the
  driver, the daemon or the commands; only the CLI imports ``commands``.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import praxist_fs

PACKAGE = Path(praxist_fs.__file__).parent
LEAF = "errors"  # imports nothing of the package; every layer may raise its errors


def module_of(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = PACKAGE.parent / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """(module of the package imported, whether only under ``TYPE_CHECKING``)."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            subs = [f"{base}.{alias.name}" for alias in node.names]
            # ``from pkg import sub`` imports the submodule; other names come from pkg
            names = [sub for sub in subs if is_module(sub)]
            if len(names) < len(subs):
                names.append(base)
        else:
            continue
        found += [(name, id(node) in typing_only) for name in names
                  if name.split(".")[0] == "praxist_fs" and name != "praxist_fs"]
    return found


def folder_of(module: str) -> str:
    """``core`` for praxist_fs.core.scheduler, ``driver`` for praxist_fs.driver."""
    return module.split(".")[1]


def import_graph() -> dict[str, set[tuple[str, bool]]]:
    graph: dict[str, set[tuple[str, bool]]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        graph[module_of(path)].update(imports_of(path))
    return graph


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def folder_edges(typing_too: bool = True) -> dict[str, dict[str, list[str]]]:
    """folder -> folder it imports -> the imports that make the arrow."""
    arrows: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module, imported in import_graph().items():
        for name, typing_only in imported:
            if typing_only and not typing_too:
                continue
            source, target = folder_of(module), folder_of(name)
            if source != target and module != "praxist_fs":
                arrows[source][target].append(f"{module} -> {name}")
    return arrows


def test_the_graph_sees_every_kind_of_import():
    """The reader itself: top-level, lazy, relative and ``TYPE_CHECKING`` imports."""
    graph = import_graph()
    assert ("praxist_fs.core.preemption", False) in graph["praxist_fs.core.passes"]
    assert ("praxist_fs.core.attempts", True) in graph["praxist_fs.core.jobcontrol"]
    assert {folder_of(name) for name, _ in graph["praxist_fs.backends.local.backend"]} >= {
        "backends", "adapters", "core"}
    assert ("praxist_fs.commands.demo", False) in graph["praxist_fs.commands.run"]  # lazy
    assert ("praxist_fs.backends.memory", True) in graph["praxist_fs.driver"]
    assert ("praxist_fs.adapters.procs", False) in graph["praxist_fs.cli"]  # from . import
    assert loops({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert loops({"a": {"b"}, "b": set()}) == []


def test_no_loop_between_folders():
    arrows = folder_edges()
    found = loops({source: set(targets) for source, targets in arrows.items()})
    detail = {f"{a} -> {b}": arrows[a][b][:3] for loop in found for a in loop for b in loop
              if b in arrows[a]}
    assert found == [], detail


def test_no_loop_between_modules_at_run_time():
    graph = import_graph()
    running = {module: {name for name, typing_only in imported if not typing_only}
               for module, imported in graph.items()}
    for module in running:  # a package's ``__init__`` re-exports its modules
        running[module] = {name for name in running[module]
                           if not module.startswith(name + ".")}
    assert loops(running) == []


def test_no_arrow_runs_up():
    arrows = folder_edges()
    allowed = {"core": {"core", LEAF}, "adapters": {"adapters", "core", LEAF}}
    for folder, may in allowed.items():
        beyond = set(arrows[folder]) - may
        assert not beyond, {f: arrows[folder][f] for f in beyond}
    up = set(arrows["backends"]) & {"driver", "daemon", "commands", "cli"}
    assert not up, {f: arrows["backends"][f] for f in up}
    importers = {source for source, targets in arrows.items() if "commands" in targets}
    assert importers <= {"cli", "__main__"}, {f: arrows[f]["commands"] for f in importers}


def test_the_architecture_page_names_only_files_that_exist():
    """docs/ARCHITECTURE.md stays true to the tree: every file it names exists (under the
    repository, the package or one of its folders), and each folder has its paragraph."""
    root = PACKAGE.parent
    text = (root / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    bases = [root, PACKAGE, *(PACKAGE / folder for folder in (
        "core", "core/pickers", "adapters", "backends"))]
    missing = sorted(name for name in named if not any((base / name).is_file() for base in bases))
    assert len(named) > 30 and missing == []
    folders = {path.name for path in PACKAGE.iterdir()
               if (path / "__init__.py").is_file()}
    assert {folder for folder in folders if f"**`{folder}/`" not in text} == set()
