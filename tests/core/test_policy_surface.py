"""Seed 002's policy surface in the core: preemptible queues, preempt policies, queue time
windows, projects in front of the queues, and fcfs by job priority then queue time."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from praxist_fs.core.events import HostSampled
from praxist_fs.core.model import Job
from praxist_fs.core.pickers import PICKERS, Pass, PreemptPolicy, VictimScope, register_picker
from praxist_fs.core.queues import Project, Queue, Window, window_hold
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.core.status import render_status

from .helpers import PreemptRun, control, cpu_harness, kinds, launched_tags, replayed


WEDNESDAY_NOON = datetime(2026, 12, 2, 12, tzinfo=timezone.utc).timestamp()
NIGHTS_AND_WEEKENDS = (Window(days=(5, 6)), Window(start=20 * 60, end=8 * 60))


# -- fcfs: priority desc, queue time asc ----------------------------------------------


def test_fcfs_takes_job_priority_first_then_queue_time_across_a_tier():
    """seed 002 "Level 2: Intra-Queue Picker ... Default: builtin_fcfs (priority desc,
    queue_time asc)": in the scout+ordinary tier, a job's own priority orders it before
    older jobs of both queues; equal priorities keep submit order."""
    h = cpu_harness(slots=8)
    for tag, work_class, priority in (("o1", "ordinary", 0), ("o2", "ordinary", 5),
                                      ("s1", "scout", 5), ("o3", "ordinary", -1),
                                      ("s2", "scout", 0)):
        h.submit(tag, work_class=work_class, priority=priority)
    assert launched_tags(h) == ["o2", "s1", "o1", "s2", "o3"]


# -- preemption: the preemptible flag and the preempt policy ----------------------------


def test_a_preemptible_queue_is_preempted_by_every_higher_queue():
    """seed 002 "What's new": ``preemptible`` on the queue struct. A queue marked
    preemptible gives way to any queue of a higher priority that lists nothing; a queue
    not marked (and not listed) is never preempted."""
    policy_queues = (Queue(name="urgent", priority=10, work_classes=("mature",)),
                     Queue(name="normal", priority=5, work_classes=("ordinary",)),
                     Queue(name="scavenger", work_classes=("scout",), preemptible=True))
    run = PreemptRun(slots=2, queues=policy_queues)
    scavenger = run.start("scav", work_class="scout")
    normal = run.start("normal")
    urgent = run.submit("urgent", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", scavenger, "suspend"),
                                   ("AttemptLaunched", urgent, "")]
    urgent2 = run.submit("urgent-2", work_class="mature")["job_id"]
    assert run.decide() == []
    assert run.state(normal) == "running"
    assert run.sched.pending[urgent2] == "waiting for a slot: 2 of 2 running"


class OldestFirst(PreemptPolicy):
    """Victims oldest first: the opposite of the builtin's youngest first."""

    def init(self, ctx: Pass, scope: VictimScope) -> None:
        self._victims = iter(sorted(scope.candidates, key=lambda j: j.current.started_at))

    def next(self) -> Job | None:
        return next(self._victims, None)


@pytest.fixture
def oldest_first():
    register_picker("preempt", "oldest_first", OldestFirst)
    yield
    del PICKERS["preempt"]["oldest_first"]


def two_running_then_high(run: PreemptRun, victim: str) -> None:
    """Attempts "old" then "young" run in the low queue and a mature job arrives: it
    suspends ``victim`` and launches; the other attempt still runs."""
    started = {tag: run.start(tag) for tag in ("old", "young")}
    high = run.submit("high", work_class="mature")["job_id"]
    assert kinds(run.decide()) == [("AttemptPreempted", started[victim], "suspend"),
                                   ("AttemptLaunched", high, "")]
    [spared] = started.keys() - {victim}
    assert run.state(started[spared]) == "running"


@pytest.mark.parametrize("where", ["queue", "global"])
def test_a_registered_preempt_policy_chooses_the_victims(oldest_first, where):
    """seed 002 "Level 3: Preemption ... victims = preempt_policy.select_victims(job)",
    ``preempt_policy`` on the queue (else the scheduler's): a registered policy replaces
    the builtin lowest_priority_first, which takes the youngest."""
    on_queue = {"preempt_policy": "oldest_first"} if where == "queue" else {}
    policy_queues = (Queue(name="high", priority=10, work_classes=("mature",), **on_queue),
                     Queue(name="low", work_classes=("scout", "ordinary"), preemptible=True))
    overrides = {"preempt_policy": "oldest_first"} if where == "global" else {}
    two_running_then_high(PreemptRun(slots=2, queues=policy_queues, **overrides), "old")


def test_the_builtin_preempt_policy_takes_the_youngest():
    """seed 002 "Level 3 ... Default (v1): lowest_priority_first": lowest queue priority,
    then the youngest attempt."""
    policy_queues = (Queue(name="high", priority=10, work_classes=("mature",)),
                     Queue(name="low", work_classes=("scout", "ordinary"), preemptible=True))
    two_running_then_high(PreemptRun(slots=2, queues=policy_queues), "young")


# -- time windows -----------------------------------------------------------------------


def test_window_hold_says_when_the_queue_opens():
    """seed 002 "Queue ... Key attributes: Priority, limits, time windows": nights and
    weekends, read on the pass's time; the reason gives the next opening."""
    queue = Queue(name="scavenger", work_classes=("scout",), windows=NIGHTS_AND_WEEKENDS)
    assert window_hold(queue, WEDNESDAY_NOON, 0) == (
        "queue scavenger: outside its time windows; opens wed 20:00 (UTC+00:00), in 8h00m")
    assert window_hold(queue, WEDNESDAY_NOON + 8 * 3600, 0) is None          # 20:00
    assert window_hold(queue, WEDNESDAY_NOON + 19 * 3600 + 59 * 60, 0) is None  # thu 07:59
    assert window_hold(queue, WEDNESDAY_NOON + 20 * 3600, 0) is not None      # thu 08:00
    assert window_hold(queue, WEDNESDAY_NOON + 3 * 86400, 0) is None          # saturday noon
    # the offset moves the clock: noon UTC is 20:00 at UTC+08:00
    assert window_hold(queue, WEDNESDAY_NOON, 8 * 60) is None
    assert window_hold(queue, WEDNESDAY_NOON, -90) == (
        "queue scavenger: outside its time windows; opens wed 20:00 (UTC-01:30), in 9h30m")
    # a window that starts late on its day opens on that day's start, days later
    friday_night = Queue(name="f", work_classes=("scout",),
                         windows=(Window(days=(4,), start=22 * 60, end=2 * 60),))
    assert window_hold(friday_night, WEDNESDAY_NOON, 0).endswith("opens fri 22:00 "
                                                                  "(UTC+00:00), in 58h00m")
    assert window_hold(friday_night, WEDNESDAY_NOON + 2 * 86400 + 13 * 3600, 0) is None  # sat 01:00


def test_a_queue_outside_its_windows_starts_nothing_until_it_opens():
    """seed 002 "Queue ... time windows": scavenger work waits for the night, says so, and
    starts at the first pass inside the window; other queues are not held."""
    policy_queues = (Queue(name="day", priority=1, work_classes=("mature", "ordinary")),
                     Queue(name="scavenger", work_classes=("scout",),
                           windows=NIGHTS_AND_WEEKENDS))
    h = cpu_harness(slots=4, queues=policy_queues)
    h.now = WEDNESDAY_NOON
    scav = h.submit("scav", work_class="scout")["job_id"]
    h.submit("day")
    assert launched_tags(h) == ["day"]
    assert h.sched.pending[scav].startswith(
        "queue scavenger: outside its time windows; opens wed 20:00 (UTC+00:00), in 7h59m")
    assert h.job(scav)["reason"] == h.sched.pending[scav]
    h.now = WEDNESDAY_NOON + 8 * 3600  # the daemon samples the host every few seconds
    h.handle(HostSampled(at=h.tick()))
    assert launched_tags(h) == ["scav"]


# -- projects ---------------------------------------------------------------------------


PROJECT_QUEUES = (Queue(name="vision", work_classes=("scout",)),
                  Queue(name="nlp", priority=5, work_classes=("ordinary", "mature")))


def test_projects_come_before_queues_in_the_loop(recorder):
    """seed 002 "The scheduling loop is always project -> queue -> job": with the flat
    project picker the projects go in the order written, each with only its own queues
    (a lower-priority queue of the first project before a higher one of the second),
    and a project's job picker orders the queues that name none (queue -> project ->
    global)."""
    projects = (Project(name="cv", queues=("vision",), picker="recorder"),
                Project(name="lang", queues=("nlp",)))
    h = cpu_harness(slots=8, queues=PROJECT_QUEUES, projects=projects)
    for tag, work_class in (("n1", "ordinary"), ("v1", "scout"), ("n2", "mature"),
                            ("v2", "scout")):
        h.submit(tag, work_class=work_class)
    assert launched_tags(h) == ["v2", "v1", "n1", "n2"]  # recorder: last first
    assert recorder.calls == [("init", ("vision",)), "fini"]  # nlp is fcfs: the global one


def project_run(picker: str, shares: tuple[float, float] = (1.0, 1.0), slots: int = 2) -> PreemptRun:
    projects = (Project(name="cv", queues=("vision",), share=shares[0]),
                Project(name="lang", queues=("nlp",), share=shares[1]))
    queues = (Queue(name="vision", work_classes=("scout",)),
              Queue(name="nlp", work_classes=("ordinary", "mature")))
    return PreemptRun(slots=slots, queues=queues, projects=projects, project_picker=picker)


def launched_when_one_ends(run: PreemptRun, running: list[str], ending: str) -> str:
    """The ``running`` jobs start their commands and, 100 s later, ``ending`` exits 0: the
    tag of the one job launched in its place."""
    for job_id in running:
        run.go(job_id, "a1")
    run.now += 100
    run.exit(ending, "a1", 0)
    (launch,) = run.decide()
    return run.sched.jobs[launch.job_id].request.tag


def next_after_one_vision_job_ends(run: PreemptRun) -> str:
    """cv fills both slots first (its jobs are older); one of them ends after 100 s."""
    first = [run.submit(f"v{i}", work_class="scout")["job_id"] for i in range(4)]
    run.submit("n1")
    launched = [e.job_id for e in run.decide()]
    assert launched == first[:2]
    return launched_when_one_ends(run, launched, first[0])


def test_fair_share_across_projects_gives_a_freed_slot_to_the_project_that_used_less():
    """seed 002 "Level 0 project picker selects which project gets resources (fair-share
    ...)": the freed slot goes to lang, which has used nothing, not to cv's older job; the
    flat picker keeps config order (cv first)."""
    assert next_after_one_vision_job_ends(project_run("fair_share")) == "n1"
    assert next_after_one_vision_job_ends(project_run("flat")) == "v2"


def test_a_project_share_weighs_its_usage():
    """seed 002 "Project ... Quota, usage": usage is divided by the share. Both projects
    run work; cv has used more, so lang gets the freed slot, unless cv's share is large."""
    def freed_slot_goes_to(shares: tuple[float, float]) -> str:
        run = project_run("fair_share", shares, slots=3)
        vision = [run.submit(f"v{i}", work_class="scout")["job_id"] for i in range(2)]
        launched = [e.job_id for e in run.decide()]
        lang = run.submit("n0")["job_id"]
        launched += [e.job_id for e in run.decide()]
        assert launched == [*vision, lang]
        run.submit("v2", work_class="scout")
        run.submit("n1")
        return launched_when_one_ends(run, launched, vision[0])

    assert freed_slot_goes_to((1.0, 1.0)) == "n1"
    assert freed_slot_goes_to((1000.0, 1.0)) == "v2"


def test_project_usage_is_rebuilt_by_replay_and_snapshot():
    """The projects' ledger (slot-seconds by queue) is derived from journaled ends."""
    run = project_run("fair_share")
    next_after_one_vision_job_ends(run)
    (ended,) = [a for j in run.sched.jobs.values() for a in j.attempts if a.ended_at]
    usage = run.sched.snapshot()["queue_usage"]
    assert usage == {"vision": [ended.ended_at - ended.started_at, ended.ended_at]}
    assert replayed(run.journal).snapshot()["queue_usage"] == usage
    assert restore(capture(run.sched)).snapshot()["queue_usage"] == usage


def test_status_shows_each_project_with_its_jobs_and_usage():
    """seed 002 "Project ... Quota, usage": status.json lists each project, its queues,
    running and queued jobs, and the usage fair share orders by; without a projects
    block, the one default project owning every queue."""
    run = project_run("fair_share")
    next_after_one_vision_job_ends(run)
    (ended,) = [a for j in run.sched.jobs.values() for a in j.attempts if a.ended_at]
    running = {j.request.tag: j.current for j in run.sched.running()}
    assert sorted(running) == ["n1", "v1"]
    now = run.tick()
    cv, lang = render_status(run.sched, now, {})["projects"]
    decayed = (ended.ended_at - ended.started_at) * 2 ** (-(now - ended.ended_at) / 3600)
    assert cv.pop("usage_slot_s") == pytest.approx(decayed + now - running["v1"].started_at,
                                                   abs=0.001)
    assert cv == {"name": "cv", "queues": ["vision"], "share": 1.0, "running": 1, "queued": 2}
    assert lang == {"name": "lang", "queues": ["nlp"], "share": 1.0, "running": 1,
                    "queued": 0, "usage_slot_s": round(now - running["n1"].started_at, 3)}
    held = next(j.job_id for j in run.sched.queued() if j.request.tag == "v3")
    assert control(run, "hold", jobs=[held])["outcome"] == "ok"
    assert render_status(run.sched, run.tick(), {})["projects"][0]["queued"] == 2  # held too
    assert [p["name"] for p in render_status(cpu_harness().sched, now, {})["projects"]] == \
        ["default"]
