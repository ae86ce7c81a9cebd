"""What the documents state as fact, checked against the code (issue 15, item 10): the
defaults and numeric ranges of docs/CONFIG.md's key tables, and the exit codes that
docs/OPERATIONS.md and docs/CONFIG.md give. A row whose default or rule is prose (``min..max``,
"legacy if omitted") is not checkable and is skipped; every key the code reads must still
have a row. The nested-launch exit codes of docs/PROTOCOL.md need a live attempt: they are
checked in tests/e2e/test_launch_cli.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from praxist_fs import cli, client, config
from praxist_fs.commands import launch
from praxist_fs.commands import run as run_command
from praxist_fs.config import parse_task_text, policy_from_mapping
from praxist_fs.core.budget import INFRA_EXIT_CODE
from praxist_fs.core.policy import Policy
from praxist_fs.errors import PolicyError

DOCS = Path(__file__).resolve().parent.parent / "docs"
LITERAL = re.compile(r"`([^`]+)`")
NUMBER = r"(-?\d+(?:\.\d+)?)"
CLAMPED = re.compile(rf"clamped to {NUMBER}\.\.{NUMBER}(?![\w.`])")
RAISED = re.compile(rf"raised to ≥ {NUMBER}(?![\w.`])")
LOWERED = re.compile(rf"lowered to ≤ {NUMBER}(?![\w.`])")


def key_rows(heading: str) -> dict[str, dict[str, str]]:
    """The rows of the ``| key | default | …`` table under the CONFIG.md heading that starts
    with ``heading``, by key (without its backticks), each a mapping column -> cell."""
    lines = (DOCS / "CONFIG.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("#") and line.lstrip("# ").startswith(heading))
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| key | default"))
    columns = [cell.strip() for cell in lines[header].strip("|").split("|")]
    rows = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == len(columns):  # a pipe inside a cell: not a row this can read
            row = dict(zip(columns, cells))
            rows[row["key"].strip("`")] = row
    return rows


def literal(cell: str) -> Any:
    """The value of a cell that is exactly one backticked YAML literal, else None."""
    found = LITERAL.fullmatch(cell)
    if not found:
        return None
    value = parse_task_text(found[1])
    return tuple(value) if isinstance(value, list) else value


def scheduler_task(key: str, value: Any) -> dict:
    """A central task that sets only ``key`` (``synthesis_trigger.…`` is a section of its own)."""
    section, _, name = key.rpartition(".")
    task: dict = {"compute_budget": {"resource_scheduler": {"mode": "central"}}}
    if section:
        task[section] = {name: value}
    else:
        task["compute_budget"]["resource_scheduler"][name] = value
    return task


def budget_task(key: str, value: Any) -> dict:
    budget = {key: value, "gpu_hours": 1.0} if key != "gpu_hours" else {key: value}
    return {"compute_budget": {"resource_scheduler": {"mode": "central", "budget": budget}}}


def hooks_task(key: str, value: Any) -> dict:
    return {"compute_budget": {"resource_scheduler": {"mode": "central", "hooks": {key: value}}}}


# heading -> (a task setting one key, where the resolved policy holds that key's value)
TABLES: dict[str, tuple[Callable[[str, Any], dict], Callable[[Policy, str], Any]]] = {
    "Keys": (scheduler_task, lambda policy, key: getattr(policy, key.rpartition(".")[2])),
    "The run budget": (budget_task, lambda policy, key: getattr(policy.budget, key)),
    "Completion hooks": (hooks_task, lambda policy, key: getattr(policy.hooks, key)),
}


def resolved(heading: str, key: str, value: Any = None) -> Any:
    """The policy's value of ``key`` when the task sets it to ``value`` (None: leaves it out)."""
    task_with, read = TABLES[heading]
    task = {"compute_budget": {"resource_scheduler": {"mode": "central"}}}
    return read(policy_from_mapping(task if value is None else task_with(key, value)), key)


def checkable(heading: str) -> list[tuple[str, dict[str, str]]]:
    """The rows whose key the resolved policy holds under that name (a key added to the
    document in another way, or a section such as ``profiles``, is left to its own tests)."""
    found = []
    for key, row in key_rows(heading).items():
        try:
            resolved(heading, key)
        except AttributeError:
            continue
        found.append((key, row))
    return found


def test_every_key_the_code_reads_has_a_row_in_config_md():
    rows = key_rows("Keys")
    read = [*config._SCHEDULER_KEYS, *(f"synthesis_trigger.{k}" for k in config._SYNTHESIS_KEYS)]
    assert [key for key in read if key not in rows] == []
    assert [key for key in config._BUDGET_KEYS if key not in key_rows("The run budget")] == []
    hooks = [*config._HOOK_KEYS, *config._HOOK_EVENTS]
    assert [key for key in hooks if key not in key_rows("Completion hooks")] == []


@pytest.mark.parametrize("heading", TABLES)
def test_documented_defaults_are_the_codes(heading):
    """CONFIG.md's default column, where it is one literal, is what a task without the key
    resolves to."""
    checked = {}
    for key, row in checkable(heading):
        documented = literal(row["default"])
        if documented is not None or row["default"] == "none":
            checked[key] = (documented, resolved(heading, key))
    assert checked, f"no checkable default under {heading!r}: has the table changed shape?"
    wrong = {key: pair for key, pair in checked.items() if pair[0] != pair[1]}
    assert wrong == {}, "key: (documented default, the code's)"


def bounds_and_probes(rule: str, default: Any) -> list[tuple[Any, Any]]:
    """(a value outside the documented numeric range, what it must become), per bound."""
    step = 1 if type(default) is int else 0.5
    probes = []
    if found := CLAMPED.search(rule):
        low, high = (type(default)(float(bound)) for bound in found.groups())
        probes += [(low - step, low), (high + step, high)]
    if found := RAISED.search(rule):
        low = type(default)(float(found[1]))
        probes.append((low - step, low))
    if found := LOWERED.search(rule):
        high = type(default)(float(found[1]))
        probes.append((high + step, high))
    return probes


@pytest.mark.parametrize("heading", TABLES)
def test_documented_numeric_ranges_are_the_codes(heading):
    """A number past a documented bound (``clamped to A..B``, ``raised to ≥ A``, ``lowered
    to ≤ B``) is moved to that bound, not to another."""
    checked, wrong = [], {}
    for key, row in checkable(heading):
        default = resolved(heading, key)
        if type(default) not in (int, float):
            continue
        for given, expected in bounds_and_probes(row["range / rule"], default):
            try:
                used = resolved(heading, key, given)
            except PolicyError as exc:
                if "fails" in row["range / rule"]:
                    continue  # refused, not moved, as the rule also says (e.g. "must be > 0")
                used = f"refused: {exc}"
            checked.append(key)
            if used != expected:
                wrong[f"{key}={given}"] = (expected, used)
    assert checked, f"no checkable range under {heading!r}: has the table changed shape?"
    assert wrong == {}, "key=given: (the documented bound, what the code used)"


def test_launch_exit_codes_in_operations_md_are_the_codes():
    text = " ".join((DOCS / "OPERATIONS.md").read_text().split())
    found = re.search(r"it exits with the experiment's exit code, (\d+) when the request is "
                      r"rejected or a terminal duplicate, (\d+) when no live coordinator owns "
                      r"the run, (\d+) when the job ends `drained_unknown`", text)
    assert found, "OPERATIONS.md no longer states launch's exit codes in the sentence read here"
    assert tuple(map(int, found.groups())) == (
        launch.EXIT_REJECTED, launch.EXIT_NO_COORDINATOR, client.EXIT_DRAINED_UNKNOWN)


def test_the_infrastructure_exit_code_in_config_md_is_the_codes():
    retries = key_rows("Keys")["infrastructure_retries"]["what it does"]
    assert re.search(r"exit code (\d+)", retries)[1] == str(INFRA_EXIT_CODE)


def test_the_no_procfs_exit_code_in_operations_md_is_the_codes():
    text = " ".join((DOCS / "OPERATIONS.md").read_text().split())
    found = re.search(r"refuses there, before it touches the run, with exit \*\*(\d+)\*\*", text)
    assert found, "OPERATIONS.md *Linux only* no longer states the exit code read here"
    assert int(found[1]) == cli.EXIT_NO_PROCFS


def test_the_full_disk_start_exit_code_in_operations_md_is_the_codes():
    text = " ".join((DOCS / "OPERATIONS.md").read_text().split())
    found = re.search(r"cannot record its own start: it refuses, exit \*\*(\d+)\*\*", text)
    assert found, "OPERATIONS.md *Full disk* no longer states the exit code read here"
    assert int(found[1]) == run_command.EXIT_NO_ROOM
