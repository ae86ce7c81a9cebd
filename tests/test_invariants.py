"""tests/invariants.py's record of command starts, on a run directory written by hand."""

from __future__ import annotations

import json

import pytest

from tests.invariants import check_run


def _run_with(tmp_path, outcomes: list[str], state: str, started: int):
    """A run whose one job has attempts ending in ``outcomes``, its command recorded as
    started ``started`` times; returns the root and the starts file."""
    sched = tmp_path / "run" / "resource_scheduler"
    (sched / "journal").mkdir(parents=True)
    (sched / "journal" / "journal.log").write_bytes(b"")
    (sched / "jobs" / "done").mkdir(parents=True)
    attempts = [{"attempt_id": f"a{n}", "outcome": outcome,
                 "exit_code": 75 if outcome == "infra_retry" else None}
                for n, outcome in enumerate(outcomes, 1)]
    for attempt in attempts:
        if attempt["outcome"] == "infra_retry":  # it ran: its exit.json is there
            directory = sched / "attempts" / "j-1" / attempt["attempt_id"]
            directory.mkdir(parents=True)
            (directory / "exit.json").write_text(json.dumps({"exit_code": 75}))
    (sched / "jobs" / "done" / "j-1.json").write_text(json.dumps(
        {"job_id": "j-1", "state": state, "attempts": attempts}))
    starts = tmp_path / "starts"
    starts.write_text("j-1\n" * started)
    return tmp_path / "run", starts


@pytest.mark.parametrize("started, broken", [(0, False), (1, False), (2, True)])
def test_a_lost_attempts_command_may_have_started_once_never_twice(tmp_path, started, broken):
    """After a power cut a command that was running ends `lost` (drained_unknown): it
    started once, or, if the power went between its GO and its start, not at all."""
    root, starts = _run_with(tmp_path, ["lost"], "drained_unknown", started)
    problems = check_run(root, settled=False, starts=starts)
    assert bool(problems) == broken, problems


@pytest.mark.parametrize("started, broken", [(0, True), (1, False), (2, False), (3, True)])
def test_an_attempt_that_ran_and_a_lost_one_allow_one_or_two_starts(tmp_path, started, broken):
    root, starts = _run_with(tmp_path, ["infra_retry", "lost"], "drained_unknown", started)
    problems = check_run(root, settled=False, starts=starts)
    assert bool(problems) == broken, problems


@pytest.mark.parametrize("exit_json, power_lost, broken", [
    (None, False, True), (None, True, False), (75, True, False), (3, True, True)])
def test_an_ended_attempt_without_exit_json_passes_only_after_a_power_cut(
        tmp_path, exit_json, power_lost, broken):
    """The shim tells the exit on its pipe before it writes exit.json: after a power cut
    (or a killed shim) the journal may hold an end whose exit.json never became durable.
    One that exists must still agree with the job file."""
    root, starts = _run_with(tmp_path, ["infra_retry", "lost"], "drained_unknown", 1)
    exit_path = root / "resource_scheduler" / "attempts" / "j-1" / "a1" / "exit.json"
    if exit_json is None:
        exit_path.unlink()
    else:
        exit_path.write_text(json.dumps({"exit_code": exit_json}))
    problems = check_run(root, settled=False, starts=starts, power_lost=power_lost)
    assert bool(problems) == broken, problems
