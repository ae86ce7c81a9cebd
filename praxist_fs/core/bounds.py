"""Bounds of request fields that the CLI offers or checks too (``--priority``, ``--state``,
``--work-class``, a job named by its id or tag, a request's size).

Apart from the request model (``request``), which imports the policy and the Slurm
options: ``launch``, ``logs``, ``wait``, ``cancel`` and the other control verbs need these
alone, and would otherwise pay ~15-50 ms of imports at every start for a model they never
use.
"""

from __future__ import annotations

import json
import re

# Tags, peers, request ids and lease locators share one safe alphabet: they
# become file names, so no '/', no leading dot or dash, no control characters.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+=@,-]{0,127}"
NAME_RE = re.compile(NAME_PATTERN)
NAME_EXPECTED = "1-128 characters from A-Z a-z 0-9 . _ + = @ , -, starting with a letter or digit"

PRIORITY_RANGE = (-100, 100)  # a job's own priority orders it inside its queue (R-CTL-5)
SELECTABLE_STATES = ("queued", "held", "running", "suspended")  # "held": queued and held
WORK_CLASSES = ("scout", "ordinary", "mature")

MAX_REQUEST_BYTES = 64 * 1024
# A request over the limit but within this size is parsed all the same, to say what filled it
EXPLAINED_BYTES = 4 * MAX_REQUEST_BYTES


def oversize_problem(data: bytes) -> str:
    """Why a request over the limit is refused, naming its env when that holds most of it:
    ``praxist-fs launch`` sends the caller's whole environment, which can outgrow the
    limit unnoticed. The env's share is its size as ``json.dumps`` writes it: about what
    the file holds."""
    problem = f"larger than {MAX_REQUEST_BYTES} bytes"
    try:
        env = json.loads(data).get("env") if len(data) <= EXPLAINED_BYTES else None
    except (ValueError, RecursionError, AttributeError):  # not JSON, or not an object
        env = None
    held = len(json.dumps(env, ensure_ascii=False).encode("utf-8", "surrogatepass")) \
        if isinstance(env, dict) else 0
    if 2 * held > len(data):
        problem += f"; its env holds about {held} of them: submit fewer variables"
    return problem
