"""Queues and pickers in the task file (R-POL-1): parsed strictly, journaled as values."""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from praxist_fs import config_checks
from praxist_fs.config import load_policy, parse_task_text, policy_from_mapping
from praxist_fs.core.pickers import PICKERS, JobPicker
from praxist_fs.core.policy import WORK_CLASSES, Policy
from praxist_fs.core.queues import Project, Queue, Window, default_queues
from praxist_fs.errors import PolicyError

RS = "compute_budget.resource_scheduler"
QUEUES = f"{RS}.queues"
TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "tasks"


def load(body: str, mode: str = "central") -> Policy:
    lines = ["compute_budget:", "  resource_scheduler:", f"    mode: {mode}"]
    lines += ["    " + line for line in body.strip("\n").splitlines()]
    return policy_from_mapping(parse_task_text("\n".join(lines) + "\n"))


def fails(body: str, key_path: str, value: Any, expected: str, mode: str = "central") -> None:
    with pytest.raises(PolicyError) as info:
        load(body, mode)
    error = info.value
    assert (error.key_path, error.value) == (key_path, value), str(error)
    assert expected in error.expected, str(error)


def test_without_queues_the_work_classes_are_the_queues():
    policy = load("exploration_reserve: 2")
    assert policy.queues is None
    assert policy.queue_set() == default_queues(2) == (
        Queue(name="mature", priority=1, work_classes=("mature",), leave_slots=2,
              leave_slots_for=("scout", "ordinary")),
        Queue(name="scout", work_classes=("scout",)),
        Queue(name="ordinary", work_classes=("ordinary",)))
    assert (policy.project_picker, policy.queue_picker, policy.job_picker) == (
        "flat", "strict_priority", "fcfs")
    assert policy.fair_share_half_life_seconds == 3600.0


def test_the_queues_in_force_follow_a_policy_made_from_another():
    """The queues in force are made once per policy, since every pass reads them: a
    policy replaced with another exploration reserve, or with queues of its own, must
    schedule by its own queues, not by those made for the policy it came from."""
    policy = load("exploration_reserve: 2")
    wider = replace(policy, exploration_reserve=3)
    assert wider.queue_set() == default_queues(3)
    assert wider.queue_of_class()["scout"] == default_queues(3)[1]
    assert wider.queue_of_class()["mature"].leave_slots == 3
    assert policy.queue_of_class()["mature"].leave_slots == 2
    one = Queue(name="all", work_classes=WORK_CLASSES)
    assert replace(policy, queues=(one,)).queue_of_class() == dict.fromkeys(WORK_CLASSES, one)


def test_the_fixture_loads_and_travels_through_the_journal():
    policy = load_policy(TASKS / "queues.yaml")
    mature, explore = policy.queues
    assert mature == Queue(name="mature", priority=10, work_classes=("mature",),
                           picker="backfill", leave_slots=1, leave_slots_for=("explore",),
                           preemptible_queues=("explore",), preempt="requeue")
    assert explore == Queue(name="explore", work_classes=("scout", "ordinary"),
                            picker="fair_share", max_running=6)
    document = json.loads(json.dumps(policy.to_dict()))
    assert document["queues"]["mature"] == {
        "priority": 10, "work_classes": ["mature"], "picker": "backfill",
        "limits": {"max_running": None}, "leave_slots": {"slots": 1, "for": ["explore"]},
        "preemptible_queues": ["explore"], "preempt": "requeue", "preemptible": False,
        "preempt_policy": None, "windows": []}
    assert Policy.from_dict(document) == policy


def test_a_policy_journaled_before_queues_existed_still_loads():
    document = Policy().to_dict()
    for key in ("queues", "project_picker", "queue_picker", "job_picker",
                "fair_share_half_life_seconds"):
        del document[key]
    assert Policy.from_dict(document) == Policy()


def test_a_policy_journaled_before_projects_and_windows_existed_still_loads():
    policy = load_policy(TASKS / "queues.yaml")
    document = json.loads(json.dumps(policy.to_dict()))
    for key in ("projects", "preempt_policy", "windows_utc_offset_minutes"):
        del document[key]
    for queue in document["queues"].values():
        for key in ("preemptible", "preempt_policy", "windows"):
            del queue[key]
    assert Policy.from_dict(document) == policy


def test_a_hand_built_policy_must_map_every_work_class_once():
    with pytest.raises(ValueError, match="every work class in exactly one queue"):
        Policy(queues=(Queue(name="a", work_classes=("scout", "ordinary")),))
    with pytest.raises(ValueError, match="queue names"):
        Policy(queues=(Queue(name="a", work_classes=("scout", "ordinary")),
                       Queue(name="a", work_classes=("mature",))))


def test_a_list_of_queues_is_the_same_as_a_mapping():
    as_map = load("queues:\n  mature: {priority: 2}\n  rest: {work_classes: [scout, ordinary]}")
    as_list = load("queues:\n  - {name: mature, priority: 2}\n"
                   "  - {name: rest, work_classes: [scout, ordinary]}")
    assert as_list == as_map


ALL = "work_classes: [scout, ordinary, mature]"
ERRORS = [
    # body, key path, value, expected
    ("queues: {}", QUEUES, {}, "a non-empty mapping of queue name -> queue"),
    ("queues: [mature]", f"{QUEUES}[0]", "mature", "a queue mapping with a name"),
    ("queues: {mature: {}}", QUEUES, ["mature"],
     "every work class in some queue's work_classes (scout, ordinary in none)"),
    (f"queues: {{a: {{{ALL}}}, mature: {{}}}}", f"{QUEUES}.mature.work_classes[0]", "mature",
     "a work class no other queue takes (queue a takes it)"),
    ("queues: {a: {work_classes: [scout, ordinary, gpu]}}", f"{QUEUES}.a.work_classes[2]",
     "gpu", "one of scout, ordinary, mature"),
    ("queues: {a: {work_classes: [scout, scout]}}", f"{QUEUES}.a.work_classes[1]", "scout",
     "each of the work classes"),
    (f"queues: {{big: {{{ALL}}}, idle: {{}}}}", f"{QUEUES}.idle.work_classes", [],
     "at least one work class"),
    (f"queues: {{'a b': {{{ALL}}}}}", f"{QUEUES}.a b", "a b", "a queue name matching"),
    (f"queues: [{{name: a, {ALL}}}, {{name: a}}]", f"{QUEUES}[1]", "a", "each queue name once"),
    (f"queues: {{a: {{{ALL}, priority: high}}}}", f"{QUEUES}.a.priority", "high",
     "an integer"),
    (f"queues: {{a: {{{ALL}, picker: lottery}}}}", f"{QUEUES}.a.picker", "lottery",
     "a job picker: one of backfill, fair_share, fcfs"),
    (f"queues: {{a: {{{ALL}, limits: {{max_runing: 2}}}}}}", f"{QUEUES}.a.limits.max_runing",
     2, "a known key (did you mean 'max_running'?)"),
    (f"queues: {{a: {{{ALL}, limits: 2}}}}", f"{QUEUES}.a.limits", 2,
     "a mapping of max_running"),
    (f"queues: {{a: {{{ALL}, leave_slots: {{slots: 1, for: [b]}}}}}}",
     f"{QUEUES}.a.leave_slots.for[0]", "b", "another queue (there is only this one)"),
    (f"queues: {{a: {{{ALL}, preemptible_queues: [a]}}, b: {{work_classes: []}}}}",
     f"{QUEUES}.a.preemptible_queues[0]", "a", "another queue: b"),
    (f"queues: {{a: {{{ALL}, preempt: kill}}}}", f"{QUEUES}.a.preempt", "kill",
     "one of suspend, requeue"),
    (f"queues: {{a: {{{ALL}, prio: 1}}}}", f"{QUEUES}.a.prio", 1,
     "a known key (did you mean 'priority'?)"),
    (f"exploration_reserve: 1\nqueues: {{a: {{{ALL}}}}}", f"{RS}.exploration_reserve", 1,
     "no exploration_reserve beside queues"),
    ("job_picker: lottery", f"{RS}.job_picker", "lottery", "a job picker: one of"),
    ("queue_picker: fcfs", f"{RS}.queue_picker", "fcfs", "a queue picker: one of strict_priority"),
    ("project_picker: 3", f"{RS}.project_picker", 3, "a project picker: one of fair_share, flat"),
    ("fair_share_half_life_seconds: 0", f"{RS}.fair_share_half_life_seconds", 0, "a number > 0"),
    # seed 002's policy surface: preemptible, preempt_policy, windows, projects
    (f"queues: {{a: {{{ALL}, preemptible: yes}}}}", f"{QUEUES}.a.preemptible", "yes",
     "true or false"),
    (f"queues: {{a: {{{ALL}, preempt_policy: oldest}}}}", f"{QUEUES}.a.preempt_policy",
     "oldest", "a preempt picker: one of lowest_priority_first"),
    ("preempt_policy: 1", f"{RS}.preempt_policy", 1, "a preempt picker: one of"),
    (f"queues: {{a: {{{ALL}, windows: {{days: [sat]}}}}}}", f"{QUEUES}.a.windows",
     {"days": ["sat"]}, "a list of windows"),
    (f"queues: {{a: {{{ALL}, windows: [{{day: [sat]}}]}}}}", f"{QUEUES}.a.windows[0]",
     {"day": ["sat"]}, "with one or both keys"),
    (f"queues: {{a: {{{ALL}, windows: [{{days: [saturday]}}]}}}}",
     f"{QUEUES}.a.windows[0].days[0]", "saturday", "one of mon, tue, wed, thu, fri, sat, sun"),
    (f"queues: {{a: {{{ALL}, windows: [{{days: []}}]}}}}", f"{QUEUES}.a.windows[0].days", [],
     "at least one day"),
    (f"queues: {{a: {{{ALL}, windows: [{{hours: '22-6'}}]}}}}",
     f"{QUEUES}.a.windows[0].hours", "22-6", 'a quoted "HH:MM-HH:MM"'),
    (f"queues: {{a: {{{ALL}, windows: [{{hours: '08:00-08:00'}}]}}}}",
     f"{QUEUES}.a.windows[0].hours", "08:00-08:00", "two different times"),
    (f"queues: {{a: {{{ALL}, windows: [{{hours: '24:00-06:00'}}]}}}}",
     f"{QUEUES}.a.windows[0].hours", "24:00-06:00", "from 00:00 to 24:00"),
    ("windows_utc_offset_minutes: 1.5", f"{RS}.windows_utc_offset_minutes", 1.5, "an integer"),
    ("projects: []", f"{RS}.projects", [], "a non-empty mapping of project name"),
    ("projects: {p: {queues: [mature, scout]}}", f"{RS}.projects", ["p"],
     "every queue in some project's queues (ordinary in none)"),
    ("projects: {p: {queues: [mature, scout, ordinary, gpu]}}", f"{RS}.projects.p.queues[3]",
     "gpu", "a queue: mature, scout, ordinary"),
    ("projects: {p: {queues: [mature, scout]}, q: {queues: [scout, ordinary]}}",
     f"{RS}.projects.q.queues[0]", "scout", "a queue no other project owns (project p owns it)"),
    ("projects: {p: {queues: []}}", f"{RS}.projects.p.queues", [], "at least one queue"),
    ("projects: {p: {queues: [mature, scout, ordinary], share: 0}}", f"{RS}.projects.p.share", 0,
     "a number > 0"),
    ("projects: {p: {queues: [mature, scout, ordinary], quota: 3}}", f"{RS}.projects.p.quota", 3,
     "a known key"),
    ("projects: {p: {queues: [mature, scout, ordinary], picker: lottery}}",
     f"{RS}.projects.p.picker", "lottery", "a job picker: one of"),
    ("project_picker: quota", f"{RS}.project_picker", "quota", "a project picker: one of "
     "fair_share, flat"),
]


@pytest.mark.parametrize("body,key_path,value,expected", ERRORS)
def test_malformed_queues_and_pickers_name_the_key_and_what_was_expected(body, key_path, value,
                                                                        expected):
    fails(body, key_path, value, expected)


def test_the_policy_surface_of_seed_002_loads_and_travels_through_the_journal():
    """seed 002 "Queue vs Project": queues with preemptible, preempt_policy and time
    windows, owned by projects with shares, survive policy.json and the journal."""
    policy = load("""
project_picker: fair_share
preempt_policy: lowest_priority_first
windows_utc_offset_minutes: 60
queues:
  urgent: {priority: 10, work_classes: [mature], preempt_policy: lowest_priority_first}
  scavenger:
    work_classes: [scout, ordinary]
    preemptible: true
    windows: [{days: [sat, sun]}, {hours: "20:00-08:00"}, {days: [mon], hours: "00:00-24:00"}]
projects:
  vision: {queues: [urgent], share: 2, picker: backfill}
  nlp: {queues: [scavenger]}
""")
    urgent, scavenger = policy.queues
    assert urgent.preempt_policy == "lowest_priority_first" and not urgent.preemptible
    assert scavenger.preemptible and scavenger.windows == (
        Window(days=(5, 6)), Window(start=1200, end=480), Window(days=(0,)))
    assert policy.projects == (Project(name="vision", queues=("urgent",), share=2.0,
                                       picker="backfill"),
                               Project(name="nlp", queues=("scavenger",)))
    assert (policy.project_picker, policy.windows_utc_offset_minutes) == ("fair_share", 60)
    assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


def test_projects_may_name_the_default_queues_and_offsets_are_clamped():
    policy = load("windows_utc_offset_minutes: 2000\n"
                  "projects: {explore: {queues: [scout, ordinary]}, exploit: {queues: [mature]}}")
    assert [p.queues for p in policy.projects] == [("scout", "ordinary"), ("mature",)]
    assert [(n.key_path, n.used) for n in policy.normalizations] == [
        (f"{RS}.windows_utc_offset_minutes", 840)]
    assert load("").project_set() == (
        Project(name="default", queues=("mature", "scout", "ordinary")),)


def test_legacy_mode_ignores_unknown_queue_keys_but_checks_values():
    policy = load(f"queues: {{a: {{{ALL}, colour: blue}}}}", mode="legacy")
    assert policy.queues == (Queue(name="a", work_classes=("scout", "ordinary", "mature")),)
    fails(f"queues: {{a: {{{ALL}, priority: high}}}}", f"{QUEUES}.a.priority", "high",
          "an integer", mode="legacy")


def test_out_of_range_queue_values_are_moved_and_recorded():
    policy = load("max_concurrent_experiments: 4\nfair_share_half_life_seconds: 5\n"
                  "queues:\n  a: {work_classes: [scout, ordinary], limits: {max_running: -1}}"
                  "\n  mature: {leave_slots: {slots: 9, for: [a]}}")
    assert [(n.key_path, n.given, n.used) for n in policy.normalizations] == [
        (f"{RS}.fair_share_half_life_seconds", 5.0, 60.0),
        (f"{QUEUES}.a.limits.max_running", -1, 0),
        (f"{QUEUES}.mature.leave_slots.slots", 9, 4),
    ]


@dataclass
class FakeEntryPoint:
    name: str
    target: Any

    def load(self) -> Any:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


class Lottery(JobPicker):
    def init(self, ctx: Any, scope: Any) -> None:
        self._jobs = iter(scope.jobs)

    def next(self) -> Any:
        return next(self._jobs, None)


@pytest.fixture
def entry_points(monkeypatch):
    """Pretend these entry points are installed; forget what discovery registered after."""
    installed: list[FakeEntryPoint] = []
    monkeypatch.setattr(config_checks, "_discovered", False)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [e for e in installed if group == "praxist_fs.pickers"])
    yield installed
    for entry in installed:
        PICKERS["job"].pop(entry.name, None)


def test_a_picker_installed_as_an_entry_point_is_found_by_name(entry_points):
    entry_points.append(FakeEntryPoint("lottery", Lottery))
    assert "lottery" not in PICKERS["job"]
    policy = load("job_picker: lottery")
    assert policy.job_picker == "lottery" and PICKERS["job"]["lottery"] is Lottery


def test_a_broken_picker_plugin_is_named_in_the_error(entry_points):
    entry_points.append(FakeEntryPoint("lottery", ImportError("no module named lotto")))
    fails("job_picker: lottery", f"{RS}.job_picker", "lottery",
          "loading the praxist_fs.pickers entry points failed: ImportError")


def test_builtins_need_no_discovery(entry_points):
    entry_points.append(FakeEntryPoint("broken", ImportError("never loaded")))
    assert load("job_picker: backfill").job_picker == "backfill"
    assert config_checks._discovered is False
