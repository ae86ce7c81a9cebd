"""The scheduler's journaled state as one document, and back: journal compaction.

``capture`` holds exactly what replaying the journal so far rebuilds; ``restore``
builds that scheduler without the events, so a start reads one snapshot plus
the journal's tail instead of every event since the run began. Soft state (host
samples, the concurrency controller, pending reasons, idle registrations) is
left out, as replay leaves it out. The test of both is the scheduler's own
equality: ``restore(capture(s)).snapshot() == s.snapshot()``, and the restored
scheduler must go on deciding exactly as the original would.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from typing import Any, NamedTuple

from .budget import Ledger
from .calibration import Calibration
from .model import Attempt, Job, Reply, identity_into_handle, kept_handle
from .nodes import NodeRegistry
from .pickers.ledger import Usage
from .policy import Policy
from .request import Request
from .scheduler import FINISHED, Scheduler
from .shelf import LineKeyed, PackedKeys, Shelved, encoded, offset_and_length, place
from .snapshot_header import read_header, read_header_pieces
from .states import (
    AttemptOutcome, AttemptPhase, AttemptTrigger, GenerationStage, JobState, LeaseState,
    PreemptMode, ReplyOutcome, attempt_transition,
)
from .supply import STAT_KEYS, Generation, Lease

FORMAT = 3  # a key added later must be optional in ``_restore``: older snapshots lack it
READS = (1, 2, 3)  # 1: every finished job's id in by_state, its line found by reading them all
# 2: an attempt's shim identity (pid, pid_start, boot_id) beside its handle; 3: inside it
# each machine's states by value (JobState(value) is slow at 100k jobs): str enums compare
# equal to their values, but a restored scheduler holds the very members replay would
_STATES = {state.value: state for state in JobState}
_PHASES = {phase.value: phase for phase in AttemptPhase}
_OUTCOMES = {outcome.value: outcome for outcome in ReplyOutcome}
_ENDS = {outcome.value: outcome for outcome in AttemptOutcome}
_MARKS = {state: mark for mark, state in enumerate(FINISHED)}


_JOB_KEY, _REPLY_KEY = b'{"job_id":"', b'{"request_id":"'  # how ``_line`` begins each


class SnapshotError(ValueError):
    """A snapshot this version cannot read (written by a newer one, or damaged)."""


class Restored(NamedTuple):
    journal_seq: int              # the journal seq the snapshot covers
    views_durable_ns: int | None  # its watermark (None: written before watermarks)
    sched: Scheduler
    tally: dict[str, Any] | None  # the attempt tally it was written with (``render``)


class Rendered(NamedTuple):
    """A snapshot file's bytes, and where its finished jobs' and replies' lines lie."""
    data: bytes
    jobs: Shelved
    replies: Shelved


def capture(sched: Scheduler) -> dict[str, Any]:
    return {**_header(sched, everything=True),
            "jobs": [_job(job) for job in sched.jobs.values()],
            "replies": [_reply(reply) for reply in sched.replies.values()]}


def render(sched: Scheduler, journal_seq: int, views_durable_ns: int | None = None,
           tally: dict[str, Any] | None = None) -> Rendered:
    """The snapshot file: a header line (everything but the jobs and the replies, with the
    journal seq it covers and the ``shelf``: the ids of the finished jobs and of the
    replies, in ``encoded`` order, with the length of each one's line, and each finished
    job's state), then a line per job not ended, per finished job and per reply, in that
    order. A start reads the header and the jobs not ended, and finds any other line by
    the header alone (``read``): it reads no line it is not asked for.

    ``views_durable_ns``: when the writer knew every derived file of the records up to
    ``journal_seq`` written and durable (the watermark a start after a crash compares
    against, ``read``); the header leaves it out when not given, and ``tally`` (the
    attempt tally of the same moment, ``AttemptTally.to_dict``) likewise. A job or reply
    still on the scheduler's shelf is copied as its line, never built."""
    live = [_line(_job(job)) for job in sorted(
        (job for job in sched.jobs.live() if not job.state.terminal),
        key=lambda job: encoded(job.job_id))]
    finished = list(sched.jobs.shelved_lines())
    finished += [(job.job_id, _line(_job(job)), _MARKS[job.state])
                 for job in sched.jobs.live() if job.state.terminal]
    replies = list(sched.replies.shelved_lines())
    replies += [(reply.request_id, _line(_reply(reply)), 0) for reply in sched.replies.live()]
    finished.sort(key=_encoded_key)  # mostly in order already: the shelf's
    replies.sort(key=_encoded_key)
    header = {**_header(sched), "journal_seq": journal_seq, "live_jobs": len(live),
              "shelf": {"finished": [state.value for state in FINISHED],
                        "jobs": _shelf_section(finished), "replies": _shelf_section(replies)}}
    if views_durable_ns is not None:
        header["views_durable_ns"] = views_durable_ns
    if tally is not None:
        header["tally"] = tally
    lines = [_line(header), *live]
    at = sum(map(len, lines))
    jobs, at = _index(finished, at)
    replies_index, _ = _index(replies, at)
    lines += [line for _, line, _ in finished]
    lines += [line for _, line, _ in replies]
    return Rendered(b"".join(lines), jobs, replies_index)


Entry = tuple[str, bytes, int]  # a finished job's or a reply's key, line and mark
Captured = tuple[list[str], list[str]]  # the finished jobs and the replies ``watch`` saw live


def watch(sched: Scheduler) -> Captured:
    """Before a snapshot of ``sched`` as it is now is rendered elsewhere (a forked
    child), while ``sched`` goes on changing: the ids of the finished jobs and of the
    replies in memory, which that snapshot will hold (``shelve`` takes them out of memory
    then, unless they were looked up to change since)."""
    sched.jobs.watch()
    sched.replies.watch()
    return ([job.job_id for job in sched.jobs.live() if job.state.terminal],
            [reply.request_id for reply in sched.replies.live()])


def _encoded_key(entry: Entry) -> bytes:
    return encoded(entry[0])


_DIGITS = bytes.maketrans(bytes(range(10)), b"0123456789")  # a mark as the header writes it


def _shelf_section(entries: list[Entry]) -> dict[str, Any]:
    return {"ids": [key for key, _, _ in entries],
            "lengths": [len(line) for _, line, _ in entries],
            "states": bytes(mark for _, _, mark in entries).translate(_DIGITS).decode()}


def _index(entries: list[Entry], at: int) -> tuple[Shelved, int]:
    """The index of lines laid one after the other from byte ``at``, and where they end."""
    lengths = [len(line) for _, line, _ in entries]
    offsets = list(accumulate(lengths, initial=at))
    return Shelved([key for key, _, _ in entries], offsets[:-1], lengths,
                   bytes(mark for _, _, mark in entries)), offsets[-1]


def shelve(sched: Scheduler, rendered: Rendered, read_at: Callable[[int], bytes],
           captured: Captured | None = None) -> None:
    """``rendered`` (of ``sched`` as it is, or as it was at ``watch`` when ``captured``
    says what it took from memory then) now lies in a file ``read_at`` reads (a
    ``place`` in, a line out): its finished jobs and every reply wait there from now on,
    not in memory (``Shelf``), but for those looked up to change since ``watch``."""
    jobs, replies = captured if captured is not None else (None, None)
    shelve_jobs(sched, rendered.jobs, read_at, jobs)
    shelve_replies(sched, rendered.replies, read_at, replies)


def shelve_jobs(sched: Scheduler, index: Shelved, read_at: Callable[[int], bytes],
                captured: Iterable[str] | None = None) -> None:
    """``shelve``'s first half, the finished jobs (a compaction's finish takes each half
    in a turn of its own: together they held the loop for 60-90 ms at 100,000)."""
    sched.jobs.shelve(index, read_at, _built_job, captured)
    for state in FINISHED:  # the finished jobs left in memory (none, as ``render`` writes)
        sched._by_state[state] = {job_id: None for job_id in sched._by_state[state]
                                  if sched.jobs.in_memory(job_id) is not None}


def shelve_replies(sched: Scheduler, index: Shelved, read_at: Callable[[int], bytes],
                   captured: Iterable[str] | None = None) -> None:
    """``shelve``'s second half, the replies."""
    sched.replies.shelve(index, read_at, _built_reply, captured)


def load(lines: Iterable[bytes]) -> tuple[int, Scheduler]:
    """(the journal seq it covers, the scheduler) from a snapshot file's lines."""
    restored = read(lines)
    return restored.journal_seq, restored.sched


def read(lines: Iterable[bytes], read_at: Callable[[int], bytes] | None = None,
         header_pieces: Callable[[], Iterator[bytes]] | None = None,
         keys_in_file: bool = False) -> Restored:
    """The scheduler a snapshot file's lines hold, and what the header says of them. With
    ``read_at`` (the lines are a file's from its start, and ``read_at`` reads one back by
    its ``place``), the finished jobs and the replies are shelved, not built, nor even
    read: a start reads the header and the jobs not yet ended. ``header_pieces``: the
    header line is read in the pieces it gives from the file's start
    (``read_header_pieces``: ~5 MB at 100,000 finished jobs, never held whole), and
    ``lines`` are those after it. A snapshot of format 1
    says where those lines lie only by reading them all; one written before shelves is
    built whole (its first compaction shelves it): it lacks the jobs with a preemption on
    record and each generation's jobs, which a shelf would build every job to find.
    ``keys_in_file`` (with ``header_pieces``): the shelf's keys are not held but read
    from their lines when looked up (``LineKeyed``), for a tool whose memory must not grow
    with the run's history; a start keeps them (its lookups are many, and on the loop)."""
    lines = iter(lines)
    try:
        if header_pieces is not None:
            header, length = read_header_pieces(header_pieces, keys=not keys_in_file)
            first = None
        else:
            first = next(lines, b"null")
            header = json.loads(first) if read_at is None else read_header(first)
            length = len(first)
        if isinstance(header, dict) and "shelf" in header:
            first = None  # ~5 MB at 100,000 finished: not held from here
            sched = _read_shelf(header, length, lines, read_at)
        elif read_at is None or "generation_jobs" not in header:
            sched = restore({**header, "jobs": _documents(lines, header["jobs"]),
                             "replies": _documents(lines, header["replies"])})
        else:
            jobs, live, replies = _places(lines, first if first is not None
                                          else b"".join(header_pieces()))
            sched = restore({**header, "jobs": map(json.loads, live), "replies": []},
                            (jobs, replies, read_at))
        if read_at is None and next(lines, None) is not None:
            raise SnapshotError("damaged snapshot: lines after the last reply")
        durable_ns, tally = header.get("views_durable_ns"), header.get("tally")
        return Restored(header["journal_seq"], durable_ns if isinstance(durable_ns, int)
                        else None, sched, tally if isinstance(tally, dict) else None)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SnapshotError):
            raise
        raise SnapshotError(f"damaged snapshot: {exc!r}") from None


def _read_shelf(header: dict[str, Any], at: int, lines: Iterator[bytes],
                read_at: Callable[[int], bytes] | None) -> Scheduler:
    """The scheduler of a snapshot with a ``shelf`` (``render``); the lines after its
    header are read only without ``read_at``. A section whose ids were only counted
    (``read_header_pieces`` without keys) is a ``LineKeyed`` index."""
    shelf, live = header["shelf"], []
    for line in _lines(lines, header["live_jobs"]):
        live.append(json.loads(line))
        at += len(line)
    marks = bytes.maketrans("".join(map(str, range(len(shelf["finished"])))).encode(),
                            bytes(_MARKS[_STATES[state]] for state in shelf["finished"]))
    sections = []
    for section in (shelf["jobs"], shelf["replies"]):
        ids, lengths, states = section["ids"], section["lengths"], section["states"]
        if not len(ids) == len(lengths) == len(states):
            raise SnapshotError("damaged snapshot: a shelf whose ids and lengths disagree")
        sections.append((ids, at, lengths, states.encode().translate(marks)))
        at += sum(lengths)
    (job_ids, job_at, job_lengths, job_marks), (reply_ids, reply_at, reply_lengths, _) = \
        sections
    if read_at is None:  # built whole: every line read, in the order the header lists them
        finished = [json.loads(line) for line in _lines(lines, len(job_ids))]
        by_state = {state: list(ids) for state, ids in header["by_state"].items()}
        for job_id, mark in zip(job_ids, job_marks):
            by_state.setdefault(FINISHED[mark].value, []).append(job_id)
        return restore({**header, "by_state": by_state, "jobs": live + finished,
                        "replies": [json.loads(line) for line in _lines(lines, len(reply_ids))]})
    jobs = _shelved(job_ids, job_at, job_lengths, job_marks, read_at, "job_id")
    replies = _shelved(reply_ids, reply_at, reply_lengths, b"", read_at, "request_id")
    last = replies if len(replies) else jobs
    if len(last):  # a file cut short would fail a later lookup: refuse now
        where = last.place(len(last) - 1)
        line = read_at(where)
        if len(line) != offset_and_length(where)[1] or not line.endswith(b"\n"):
            raise SnapshotError("damaged snapshot: it ends early")
    return restore({**header, "jobs": live, "replies": []}, (jobs, replies, read_at))


def _shelved(ids: list[str] | PackedKeys, at: int, lengths: array, marks: bytes,
             read_at: Callable[[int], bytes], field: str) -> Shelved:
    """A section's index, from its ids as ``json.loads`` or ``read_header`` gave them and
    its lines' ``lengths``, laid one after the other from byte ``at``; a ``LineKeyed`` one
    where the ids were only counted (``read_header_pieces`` without keys)."""
    wide = at + sum(lengths) >= 1 << 32  # 4 bytes a place where they do, as the index keeps
    if isinstance(ids, PackedKeys) and len(ids) and not ids.data:
        ends = array("Q", lengths) if wide and lengths.typecode != "Q" else lengths
        for position, end in enumerate(accumulate(ends, initial=at)):
            if position:  # the lengths become where each line ends, in place: no 2nd array
                ends[position - 1] = end
        return LineKeyed(at, ends, marks, read_at, field)
    offsets = array("Q" if wide else "I", accumulate(lengths, initial=at))
    del offsets[-1]
    if isinstance(ids, PackedKeys):
        return Shelved.packed(ids, offsets, lengths, marks)  # no marks: all 0
    return Shelved(ids, offsets, lengths, marks)


def _lines(lines: Iterator[bytes], count: int) -> Iterator[bytes]:
    for _ in range(count):
        line = next(lines, None)
        if line is None or not line.endswith(b"\n"):
            raise SnapshotError("damaged snapshot: it ends early")
        yield line


def _documents(lines: Iterator[bytes], count: int) -> Iterator[dict[str, Any]]:
    return map(json.loads, _lines(lines, count))


def _places(lines: Iterator[bytes], first: bytes) -> tuple[Shelved, list[bytes], Shelved]:
    """Of the lines after a format 1 header (``first``): (its finished jobs' index, the
    other jobs' lines, its replies' index)."""
    header, offset = json.loads(first), len(first)
    finished = {job_id: _MARKS[_STATES[state]] for state, job_ids in header["by_state"].items()
                if _STATES[state].terminal for job_id in job_ids}
    jobs: list[tuple[str, int, int]] = []
    live: list[bytes] = []
    replies: list[tuple[str, int, int]] = []
    for count, places, prefix, field in ((header["jobs"], jobs, _JOB_KEY, "job_id"),
                                         (header["replies"], replies, _REPLY_KEY, "request_id")):
        for line in _lines(lines, count):
            key = _key(line, prefix, field)
            if places is replies or key in finished:
                places.append((key, place(offset, len(line)), finished.get(key, 0)))
            else:
                live.append(line)
            offset += len(line)
    return Shelved.of(jobs), live, Shelved.of(replies)


def _key(line: bytes, prefix: bytes, field: str) -> str:
    """A line's first field, read without parsing the line where no escape is in it."""
    if line.startswith(prefix):
        end = line.find(b'"', len(prefix))
        raw = line[len(prefix):end]
        if end > 0 and b"\\" not in raw:
            return raw.decode()
    return json.loads(line)[field]


def _line(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "backslashreplace") + b"\n"


def _header(sched: Scheduler, everything: bool = False) -> dict[str, Any]:
    """All but the jobs and the replies. ``by_state`` lists the jobs not ended (a file's
    shelf lists the finished ones), or with ``everything`` every job (``capture``)."""
    calibration = sched.calibration
    by_state = {state.value: list(jobs) for state, jobs in sched._by_state.items()
                if jobs and (everything or not state.terminal)}
    if everything:
        for job_id, mark in sched.jobs.shelved():
            by_state.setdefault(FINISHED[mark].value, []).append(job_id)
    return {
        "format": FORMAT,
        "policy": sched.policy.to_dict(),
        "coordinator": sched.coordinator,
        "version": sched.version,
        "next_order": sched.last_order,
        "stopped": sched.stopped,
        # each state's jobs in the order they entered it (running() is in that order)
        "by_state": by_state,
        "generations": [_generation(gen) for gen in sched.generations.values()],
        "control_replies": sched.control_replies,
        "calibration": [calibration.count, calibration.total, calibration.total_sq],
        "usage": sched.usage.to_dict(),
        "queue_usage": sched.queue_usage.to_dict(),
        "budget": sched.ledger.to_dict(),
        "nodes": sched.nodes.to_dict(),
        "preempted_jobs": list(sched.preempted_jobs),
        "generation_jobs": {str(number): jobs for number, jobs in sched.generation_jobs.items()},
    }


OnShelf = tuple[Shelved, Shelved, Callable[[int], bytes]]


def restore(doc: dict[str, Any], shelved: OnShelf | None = None) -> Scheduler:
    """The scheduler ``doc`` holds; ``shelved``: its finished jobs and replies that are
    not in ``doc`` but on a shelf (their index, and how to read a place)."""
    if not isinstance(doc, dict) or doc.get("format") not in READS:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise SnapshotError(f"snapshot format {found!r}; this version reads "
                            f"{', '.join(map(str, READS))}")
    try:
        return _restore(doc, shelved)
    except (KeyError, TypeError, ValueError) as exc:
        raise SnapshotError(f"damaged snapshot: {exc!r}") from None


def _restore(doc: dict[str, Any], shelved: OnShelf | None = None) -> Scheduler:
    sched = Scheduler(Policy.from_dict(doc["policy"]))
    sched.coordinator = doc["coordinator"]
    sched.version = doc["version"]
    sched.resume_orders_after(doc["next_order"])
    sched.stopped = doc["stopped"]
    for data in doc["jobs"]:
        sched.jobs[data["job_id"]] = _to_job(data)
    for data in doc["replies"]:
        sched.replies[data["request_id"]] = _to_reply(data)
    if shelved is not None:
        jobs, replies, read_at = shelved
        sched.jobs.shelve(jobs, read_at, _built_job)
        sched.replies.shelve(replies, read_at, _built_reply)
    for state, job_ids in doc["by_state"].items():
        state = _STATES[state]  # a finished job's entry is its id alone (``_transition``)
        in_memory = {}  # a new dict: the queue's index is rebuilt from it (``_queue``)
        for job_id in job_ids:  # a shelved one (format 1 lists them) is found by its mark
            if (job := sched.jobs.in_memory(job_id)) is not None:
                in_memory[job_id] = None if state.terminal else job
            elif sched.state_of(job_id) is not state:
                raise ValueError(f"jobs and their per-state index disagree on {job_id}")
        sched._by_state[state] = in_memory
    live = list(sched.jobs.live())
    if sum(map(len, sched._by_state.values())) != len(live) or any(
            job.job_id not in sched._by_state[job.state] for job in live):
        raise ValueError("jobs and their per-state index disagree")
    sched.generations = {data["number"]: _to_generation(data) for data in doc["generations"]}
    sched.control_replies = doc["control_replies"]
    sched.calibration = Calibration(*doc["calibration"])
    sched.usage = Usage({peer: (value, as_of) for peer, (value, as_of) in doc["usage"].items()})
    sched.queue_usage = Usage({name: (value, as_of)  # snapshots before projects lack it
                               for name, (value, as_of) in doc.get("queue_usage", {}).items()})
    sched.ledger = Ledger.from_dict(doc["budget"])
    if "nodes" in doc:  # snapshots before the node registry lack it
        sched.nodes = NodeRegistry.from_dict(doc["nodes"])
    if "preempted_jobs" in doc:
        sched.preempted_jobs = dict.fromkeys(doc["preempted_jobs"])
    else:  # snapshots before the shelf lack it: every job is read once
        sched.preempted_jobs = {job.job_id: None for job in sched.jobs.values()
                                if any(attempt.preemptions for attempt in job.attempts)}
    if "generation_jobs" in doc:
        sched.generation_jobs = {int(number): jobs
                                 for number, jobs in doc["generation_jobs"].items()}
    else:  # likewise
        for job in sched.jobs.values():
            if job.generation is not None:
                sched.generation_jobs.setdefault(job.generation, {})[job.job_id] = \
                    job.request.peer
    for job in live:  # a finished job waits for nothing (its dependencies matter no more)
        sched.jobcontrol.link_dependencies(job)
    return sched


def _job(job: Job) -> dict[str, Any]:
    return {"job_id": job.job_id, "request": job.request.to_dict(), "profile": job.profile,
            "fingerprint": job.fingerprint, "submitted_at": job.submitted_at,
            "order": job.order, "state": job.state.value, "reason": job.reason,
            "round": job.round, "generation": job.generation,
            "priority": job.priority, "held": job.held,
            "after": [list(dependency) for dependency in job.after], "uid": job.uid,
            "admission_deadline": job.admission_deadline,
            "attempts": [_attempt(a) for a in job.attempts]}


def _to_job(data: dict[str, Any]) -> Job:
    return Job(job_id=data["job_id"], request=Request.from_dict(data["request"]),
               profile=data["profile"], fingerprint=data["fingerprint"],
               submitted_at=data["submitted_at"], order=data["order"],
               state=_STATES[data["state"]], reason=data["reason"], round=data["round"],
               generation=data["generation"], priority=data.get("priority", 0),
               held=data.get("held"), after=tuple(map(tuple, data.get("after", ()))),
               uid=data.get("uid"), admission_deadline=data.get("admission_deadline"),
               attempts=[_to_attempt(a) for a in data["attempts"]])


def _built_job(line: bytes) -> Job:
    return _to_job(json.loads(line))


def _attempt(attempt: Attempt) -> dict[str, Any]:
    return {"attempt_id": attempt.attempt_id, "number": attempt.number, "round": attempt.round,
            "started_at": attempt.started_at, "gpus": list(attempt.gpus),
            "phase": attempt.phase, "go": attempt.go, "ended_at": attempt.ended_at,
            "exit_code": attempt.exit_code, "signal": attempt.signal,
            "outcome": attempt.outcome, "failure": attempt.failure, "error": attempt.error,
            "preemptions": [dict(p) for p in attempt.preemptions], "cancel": attempt.cancel,
            "budget": attempt.budget,
            **({"handle": attempt.handle} if attempt.handle is not None else {}),
            **({"infrastructure": attempt.infrastructure} if attempt.infrastructure else {})}


def _to_attempt(data: dict[str, Any]) -> Attempt:
    attempt = Attempt(**identity_into_handle(data))
    if attempt.handle is not None:
        attempt.handle = kept_handle(attempt.handle)
    attempt.gpus = tuple(attempt.gpus)
    if attempt.preemptions:
        attempt.preemptions = tuple({**p, "mode": PreemptMode(p["mode"])}
                                    for p in attempt.preemptions)
    else:
        attempt.preemptions = ()
    attempt.phase = _PHASES[attempt.phase]
    if attempt.outcome is not None:
        attempt.outcome = _ENDS[attempt.outcome]
    if attempt.go and attempt.phase == AttemptPhase.BARRIER:  # a snapshot from before the
        attempt.phase = attempt_transition(attempt.attempt_id, attempt.phase,  # running phase
                                           AttemptTrigger.GO)
    return attempt


def _reply(reply: Reply) -> dict[str, Any]:
    return {"request_id": reply.request_id, "outcome": reply.outcome, "job_id": reply.job_id,
            "state": reply.state, "reason": reply.reason, "digest": reply.digest,
            "field": reply.field, "problem": reply.problem, "lease": reply.lease,
            "estimate": reply.estimate, "uid": reply.uid,
            **({"differs": reply.differs} if reply.differs else {})}


def _to_reply(data: dict[str, Any]) -> Reply:
    return Reply(**{**data, "outcome": _OUTCOMES[data["outcome"]],
                    "differs": tuple(data.get("differs", ()))})


def _built_reply(line: bytes) -> Reply:
    return _to_reply(json.loads(line))


def _generation(gen: Generation) -> dict[str, Any]:
    return {"number": gen.number, "phase": gen.phase, "cohort": list(gen.cohort),
            "deadline": gen.deadline, "opened_at": gen.opened_at,
            "close_requested": gen.close_requested, "closing_signal": gen.closing_signal,
            "results": {rid: list(value) for rid, value in gen.results.items()},
            "quarantined": gen.quarantined,
            "leases": [_lease(lease) for lease in gen.leases.values()],
            "cooldowns": [[peer, priority, declines, until]
                          for (peer, priority), (declines, until) in gen.cooldowns.items()],
            "stats": gen.stats}


def _to_generation(data: dict[str, Any]) -> Generation:
    return Generation(
        number=data["number"], phase=GenerationStage(data["phase"]), cohort=tuple(data["cohort"]),
        deadline=data["deadline"], opened_at=data["opened_at"],
        close_requested=data["close_requested"], closing_signal=data["closing_signal"],
        results={rid: (peer, mature) for rid, (peer, mature) in data["results"].items()},
        quarantined=data["quarantined"],
        leases={lease["lease_id"]: _to_lease(lease) for lease in data["leases"]},
        cooldowns={(peer, priority): (declines, until)
                   for peer, priority, declines, until in data["cooldowns"]},
        stats={priority: {**dict.fromkeys(STAT_KEYS, 0), **counts}  # older: fewer counters
               for priority, counts in data["stats"].items()})


def _lease(lease: Lease) -> dict[str, Any]:
    return {**lease.to_dict(), "profiles": list(lease.profiles)}


def _to_lease(data: dict[str, Any]) -> Lease:
    return Lease(**{**data, "profiles": tuple(data["profiles"]),
                    "state": LeaseState(data["state"])})
