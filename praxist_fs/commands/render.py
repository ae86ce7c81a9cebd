"""Every table and JSON document the CLI prints for people: one place for layout."""

from __future__ import annotations

import json
import time

from ..client import TERMINAL

TYPE_CHECKING = False  # ``typing`` is ~3 ms of a CLI call's start (R-PERF-3)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ..adapters.runs import Entry
    from ..simulate import Result


def format_peer_local(launches: list[dict]) -> str:
    """Legacy peer-local launches, from the protected-PID manifests (R-DUR-3)."""
    lines = [f"{'PEER-LOCAL LAUNCH (TAG)':32} {'PEER':12} {'PID':>8} {'AGE':>8}  "
             f"{'STATE':12} COMMAND"]
    for launch in launches:
        age = "-" if launch["age_s"] is None else f"{launch['age_s']:.1f}s"
        command = " ".join(map(str, launch.get("argv") or []))
        lines.append(f"{str(launch.get('tag'))[:32]:32} {launch['peer'][:12]:12} "
                     f"{str(launch.get('pid')):>8} {age:>8}  {launch['state']:12} {command[:60]}")
    return "\n".join(lines)


def format_budget(budget: dict) -> str:
    """One line: the verdict and for how long, spend against each limit, and how much of
    it infrastructure failures took."""
    limits, spend, infra = budget["limits"], budget["spend"], budget["infrastructure"]

    def against(key: str) -> str:
        limit = limits[key]
        return f"{spend[key]:.4g}" + ("" if limit is None else f" of {limit:g}")

    verdict = "no limits" if budget["verdict"] is None else \
        f"{budget['verdict']} for {time.time() - budget['since']:.0f}s"
    alerts = (budget.get("alerts") or {}).get("count")  # an older status.json has none
    return (f"budget {verdict}: {against('gpu_hours')} GPU-h, cost {against('cost')} "
            f"(infrastructure {infra['gpu_hours']:.4g} GPU-h, cost {infra['cost']:.4g})"
            + (f"; {alerts} alert(s): work enqueued while not under" if alerts else ""))


def format_status(doc: dict, alive: bool = True) -> str:
    """``alive``: whether the coordinator that wrote ``doc`` still runs (the liveness
    check ``launch`` uses); a dead one's last status is shown as such."""
    coord = doc.get("coordinator", {})
    age = time.time() - doc.get("updated_at", 0)
    if alive:
        state = f"{coord.get('state')} ({coord.get('observer')}, journal seq " \
                f"{coord.get('journal_seq')}, updated {age:.1f}s ago)"
    else:
        state = (f"NOT RUNNING (process gone; its last status, {age:.0f}s old, follows"
                 + (f"; the run is stopped: {doc['run_stopped']}" if doc.get("run_stopped")
                    else "; start one with: praxist-fs serve") + ")")
    lines = [
        f"coordinator pid {coord.get('pid')} on {coord.get('host')}: {state}",
        f"concurrency target {doc['concurrency']['target']} "
        f"(min {doc['concurrency']['min']}, max {doc['concurrency']['max']}); "
        f"running {doc['running']}" + (f" ({doc['pending_in_slurm']} of them pending in Slurm)"
                                       if doc.get("pending_in_slurm") else ""),
        "counts: " + "  ".join(f"{k} {v}" for k, v in doc["counts"].items() if v),
    ]
    peers = doc.get("peers") or {}  # an older coordinator's status.json has none
    if peers.get("max_concurrent_per_peer") is not None:  # R-SUB-5: only with a cap
        lines.append(f"running by peer (cap {peers['max_concurrent_per_peer']} each): "
                     + ("  ".join(f"{peer} {count}" for peer, count in peers["running"].items())
                        or "none"))
    if coord.get("degraded"):  # a full disk (OPERATIONS.md *Full disk*)
        lines.append(f"DEGRADED: {coord['degraded']}; requests wait until there is room")
    if coord.get("quarantined"):
        lines.append(f"quarantine: {coord['quarantined']} item(s) set aside in "
                     "resource_scheduler/quarantine/ await an operator (note.json says why)")
    for case in coord.get("problems") or ():  # set aside at a start (OPERATIONS.md *Crash*)
        lines.append(f"PROBLEM: {len(case['items'])} item(s) set aside in {case['case']}: "
                     + "; ".join(item["why"] for item in case["items"]))
    pressure = doc.get("pressure", {})
    if pressure.get("source"):
        lines.append(f"pressure ({pressure['source']} avg10): " + "  ".join(
            f"{d} {'?' if v['avg10'] is None else format(v['avg10'], '.0f')}% (high {v['high']:g})"
            for d, v in pressure["domains"].items()))
    if doc.get("budget"):
        lines.append(format_budget(doc["budget"]))
    gpus = doc.get("gpus", {})
    if gpus.get("devices"):
        lines += ["", f"{'GPU (' + gpus['source'] + ')':26} {'UTIL decl+ext':>14} "
                      f"{'MEMORY GiB decl+ext/total':>26}  JOBS"]
        for d in gpus["devices"]:
            lines.append(
                f"{d['uuid'][:26]:26} {d['declared_utilization_pct']:>6.0f}+"
                f"{d['external_utilization_pct']:<3.0f}%    "
                f"{d['declared_memory_mib'] / 1024:>9.1f}+{d['external_memory_mib'] / 1024:<5.1f}"
                f"/{d['memory_total_mib'] / 1024:<6.1f}  {len(d['jobs'])}")
    elif gpus.get("error"):
        lines.append(f"gpus: {gpus['error']}")
    if doc["active"]:
        lines += ["", f"{'JOB':40} {'ATTEMPT':8} {'PID':>8} {'AGE':>8}  {'PROFILE':14} "
                      f"{'GPUS':24} ACTIVITY"]
        lines += [f"{a['job_id'][:40]:40} {a['attempt_id']:8} {_where(a):>8} "
                  f"{a['age_s']:>7.1f}s  {a['profile'][:14]:14} "
                  f"{','.join(_gpus(a))[:24] or '-':24} {_activity(a)}"
                  + (f" {a['progress']['done']}/{a['progress']['total']}"
                     if a.get("progress") and "done" in a["progress"] else "")
                  for a in doc["active"]]
    if doc.get("nodes"):  # R-BUD-2: a cluster backend's nodes (this host first, if it runs)
        lines += ["", f"{'NODE':24} {'PARTITION':16} {'STATE':8} {'RUN':>4} {'SEEN':>9} "
                      f"{'FAILS':>5}  REASON"]
        lines += [f"{n['node'][:24]:24} {(n['partition'] or '(this host)')[:16]:16} "
                  f"{n['state']:8} {n.get('running', '-'):>4} {_seen(doc, n):>9} "
                  f"{n['consecutive_failures']:>5}  {n['reason'] or ''}" for n in doc["nodes"]]
    if doc.get("suspended"):  # R-POL-3; an older coordinator's status.json has none
        lines += ["", f"{'SUSPENDED JOB':40} {'ATTEMPT':8} {'FOR':>8}  {'BY':30} WAITING"]
        lines += [f"{s['job_id'][:40]:40} {s['attempt_id']:8} {s['suspended_s']:>7.1f}s  "
                  f"{s['by'][:30]:30} {s['waiting']}" for s in doc["suspended"]]
    if doc["queue"]:
        lines += ["", f"{'QUEUED JOB':40} {'AGE':>8}  {'PRIO':>4}  {'PROFILE':14} REASON"]
        lines += [f"{q['job_id'][:40]:40} {q['age_s']:>7.1f}s  {q.get('priority', 0):>4}  "
                  f"{q['profile'][:14]:14} {q['reason']}" for q in doc["queue"]]
        if doc["queue_length"] > len(doc["queue"]):
            lines.append(f"... and {doc['queue_length'] - len(doc['queue'])} more")
    return "\n".join(lines)


def format_control_reply(reply: dict) -> str:
    """A control request's answer: its outcome, then a line per selected job."""
    lines = [f"{reply['outcome']}: {reply['reason']}"]
    for job in reply.get("jobs") or ():
        lines.append(f"  {job['job_id'][:40]:40} {job['result']:10} {job['state']:10} "
                     f"{job['reason']}")
    return "\n".join(lines)


def format_when(at: float | None, now: float) -> str:
    """A local time, compact: the time alone today, the date and minute this year."""
    if at is None:
        return "-"
    when, today = time.localtime(at), time.localtime(now)
    if when[:3] == today[:3]:
        return time.strftime("%H:%M:%S", when)
    return time.strftime("%b %d %H:%M" if when[0] == today[0] else "%Y-%m-%d", when)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, hours = int(seconds) // 60, int(seconds) // 3600
    if hours < 1:
        return f"{minutes}m{int(seconds) % 60:02d}s"
    if hours < 24:
        return f"{hours}h{minutes % 60:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def _ellipsize(text: str, width: int, middle: bool = True) -> str:
    """At most ``width`` characters, cut in the ``middle`` (tags differ at both ends, model
    and seed; job ids at the end, their hash) or at the end (a reason's start says most)."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2 if middle else width - 1
    return f"{text[:head]}…{text[len(text) - (width - 1 - head):] if middle else ''}"


def job_row(document: dict, now: float) -> dict:
    """A job file plus what ``praxist-fs jobs`` derives from it (PROTOCOL.md, *Listing
    jobs*): the first start, the end, the attempts' summed run time and their count, and
    on Slurm the last attempt's Slurm job id and node."""
    attempts = document.get("attempts") or []
    ends = [a.get("ended_at") for a in attempts]
    last_end = ends[-1] if ends else None
    runs = [(start, end if end is not None else now) for a, end in zip(attempts, ends)
            if (start := _command_start(a)) is not None]
    wall = sum(end - start for start, end in runs) if runs else None
    handle = (attempts[-1].get("handle") or {}) if attempts else {}
    return {**document, "attempt_count": len(attempts),
            "started_at": attempts[0]["started_at"] if attempts else None,
            "ended_at": last_end if document.get("state") in TERMINAL else None,
            "wall_s": None if wall is None else round(wall, 3),
            "slurm_job_id": handle.get("job_id"), "node": handle.get("node")}


def _command_start(attempt: dict) -> float | None:
    """When the attempt's command started, for its wall time: its launch, or on Slurm when
    its shim was ready (``handle.started_at``: the queue's wait is not run time); None
    for one that never ran there."""
    handle = attempt.get("handle") or {}
    if handle.get("backend") != "slurm":
        return attempt["started_at"]
    if handle.get("started_at") is not None:
        return handle["started_at"]
    return attempt["started_at"] if handle.get("node") else None  # an older version's


JOB_COLUMNS = (  # header, cell
    ("JOB", lambda r, now: _ellipsize(r["job_id"], 36)),
    ("TAG", lambda r, now: _ellipsize(str(r.get("tag")), 28)),
    ("PEER", lambda r, now: _ellipsize(str(r.get("peer")), 12)),
    ("STATE", lambda r, now: r["state"]),
    ("EXIT", lambda r, now: "-" if r.get("exit_code") is None else str(r["exit_code"])),
    ("ATT", lambda r, now: str(r["attempt_count"])),
    ("SUBMITTED", lambda r, now: format_when(r.get("submitted_at"), now)),
    ("STARTED", lambda r, now: format_when(r["started_at"], now)),
    ("ENDED", lambda r, now: format_when(r["ended_at"], now)),
    ("WALL", lambda r, now: format_duration(r["wall_s"])),
    ("REASON", lambda r, now: _ellipsize(str(r.get("reason")), 60, middle=False)),
)
NUMERIC = {"EXIT", "ATT", "WALL", "SLURM"}
SLURM_COLUMNS = (  # where some job ran on Slurm: its last attempt's job id and node
    ("SLURM", lambda r, now: r["slurm_job_id"] or "-"),
    ("NODE", lambda r, now: _ellipsize(r["node"] or "-", 16)),
)


def _seen(doc: dict[str, Any], node: dict[str, Any]) -> str:
    """How long ago a node was last heard of (its latest outcome; this host's sample)."""
    seen = node.get("last_seen")
    return "-" if seen is None else f"{max(0.0, doc['updated_at'] - seen):.0f}s ago"


def _where(active: dict) -> str:
    """The attempt's shim pid, or its Slurm job id (``s<id>``) with a cluster backend."""
    handle = active.get("handle") or {}
    return f"s{handle['job_id']}" if "job_id" in handle else str(active["pid"])


def _gpus(active: dict) -> list[str]:
    """The devices it runs on: those praxist_fs placed, or on a cluster those Slurm gave."""
    return active["gpus"] or (active.get("handle") or {}).get("gpus") or []


def _activity(active: dict) -> str:
    """What it does: the host's measure, or on a cluster where Slurm runs it and why it
    waits (the job's reason carries Slurm's pending reason)."""
    handle = active.get("handle") or {}
    if "job_id" not in handle:
        return active["resource_activity"]
    return active.get("reason") or f"Slurm job {handle['job_id']}"


def format_jobs(rows: list[dict], matched: int, now: float) -> str:
    """The jobs table: each column as wide as its widest cell, the reason last and free,
    and a last line saying how many more matched than the limit let through."""
    columns = JOB_COLUMNS
    if any(row.get("slurm_job_id") for row in rows):
        columns = (*JOB_COLUMNS[:-1], *SLURM_COLUMNS, JOB_COLUMNS[-1])
    cells = [[cell(row, now) for _, cell in columns] for row in rows]
    headers = [header for header, _ in columns]
    widths = [max([len(header)] + [len(line[i]) for line in cells])
              for i, header in enumerate(headers)]
    lines = [" ".join(value.rjust(width) if header in NUMERIC else value.ljust(width)
                      for header, width, value in zip(headers, widths, line)).rstrip()
             for line in [headers, *cells]]
    if matched > len(rows):
        lines.append(f"... {matched - len(rows)} more (--limit N or --limit 0 to list them)")
    return "\n".join(lines)


def jobs_json(rows: list[dict], matched: int, source: str) -> str:
    return json.dumps({"jobs": rows, "matched": matched, "source": source}, indent=2)


def describe_end(attempt: dict) -> str:
    """How an attempt ended, in a few words: ``exit 75``, ``killed by signal 9``, ``released``,
    ``Slurm NODE_FAIL on node ci0, exit 143`` (an infrastructure failure, then the command's
    own end), or ``running`` while it has not."""
    if attempt.get("ended_at") is None:
        return "running"
    if attempt.get("infrastructure"):
        own = dict(attempt, infrastructure=None)
        return attempt["infrastructure"] + (
            f", {describe_end(own)}" if attempt.get("exit_code") is not None else "")
    if attempt.get("signal"):
        return f"killed by signal {attempt['signal']}"
    if attempt.get("exit_code") is not None:
        return f"exit {attempt['exit_code']}"
    return attempt.get("outcome") or "ended"


def attempt_header(attempt: dict, now: float) -> str:
    """``praxist-fs logs``'s line above each attempt's output, like tail's ``==> file <==``."""
    return (f"==> attempt {attempt['attempt_id']} (started "
            f"{format_when(attempt.get('started_at'), now)}, {describe_end(attempt)}) <==")


def attempt_marker(attempt: dict, previous: dict) -> str:
    """``praxist-fs launch``'s line between the output of two attempts of one job."""
    return (f"--- praxist-fs: attempt {attempt['attempt_id']} (retry after "
            f"{previous['attempt_id']}: {describe_end(previous)}) ---")


def format_json(document: Any) -> str:
    """A document for scripts, the same way in every command: indented JSON."""
    return json.dumps(document, indent=2)


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def format_simulation(results: list[Result], wall: bool = True) -> str:
    """``praxist-fs simulate``'s table: one row per policy and placement, the concurrency
    it ran under, then delay and completion time by size and by work class. ``wall``
    False (``--deterministic``) prints ``-`` for the wall time."""
    header = (f"{'POLICY':14} {'PLACEMENT':9} {'JOBS':>6} {'DONE':>6} {'UNRUN':>5} "
              f"{'MEAN DELAY':>10} {'P50 DELAY':>10} {'P95 DELAY':>10} {'MEAN JCT':>10} "
              f"{'GPU UTIL':>8} {'PREEMPT':>7} {'MAKESPAN':>10} {'WALL':>6}")
    lines = [header]
    for r in results:
        util = "-" if r.gpu_utilization is None else f"{100 * r.gpu_utilization:.1f}%"
        lines.append(
            f"{r.policy[:14]:14} {r.placement:9} {r.jobs:>6} {r.completed:>6} "
            f"{len(r.unrunnable):>5} {_span(r.mean_delay_s):>10} "
            f"{_span(r.p50_delay_s):>10} {_span(r.p95_delay_s):>10} "
            f"{_span(r.mean_jct_s):>10} {util:>8} {r.preemptions:>7} "
            f"{_span(r.makespan_s):>10} " + (f"{r.wall_s:>5.1f}s" if wall else f"{'-':>6}"))
    for r in results:
        limits = ("uncapped (--uncapped)" if r.concurrency == "uncapped"
                  else "the task file's limits")
        lines.append(f"concurrency ({r.policy}, {r.placement}): {limits}, at most "
                     f"{r.max_concurrent} at once; {r.peak_running} ran at once at the peak"
                     + (f"; {cap_bound(r)}" if r.cap_bound_s else ""))
    for title, breakdown in (("GPUS", "by_gpus"), ("CLASS", "by_class")):
        if any(getattr(r, breakdown) for r in results):
            lines.append(f"{'POLICY':14} {'PLACEMENT':9} {title:>8} {'DONE':>6} "
                         f"{'MEAN DELAY':>10} {'P50 DELAY':>10} {'P95 DELAY':>10} "
                         f"{'MAX DELAY':>10} {'MEAN JCT':>10} {'P95 JCT':>10} "
                         f"{'SUSPENDED':>10}")
        for r in results:
            for key, row in getattr(r, breakdown).items():
                lines.append(
                    f"{r.policy[:14]:14} {r.placement:9} {key:>8} {row['completed']:>6} "
                    + " ".join(f"{_span(row[name]):>10}" for name in (
                        "mean_delay_s", "p50_delay_s", "p95_delay_s", "max_delay_s",
                        "mean_jct_s", "p95_jct_s", "mean_suspended_s")))
    for r in results:
        if r.capacity_violations:
            lines.append(f"capacity ({r.policy}, {r.placement}): {r.capacity_violations} "
                         f"decision(s) broke a per-device limit, first: {r.violations[0]}")
    for r in results:
        for item in r.unrunnable[:5]:
            lines.append(f"unrunnable ({r.policy}, {r.placement}): job {item['job_id']}: "
                         f"{item['reason']}")
        if len(r.unrunnable) > 5:
            lines.append(f"unrunnable ({r.policy}, {r.placement}): ... and "
                         f"{len(r.unrunnable) - 5} more (--json lists them all)")
    return "\n".join(lines)


def cap_bound(r: Result) -> str:
    """What the concurrency line and ``simulate``'s warning say when the cap on jobs at
    once, not the GPUs, held work back for part of the replay."""
    share = f" ({100 * r.cap_bound_s / r.makespan_s:.0f}% of the makespan)" if r.makespan_s \
        else ""
    return (f"the cap, not the {r.gpus} GPUs, held work back for {_span(r.cap_bound_s)}"
            f"{share}: {r.max_concurrent} jobs ran, others waited, and a device held nothing")


def write_plot(results: list[Result], path: str) -> None:
    """Queue length and busy GPUs over time, one line per policy and placement."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    span = max((r.series[-1][0] for r in results if r.series), default=0.0)
    scale, unit = (86400, "days") if span > 2 * 86400 else (3600, "hours")
    figure, (queue_ax, busy_ax) = pyplot.subplots(2, 1, sharex=True, figsize=(11, 7))
    for r in results:
        times = [t / scale for t, _, _ in r.series]
        label = f"{r.policy} / {r.placement}"
        queue_ax.step(times, [q for _, q, _ in r.series], where="post", label=label)
        busy_ax.step(times, [b for _, _, b in r.series], where="post", label=label)
    busy_ax.axhline(results[0].gpus, color="grey", linestyle=":", label="GPUs")
    queue_ax.set_ylabel("queued jobs")
    busy_ax.set_ylabel("busy GPUs")
    busy_ax.set_xlabel(f"{unit} since the first submission")
    queue_ax.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot.close(figure)


def format_stop_listing(entries: list[Entry], registry: Path, what: dict[Path, str]) -> str:
    """What ``stop --all`` is about to do, for a person (stderr): one line per run, with
    ``what`` it runs."""
    targets = [e for e in entries if e.to_stop]
    lines = [f"praxist-fs stop --all: {len(targets) or 'no'} run{'s' * (len(targets) != 1)} "
             f"to stop in the run registry {registry}" + (":" if targets else "")]
    width = max((len(str(e.run_dir)) for e in entries), default=0)
    lines += [f"  {str(e.run_dir):{width}}  {what[e.run_dir]}"
              for e in targets]
    for title, chosen in (("left alone", [(e.run_dir, e.skipped) for e in entries if e.skipped]),
                          ("forgotten (stale entries, deleted)",
                           [(e.run_dir, e.pruned) for e in entries if e.pruned])):
        if chosen:
            lines += [f"{title}:", *(f"  {str(run_dir):{width}}  {why}"
                                     for run_dir, why in chosen)]
    return "\n".join(lines)


# -- praxist-fs top: the screen as lines, for a terminal at least 80 columns wide ----------

TOP_BAR = 10  # the inside of a bar: 10 characters, 10 % each


def bar(parts: list[float], full: float, mark: float | None = None, size: int = TOP_BAR
        ) -> str:
    """``[###++.....]``: ``parts`` of ``full`` (the first ``#``, the second ``+``), the
    rest ``.``; ``mark`` puts a ``|`` at a threshold (a pressure domain's ``high``)."""
    cells: list[str] = []
    for part, glyph in zip(parts, "#+"):
        share = 0.0 if not full else max(0.0, part) / full
        cells += glyph * round(min(size - len(cells), share * size))
    cells += "." * (size - len(cells))
    if mark is not None and full:
        cells[min(size - 1, round(mark / full * size))] = "|"
    return f"[{''.join(cells)}]"


def top_summary(doc: dict | None, alive: bool, run_dir: str, now: float) -> list[str]:
    """The fixed part above the job list: the coordinator, concurrency and counts,
    pressure, one line per GPU, the open generation's arithmetic and leases, the budget."""
    if doc is None:
        state = "no status.json yet:" if alive else "coordinator not running:"
        return [f"{state} {_ellipsize(run_dir, 79 - len(state) - 1)}",
                "start one with: praxist-fs serve --run-dir RUN"]
    coord = doc.get("coordinator") or {}
    age = now - doc.get("updated_at", now)
    state = (f"{coord.get('state')}, journal seq {coord.get('journal_seq')}, "
             f"updated {format_duration(max(0.0, age))} ago:" if alive else
             f"coordinator not running (last status {format_duration(max(0.0, age))} old"
             + (f"; run stopped: {doc['run_stopped']}" if doc.get("run_stopped") else "") + "):")
    lines = [f"{state} {_ellipsize(run_dir, max(12, 79 - len(state) - 1))}"]
    concurrency, counts = doc.get("concurrency") or {}, doc.get("counts") or {}
    listed = len(doc.get("queue") or ())  # status.json lists the first 50 queued jobs
    lines.append(f"running {doc.get('running', 0)} of {concurrency.get('target')} "
                 f"(min {concurrency.get('min')}, bound {concurrency.get('upper_bound')}: "
                 f"{concurrency.get('bound')}); " + " ".join(
                     f"{k} {v}" + (f" ({listed} listed)" if k == "queued" and v > listed else "")
                     for k, v in counts.items() if v and k != "running"))
    if coord.get("degraded"):
        lines.append(f"DEGRADED: {coord['degraded']}")
    if coord.get("quarantined"):
        lines.append(f"quarantine: {coord['quarantined']} item(s) await an operator")
    pressure = doc.get("pressure") or {}
    if pressure.get("source"):
        lines.append("pressure" + "".join(
            f" {domain[:3]} {bar([v['avg10'] or 0.0], 100.0, v['high'], size=8)} "
            f"{'?' if v['avg10'] is None else format(v['avg10'], '.0f')}/{v['high']:g}%"
            for domain, v in pressure["domains"].items()))
    gpus = doc.get("gpus") or {}
    for d in gpus.get("devices") or ():
        total, jobs = d["memory_total_mib"], len(d["jobs"])
        util = [d["declared_utilization_pct"], d["external_utilization_pct"]]
        memory = [d["declared_memory_mib"], d["external_memory_mib"]]
        lines.append(
            f"{d['index']:>2} {_ellipsize(d['uuid'], 14):14} util {bar(util, 100.0)} "
            f"{'{:.0f}+{:.0f}%'.format(*util):>7} mem {bar(memory, total)} "
            f"{'{:.0f}+{:.0f}/{:.0f}G'.format(*(m / 1024 for m in (*memory, total))):>10} "
            f"{jobs} job{'s' * (jobs != 1)}")
    if gpus.get("error"):
        lines.append(f"gpus: {gpus['error']}")
    lines += _top_generation(doc)
    if (doc.get("budget") or {}).get("verdict") is not None:
        lines.append(format_budget(doc["budget"]))
    return lines


def _top_generation(doc: dict) -> list[str]:
    """The open generation's maturity arithmetic and its leases; else the last one's phase."""
    gen = doc.get("generation")
    if gen is None:
        last = (doc.get("generations") or [None])[-1]
        return [] if last is None else [f"generation: none open (last {last['number']}, "
                                        f"{last['phase']})"]
    m, stats = gen["maturity"], gen["stats"]
    return [f"generation {gen['number']} {gen['phase']}: Q {m['Q']} M {m['M']} D {m['D']} "
            f"A_target {m['A_target']} commitments {m['mature_commitments']} results "
            f"{gen['results']['count']} (mature {gen['results']['mature']})",
            f"leases {len(gen['leases'])} held; " + " ".join(
                f"{k} {stats.get(k, 0)}" for k in ("granted", "consumed", "declined", "expired",
                                                  "revoked"))
            + f"; {len(gen.get('idle_peers') or ())} idle"]


TOP_JOB_HEADER = f"{'':3} {'JOB':24} {'PEER':8} {'AGE':>7} {'GPUS':5} {'ATT':3} DETAIL"


def top_jobs(doc: dict | None) -> list[dict]:
    """Every job ``top`` lists: running, then suspended, then queued (status.json's first
    50); each a ``row`` and a ``detail`` (the selected one's full line) by ``job_id``."""
    if doc is None:
        return []
    index = {d["uuid"]: str(d["index"]) for d in (doc.get("gpus") or {}).get("devices") or ()}
    rows = []
    for a in doc.get("active") or ():
        progress = a.get("progress") or {}
        done = (f"{progress['done']}/{progress['total']} {progress.get('unit') or ''}".strip()
                if "done" in progress else "no progress")
        phase = "" if a["phase"] == "running" else f"{a['phase']}, "  # launching, barrier
        rows.append(_top_row("RUN", a, a["age_s"], ",".join(index.get(g, g) for g in a["gpus"]),
                             a["attempt_id"], f"{phase}{done}, {a['resource_activity']}"))
    for s in doc.get("suspended") or ():
        rows.append(_top_row("SUS", s, s["suspended_s"], ",".join(index.get(g, g)
                                                                 for g in s["gpus"]),
                             s["attempt_id"], s["waiting"]))
    for q in doc.get("queue") or ():
        rows.append(_top_row("QUE", q, q["age_s"], "", "", q["reason"]))
    return rows


def _top_row(kind: str, job: dict, age: float, gpus: str, attempt: str, detail: str) -> dict:
    return {"job_id": job["job_id"], "kind": kind,
            "text": " ".join(str(job.get(k)) for k in ("job_id", "tag", "peer", "profile"))
            + " " + detail,
            "row": f"{kind:3} {_ellipsize(job['job_id'], 24):24} "
                   f"{_ellipsize(str(job.get('peer')), 8):8} {format_duration(age):>7} "
                   f"{_ellipsize(gpus or '-', 5):5} {attempt or '-':3} {detail}",
            "detail": f"{job['job_id']} ({job.get('peer')}, {job.get('profile')}): {detail}"}
