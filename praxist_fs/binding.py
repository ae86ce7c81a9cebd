"""GPU mask binding for task harnesses (seed 000, "Managed NVIDIA/CUDA Descendant Binding").

Under praxist_fs, ``PRAXIST_ASSIGNED_GPU_UUIDS`` is the authoritative ordered
physical GPU assignment of an attempt (R-RUN-1): comma-separated GPU UUIDs, or
the empty string for a CPU profile (forced CPU). A nested launch (evaluator,
trainer, worker, shell, container entry point) must hand the same value on in
``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``:

- missing mask: restored from the assignment;
- mask equal to the assignment: kept;
- any other mask (a local ordinal such as ``0`` written back by a framework,
  another UUID, the same UUIDs reordered, a non-empty mask under forced CPU):
  ``BindingConflict``. We never silently rebind a child to other devices.

Without ``PRAXIST_ASSIGNED_GPU_UUIDS`` (standalone, not launched by
praxist_fs) the environment is returned unchanged.

``praxist-fs bind -- CMD ...`` applies this and execs CMD (exit 3 on conflict).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from praxist_fs.errors import PraxistError

ASSIGNMENT_VAR = "PRAXIST_ASSIGNED_GPU_UUIDS"
MASK_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
EXIT_CONFLICT = 3
EXIT_USAGE = 2
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126


class BindingConflict(PraxistError):
    """A GPU visibility mask disagrees with the praxist_fs GPU assignment."""

    def __init__(self, variable: str, value: str, assignment: str, why: str) -> None:
        shown = assignment if assignment else "'' (forced CPU)"
        super().__init__(
            f"{variable}={value!r} conflicts with {ASSIGNMENT_VAR}={shown}: {why}; "
            f"refusing to rebind (unset {variable} to inherit the assignment)")
        self.variable = variable
        self.value = value
        self.assignment = assignment


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")] if value.strip() else []


def _why(value: str, assigned: list[str]) -> str:
    given = _split(value)
    if not assigned:
        return "a CPU attempt must see no GPU"
    if given and all(part.isdigit() for part in given):
        return "a local device ordinal must not be written back into a child's mask"
    if sorted(given) == sorted(assigned):
        return "the same GPUs in another order"
    return "other devices than the assignment"


def bound_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a praxist-managed child must get; raises ``BindingConflict``.

    Masks are compared as ordered UUID lists (whitespace around commas is
    ignored); a mask that matches is rewritten to the assignment's exact text.
    """
    env = dict(environ)
    if ASSIGNMENT_VAR not in env:
        return env  # standalone: not ours to bind
    assignment = env[ASSIGNMENT_VAR]
    assigned = _split(assignment)
    if any(not part for part in assigned):
        raise BindingConflict(ASSIGNMENT_VAR, assignment, assignment,
                              "the assignment has an empty entry")
    canonical = ",".join(assigned)
    for variable in MASK_VARS:
        if variable not in env:
            env[variable] = canonical
        elif _split(env[variable]) == assigned:
            env[variable] = canonical
        else:
            raise BindingConflict(variable, env[variable], canonical,
                                  _why(env[variable], assigned))
    return env


def main_bind(argv: list[str]) -> int:
    """``praxist-fs bind [--] CMD ...``: exec CMD with the bound environment.

    Returns only on failure: 3 on a binding conflict, 2 without a command,
    127/126 when CMD cannot be found/executed.
    """
    args = list(argv)
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print("usage: praxist-fs bind -- CMD [ARG...]", file=sys.stderr)
        return EXIT_USAGE
    try:
        env = bound_environment(os.environ)
    except BindingConflict as exc:
        print(f"praxist-fs bind: {exc}", file=sys.stderr)
        return EXIT_CONFLICT
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(args[0], args, env)
    except FileNotFoundError:
        print(f"praxist-fs bind: {args[0]}: command not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as exc:
        print(f"praxist-fs bind: {args[0]}: {exc.strerror}", file=sys.stderr)
        return EXIT_NOT_EXECUTABLE
    return EXIT_NOT_EXECUTABLE  # not reached: execvpe does not return
