"""Reports a task writes into its attempt directory (R-OPS-3): read with care, since the
task, not the coordinator, wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .fsio import read_json

REPORT_LIMIT = 64 * 1024  # largest progress.json / failure.json we read from a task


def task_report(path: Path) -> dict[str, Any] | None:
    """A task-owned JSON report (progress.json, failure.json): a small object, or None."""
    try:
        if path.stat().st_size > REPORT_LIMIT:
            return None
    except OSError:
        return None
    document = read_json(path)
    return document if isinstance(document, dict) else None


def progress(path: Path) -> dict[str, Any] | None:
    """progress.json as R-OPS-3 shapes it (done, total, unit), or None if absent or malformed."""
    report = task_report(path)
    if report is None:
        return None
    done, total, unit = report.get("done"), report.get("total"), report.get("unit")
    if type(done) not in (int, float) or (total is not None and type(total) not in (int, float)):
        return {"error": "progress.json needs a number 'done' and a number or null 'total'"}
    return {"done": done, "total": total, "unit": unit if isinstance(unit, str) else None}
