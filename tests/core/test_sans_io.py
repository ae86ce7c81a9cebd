"""The core is sans-IO: nothing under praxist_fs/core imports an I/O module.

The static AST check is the main guard (it also sees imports inside functions
and imports of praxist_fs modules outside core that core pulls in); the
subprocess check proves that importing every core module leaves no forbidden
module in ``sys.modules`` beyond what a baseline interpreter already has.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import praxist_fs.core

FORBIDDEN = frozenset({
    "os", "time", "subprocess", "threading", "watchdog", "psutil", "pynvml",
    "shutil", "socket", "signal", "selectors",
})

CORE_DIR = Path(praxist_fs.core.__file__).parent
PACKAGE_ROOT = CORE_DIR.parent.parent  # the directory that holds praxist_fs/


def core_module_names() -> list[str]:
    names = ["praxist_fs.core"]
    for info in pkgutil.walk_packages([str(CORE_DIR)], prefix="praxist_fs.core."):
        names.append(info.name)
    return sorted(names)


def module_path(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"cannot locate {name}"
    return Path(spec.origin)


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every absolute module name imported by ``tree`` (relative ones resolved)."""
    found: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # ``from pkg import sub`` may import the submodule pkg.sub
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
        elif isinstance(node, ast.Call):
            func = node.func
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module")
            if dynamic:
                arg = node.args[0] if node.args else None
                name = arg.value if isinstance(arg, ast.Constant) else "<dynamic>"
                found.append((node.lineno, f"__import__:{name}"))
    return found


def static_violations(paths_and_modules: list[tuple[Path, str]]) -> list[str]:
    problems = []
    for path, module in paths_and_modules:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for lineno, name in imported_names(tree, module, path.name == "__init__.py"):
            if name.startswith("__import__:"):
                problems.append(f"{path}:{lineno}: dynamic import {name.split(':', 1)[1]}")
                continue
            if name.split(".")[0] in FORBIDDEN:
                problems.append(f"{path}:{lineno}: imports {name}")
    return problems


def test_core_package_is_found():
    names = core_module_names()
    # the modules the design names must all be walked, or the checks prove nothing
    for expected in ("scheduler", "states", "request", "events", "effects", "model"):
        assert f"praxist_fs.core.{expected}" in names


def test_static_checker_catches_forbidden_imports():
    """The checker itself must see every spelling of a forbidden import."""
    samples = {
        "import os": True,
        "import os.path as p": True,
        "from time import monotonic": True,
        "def f():\n    import subprocess": True,
        "from watchdog.observers import Observer": True,
        "__import__('psutil')": True,
        "import importlib\nimportlib.import_module('socket')": True,
        "import json, hashlib": False,
        "from dataclasses import dataclass": False,
        "from .policy import Policy": False,
    }
    for source, bad in samples.items():
        tree = ast.parse(source)
        names = imported_names(tree, "praxist_fs.core.sample", False)
        hit = any(n.startswith("__import__:") or n.split(".")[0] in FORBIDDEN for _, n in names)
        assert hit is bad, source


def _reachable_praxist_modules() -> list[tuple[Path, str]]:
    """Core modules plus every praxist_fs module they import (transitively)."""
    todo = core_module_names()
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):  # ``from pkg import name`` where name is not a module
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        path = Path(spec.origin)
        seen[name] = path
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, imported in imported_names(tree, name, path.name == "__init__.py"):
            if imported.startswith("praxist_fs"):
                parts = imported.split(".")
                # the module itself and each parent package get executed on import
                todo += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return [(path, name) for name, path in sorted(seen.items())]


def test_no_core_module_imports_io_modules_statically():
    modules = _reachable_praxist_modules()
    assert any(name == "praxist_fs.core.scheduler" for _, name in modules)
    assert static_violations(modules) == []


def _modules_after(code: str) -> set[str]:
    script = textwrap.dedent(code) + "\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-I", "-c", script],
        capture_output=True, text=True, timeout=60, cwd=str(PACKAGE_ROOT),
        env={"PYTHONPATH": str(PACKAGE_ROOT), "PATH": ""},
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _stdlib_imports_of_core() -> list[str]:
    """Top-level stdlib modules core imports itself (allowed ones only)."""
    names = set()
    for path, module in _reachable_praxist_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for _, name in imported_names(tree, module, path.name == "__init__.py"):
            top = name.split(".")[0]
            if name.startswith("__import__:") or top in FORBIDDEN or top == "praxist_fs":
                continue
            if top == "__future__":
                continue
            if importlib.util.find_spec(top) is not None:
                names.add(top)
    return sorted(names)


def test_importing_core_pulls_in_no_io_module():
    # -I ignores PYTHONPATH, so put the package root on sys.path explicitly
    prelude = f"import sys\nsys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
    allowed_stdlib = _stdlib_imports_of_core()
    baseline = _modules_after(prelude + "".join(f"import {m}\n" for m in allowed_stdlib))
    imports = "".join(f"import {name}\n" for name in core_module_names())
    with_core = _modules_after(prelude + imports)
    assert "praxist_fs.core.scheduler" in with_core
    because_of_core = sorted(
        m for m in with_core - baseline if m.split(".")[0] in FORBIDDEN)
    assert because_of_core == []


@pytest.mark.parametrize("name", core_module_names())
def test_each_core_module_imports_alone_without_io(name):
    prelude = f"import sys\nsys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
    baseline = _modules_after(prelude)
    with_module = _modules_after(prelude + f"import {name}\n")
    assert name in with_module
    assert sorted(m for m in with_module - baseline if m.split(".")[0] in FORBIDDEN) == []
