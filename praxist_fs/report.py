"""The run report (R-OPS-1): one self-contained HTML file that looks back over a run.

``render`` draws it from the scheduler state the journal rebuilds (``load_run`` replays a
run's snapshot and journal read-only, for a live or a stopped run; ``praxist-fs simulate
--report`` passes the replay's scheduler): a per-GPU timeline (one bar per attempt on
each of its devices, co-located attempts stacked by their declared share), the queue
length over time, queue delay per work class, GPU-hours per peer with the budget
verdict, failures and retries, and lease outcomes per generation. Inline SVG and CSS
only, no script and nothing fetched: it opens from a mail attachment or an air-gapped
box. The state keeps every attempt's start and end, so a compacted journal loses
nothing the report shows.

Every section reads a ``History`` (report_history.py), not the jobs: the run's jobs are
walked once, each built from its snapshot line, folded into the sums and lists the
sections draw, and let go, so the memory a report of 100,000 finished jobs takes grows
with what it draws (bars, a float or two per wait), not with the jobs' documents or a
row per job; and the document is written as it is drawn (``render_parts``, ``write``),
never held whole.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from .adapters.fsio import write_atomic_pieces
from .adapters.history import read_run
from .adapters.layout import RunLayout
from .adapters.lock import live_endpoint
from .client import status_document
from .core.budget import Spend, attempt_spend, verdict
from .core.queues import queue_of_class
from .core.scheduler import Scheduler
from .errors import PraxistError
from .report_history import (
    MAX_FAILURE_ROWS, AttemptRow, History, JobRow, Ranked, queue_lengths,
)
from .simulate import percentile, percentile_ranks

# Colour-blind-safe (Tableau 10); peers beyond ten share colours, the legend says whose.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
PLOT_W, LABEL_W, LANE_H, AXIS_H = 1000, 190, 34, 22
MIN_SHARE = 0.15  # the least height of a bar (of a lane's): a 5 % job is seen, not a hairline
# Queue delay histogram bins (upper bounds, seconds): where a delay lands at a glance.
DELAY_BINS = ((1, "<1 s"), (10, "<10 s"), (60, "<1 min"), (600, "<10 min"), (3600, "<1 h"),
              (6 * 3600, "<6 h"), (math.inf, "≥6 h"))
COLOUR_BY = ("peer", "queue")
VIRTUAL_CLOCK = 1e9     # times below this are a simulation's seconds, not the epoch's


class ReportError(PraxistError):
    """A run directory the report cannot be built from (no journal, unreadable)."""


@dataclass(frozen=True, slots=True)
class Device:
    """A lane of the timeline: a GPU as the host's inventory named it."""

    uuid: str
    index: int | None = None  # None: not in the inventory (a UUID only attempts name)
    name: str = ""

    @property
    def label(self) -> str:
        return self.uuid if self.index is None else f"GPU {self.index} {self.name}".strip()


def devices_of(status: dict | None, sched: Scheduler | None = None) -> list[Device]:
    """The host's GPUs, from a coordinator's status.json (``gpus.devices``) or, for a
    replay, from the scheduler's last host sample: every lane the timeline draws, idle
    ones too."""
    listed = ((status or {}).get("gpus") or {}).get("devices") or []
    if not listed and sched is not None and sched.host is not None and sched.host.gpus:
        listed = [{"uuid": d.uuid, "index": d.index, "name": d.name}
                  for d in sched.host.gpus.devices]
    return [Device(d["uuid"], d.get("index"), d.get("name") or "") for d in listed
            if isinstance(d, dict) and isinstance(d.get("uuid"), str)]


@dataclass(slots=True)  # not frozen: one is built per bar, and frozen ones build slower
class Stint:
    """One attempt on one device: a bar of the timeline."""

    job: JobRow
    attempt: AttemptRow
    uuid: str
    start: float
    end: float
    share: float  # of the device's height: the declared utilisation, 1 when unknown
    open: bool    # still running (or suspended) at the report's end


def load_run(layout: RunLayout) -> tuple[Scheduler, float | None]:
    """The scheduler a start would rebuild from ``layout``'s snapshot and journal, read
    without writing anything, and the last journaled instant (None: no record after the
    snapshot)."""
    if not layout.journal.exists() and not layout.snapshot.exists():
        raise ReportError(f"{layout.root}: no journal under {layout.journal_dir}: not a "
                          "run directory, or its coordinator has not started yet")
    try:
        return read_run(layout)
    except PermissionError as exc:
        raise ReportError(f"{exc.filename}: permission denied (the journal is the "
                          "coordinator's alone: run the report as its user)") from None
    except (OSError, ValueError, KeyError, TypeError, PraxistError) as exc:
        # damage, or a record of a newer version: say so rather than print a traceback
        raise ReportError(f"{layout.journal_dir}: cannot replay: {exc!r}") from None


def report_of(layout: RunLayout, colour_by: str = "peer") -> tuple[Iterator[str], int]:
    """The report of the run at ``layout``, in pieces drawn as they are consumed
    (``render_parts``: hand them to ``write``), and its job count: a live run's open
    attempts run until now, a stopped run's until its last journaled instant
    (``History.end``)."""
    sched, last = load_run(layout)
    history = History.of(sched.jobs.values())
    live = live_endpoint(layout) is not None
    title = f"praxist-fs report: {layout.root}" + ("" if live else " (coordinator stopped)")
    until = time.time() if live else history.end(last)
    return render_parts(sched, title=title, until=until, colour_by=colour_by,
                        history=history, devices=devices_of(status_document(layout))), \
        history.jobs


def render(sched: Scheduler, *, title: str, until: float, colour_by: str = "peer",
           devices: list[Device] = (), history: History | None = None) -> str:
    """The report's HTML; open attempts are drawn up to ``until``, the timeline's bars
    coloured by ``colour_by`` (one of ``COLOUR_BY``: the job's peer or its queue), one
    lane for each of ``devices`` (idle ones too) and for any other GPU an attempt used.
    ``history``: ``History.of`` the scheduler's jobs when the caller has it already (the
    walk is not repeated); closed here, at ``until``."""
    return "".join(render_parts(sched, title=title, until=until, colour_by=colour_by,
                                devices=devices, history=history))


def render_parts(sched: Scheduler, *, title: str, until: float, colour_by: str = "peer",
                 devices: list[Device] = (), history: History | None = None
                 ) -> Iterator[str]:
    """``render``'s document as the pieces it is joined from, each drawn when the one
    before it has been consumed: ``write`` writes them as they come, so that the queue
    curve of a long run (~4.7 MB of text at 100,000 finished jobs) is never held whole,
    nor copied to be joined and again to be encoded (issue 31: memory flat in history)."""
    history = History.of(sched.jobs.values()) if history is None else history
    history.close(until)
    stints = _stints(sched, history.gpu_jobs, until)
    span = history.span(until)
    key = _peer if colour_by == "peer" else _queue_of(sched)
    peers = _colours(history.peers)
    colours = peers if colour_by == "peer" else _colours(_queues(sched, history.work_classes))
    states = history.states.counter()
    summary = (f"{_count(history.jobs, 'job')} "
               f"({', '.join(f'{n} {s}' for s, n in states.most_common())}), "
               f"{_count(history.attempts, 'attempt')}, "
               f"{_count(len({s.uuid for s in stints}), 'GPU')} used; "
               f"{_when(span[0])} → {_when(span[1])} ({_duration(span[1] - span[0])})")
    sections = [
        ("GPU timeline", "One lane per device, one bar per attempt on it; attempts sharing "
         f"a device are stacked by their declared utilisation, coloured by {colour_by}. "
         "Hover a bar for its job.",
         _timeline(stints, span, colours, key, devices)),
        ("Queue length", "Jobs waiting to start (queued, retries included) over time.",
         _queue_chart(history, span)),
        ("Queue delay by work class", "Every wait per job that started: submission to "
         "first start, and each time it was suspended or queued again.",
         _delays(history)),
        ("GPU-hours by peer", "Device-hours of every attempt (suspended time excluded).",
         _gpu_hours(sched, history, until, peers)),
        ("Failures and retries", "Attempts that did not complete, newest first.",
         _failures(history)),
        ("Leases by generation", "What the directed leases of each generation came to.",
         _leases(sched)),
    ]
    yield (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
           f"<title>{_e(title)}</title><style>{_css(peers, colours)}</style></head><body>"
           f"<h1>{_e(title)}</h1><p class=\"summary\">{_e(summary)}</p>")
    for name, note, content in sections:
        yield f'<section id="{_slug(name)}"><h2>{name}</h2><p class="note">{note}</p>'
        yield from [content] if isinstance(content, str) else content
        yield "</section>"
    yield (f'<p class="note">Built {_when(time.time())} by praxist-fs report.</p>'
           "</body></html>")


def write(path: str | Path, document: str | Iterable[str]) -> int:
    """Write the report whole (a browser reloading it never sees half): ``document`` or
    its pieces (``render_parts``), encoded and written as they come; its size in bytes."""
    pieces = (document,) if isinstance(document, str) else document
    return write_atomic_pieces(path, (piece.encode() for piece in pieces))


# -- the sections ------------------------------------------------------------------


def _stints(sched: Scheduler, jobs: list[JobRow], until: float) -> list[Stint]:
    stints = []
    for job in jobs:
        profile = sched.policy.profiles.get(job.profile)
        share = (profile.gpu_utilization_pct / 100 if profile is not None and
                 profile.demand_known else 1.0)
        for attempt in job.attempts:
            end = attempt.ended_at
            stints += [Stint(job, attempt, uuid, attempt.started_at,
                             until if end is None else end, min(share, 1.0), end is None)
                       for uuid in attempt.gpus]
    return stints


def _timeline(stints: list[Stint], span: tuple[float, float], colours: dict[str, int],
              key: Callable[[JobRow], str], devices: list[Device]) -> str:
    if not stints and not devices:
        return '<p class="empty">No attempt ran on a GPU.</p>'
    lanes: dict[str, list[Stint]] = defaultdict(list)
    for stint in stints:
        lanes[stint.uuid].append(stint)
    known = {device.uuid: device for device in devices}
    order = sorted([*devices, *(Device(uuid) for uuid in lanes if uuid not in known)],
                   key=_lane_order)
    height = len(order) * LANE_H + AXIS_H
    scale = PLOT_W / (span[1] - span[0])
    parts = [f'<svg class="timeline" width="{LABEL_W + PLOT_W}" height="{height}" '
             f'viewBox="0 0 {LABEL_W + PLOT_W} {height}">', _axis(span, len(order) * LANE_H)]
    # an attempt is one group (its hover text once), with a rectangle on each of its devices;
    # attempt ids are unique within their job only
    bars: dict[tuple[str, str], tuple[Stint, list[str]]] = {}
    for row, device in enumerate(order):
        top, uuid = row * LANE_H, device.uuid
        parts.append(f'<text x="4" y="{top + LANE_H / 2 + 4:.0f}" class="lane">'
                     f'<title>{_e(uuid)}</title>{_e(device.label)}</text>'
                     f'<rect x="{LABEL_W}" y="{top}" width="{PLOT_W}" height="{LANE_H - 2}" '
                     'class="lanebg"/>')
        for stint, offset in _stack(lanes.get(uuid, [])):
            x = LABEL_W + (stint.start - span[0]) * scale
            width = max((stint.end - stint.start) * scale, 1.0)
            bars.setdefault((stint.job.job_id, stint.attempt.attempt_id), (stint, []))[1].append(
                f'<rect x="{x:.1f}" y="{top + offset * (LANE_H - 2):.1f}" width="{width:.1f}" '
                f'height="{max(stint.share, MIN_SHARE) * (LANE_H - 2):.1f}"/>')
    parts += [f'<g class="bar p{colours[key(stint.job)]}" data-job="{_e(job_id)}" '
              f'data-attempt="{_e(attempt_id)}"><title>{_e(_hover(stint))}</title>'
              f'{"".join(rects)}</g>' for (job_id, attempt_id), (stint, rects) in bars.items()]
    return "".join(parts) + "</svg>" + _legend(colours)


def _lane_order(device: Device) -> tuple:
    """The inventory's devices by index, then UUIDs alone in natural order (GPU-2 before
    GPU-10, as people count)."""
    if device.index is not None:
        return (0, device.index, "")
    return (1, 0, [int(part) if part.isdigit() else part
                   for part in re.split(r"(\d+)", device.uuid)])


def _stack(stints: list[Stint]) -> Iterable[tuple[Stint, float]]:
    """Each attempt of one lane and its offset from the lane's top (a fraction): the
    lowest place its share fits beside the attempts on the device at the same time."""
    active: list[tuple[float, float, float]] = []  # (end, top, bottom)
    for stint in sorted(stints, key=lambda s: (s.start, s.attempt.attempt_id)):
        active = [a for a in active if a[0] > stint.start]
        offset = next((top for top in sorted({0.0, *(a[2] for a in active)})
                       if all(top + stint.share <= a[1] + 1e-9 or top >= a[2] - 1e-9
                              for a in active)), 0.0)
        offset = min(offset, max(0.0, 1.0 - stint.share))  # declared over 100%: overlap
        active.append((stint.end, offset, offset + stint.share))
        yield stint, offset


def _hover(stint: Stint) -> str:
    attempt, job = stint.attempt, stint.job
    if stint.open:
        ended = "still running"
    elif attempt.exit_code is not None:
        ended = f"exit {attempt.exit_code}" + (
            f" (signal {attempt.signal})" if attempt.signal else "")
    else:
        ended = attempt.outcome or "ended"
    return (f"{job.tag} · {job.job_id} attempt {attempt.number} · peer "
            f"{job.peer} · {_when(stint.start)} → "
            f"{'…' if stint.open else _when(stint.end)} ({_duration(stint.end - stint.start)})"
            f" · {ended}")


def _axis(span: tuple[float, float], top: int) -> str:
    ticks, scale = 6, PLOT_W / (span[1] - span[0])
    parts = []
    for i in range(ticks + 1):
        t = span[0] + (span[1] - span[0]) * i / ticks
        x = LABEL_W + (t - span[0]) * scale
        anchor = "start" if i == 0 else "end" if i == ticks else "middle"
        label = _when(t, short=True) if i == 0 else f"+{_duration(t - span[0])}"
        parts.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{top}" class="grid"/>'
                     f'<text x="{x:.1f}" y="{top + 15}" text-anchor="{anchor}" '
                     f'class="tick">{_e(label)}</text>')
    return "".join(parts)


def _legend(colours: dict[str, int]) -> str:
    return '<p class="legend">' + "".join(
        f'<span><i class="p{colour}"></i>{_e(name)}</span>' for name, colour in colours.items()
    ) + "</p>"


def _queue_chart(history: History, span: tuple[float, float]) -> Iterator[str]:
    """A step curve of queued jobs (``History``'s waits: from a job's submission, or the
    end of an attempt that sent it back, to the start of its next attempt, or to the end
    when it still waits), in pieces: its points are drawn a chunk at a time as the
    pieces are consumed."""
    if not history.queue_in:
        yield '<p class="empty">No job was queued.</p>'
        return
    height, scale = 160, PLOT_W / (span[1] - span[0])
    peak = max(0, max(n for _, n in queue_lengths(history)))
    y_of = (height - 10) / max(peak, 1)
    yield (f'<svg class="queue" width="{LABEL_W + PLOT_W}" height="{height + AXIS_H}">'
           f'<text x="4" y="14" class="lane">peak {peak} queued</text>'
           f'<text x="{LABEL_W - 6}" y="{height}" text-anchor="end" class="tick">0'
           '</text><polyline points="')
    yield from _spaced(f"{LABEL_W + (at - span[0]) * scale:.1f},{height - n * y_of:.1f}"
                       for at, n in _step_points(_corners(history, span)))
    yield f'" class="curve"/>{_axis(span, height)}</svg>'


def _corners(history: History, span: tuple[float, float]) -> Iterator[tuple[float, int]]:
    """The curve's points, one per instant: 0 at the axis' start, the queue's length at
    each instant it changes, 0 at the axis' end (every wait has ended by then) — where
    the start or the end is such an instant, its length is there, in that place."""
    start, end = span
    later = (n if at == start else 0 for at, n in queue_lengths(history) if at >= start)
    yield start, 0 if start == end else next(later, 0)
    ended = start == end
    for at, n in queue_lengths(history):
        if at == start:
            continue
        ended = ended or at == end
        yield at, 0 if at == end else n
    if not ended:
        yield end, 0


def _step_points(points: Iterable[tuple[float, int]]) -> Iterator[tuple[float, int]]:
    """A step curve's corners from its points (one per instant: many jobs start at once)."""
    previous = None
    for at, n in points:
        if previous is not None:
            yield at, previous
        yield at, n
        previous = n


def _spaced(parts: Iterable[str], chunk: int = 4096) -> Iterator[str]:
    """``parts`` a space apart, as strings to be joined (or written) with nothing between
    them: a chunk's joined at a time, so that a curve of 200,000 points is never a list
    of 400,000 strings."""
    parts = iter(parts)
    if block := list(islice(parts, chunk)):
        yield " ".join(block)
    while block := list(islice(parts, chunk)):
        yield " "
        yield " ".join(block)


def _delays(history: History) -> str:
    if not history.delays:
        return '<p class="empty">No job has started yet.</p>'
    head = "".join(f"<th>{label}</th>" for _, label in DELAY_BINS)
    rows = []
    for work_class, waits in sorted(history.delays.items()):
        delays = Ranked(len(waits), _ranks_shown(len(waits)))
        counts: Counter[int] = Counter()
        for rank, delay in enumerate(waits.sorted()):  # in order, once: binned, and kept
            # only at the ranks the table shows
            counts[next(i for i, (upper, _) in enumerate(DELAY_BINS) if delay < upper)] += 1
            delays.see(rank, delay)
        cells = "".join(
            f'<td class="heat" style="--f:{counts[i] / len(delays):.2f}">{counts[i] or ""}</td>'
            for i in range(len(DELAY_BINS)))
        rows.append(f"<tr><th>{_e(work_class)}</th><td>{len(delays)}</td>"
                    f"<td>{_duration(percentile(delays, 50))}</td>"
                    f"<td>{_duration(percentile(delays, 95))}</td>"
                    f"<td>{_duration(delays[-1])}</td>{cells}</tr>")
    return (f'<table class="delays"><tr><th>work class</th><th>jobs</th><th>p50</th>'
            f"<th>p95</th><th>max</th>{head}</tr>{''.join(rows)}</table>")


def _ranks_shown(count: int) -> set[int]:
    """The ranks of a work class's ``count`` waits in order that its row of the delay
    table reads: the two each of p50 and p95 lies between, and the last (the max)."""
    return {count - 1, *(rank for pct in (50, 95) for rank in percentile_ranks(count, pct)[:2])}


def _gpu_hours(sched: Scheduler, history: History, until: float, peers: dict[str, int]) -> str:
    """Each peer's device-hours, summed in submission order (the jobs that ran on no GPU
    add nothing: only their peers are listed)."""
    hours: Counter[str] = Counter({peer: 0.0 for peer in history.spenders})
    for job in history.gpu_jobs:
        for attempt in job.attempts:
            end = attempt.ended_at if attempt.ended_at is not None else until
            spent = attempt_spend(len(attempt.gpus), attempt.active_seconds(end), None)
            hours[job.peer] += spent.gpu_seconds / 3600
    most = max(hours.values(), default=0.0) or 1.0
    rows = "".join(
        f'<tr><th><i class="p{peers[peer]}"></i>{_e(peer)}</th><td>{_hours(spent)}</td>'
        f'<td class="barcell"><span class="p{peers[peer]}" style="width:{spent / most * 100:.1f}%">'
        "</span></td></tr>" for peer, spent in hours.most_common())
    budget = sched.budget
    total = sum(sched.spend(until).values(), Spend())
    found = verdict(budget, total)
    limits = ", ".join(f"{name} {limit:g}" for name, limit in (
        ("GPU-hours", budget.gpu_hours), ("cost", budget.cost)) if limit is not None)
    so_far = f"{_hours(total.gpu_seconds / 3600)} GPU-hours, cost {total.cost:.2f}"
    verdict_line = (f'budget verdict <b class="verdict {found}">{found}</b>: spent {so_far} '
                    f"(limits: {limits})" if found is not None else
                    f"no budget limits; spent {so_far}")
    return (f'<p class="budget">{verdict_line}</p><table class="peers"><tr><th>peer</th>'
            f"<th>GPU-hours</th><th></th></tr>{rows}</table>")


def _failures(history: History) -> str:
    if not history.failed:
        return '<p class="empty">Every attempt that ended completed.</p>'
    outcomes, retried = history.outcomes.counter(), history.retried
    rows = "".join(
        f"<tr><td>{_when(attempt.ended_at or attempt.started_at)}</td><td>{_e(job.job_id)}</td>"
        f"<td>{_e(job.tag)}</td><td>{_e(job.peer)}</td><td>{attempt.number}</td>"
        f"<td>{_e(attempt.outcome)}</td><td>{_exit(attempt)}</td><td>{_e(_why(attempt, job))}</td>"
        "</tr>" for attempt, job in history.failures())
    more = (f'<p class="note">… and {history.failed - MAX_FAILURE_ROWS} older ones.</p>'
            if history.failed > MAX_FAILURE_ROWS else "")
    counts = ", ".join(f"{n} {outcome}" for outcome, n in outcomes.most_common())
    return (f"<p>{counts}; {_count(retried, 'job')} ran more than once.</p>"
            "<table class=\"failures\">"
            "<tr><th>ended</th><th>job</th><th>tag</th><th>peer</th><th>attempt</th>"
            f"<th>outcome</th><th>exit</th><th>why</th></tr>{rows}</table>{more}")


def _exit(attempt: AttemptRow) -> str:
    if attempt.exit_code is None:
        return "—"
    return str(attempt.exit_code) + (f" (signal {attempt.signal})" if attempt.signal else "")


def _why(attempt: AttemptRow, job: JobRow) -> str:
    """What the attempt's own record says went wrong; the job's reason for its last one."""
    if attempt.failure:
        return json.dumps(attempt.failure, separators=(",", ":"))[:300]
    if attempt.error:
        return attempt.error
    if attempt.preemptions:
        last = attempt.preemptions[-1]
        return f"preempted ({last['mode']}) for {last['by']}: {last['reason']}"
    return job.reason if attempt is job.current else ""


def _leases(sched: Scheduler) -> str:
    if not sched.generations:
        return '<p class="empty">No generation was opened.</p>'
    keys = ("granted", "consumed", "declined", "expired", "revoked")
    rows = []
    for number, gen in sorted(sched.generations.items()):
        stats = gen.stats_document()
        rate = stats["conversion_rate"]
        rows.append(f"<tr><th>{number}</th><td>{_e(gen.phase)}</td>"
                    + "".join(f"<td>{stats[key]}</td>" for key in keys)
                    + f"<td>{'—' if rate is None else f'{rate:.0%}'}</td></tr>")
    return ('<table class="leases"><tr><th>generation</th><th>phase</th>'
            + "".join(f"<th>{key}</th>" for key in keys)
            + f"<th>consumed / granted</th></tr>{''.join(rows)}</table>")


# -- helpers -----------------------------------------------------------------------


def _colours(names: Iterable[str]) -> dict[str, int]:
    """Each peer's (or queue's) palette index, ``names`` in order of first submission."""
    colours: dict[str, int] = {}
    for name in names:
        colours.setdefault(name, len(colours) % len(PALETTE))
    return colours


def _queues(sched: Scheduler, work_classes: Iterable[str]) -> Iterator[str]:
    """The queue of each of ``work_classes`` (in order of first submission): the queues
    in order of first submission, some more than once."""
    queues = queue_of_class(sched.policy.queue_set())
    return (queues[work_class].name for work_class in work_classes)


def _peer(job: JobRow) -> str:
    return job.peer


def _queue_of(sched: Scheduler) -> Callable[[JobRow], str]:
    queues = queue_of_class(sched.policy.queue_set())
    return lambda job: queues[job.work_class].name


def _css(*maps: dict[str, int]) -> str:
    used = {i for colours in maps for i in colours.values()}
    colours = "".join(f".p{i}{{fill:{c};background:{c}}}" for i, c in enumerate(PALETTE)
                      if i in used)
    return (
        "body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1240px}"
        "h1{font-size:20px}h2{font-size:16px;margin:28px 0 4px}"
        ".note,.summary{color:#555;margin:2px 0 8px}.empty{color:#777;font-style:italic}"
        "svg{display:block;overflow:visible}.lane{font:11px monospace;fill:#333}"
        ".lanebg{fill:#f4f4f4}.bar{stroke:#fff;stroke-width:.5}.bar:hover{stroke:#000}"
        ".grid{stroke:#ddd}.tick{font:11px sans-serif;fill:#555}"
        ".curve{fill:none;stroke:#4e79a7;stroke-width:1.5}"
        "table{border-collapse:collapse}th,td{padding:2px 8px;text-align:left;"
        "border-bottom:1px solid #eee}"
        ".heat{background:rgba(78,121,167,var(--f));text-align:right}"
        ".barcell{width:400px}.barcell span{display:inline-block;height:10px}"
        ".legend span{margin-right:14px}i{display:inline-block;width:10px;height:10px;"
        "margin-right:4px}.verdict.over{color:#c00}.verdict.at{color:#b60}"
        ".failures td{font-size:12px}" + colours)


def _when(t: float, short: bool = False) -> str:
    """A UTC time; a simulation's virtual seconds as ``t=…``."""
    if t < VIRTUAL_CLOCK:
        return f"t={_duration(t)}"
    return time.strftime("%H:%M:%S" if short else "%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.{2 if seconds < 1 else 1 if seconds < 10 else 0}f} s"
    minutes = seconds / 60
    if minutes < 60:
        return f"{minutes:.1f} min"
    return f"{minutes / 60:.1f} h"


def _hours(hours: float) -> str:
    """GPU-hours as status shows them below one (a short run's are small)."""
    return f"{hours:.2f}" if hours >= 1 else f"{hours:.6f}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def _e(text: object) -> str:
    return html.escape(str(text))
