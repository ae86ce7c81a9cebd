"""Bounds of request fields that the CLI offers or checks too (``--priority``, ``--state``,
a job named by its id or tag).

Apart from the request model (``request``), which imports the policy and the Slurm
options: ``logs``, ``wait``, ``cancel`` and the other control verbs need these alone, and
would otherwise pay ~15 ms of imports at every start for a model they never use.
"""

from __future__ import annotations

import re

# Tags, peers, request ids and lease locators share one safe alphabet: they
# become file names, so no '/', no leading dot or dash, no control characters.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._+=@,-]{0,127}"
NAME_RE = re.compile(NAME_PATTERN)
NAME_EXPECTED = "1-128 characters from A-Z a-z 0-9 . _ + = @ , -, starting with a letter or digit"

PRIORITY_RANGE = (-100, 100)  # a job's own priority orders it inside its queue (R-CTL-5)
SELECTABLE_STATES = ("queued", "held", "running", "suspended")  # "held": queued and held
