"""Quarantine cases (adapters/quarantine.py): nothing set aside is ever lost or unexplained,
even when one coordinator sets things aside twice within a second (a start and its first
reconcile; two reconciles), which names the same case directory."""

from __future__ import annotations

import time

from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.quarantine import Case, notes


def test_a_case_opened_again_in_the_same_second_keeps_every_item_and_note(tmp_path):
    layout = RunLayout.at(tmp_path)
    jobs = layout.jobs("running")
    jobs.mkdir(parents=True)
    at = time.time()
    (jobs / "x.json").write_text("first")
    Case(layout, at).move(jobs / "x.json", "the first")
    (jobs / "x.json").write_text("second")  # the same name again, in the same second
    later = Case(layout, at)
    later.move(jobs / "x.json", "the second")
    later.keep("resource_scheduler/jobs/done/y.json", b"forged", "the third")

    [case] = notes(layout)
    assert [(item["path"], item["why"]) for item in case["items"]] == [
        ("resource_scheduler/jobs/running/x.json", "the first"),
        ("resource_scheduler/jobs/running/x.json.2", "the second"),
        ("resource_scheduler/jobs/done/y.json", "the third")]
    kept = tmp_path / case["case"] / "resource_scheduler" / "jobs"
    assert (kept / "running" / "x.json").read_text() == "first"
    assert (kept / "running" / "x.json.2").read_text() == "second"
    assert (kept / "done" / "y.json").read_bytes() == b"forged"
