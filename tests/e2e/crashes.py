"""The crash matrix's scenarios, shared by the crash matrix, the power-loss cases, the
supervisors' tests and tests/soak.py: the named crash points, the task and the basic
workload whose every command marks its start, and the checks once a run has settled."""

from __future__ import annotations

import subprocess

from ..invariants import check_run
from .conftest import request, wait_for


CRASH_EXIT = 86


# A commit is named by the moment of a job's life it journals (``NAME@MOMENT``,
# adapters/crashpoints.py), not by its count: the loop's batching decides how many
# commits come before it. b's first end (exit 75) is journaled with its retry, c's end
# late in the scenario (every other job started by then).
BASIC = [
    "start.after_journal_open", "start.after_repair", "start.after_adopt",
    "journal.before_commit", "journal.after_commit", "journal.before_commit@ended:b/a1",
    "journal.after_commit@done:c",
    "effect.WriteJob.before", "effect.WriteJob.after", "effect.WriteJob.before:5",
    "effect.WriteReply.before", "effect.WriteReply.after",
    "effect.ConsumeRequest.before", "effect.ConsumeRequest.after",
    "effect.RejectRequest.before", "effect.RejectRequest.after",
    "effect.SpawnAttempt.before", "effect.SpawnAttempt.after", "effect.SpawnAttempt.after:3",
    "effect.WriteGo.before", "effect.WriteGo.after", "effect.WriteGo.before:3",
    "status.before_write", "status.after_write:3",
]


# With the journal compacted every few records, so snapshots are written (and
# crashed in) throughout the scenario, and the restart reads snapshot + tail.
COMPACTION = [
    "snapshot.before_write", "snapshot.after_write", "snapshot.after_truncate",
    "snapshot.after_write:3", "snapshot.after_truncate:2",
]


COMPACT_OFTEN = {"PRAXIST_COMPACT_AFTER": "4"}


GENERATION = [
    "effect.WriteControlReply.before", "effect.WriteControlReply.after",
    "effect.DisposeControl.before", "effect.DisposeControl.after",
    "effect.WriteGenerationFile.peer.before", "effect.WriteGenerationFile.lease.before",
    "effect.WriteGenerationFile.lease.after", "effect.WriteGenerationFile.stats.after",
    "effect.WriteGenerationFile.closing.before", "effect.WriteGenerationFile.closing.after",
]


CRASH_TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    max_concurrent_experiments: 2
    infrastructure_retries: 1
    supply_idle_samples: 1
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
"""


def start_crashing(run, point: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A coordinator that dies at ``point``; unlike Run.start it may die before serving."""
    return run.start_raw(env={"PRAXIST_CRASH_AT": point, **(env or {})})


def settle(run, tags, timeout=30.0):
    def done():
        docs = [run.job(job_id) for job_id in tags.values()]
        return all(d and d["state"] in ("completed", "failed") for d in docs)
    wait_for(done, timeout, message="every job to finish after the restart")


def basic_scenario(run, tmp_path) -> dict[str, str]:
    """Submit work whose every command marks its start; returns tag -> request id."""
    starts, counter = tmp_path / "starts", tmp_path / "b-count"
    mark = f'echo "$PRAXIST_EXPERIMENT_ID" >> {starts}; '
    docs = {
        "a": request("a", ["sh", "-c", mark + "exit 0"]),
        "b": request("b", ["sh", "-c", mark + f"[ -e {counter} ] || {{ touch {counter}; exit 75; }}"]),
        "c": request("c", ["sh", "-c", mark + "exit 3"]),
        "d": request("d", ["sh", "-c", mark + "sleep 0.3"]),
    }
    ids = {tag: run.submit(doc, name=f"{tag}.json") for tag, doc in docs.items()}
    run.submit(docs["a"], name="a-again.json")
    run.drop_raw("bad.json", b'{"peer": "p", "tag": "../x", "argv": ["true"]}')
    return ids


def job_ids(run, ids):
    return {tag: run.reply(rid, timeout=30)["job_id"] for tag, rid in ids.items()}


def settled_invariants(run, timeout: float, **checks) -> None:
    """Wait until every invariant holds (views such as status.json lag the job files a
    little); else fail with the problems as they stand then, and the coordinator's state."""
    try:
        wait_for(lambda: not check_run(run.root, **checks), timeout=timeout,
                 message="invariants")
    except AssertionError:
        log = run.root.parent / f"coordinator-{run.root.name}.log"
        alive = run.proc is not None and run.proc.poll() is None
        tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
        raise AssertionError(f"after {timeout}s: {check_run(run.root, **checks)}; the "
                             f"coordinator {'serves' if alive else 'has exited'}; its log "
                             "ends:\n" + "\n".join(tail)) from None


def more_records_until_it_dies(run, proc, starts, most=20):
    """A compaction runs in a child while the loop goes on, and the next one begins only
    once it is done (its finish a step a loop turn): how many the scenario's records
    bring depends on the machine's speed. Trivial jobs add records until the coordinator reaches the point (its nth
    compaction) and dies; each marks its start in ``starts``, as the scenario's do."""
    for n in range(most):
        try:
            proc.wait(timeout=2)
            return
        except subprocess.TimeoutExpired:
            run.submit(request(f"more-{n}", ["sh", "-c",
                                             f'echo "$PRAXIST_EXPERIMENT_ID" >> {starts}']))
