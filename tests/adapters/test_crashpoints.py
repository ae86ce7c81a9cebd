"""PRAXIST_CRASH_AT's forms (adapters/crashpoints.py), each in a fresh interpreter (the
variable is read once, at import): ``NAME:N`` counts passes; ``NAME@MOMENT`` crashes at the
first pass of NAME inside the batch that journals MOMENT, and nowhere else."""

from __future__ import annotations

import os
import subprocess
import sys

from praxist_fs.adapters.crashpoints import CRASH_EXIT_CODE

# Each step printed before it is taken: what the output ends with is where it crashed.
SCRIPT = """
from praxist_fs.adapters import crashpoints as c
for moments, point in [((), "journal.after_commit"), (("ended:a",), "journal.after_commit"),
                       (("ended:b/a1", "ended:b"), "journal.before_commit"),
                       (("ended:b/a1", "ended:b"), "journal.after_commit"),
                       ((), "journal.after_commit"), ((), "journal.after_commit")]:
    c.within(moments)
    print(point, *sorted(moments), flush=True)
    c.reach(point)
print("never", flush=True)
"""


def crash_at(spec: str) -> tuple[int, list[str]]:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env={**os.environ, "PRAXIST_CRASH_AT": spec}, timeout=60)
    return done.returncode, done.stdout.splitlines()


def test_a_moment_crashes_at_its_point_inside_the_batch_that_journals_it_only():
    code, steps = crash_at("journal.after_commit@ended:b")
    assert code == CRASH_EXIT_CODE
    assert steps[-1] == "journal.after_commit ended:b ended:b/a1"


def test_a_moment_no_batch_journals_is_never_reached():
    code, steps = crash_at("journal.after_commit@done:b")
    assert (code, steps[-1]) == (0, "never")


def test_a_count_crashes_at_the_nth_pass_whatever_the_batch():
    code, steps = crash_at("journal.after_commit:4")
    assert code == CRASH_EXIT_CODE and len(steps) == 5 and steps[-1] == "journal.after_commit"
