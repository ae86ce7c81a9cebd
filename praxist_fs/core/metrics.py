"""metrics.prom: the run's numbers in Prometheus's text exposition format (issue 17).

Rendered from the same scheduler state as status.json (``status.py``), at its cadence,
for node_exporter's textfile collector. Names follow Prometheus's conventions: the
``praxist_`` prefix, base units (seconds, bytes, ratios 0..1) in the name, ``_total``
on counters. Every sample carries ``run`` (the run directory), so the files of several
runs in one textfile directory never collide. Counters count what the journal holds,
so they survive a restart; the journal commit histogram is the serving coordinator's
own and starts again at zero with it (a counter reset, which ``rate()`` expects).
Deterministic for a given state, ``now`` and commit histogram.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .budget import RUNNING, VERDICTS
from .model import Job
from .policy import WORK_CLASSES
from .scheduler import Scheduler
from .states import JobState
from .supply import STAT_KEYS

MIB = 1024 * 1024
# Queue waits run from a second to a night; a commit is an fsync (sub-ms to a slow disk's 1 s).
QUEUE_WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# A loop turn: most take a millisecond or two; 50 ms is the most one may hold the loop.
TURN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


@dataclass(slots=True)
class Histogram:
    """Cumulative-bucket histogram of observations (upper bounds, ``le``)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bound, not cumulative
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        self.total += value
        self.count += 1


class AttemptTally:
    """Attempts started, retried (every attempt after a job's first) and ended by outcome,
    and the queue wait before each, by work class: from submission for a first attempt,
    from the end of the one before for a retry (a job that never starts is in no bucket).

    Kept a job at a time (``update`` with every job the daemon writes), since a status
    write must not walk every job of the run: 100,000 of them take ~0.2 s. Idempotent:
    per job it remembers how many attempts it counted and whether the last had ended
    (a job's attempts only grow, and all but its last have ended), packed in one small
    int; but not of the jobs that had finished at the last compaction
    (``forget_finished``: 100,000 entries cost megabytes): a job submitted by then
    (``settled_through``, in submission order) that it does not know was counted whole,
    and if it is not finished now it was reopened, so its rounds before are. ``of``
    counts a whole run, as at a start, after replay."""

    __slots__ = ("started", "retried", "outcomes", "waits", "_seen", "settled_through")

    def __init__(self) -> None:
        self.started = self.retried = 0
        self.outcomes: Counter[str] = Counter()
        self.waits = {work_class: Histogram(QUEUE_WAIT_BUCKETS) for work_class in WORK_CLASSES}
        self._seen: dict[str, int] = {}  # job id -> 2 x attempts counted + last one ended
        self.settled_through = 0  # the jobs up to this order it does not know were counted

    @classmethod
    def of(cls, jobs: Iterable[Job]) -> AttemptTally:
        tally = cls()
        for job in jobs:
            tally.update(job)
        return tally

    def to_dict(self) -> dict[str, Any]:
        """For the snapshot (``compaction.compact``): a start then counts only the jobs
        the journal's tail changed, not the whole run's (``from_dict``)."""
        return {"started": self.started, "retried": self.retried,
                "outcomes": dict(self.outcomes),
                "waits": {work_class: [h.counts, h.total, h.count]
                          for work_class, h in self.waits.items()},
                "seen": self._seen, "settled_through": self.settled_through}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttemptTally:
        tally = cls()
        tally.started, tally.retried = data["started"], data["retried"]
        tally.outcomes.update(data["outcomes"])
        for work_class, (counts, total, count) in data["waits"].items():
            if work_class not in tally.waits or len(counts) != len(QUEUE_WAIT_BUCKETS):
                raise ValueError(f"a tally of other queue waits ({work_class})")
            tally.waits[work_class] = Histogram(QUEUE_WAIT_BUCKETS, list(counts), total, count)
        tally._seen = dict(data["seen"])
        tally.settled_through = data.get("settled_through", 0)  # older tallies forgot none
        return tally

    def forget_finished(self, in_memory: Callable[[str], Job | None], last_order: int) -> None:
        """Forget the jobs finished now (``in_memory``: a job by id, None for one on the
        shelf), every attempt of which was counted: the jobs submitted so far (up to
        ``last_order``) are known without them."""
        self._seen = {job_id: seen for job_id, seen in self._seen.items()
                      if not seen & 1 or (job := in_memory(job_id)) is not None and
                      not job.state.terminal}
        self.settled_through = last_order

    def update(self, job: Job) -> None:
        attempts = job.attempts
        seen = self._seen.get(job.job_id)
        if seen is None:  # new, or forgotten finished: counted whole, reopened since if not
            counted = 0 if job.order > self.settled_through else len(attempts) \
                if job.state.terminal else sum(a.round < job.round for a in attempts)
            seen = 2 * counted + 1
        counted, last_ended = seen >> 1, seen & 1
        if not attempts or counted == len(attempts) and (last_ended or
                                                         attempts[-1].outcome is None):
            return  # nothing new: the common case
        if counted and not last_ended and attempts[counted - 1].outcome is not None:
            self.outcomes[attempts[counted - 1].outcome] += 1
        for i in range(counted, len(attempts)):
            attempt = attempts[i]
            queued_since = attempts[i - 1].ended_at if i else None
            self.started += 1
            self.retried += i > 0
            self.waits[job.request.work_class].observe(
                max(0.0, attempt.started_at - (queued_since or job.submitted_at)))
            if attempt.outcome is not None:
                self.outcomes[attempt.outcome] += 1
        self._seen[job.job_id] = 2 * len(attempts) + (attempts[-1].outcome is not None)


class _Family:
    """One metric family: HELP, TYPE and its samples, labels escaped."""

    def __init__(self, name: str, kind: str, help_text: str, run: str) -> None:
        self.name, self.kind, self.help, self.run = name, kind, help_text, run
        self.lines: list[str] = []

    def add(self, value: float | None, suffix: str = "", **labels: object) -> None:
        if value is None:  # unknown is left out, never reported as 0
            return
        pairs = ",".join(f'{k}="{_escape(str(v))}"' for k, v in
                         {"run": self.run, **labels}.items())
        self.lines.append(f"{self.name}{suffix}{{{pairs}}} {_number(value)}")

    def histogram(self, hist: Histogram, **labels: object) -> None:
        cumulative = 0
        for bound, count in zip(hist.bounds, hist.counts):
            cumulative += count
            self.add(cumulative, "_bucket", **labels, le=_number(bound))
        self.add(hist.count, "_bucket", **labels, le="+Inf")
        self.add(hist.total, "_sum", **labels)
        self.add(hist.count, "_count", **labels)

    def text(self) -> str:
        return "\n".join([f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}",
                          *self.lines])


Family = Callable[[str, str, str], "_Family"]  # (name, type, help) -> a new family


def render_metrics(sched: Scheduler, now: float, run: str, journal_seq: int,
                   tally: AttemptTally, commits: Histogram, serving: bool = True,
                   turns: tuple[Histogram, Histogram] | None = None) -> str:
    """The exposition text. ``tally``: the run's attempts, kept up to date with ``sched``;
    ``commits``: this coordinator's journal commit latencies; ``turns``: its loop turns'
    wall and CPU times."""
    families: list[_Family] = []

    def family(name: str, kind: str, help_text: str) -> _Family:
        families.append(_Family(name, kind, help_text, run))
        return families[-1]

    family("praxist_coordinator_serving", "gauge",
           "1 while the coordinator serves; 0 once it stopped cleanly").add(int(serving))
    family("praxist_metrics_updated_timestamp_seconds", "gauge",
           "When this file was rendered (Unix time)").add(now)
    jobs = family("praxist_jobs", "gauge", "Jobs of the run by state")
    for state in JobState:
        jobs.add(sched.count(state), state=state.value)
    family("praxist_queue_length", "gauge", "Jobs waiting to start (status.json queue_length)"
           ).add(len(sched.queued()))
    _attempts(tally, family)
    _gpus(sched, family)
    _pressure(sched, family)
    _concurrency(sched, family)
    _leases(sched, family)
    family("praxist_journal_commit_seconds", "histogram",
           "Journal commit (append + fsync) latency in this coordinator").histogram(commits)
    if turns is not None:
        family("praxist_loop_turn_seconds", "histogram", "Wall time of each turn of this "
               "coordinator's loop (selector to selector)").histogram(turns[0])
        family("praxist_loop_turn_cpu_seconds", "histogram",
               "CPU time of the loop's thread in each of those turns").histogram(turns[1])
    family("praxist_journal_seq", "gauge", "Sequence number of the last journaled record"
           ).add(journal_seq)
    _budget(sched, now, family)
    return "\n".join(f.text() for f in families) + "\n"


def _attempts(tally: AttemptTally, family: Family) -> None:
    family("praxist_attempts_started_total", "counter", "Attempts launched").add(tally.started)
    family("praxist_attempts_retried_total", "counter",
           "Attempts launched after a job's first (infrastructure retries, requeues)"
           ).add(tally.retried)
    ended = family("praxist_attempts_ended_total", "counter", "Attempts ended, by outcome")
    for outcome, count in sorted(tally.outcomes.items()):
        ended.add(count, outcome=outcome)
    waits = family("praxist_queue_wait_seconds", "histogram",
                   "Time a job waited in the queue before each of its attempts started")
    for work_class, histogram in tally.waits.items():
        waits.histogram(histogram, work_class=work_class)


def _gpus(sched: Scheduler, family: Family) -> None:
    loads = sched.real_loads() or []
    specs = (
        ("praxist_gpu_utilization_ratio", "Observed GPU utilization (0..1)",
         lambda load: _ratio(load.device.utilization_pct)),
        ("praxist_gpu_declared_utilization_ratio",
         "Utilization the run's jobs on the GPU declared (0..1)",
         lambda load: _ratio(load.declared_util)),
        ("praxist_gpu_external_utilization_ratio",
         "Observed utilization not accounted for by declarations (0..1)",
         lambda load: _ratio(load.external_util)),
        ("praxist_gpu_memory_total_bytes", "GPU memory size",
         lambda load: _bytes(load.device.memory_total_mib)),
        ("praxist_gpu_memory_used_bytes", "Observed GPU memory in use",
         lambda load: _bytes(load.device.memory_used_mib)),
        ("praxist_gpu_declared_memory_bytes", "GPU memory the run's jobs on the GPU declared",
         lambda load: _bytes(load.declared_mem)),
        ("praxist_gpu_external_memory_bytes",
         "Observed GPU memory in use not accounted for by declarations",
         lambda load: _bytes(load.external_mem)),
    )
    for name, help_text, value in specs:
        metric = family(name, "gauge", help_text)
        for load in loads:
            metric.add(value(load), uuid=load.device.uuid, index=load.device.index)


def _pressure(sched: Scheduler, family: Family) -> None:
    sample = sched.host.pressure if sched.host else None
    avg10 = family("praxist_pressure_avg10_ratio", "gauge",
                   "Host PSI 'some' avg10 per domain (0..1)")
    high = family("praxist_pressure_high_ratio", "gauge",
                  "Pressure above which admission holds work, per domain (0..1)")
    low = family("praxist_pressure_low_ratio", "gauge",
                 "Pressure below which the concurrency target may rise, per domain (0..1)")
    for domain, threshold in sched.policy.pressure_thresholds.items():
        avg10.add(_ratio(sample.get(domain) if sample else None), domain=domain)
        high.add(_ratio(threshold.high), domain=domain)
        low.add(_ratio(threshold.low), domain=domain)


def _concurrency(sched: Scheduler, family: Family) -> None:
    policy = sched.policy
    family("praxist_concurrency_target", "gauge", "Experiments the run may run at once now"
           ).add(sched.concurrency_target())
    family("praxist_concurrency_upper_bound", "gauge",
           "Bound on the target (max_concurrent_experiments, or the host's for auto)"
           ).add(sched.upper_bound())
    family("praxist_concurrency_min", "gauge", "min_concurrent_experiments"
           ).add(policy.min_concurrent_experiments)


def _leases(sched: Scheduler, family: Family) -> None:
    """Supply leases (R-SUP-3/4) by outcome over every generation, and open ones now."""
    totals = Counter({key: 0 for key in STAT_KEYS})
    for gen in sched.generations.values():
        for counts in gen.stats.values():
            totals.update(counts)
    outcomes = family("praxist_lease_outcomes_total", "counter",
                      "Supply lease events by outcome, over every generation")
    for key in STAT_KEYS:
        outcomes.add(totals[key], outcome=key)
    family("praxist_leases_outstanding", "gauge", "Leases granted and not yet used or ended"
           ).add(sum(len(gen.outstanding()) for gen in sched.generations.values()))
    current = sched.current_generation()
    family("praxist_generation_current", "gauge", "Number of the open generation (if any)"
           ).add(current.number if current else None)


def _budget(sched: Scheduler, now: float, family: Family) -> None:
    """Spend of ended attempts by kind (counters: it only grows), what the attempts in
    flight spent so far (a gauge: it falls as they end and their spend moves to a kind),
    and the limits in force."""
    spend = sched.spend(now)
    running = spend.pop(RUNNING)
    gpu = family("praxist_budget_gpu_seconds_total", "counter",
                 "GPU time ended attempts spent (GPU-seconds), by kind")
    cost = family("praxist_budget_cost_total", "counter",
                  "Cost ended attempts spent at the task's rates, by kind")
    for kind, ended in spend.items():
        gpu.add(ended.gpu_seconds, kind=kind)
        cost.add(ended.cost, kind=kind)
    family("praxist_budget_running_gpu_seconds", "gauge",
           "GPU time the attempts in flight spent so far (GPU-seconds)"
           ).add(running.gpu_seconds)
    family("praxist_budget_running_cost", "gauge",
           "Cost the attempts in flight spent so far").add(running.cost)
    budget, ledger = sched.budget, sched.ledger
    limit = family("praxist_budget_limit_gpu_seconds", "gauge",
                   "The run's GPU-time budget (GPU-seconds), if set")
    limit.add(None if budget.gpu_hours is None else budget.gpu_hours * 3600)
    family("praxist_budget_limit_cost", "gauge", "The run's cost budget, if set"
           ).add(budget.cost)
    verdict = family("praxist_budget_verdict", "gauge",
                     "1 for the journaled budget verdict (under, at, over), 0 for the others; "
                     "none without a budget")
    for name in VERDICTS if ledger.verdict is not None else ():
        verdict.add(int(ledger.verdict == name), verdict=name)


def _ratio(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def _bytes(mib: float | None) -> float | None:
    return None if mib is None else mib * MIB


def _number(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
