"""Seed 002's policy surface through a real coordinator, with real processes: projects with
a fair-share project picker in front of the queues, a preemptible queue, and a queue
outside its time windows. Every wait is on the field it reads, with a timeout."""

from __future__ import annotations

import time
from pathlib import Path

from praxist_fs.core.queues import DAYS

from .conftest import CPU_ONLY, request, wait_for

PROJECTS_TASK = """\
compute_budget:
  resource_scheduler:
    mode: central
    initial_concurrent_experiments: 2
    min_concurrent_experiments: 2
    max_concurrent_experiments: 2
    default_profile: cpu
    profiles:
      cpu: {accelerator: cpu}
    project_picker: fair_share
    queues:
      urgent: {priority: 10, work_classes: [mature]}
      vision: {work_classes: [scout], preemptible: true}
      nlp: {work_classes: [ordinary]}
    projects:
      cv: {queues: [vision]}
      lang: {queues: [urgent, nlp]}
"""


def held_until(directory: Path, name: str) -> list[str]:
    """Runs until ``directory/name`` exists, then exits 0."""
    return ["sh", "-c", f"while [ ! -e {directory}/{name} ]; do sleep 0.05; done"]


def test_fair_share_across_projects_and_a_preemptible_queue(make_run, tmp_path):
    """seed 002 "The scheduling loop is always project -> queue -> job" and "Level 0
    project picker selects which project gets resources (fair-share ...)": cv fills both
    slots; when one of its jobs ends, the freed slot goes to lang, which has used nothing,
    not to cv's older queued job. Then lang's urgent job (seed 002 "`preemptible` ... on
    queue struct") suspends the running job of the preemptible vision queue, never the
    nlp one."""
    run = make_run(task_text=PROJECTS_TASK)
    run.start()
    work = tmp_path / "work"
    work.mkdir()

    def submit(tag: str, work_class: str) -> str:
        doc = request(tag, held_until(work, tag), work_class=work_class)
        return run.reply(run.submit(doc))["job_id"]

    v1, v2 = submit("v1", "scout"), submit("v2", "scout")
    run.wait_state(v1, "running")
    run.wait_state(v2, "running")
    v3, n1 = submit("v3", "scout"), submit("n1", "ordinary")
    wait_for(lambda: (d := run.job(n1)) and d["reason"].startswith("waiting for a slot"),
             message="n1 to wait for a slot")
    assert run.job(v3)["state"] == "queued"

    (work / "v1").touch()
    run.wait_state(v1, "completed")
    run.wait_state(n1, "running")
    assert run.job(v3)["state"] == "queued"  # older, but its project has used more

    urgent = submit("urgent", "mature")
    doc = run.wait_state(v2, "suspended")
    assert doc["reason"].startswith(f"suspended: preempted by job {urgent}")
    run.wait_state(urgent, "running")
    assert run.job(n1)["state"] == "running"  # nlp is not preemptible
    status = wait_for(lambda: (s := run.status()) and s["suspended"] and s)
    assert status["suspended"][0]["job_id"] == v2
    cv, lang = status["projects"]
    assert (cv["name"], cv["queues"], cv["running"], cv["queued"]) == ("cv", ["vision"], 0, 1)
    assert (lang["name"], lang["queues"], lang["running"]) == ("lang", ["urgent", "nlp"], 2)
    assert cv["usage_slot_s"] > 0  # v1's run, and v2's until it was suspended


def windows_task(closed_day: str) -> str:
    return CPU_ONLY + f"""\
    queues:
      day: {{priority: 5, work_classes: [mature, ordinary]}}
      scavenger: {{work_classes: [scout], windows: [{{days: [{closed_day}]}}]}}
"""


def test_a_queue_outside_its_time_window_holds_its_work_and_says_when_it_opens(
        make_run, tmp_path):
    """seed 002 "Queue ... Key attributes: Priority, limits, time windows": the scavenger
    queue is open only the day after tomorrow (UTC), so its job waits with a reason that
    names the opening, while later work of an open queue runs and completes."""
    today = int(time.time() // 86400 + 3) % 7  # 1970-01-01 was a Thursday (mon = 0)
    opens_on = DAYS[(today + 2) % 7]
    run = make_run(task_text=windows_task(opens_on))
    run.start()
    scavenger = run.reply(run.submit(request("scavenger", ["true"], work_class="scout")))
    job = scavenger["job_id"]
    doc = wait_for(lambda: (d := run.job(job)) and "time windows" in d["reason"] and d,
                   message="the scavenger job's window reason")
    assert doc["reason"].startswith(f"queue scavenger: outside its time windows; opens "
                                    f"{opens_on} 00:00 (UTC+00:00), in ")
    day = run.reply(run.submit(request("day", ["true"])))["job_id"]
    run.wait_state(day, "completed")
    assert run.job(job)["state"] == "queued"
    status = wait_for(lambda: (s := run.status()) and s.get("counts", {}).get("completed") and s)
    assert status["counts"]["queued"] == 1


LEAVE_SLOTS_TASK = CPU_ONLY + """\
    queues:
      mature: {priority: 1, work_classes: [mature], leave_slots: {slots: 1, for: [explore]}}
      explore: {work_classes: [scout, ordinary]}
"""


def test_a_job_held_for_a_kept_slot_says_so_once_the_slots_fill(make_run, tmp_path):
    """Seed 002's leave_slots through a real coordinator: of two mature jobs and two
    exploration jobs seen together at two slots, a mature job and an exploration job
    start; the other mature job waits because the slot it could take is kept for the
    exploration job still queued, and says so in status.json and its job file once both
    started jobs run (the loop's later passes find no slot free: they must not restate
    it as only waiting for a slot, which the exploration job does)."""
    run = make_run(task_text=LEAVE_SLOTS_TASK)
    work = tmp_path / "work"
    work.mkdir()
    ids = {}
    for tag, work_class in (("e0", "ordinary"), ("e1", "ordinary"), ("m0", "mature"),
                            ("m1", "mature")):
        ids[tag] = run.submit(request(tag, held_until(work, tag), work_class=work_class))
    run.start()  # all four seen in one batch, by one pass
    jobs = {tag: run.reply(rid)["job_id"] for tag, rid in ids.items()}
    run.wait_state(jobs["m0"], "running")
    run.wait_state(jobs["e0"], "running")
    status = wait_for(lambda: (s := run.status()) and s["running"] == 2 and s,
                      message="status.json with both started jobs running")
    kept = "queues.mature.leave_slots: 1 slot(s) kept for queued explore"
    assert {q["job_id"]: q["reason"] for q in status["queue"]} == {
        jobs["m1"]: kept, jobs["e1"]: "waiting for a slot: 2 of 2 running"}
    assert run.job(jobs["m1"])["reason"] == kept
    for tag in jobs:
        (work / tag).touch()
    for tag in jobs:
        run.wait_state(jobs[tag], "completed")
