"""What an executor job runs: ``python -m praxist_fs.callworker --results DIR CALL``.

praxist_fs/executor.py pickles a Python call (the callable, its arguments, and what
the worker needs to find the callable again) into the file CALL and submits this
command as an ordinary job. Here, inside the attempt, the call is loaded and run, and
what it returned or raised is pickled into ``DIR/<job id>/<attempt id>.pickle``
(written whole, then renamed), where the executor reads it once the job has ended.

Callables travel by reference, as the standard ``pickle`` sends them: a module-level
function or class of an importable module, or of the submitting script itself (its
``__main__``, which is run here again as ``__mp_main__`` first, exactly as
``multiprocessing`` does under the spawn start method). The submitter's ``sys.path``
comes along, after the worker's own, so what it could import, this can.

The exit code says how the call went: 0 returned, 1 raised (its traceback is in the
attempt's log), or the code of a ``SystemExit`` it raised (``sys.exit(75)`` asks for
an infrastructure retry). It imports nothing of praxist_fs but its atomic writes
(adapters/fsio.py): a job starts no faster than this module imports.
"""

from __future__ import annotations

import argparse
import os
import pickle
import runpy
import sys
import traceback
import types
from pathlib import Path
from typing import Any

from .adapters.fsio import write_atomic

MODULE = "praxist_fs.callworker"
PICKLE_PROTOCOL = 5
FORMAT = 1  # of the call and result documents below; a reader refuses one it does not know


class RemoteError(Exception):
    """Stands in for what a job raised or returned that could not be pickled back: its
    type, message and traceback, as text."""


def worker_argv(python: str, call: Path, results: Path) -> list[str]:
    return [python, "-m", MODULE, "--results", str(results), str(call)]


def parse_argv(argv: list[str] | tuple[str, ...] | None) -> tuple[Path, Path] | None:
    """(the call file, the results directory) of a job whose command is this worker's,
    else None."""
    if argv is None or len(argv) != 6 or list(argv[1:4]) != ["-m", MODULE, "--results"]:
        return None
    return Path(argv[5]), Path(argv[4])


def call_id(call: Path) -> str:
    """The id of the call a call file holds: its name."""
    return call.name.removesuffix(".pickle")


def result_path(results: Path, job_id: str, attempt_id: str) -> Path:
    return results / job_id / f"{attempt_id}.pickle"


def write_whole(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as every writer of ours does (a temporary name beside
    it, then a rename: no reader sees part of it), readable by its owner alone; the
    directories are made as needed, ours only."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, data, mode=0o600)


def load_call(path: Path) -> tuple[str, Any, tuple, dict]:
    """(call id, callable, args, kwargs) from a call file, after the submitter's
    ``sys.path`` and ``__main__`` were set up to find the callable."""
    with open(path, "rb") as handle:
        document = pickle.load(handle)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f"{path} is not a call file of this version ({FORMAT}) of "
                         "praxist_fs: submit it again")
    # After the worker's own: a python= of another version keeps its standard library.
    sys.path += [entry for entry in document["sys_path"] if entry not in sys.path]
    if document["main"] is not None:
        adopt_main(document["main"])
    fn, args, kwargs = pickle.loads(document["call"])
    return document["call_id"], fn, args, kwargs


def adopt_main(main: dict[str, str | None]) -> None:
    """Make the submitter's main module ours, as ``__mp_main__``, so that what it pickled
    as ``__main__.NAME`` is found: its code runs again here, but for what is under
    ``if __name__ == "__main__":``."""
    module = types.ModuleType("__mp_main__")
    if main.get("name"):
        namespace = runpy.run_module(main["name"], run_name="__mp_main__", alter_sys=True)
    else:
        namespace = runpy.run_path(main["path"], run_name="__mp_main__")
    module.__dict__.update(namespace)
    sys.modules["__main__"] = sys.modules["__mp_main__"] = module


def outcome_document(identity: str, ok: bool, value: Any, trace: str | None) -> bytes:
    """The result file: the value returned (``ok``) or the exception raised, pickled; a
    ``RemoteError`` with the same story when that cannot be pickled."""
    document = {"format": FORMAT, "call_id": identity, "ok": ok, "value": value,
                "traceback": trace}
    try:
        return pickle.dumps(document, protocol=PICKLE_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - whatever the value's own pickling raises
        what = "returned" if ok else "raised"
        stand_in = RemoteError(f"the job {what} {type(value).__qualname__}: {value!r:.2000}, "
                               f"which cannot be pickled back ({type(exc).__name__}: {exc})")
        return pickle.dumps({**document, "ok": False, "value": stand_in},
                            protocol=PICKLE_PROTOCOL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description="run a call an executor pickled")
    parser.add_argument("--results", type=Path, required=True,
                        help="where <job id>/<attempt id>.pickle is written")
    parser.add_argument("call", type=Path, help="the call file")
    args = parser.parse_args(argv)
    identity, code, trace = call_id(args.call), 0, None
    try:
        identity, fn, fn_args, fn_kwargs = load_call(args.call)
        value, ok = fn(*fn_args, **fn_kwargs), True
    except SystemExit as exc:  # the call's own exit: its code is the job's
        value, ok, trace = exc, False, traceback.format_exc()
        code = exc.code if isinstance(exc.code, int) and exc.code else 1
    except Exception as exc:  # noqa: BLE001 - whatever the call raised goes back to its future
        value, ok, trace, code = exc, False, traceback.format_exc(), 1
    if trace is not None:
        print(trace, file=sys.stderr, end="", flush=True)
    job, attempt = os.environ.get("PRAXIST_EXPERIMENT_ID"), \
        os.environ.get("PRAXIST_EXPERIMENT_ATTEMPT_ID")
    if job and attempt:
        write_whole(result_path(args.results, job, attempt),
                    outcome_document(identity, ok, value, trace))
    else:  # run by hand, outside any job: nowhere to put it but here
        print(f"{'returned' if ok else 'raised'}: {value!r}")
    return code


if __name__ == "__main__":
    # Run as praxist_fs.callworker, not as __main__: RemoteError must pickle under the
    # name the submitter imports, and __main__ is to be the submitter's own.
    from praxist_fs.callworker import main as worker_main
    sys.exit(worker_main())
