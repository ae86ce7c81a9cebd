"""The exporter seam (issue 30 item 2), shown the way a new output would be added: this
file is a whole sink (``EndLedger``: one line per job that ended, like a notification
or a metric a site might want), handed to the production ``Driver`` as the daemon hands
it its own (status.json and metrics.prom, the task's hooks), over a real scheduler and
the memory backend's virtual host.

What a sink may rely on: it is called once per committed batch, after the commit (what
it is told is already in the journal) and after the batch's effects; it is told each
end once, in the core's own words (``JobEnded``, ``RunHook``), and never for a batch
that changed nothing."""

from __future__ import annotations

import math

from praxist_fs.backends.memory import MemoryBackend, Run, VirtualHost
from praxist_fs.core.effects import JobEnded, RunHook, SpawnAttempt
from praxist_fs.core.events import ClaimsSeen, CoordinatorStarted, RequestSeen, from_record
from praxist_fs.core.policy import Hooks
from praxist_fs.core.request import Request
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.driver import Driver
from praxist_fs.sinks import Commit, Sink

from .core.helpers import make_policy
from .core.twins import MemoryJournal

EXITS = {"r0": 0, "r1": 3, "r2": 0, "r3": 137}


class EndLedger(Sink):
    """One line per job that ended: its id, its state and its exit code, read from the
    core it is handed; and the hooks the core decided, by name."""

    def __init__(self, journal: MemoryJournal) -> None:
        self.journal = journal  # only to check that what it is told is committed
        self.lines: list[str] = []
        self.hooks: list[str] = []
        self.calls = 0

    def committed(self, commit: Commit) -> None:
        self.calls += 1
        assert not self.journal.pending, "a sink was called before the commit"
        replayed = Scheduler()
        for record in self.journal.records:
            replayed.handle(from_record(record))
        assert replayed.version == commit.sched.version, "told of what is not committed"
        for effect in commit.effects:
            if isinstance(effect, JobEnded):
                job = commit.sched.jobs[effect.job_id]
                self.lines.append(f"{job.request.tag} {effect.state} "
                                  f"{job.current.exit_code}")
            elif isinstance(effect, RunHook):
                self.hooks.append(effect.name)


def test_a_sink_is_told_each_end_once_after_its_commit():
    policy = make_policy(initial_concurrent_experiments=2, max_concurrent_experiments=2,
                         hooks=Hooks(on_job_end=(("notify",),)))
    host = VirtualHost()
    journal = MemoryJournal([])
    ledger = EndLedger(journal)
    sched = Scheduler(policy)

    def plan(launch: SpawnAttempt) -> Run:
        return Run(30.0, exit_code=EXITS[launch.metadata["request_id"]])

    driver = Driver(sched, MemoryBackend(plan, host), journal=journal,
                    clock=lambda: host.now, sinks=[ledger])
    driver.process([CoordinatorStarted(at=0.0, policy=policy.to_dict(), pid=1, host="test",
                                       boot_id="memory")])
    for n, request_id in enumerate(EXITS):
        request = Request(request_id=request_id, peer="p", tag=f"t{n}", profile="cpu",
                          argv=("train",))
        driver.process([RequestSeen(at=float(n), name=f"{request_id}.json",
                                    digest=request_id, request_id=request_id,
                                    request=request)], launch=True)
    calls = ledger.calls
    driver.process([ClaimsSeen(at=5.0, others=())])  # changes nothing: nothing committed
    assert ledger.calls == calls and ledger.lines == []  # two run, two wait: none ended
    while (at := driver.backend.next_timer()) < math.inf:
        driver.process(driver.backend.on_timer(at), launch=True)
    assert sorted(ledger.lines) == ["t0 completed 0", "t1 failed 3", "t2 completed 0",
                                    "t3 failed 137"]
    assert sorted(ledger.hooks) == sorted(f"job_end-{job_id}-0" for job_id in sched.jobs)
