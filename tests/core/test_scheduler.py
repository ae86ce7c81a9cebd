"""The scheduler driven by hand-built events: replies (R-FS-5), job files (R-FS-6),
dedup and retries (R-SUB-2..4), the launch barrier, and status."""

from __future__ import annotations

import copy

import pytest

from praxist_fs.core.effects import (
    AbortAttempt, ConsumeRequest, RejectRequest, SpawnAttempt, WriteGo, WriteJob, WriteReply,
)
from praxist_fs.core.events import (
    AttemptLaunched, AttemptObserved, CoordinatorStarted, RequestSeen, from_record,
)
from praxist_fs.core.secrets import placeholder
from praxist_fs.core.status import render_status

from .helpers import Harness, make_policy, shim

REPLY_KEYS = {"request_id", "outcome", "job_id", "state", "reason"}
JOB_KEYS = {"job_id", "tag", "peer", "profile", "work_class", "state", "exit_code", "reason",
            "attempts"}
ATTEMPT_KEYS = {"attempt_id", "started_at", "ended_at", "exit_code", "gpus", "outcome"}


def effects_of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def check_reply(reply, outcome, job_id, state):
    assert REPLY_KEYS <= set(reply)
    assert reply["outcome"] == outcome, reply
    assert reply["job_id"] == job_id
    assert reply["state"] == state
    assert isinstance(reply["reason"], str) and reply["reason"]


# -- acceptance and admission ------------------------------------------------------


def test_accepted_request_makes_a_queued_job():
    h = Harness()
    reply = h.submit("exp-1", name="first.json", peer="peer-b", work_class="scout", eta_s=30)
    job_id = reply["job_id"]
    check_reply(reply, "accepted", job_id, "queued")
    assert reply["request_id"] == "first"
    assert "exp-1" in job_id
    effects = h.last_effects
    assert effects_of(effects, ConsumeRequest) == [ConsumeRequest(name="first.json")]
    assert h.reply_files["first"] == reply
    job = h.job(job_id)
    assert JOB_KEYS <= set(job)
    assert job["job_id"] == job_id and job["tag"] == "exp-1" and job["peer"] == "peer-b"
    assert job["profile"] == "cpu" and job["work_class"] == "scout"
    assert job["state"] == "queued" and job["exit_code"] is None and job["attempts"] == []
    assert isinstance(job["reason"], str) and job["reason"]
    assert h.directory(job_id) == "queued"


def test_job_id_is_derived_from_the_tag_alone():
    a, b = Harness(), Harness()
    assert a.submit("same-tag", peer="p1")["job_id"] == b.submit(
        "same-tag", peer="p2", argv=["other"])["job_id"]
    assert a.submit("other-tag")["job_id"] != a.submit("same-tag")["job_id"]


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_next_launches_respects_concurrency_and_fcfs(slots):
    h = Harness(make_policy(initial_concurrent_experiments=slots))
    ids = [h.submit(f"exp-{i}")["job_id"] for i in range(5)]
    first = h.launch_all()
    assert first == [(j, "a1") for j in ids[:slots]]
    assert h.sched.next_launches(h.tick()) == []  # full
    for job_id in ids[:slots]:
        assert h.job(job_id)["state"] == "running"
        assert h.directory(job_id) == "running"
    # one finishes: exactly the next-oldest starts
    h.go(ids[0], "a1")
    h.exit(ids[0], "a1", 0)
    assert h.launch_all() == [(ids[slots], "a1")]
    assert h.job(ids[0])["state"] == "completed"
    assert len(h.sched.running()) == slots
    assert [j.job_id for j in h.sched.queued()] == ids[slots + 1:]



def test_a_peer_at_its_cap_keeps_its_jobs_queued_while_other_peers_launch():
    """seed 000 "Submission": "When a peer's compatibility cap is already occupied, another
    central submission from that peer remains queued until the active process group
    drains. Other peers may continue to launch, and the blocked job does not consume an
    attempt or create a capacity-failure record." (R-SUB-5)"""
    h = Harness(make_policy(initial_concurrent_experiments=4, max_concurrent_per_peer=1))
    a1, a2 = (h.submit(f"a-{i}", peer="alice")["job_id"] for i in (1, 2))
    b1, b2 = (h.submit(f"b-{i}", peer="bob")["job_id"] for i in (1, 2))
    assert h.launch_all() == [(a1, "a1"), (b1, "a1")]  # two slots stay free
    for job_id, peer in ((a2, "alice"), (b2, "bob")):
        held = h.job(job_id)
        assert (held["state"], held["attempts"]) == ("queued", [])
        assert held["reason"] == f"peer {peer}: 1 of max_concurrent_per_peer 1 running"
    status = render_status(h.sched, h.now, {})
    assert status["peers"] == {"max_concurrent_per_peer": 1, "running": {"alice": 1, "bob": 1}}
    h.go(a1, "a1")
    h.exit(a1, "a1", 0)  # alice's running job drains: her next one starts, bob's still waits
    assert h.launch_all() == [(a2, "a1")]
    assert h.job(a2)["attempts"][0]["attempt_id"] == "a1"
    assert h.job(b2)["reason"] == "peer bob: 1 of max_concurrent_per_peer 1 running"



def test_with_nothing_queued_a_pass_starts_nothing_and_every_free_slot_is_unused():
    """An exit or a shim's word with the queue empty makes a pass due; with nothing
    queued or suspended it is cut short (a pass of nothing took 31 us, 4 us now), and
    must still say what a whole one would: no launch, every free slot unused (the
    supply's leases offer them to idle peers), no work waiting for a slot (the
    controller raises nothing for it)."""
    h = Harness(make_policy(initial_concurrent_experiments=3, max_concurrent_experiments=3))
    job_id = h.submit("a")["job_id"]
    assert h.launch_all() == [(job_id, "a1")]
    h.go(job_id, "a1")
    assert h.sched.next_launches(h.tick()) == [] and h.sched.passes.last_pass is not None
    assert h.sched.unused_slots == 2 and not h.sched.passes.slot_limited_now()
    h.exit(job_id, "a1", 0)
    assert h.sched.next_launches(h.tick()) == []
    assert h.sched.unused_slots == 3 and not h.sched.passes.slot_limited_now()
    later = h.submit("b")["job_id"]
    assert h.launch_all() == [(later, "a1")] and h.sched.unused_slots == 2


def test_a_capped_peer_says_so_when_every_slot_is_taken_too():
    """seed 000 "Submission" (R-SUB-5): a slot would not start the job, so its reason names
    the cap, and it does not count as work waiting for a slot (concurrency is not raised
    for it)."""
    h = Harness(make_policy(initial_concurrent_experiments=2, max_concurrent_per_peer=1))
    a1, a2 = (h.submit(f"a-{i}", peer="alice")["job_id"] for i in (1, 2))
    b1 = h.submit("b-1", peer="bob")["job_id"]
    assert h.launch_all() == [(a1, "a1"), (b1, "a1")]
    assert h.job(a2)["reason"] == "peer alice: 1 of max_concurrent_per_peer 1 running"
    h.sched.refresh_reasons()
    assert not h.sched.passes.slot_limited


def test_without_a_cap_one_peer_may_fill_every_slot():
    h = Harness(make_policy(initial_concurrent_experiments=3))
    jobs = [h.submit(f"a-{i}", peer="alice")["job_id"] for i in range(3)]
    assert h.launch_all() == [(j, "a1") for j in jobs]
    assert render_status(h.sched, h.now, {})["peers"] == {
        "max_concurrent_per_peer": None, "running": {"alice": 3}}


def test_an_acceptance_and_its_launch_in_one_batch_write_one_job_file_before_the_reply():
    """The daemon hands requests over with the scheduling pass in their batch: the
    acceptance and the launch share one commit, the shim is told first, and the job's
    two writes are one, in running/ (never a copy in queued/), there before the reply
    that says the job was accepted (a peer reads it next)."""
    h = Harness()
    event = h.request_event({"peer": "p", "tag": "exp-1", "argv": ["x"]}, name="r1.json")
    effects = h.feed([event], launch=True)
    (written,) = effects_of(effects, WriteJob)  # in running/, whatever queued/ held gone
    assert (written.directory, written.replaces) == ("running", "queued")
    assert h.job(written.job_id)["state"] == "running" and h.disk.jobs["queued"] == {}
    kinds = [type(e) for e in effects]
    assert kinds[0] is SpawnAttempt and kinds.index(WriteJob) < kinds.index(WriteReply)
    assert [record["type"] for record in h.records] == ["request_seen", "attempt_launched"]
    assert h.reply_files[event.request_id]["outcome"] == "accepted"
    assert h.incoming == {}  # the request file is consumed


def test_a_job_accepted_with_no_slot_free_says_why_in_its_one_job_file():
    """An accepted job that finds no slot in its batch's pass is written once, saying why
    it waits: no status tick needed for its file to say it."""
    h = Harness(make_policy(initial_concurrent_experiments=1, max_concurrent_experiments=1))
    h.submit("exp-1")
    h.launch_all()
    effects = h.feed([h.request_event({"peer": "p", "tag": "exp-2", "argv": ["x"]})],
                     launch=True)
    (written,) = effects_of(effects, WriteJob)
    waiting = written.job_id
    assert h.sched.written_document(written)["reason"] == "waiting for a slot: 1 of 1 running"
    assert h.job(waiting)["reason"] == "waiting for a slot: 1 of 1 running"


def test_a_job_accepted_outside_a_pass_with_no_slot_free_says_why_in_its_one_job_file():
    """A run on the host registry accepts requests in a batch of their own and runs its
    pass after, under the registry's lock (``Coordinator._launch``): the job's one file in
    queued/ still says why it waits, though the reasons were fresh before it came (they
    had just been asked for at status cadence), not only at the next status."""
    h = Harness(make_policy(initial_concurrent_experiments=1, max_concurrent_experiments=1))
    h.submit("exp-1")
    h.launch_all()  # exp-1 runs; the pending reasons asked for after, as a status does
    effects = h.feed([h.request_event({"peer": "p", "tag": "exp-2", "argv": ["x"]})])
    (written,) = effects_of(effects, WriteJob)
    assert h.sched.written_document(written)["reason"] == "waiting for a slot: 1 of 1 running"
    assert h.launch_all() == [] and effects_of(h.last_effects, WriteJob) == []


def test_spawn_effect_carries_the_request():
    h = Harness()
    job_id = h.submit("exp-1", argv=["python", "-m", "x"], cwd="/srv/w", env={"SEED": "4"},
                      profile="cpu")["job_id"]
    (event,) = h.sched.next_launches(h.tick())
    effects = h.handle(event)
    (spawn,) = effects_of(effects, SpawnAttempt)
    assert (spawn.job_id, spawn.attempt_id) == (job_id, "a1")
    assert spawn.argv == ("python", "-m", "x") and spawn.command is None
    assert spawn.cwd == "/srv/w" and spawn.env == {"SEED": "4"} and spawn.profile == "cpu"
    assert spawn.gpus == ()
    (write,) = effects_of(effects, WriteJob)
    assert write.directory == "running"
    (attempt,) = h.sched.written_document(write)["attempts"]
    assert ATTEMPT_KEYS <= set(attempt)
    assert attempt["attempt_id"] == "a1" and attempt["started_at"] == event.at
    assert attempt["ended_at"] is None and attempt["exit_code"] is None
    assert attempt["gpus"] == [] and attempt["outcome"] is None


def test_gpu_jobs_are_held_and_do_not_block_cpu_jobs():
    h = Harness(make_policy(initial_concurrent_experiments=2))
    gpu = h.submit("exp-gpu", profile="gpu")["job_id"]
    cpu1 = h.submit("exp-cpu-1")["job_id"]
    cpu2 = h.submit("exp-cpu-2")["job_id"]
    assert h.launch_all() == [(cpu1, "a1"), (cpu2, "a1")]
    assert h.job(gpu)["state"] == "queued" and h.job(gpu)["attempts"] == []
    reason = h.sched.pending.get(gpu)
    assert reason and "gpu" in reason.lower()
    assert cpu1 not in h.sched.pending
    # even with every slot free, GPU work is never turned into CPU work
    for job_id in (cpu1, cpu2):
        h.go(job_id, "a1")
        h.exit(job_id, "a1", 0)
    assert h.launch_all() == []
    status = render_status(h.sched, h.now, {})
    (entry,) = status["queue"]
    assert entry["job_id"] == gpu and "gpu" in entry["reason"].lower()


def test_held_gpu_job_file_says_why():
    h = Harness()
    gpu = h.submit("exp-gpu", profile="gpu")["job_id"]
    h.launch_all()
    assert "gpu" in h.job(gpu)["reason"].lower()


# -- R-SUB-3: identity and retries -----------------------------------------------


def bring_to(h: Harness, state: str, tag: str = "exp-1", **fields) -> str:
    """Submit ``tag`` and drive its job into ``state``; return the job id."""
    reply = h.submit(tag, **fields)
    assert reply["outcome"] == "accepted"
    job_id = reply["job_id"]
    if state == "queued":
        return job_id
    (launched,) = h.launch_all()
    assert launched == (job_id, "a1")
    h.go(job_id, "a1")
    if state == "completed":
        h.exit(job_id, "a1", 0)
    elif state == "failed":
        h.exit(job_id, "a1", 3)
    elif state == "drained_unknown":
        h.observe(job_id, "a1", alive=False, go=True)
    else:
        assert state == "running"
    assert h.job(job_id)["state"] == state
    return job_id


LIVE_STATES = ["queued", "running", "completed", "drained_unknown"]
BASE_SUBMIT = {"argv": ("python", "train.py"), "env": {"SEED": "1"}, "cwd": "/srv/w"}
CHANGES = {
    "argv": {"argv": ("python", "train.py", "--lr=0.1")},
    "command": {"argv": None, "command": "python train.py"},
    "env": {"env": {"SEED": "2"}},
    "env added": {"env": {"SEED": "1", "EXTRA": "x"}},
    "cwd": {"cwd": "/srv/other"},
    "profile": {"profile": "gpu"},
}
# what the conflict's reply names for each change
CHANGE_NAMED = {
    "argv": "with a different command", "command": "with a different command",
    "env": "with a different env (this request changes SEED)",
    "env added": "with a different env (this request adds EXTRA)",
    "cwd": "with a different cwd", "profile": "with a different profile",
}
NON_IDENTITY = {
    "other peer": {"peer": "peer-z"},
    "other work_class": {"work_class": "mature"},
    "eta": {"eta_s": 99},
    "explicit default profile": {"profile": "cpu"},
    "generation": {"generation": 4},
}


@pytest.mark.parametrize("state", LIVE_STATES)
@pytest.mark.parametrize("variant", sorted(NON_IDENTITY))
def test_same_fingerprint_is_a_duplicate(state, variant):
    h = Harness()
    job_id = bring_to(h, state, **BASE_SUBMIT)
    before = copy.deepcopy(h.sched.jobs[job_id].to_dict())
    reply = h.submit("exp-1", **{**BASE_SUBMIT, **NON_IDENTITY[variant]})
    check_reply(reply, "duplicate", job_id, state)
    assert h.sched.jobs[job_id].to_dict() == before
    assert h.launch_all() == ([(job_id, "a1")] if state == "queued" else [])
    assert len(h.sched.jobs) == 1


# what a shared job's duplicate reply says differed, for each change (R-SUB-7)
CHANGE_DIFFERS = {
    "argv": ["argv"], "command": ["argv", "command"], "env": ["env:SEED"],
    "env added": ["env:EXTRA"], "cwd": ["cwd"], "profile": ["profile"],
}
STRICT = {"same_tag_different_request": "reject"}  # the task key that restores rejection


@pytest.mark.parametrize("state", LIVE_STATES)
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changed_request_on_a_live_job_shares_it_and_says_what_differs(state, change):
    """Seed 000: "The tag identifies science, not execution syntax ... Repeated
    submissions with the same identity share one queued, running, or completed job"."""
    h = Harness()
    job_id = bring_to(h, state, **BASE_SUBMIT)
    before = copy.deepcopy(h.sched.jobs[job_id].to_dict())
    reply = h.submit("exp-1", **{**BASE_SUBMIT, **CHANGES[change]})
    check_reply(reply, "duplicate", job_id, state)
    assert reply["differs"] == CHANGE_DIFFERS[change]
    assert reply["reason"] == (f"same tag as job {job_id}, which this request shares (the tag "
                               "is the experiment's identity); it differs in "
                               + ", ".join(CHANGE_DIFFERS[change]))
    assert effects_of(h.last_effects, ConsumeRequest)
    assert h.sched.jobs[job_id].to_dict() == before  # it keeps the request it was made by


@pytest.mark.parametrize("state", LIVE_STATES)
@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize("flag", [False, True])
def test_changed_request_on_a_live_job_is_rejected_with_the_flag_or_the_strict_key(
        state, change, flag):
    """Seed 000: "a changed request with the flag is rejected in those states"; and the
    task key restores strict rejection of every changed request."""
    h = Harness() if flag else Harness(make_policy(**STRICT))
    job_id = bring_to(h, state, **BASE_SUBMIT)
    before = copy.deepcopy(h.sched.jobs[job_id].to_dict())
    fields = {**BASE_SUBMIT, **CHANGES[change]}
    if flag:
        fields["retry_terminal"] = True
    reply = h.submit("exp-1", **fields)
    check_reply(reply, "rejected", job_id, state)
    assert reply["field"] == "tag"
    assert job_id in reply["problem"]
    assert reply["problem"].split(f"({state}) ")[1].split(";")[0] == CHANGE_NAMED[change]
    if flag:
        assert "retry_terminal" in reply["problem"]
    (reject,) = effects_of(h.last_effects, RejectRequest)
    assert reject.error["field"] == "tag"
    assert h.sched.jobs[job_id].to_dict() == before


def test_a_conflict_names_every_change_and_env_keys_but_never_a_value():
    """Env values arrive as the daemon redacted them: a secret as its keyed hash, so a
    changed secret is a changed key, named without its value (R-SEC-2)."""
    key = b"run-key"
    h = Harness(make_policy(**STRICT))
    job_id = h.submit("exp-1", env={"API_TOKEN": placeholder(key, "old-secret"),
                                    "KEEP": "1", "GONE": "old-value"})["job_id"]
    many = {f"V{i:02d}": "v" for i in range(10)}
    reply = h.submit("exp-1", argv=("python", "other.py"), cwd="/srv/other", env={
        "API_TOKEN": placeholder(key, "new-secret"), "KEEP": "1", **many})
    assert reply["outcome"] == "rejected" and reply["field"] == "tag"
    assert reply["problem"] == (
        f"tag 'exp-1' already names job {job_id} (queued) with a different command, cwd and "
        "env (this request adds V00, V01, V02, V03, V04, V05, V06, V07 and 2 more; "
        "removes GONE; changes API_TOKEN)")
    for value in ("old-secret", "new-secret", "old-value", placeholder(key, "new-secret")):
        assert value not in reply["reason"]


@pytest.mark.parametrize("change", [None, "argv", "env"])
def test_failed_job_without_flag_is_a_terminal_duplicate(change):
    h = Harness()
    job_id = bring_to(h, "failed", **BASE_SUBMIT)
    fields = {**BASE_SUBMIT, **(CHANGES[change] if change else {})}
    reply = h.submit("exp-1", **fields)
    check_reply(reply, "terminal_duplicate", job_id, "failed")
    assert effects_of(h.last_effects, ConsumeRequest)
    assert h.launch_all() == []
    assert h.job(job_id)["state"] == "failed"


def retried_job(h: Harness, **changes) -> str:
    job_id = bring_to(h, "failed", **BASE_SUBMIT)
    reply = h.submit("exp-1", retry_terminal=True, **{**BASE_SUBMIT, **changes})
    check_reply(reply, "retry_accepted", job_id, "queued")
    return job_id


def test_retry_terminal_reruns_under_the_same_job_with_a_new_attempt():
    h = Harness()
    job_id = retried_job(h)
    job = h.job(job_id)
    assert job["state"] == "queued" and h.directory(job_id) == "queued"
    assert [a["attempt_id"] for a in job["attempts"]] == ["a1"]
    assert h.launch_all() == [(job_id, "a2")]
    h.go(job_id, "a2")
    h.exit(job_id, "a2", 0)
    job = h.job(job_id)
    assert job["state"] == "completed" and job["exit_code"] == 0
    assert [(a["attempt_id"], a["outcome"]) for a in job["attempts"]] == [
        ("a1", "failed"), ("a2", "completed")]


def test_retry_terminal_may_change_the_request():
    h = Harness()
    job_id = retried_job(h, argv=("python", "fixed.py"))
    (event,) = h.sched.next_launches(h.tick())
    (spawn,) = effects_of(h.handle(event), SpawnAttempt)
    assert spawn.job_id == job_id and spawn.argv == ("python", "fixed.py")


def _advance(h: Harness, job_id: str, state: str) -> None:
    if state == "queued":
        return
    assert h.launch_all() == [(job_id, "a2")]
    h.go(job_id, "a2")
    if state == "completed":
        h.exit(job_id, "a2", 0)
    elif state == "drained_unknown":
        h.observe(job_id, "a2", alive=False, go=True)
    assert h.job(job_id)["state"] == state


def _live_retry(state: str) -> tuple[Harness, str, dict]:
    """A job retried and brought to ``state``: the harness, its id, and its file then."""
    h = Harness()
    job_id = retried_job(h)
    _advance(h, job_id, state)
    return h, job_id, copy.deepcopy(h.sched.jobs[job_id].to_dict())


@pytest.mark.parametrize("state", LIVE_STATES)
def test_retransmitted_retry_is_idempotent(state):
    h, job_id, before = _live_retry(state)
    reply = h.submit("exp-1", retry_terminal=True, **BASE_SUBMIT)  # a new request id
    check_reply(reply, "duplicate", job_id, state)
    assert h.sched.jobs[job_id].to_dict() == before
    assert h.launch_all() == ([(job_id, "a2")] if state == "queued" else [])


@pytest.mark.parametrize("state", LIVE_STATES)
def test_changed_retry_is_rejected_while_the_retry_is_live(state):
    h, job_id, before = _live_retry(state)
    reply = h.submit("exp-1", retry_terminal=True, **{**BASE_SUBMIT, "argv": ("other",)})
    check_reply(reply, "rejected", job_id, state)
    assert reply["field"] == "tag"
    assert h.sched.jobs[job_id].to_dict() == before


def test_a_failed_retry_can_be_retried_again():
    h = Harness()
    job_id = retried_job(h)
    h.launch_all()
    h.go(job_id, "a2")
    h.exit(job_id, "a2", 4)
    assert h.job(job_id)["state"] == "failed" and h.job(job_id)["exit_code"] == 4
    reply = h.submit("exp-1", retry_terminal=True, **BASE_SUBMIT)
    check_reply(reply, "retry_accepted", job_id, "queued")
    assert h.launch_all() == [(job_id, "a3")]


# -- exits and infrastructure retries (R-SUB-4) -----------------------------------------


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_exit_75_is_retried_up_to_infrastructure_retries(retries):
    h = Harness(make_policy(infrastructure_retries=retries))
    job_id = h.submit("exp-1")["job_id"]
    for n in range(1, retries + 2):
        assert h.launch_all() == [(job_id, f"a{n}")]
        h.go(job_id, f"a{n}")
        h.exit(job_id, f"a{n}", 75)
        job = h.job(job_id)
        if n <= retries:
            assert job["state"] == "queued", n
            assert h.directory(job_id) == "queued"
            assert "75" in job["reason"]
    job = h.job(job_id)
    assert job["state"] == "failed" and h.directory(job_id) == "done"
    assert job["exit_code"] == 75
    assert "75" in job["reason"]
    assert [a["attempt_id"] for a in job["attempts"]] == [f"a{n}" for n in range(1, retries + 2)]
    assert [a["outcome"] for a in job["attempts"]] == ["infra_retry"] * retries + ["failed"]
    assert all(a["exit_code"] == 75 and a["ended_at"] is not None for a in job["attempts"])
    assert h.launch_all() == []


@pytest.mark.parametrize("code", [143, None])
def test_an_infrastructure_failure_keeps_the_commands_own_exit(code):
    """Issue 28: a node failed under the attempt (Slurm NODE_FAIL): it is retried as an exit
    75 is and charged to the infrastructure, while its exit code stays the command's own
    (143 from Slurm's TERM, or none without exit.json) and why it ended is said apart."""
    h = Harness(make_policy(infrastructure_retries=1))
    job_id = h.submit("exp-1")["job_id"]
    for attempt in ("a1", "a2"):
        h.launch_all()
        h.go(job_id, attempt)
        h.observe(job_id, attempt, alive=False, ready=True, go=True, exited=code is not None,
                  exit_code=code, signal=None if code is None else 15,
                  infrastructure="Slurm NODE_FAIL on node ci0")
    job = h.job(job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["infra_retry", "failed"]
    for attempt in job["attempts"]:
        assert (attempt["exit_code"], attempt["infrastructure"]) == (
            code, "Slurm NODE_FAIL on node ci0")
    exited = "" if code is None else f" (the command exited {code})"
    assert job["reason"] == (f"infrastructure failure: Slurm NODE_FAIL on node ci0{exited} "
                             "with no retries left (1 used)")
    assert (job["state"], job["exit_code"]) == ("failed", code)
    assert set(h.sched.ledger.ended) == {"infrastructure"}  # not the experiment's spend


def test_a_cancel_by_the_backends_scheduler_before_the_command_ran_cancels_the_job():
    """Issue 28: scancel of a job still pending in Slurm: cancelled, no exit code, nothing
    retried."""
    h = Harness(make_policy(infrastructure_retries=2))
    job_id = h.submit("exp-1")["job_id"]
    h.launch_all()
    h.observe(job_id, "a1", handle={"backend": "slurm", "job_id": "7"}, ready=True)
    h.observe(job_id, "a1", alive=False, cancelled="cancelled in Slurm while pending")
    job = h.job(job_id)
    assert (job["state"], job["reason"], job["exit_code"]) == (
        "cancelled", "cancelled in Slurm while pending", None)
    assert job["attempts"][0]["outcome"] == "cancelled"
    assert h.launch_all() == []


@pytest.mark.parametrize(("code", "signal", "state", "outcome", "words"), [
    (0, None, "completed", "completed", ["0"]),
    (3, None, "failed", "failed", ["3"]),
    (1, None, "failed", "failed", ["1"]),
    (137, 9, "failed", "failed", ["signal", "9"]),
    (143, 15, "failed", "failed", ["signal", "15"]),
])
def test_exit_codes(code, signal, state, outcome, words):
    h = Harness(make_policy(infrastructure_retries=2))
    job_id = h.submit("exp-1")["job_id"]
    h.launch_all()
    h.go(job_id, "a1")
    h.exit(job_id, "a1", code, signal=signal)
    job = h.job(job_id)
    assert job["state"] == state and h.directory(job_id) == "done"
    assert job["exit_code"] == code
    for word in words:
        assert word in job["reason"]
    (attempt,) = job["attempts"]
    assert attempt["outcome"] == outcome and attempt["exit_code"] == code
    observed_at = h.now
    assert attempt["ended_at"] == observed_at - 0.5  # the shim's recorded end time, not ours
    assert h.launch_all() == []  # nothing is retried except exit 75


def test_exit_error_text_reaches_the_reason():
    h = Harness()
    job_id = h.submit("exp-1")["job_id"]
    h.launch_all()
    h.go(job_id, "a1")
    h.exit(job_id, "a1", 2, error="command not found: trian.py")
    assert "command not found" in h.job(job_id)["reason"]


# -- the launch barrier (R-RUN-2) -------------------------------------------------------


def launched(policy=None):
    h = Harness(policy)
    job_id = h.submit("exp-1")["job_id"]
    h.launch_all()
    return h, job_id


def test_go_needs_the_pid_recorded_first():
    h, job_id = launched()
    # READY seen before the shim's pid is known: no GO
    assert effects_of(h.observe(job_id, "a1", ready=True), WriteGo) == []
    version = h.sched.version
    effects = h.observe(job_id, "a1", handle=shim(4242, 9, "b"))
    assert effects_of(effects, WriteGo) == []  # pid but no READY yet
    assert h.sched.version > version  # the pid is a journaled fact
    assert h.job(job_id)["attempts"][0]["pid"] == 4242
    effects = h.observe(job_id, "a1", ready=True)
    assert effects_of(effects, WriteGo) == [WriteGo(job_id=job_id, attempt_id="a1")]


def test_pid_and_ready_in_one_sighting_records_pid_before_go():
    """The pid and GO come of one sighting: the driver commits the sighting (the pid)
    before it writes GO (the backend twin checks that no record is left uncommitted at a
    GO), and the job file shows the pid."""
    h, job_id = launched()
    effects = h.observe(job_id, "a1", handle=shim(4242, 9), ready=True)
    assert effects_of(effects, WriteGo) == [WriteGo(job_id=job_id, attempt_id="a1")]
    record = from_record(h.records[-1])
    assert isinstance(record, AttemptObserved) and record.handle == shim(4242, 9)
    (written,) = effects_of(effects, WriteJob)
    assert h.sched.written_document(written)["attempts"][0]["pid"] == 4242 == h.job(job_id)["attempts"][0]["pid"]


def started(boot_id: str):
    return CoordinatorStarted(at=1.0, policy=make_policy().to_dict(), pid=1, host="h",
                              boot_id=boot_id)


def test_go_is_a_journaled_decision_so_a_go_file_lost_in_a_power_cut_still_means_lost():
    h, job_id = launched()
    h.handle(started("boot"))  # the boot the shim is recorded in (helpers' spawn)
    h.spawn(job_id, "a1")
    version = h.sched.version
    assert effects_of(h.observe(job_id, "a1", ready=True), WriteGo)
    assert h.sched.version > version  # the daemon commits it before GO is written
    # after a power cut the GO file (written without fsync) may be gone, and the shim with
    # it: the command may have run, so the job is lost, not relaunched
    h.handle(started("the next boot"))
    h.observe(job_id, "a1", alive=False, ready=True, go=False)
    job = h.job(job_id)
    assert job["state"] == "drained_unknown" and job["attempts"][0]["outcome"] == "lost"
    assert h.launch_all() == []


@pytest.mark.parametrize("ready, state, outcome", [(True, "drained_unknown", "lost"),
                                                     (False, "queued", "released")])
def test_go_journaled_without_a_go_file_in_the_same_boot(ready, state, outcome):
    """GO is journaled, then told on the shim's pipe, then written as a file: a
    coordinator killed in between leaves no GO file. A shim that reached READY may have
    run the command; one that did not (a warm shim never told its attempt) ran nothing."""
    h, job_id = launched()
    h.handle(started("boot"))
    h.go(job_id, "a1")
    h.disk.go.clear()  # killed before the GO file was written
    h.handle(started("boot"))
    h.observe(job_id, "a1", alive=False, ready=ready, go=False)
    job = h.job(job_id)
    assert job["state"] == state and job["attempts"][0]["outcome"] == outcome


def test_go_decided_but_its_file_missing_is_written_again_without_a_new_record():
    h, job_id = launched()
    h.go(job_id, "a1")
    version = h.sched.version
    # a coordinator that crashed between its commit and the GO file: the next one rewrites it
    h.disk.go.clear()
    assert effects_of(h.observe(job_id, "a1", ready=True), WriteGo)
    assert h.disk.go == {(job_id, "a1")}
    assert h.sched.version == version


def test_go_is_never_written_again_once_seen():
    h, job_id = launched()
    assert effects_of(h.go(job_id, "a1"), WriteGo)
    version = h.sched.version
    for _ in range(3):
        assert effects_of(h.observe(job_id, "a1", ready=True, go=True), WriteGo) == []
    assert h.sched.version == version


def test_dead_before_go_is_released_without_using_a_retry():
    h, job_id = launched(make_policy(infrastructure_retries=1))
    h.spawn(job_id, "a1")
    effects = h.observe(job_id, "a1", alive=False, ready=True, go=False)
    assert effects_of(effects, AbortAttempt) == [AbortAttempt(job_id=job_id, attempt_id="a1")]
    job = h.job(job_id)
    assert job["state"] == "queued" and h.directory(job_id) == "queued"
    assert job["attempts"][0]["outcome"] == "released"
    assert job["exit_code"] is None
    # a2: exit 75 still has its one retry; a3: exit 75 is final
    assert h.launch_all() == [(job_id, "a2")]
    h.go(job_id, "a2")
    h.exit(job_id, "a2", 75)
    assert h.job(job_id)["state"] == "queued"
    assert h.launch_all() == [(job_id, "a3")]
    h.go(job_id, "a3")
    h.exit(job_id, "a3", 75)
    job = h.job(job_id)
    assert job["state"] == "failed"
    assert [a["outcome"] for a in job["attempts"]] == ["released", "infra_retry", "failed"]


def test_released_before_spawn_is_also_requeued():
    h, job_id = launched()
    effects = h.observe(job_id, "a1", alive=False)
    assert effects_of(effects, AbortAttempt)
    assert h.job(job_id)["state"] == "queued"
    assert h.launch_all() == [(job_id, "a2")]


def test_dead_after_go_without_exit_record_is_drained_unknown():
    h, job_id = launched()
    h.go(job_id, "a1")
    effects = h.observe(job_id, "a1", alive=False, ready=True, go=True)
    assert effects_of(effects, AbortAttempt) == []
    job = h.job(job_id)
    assert job["state"] == "drained_unknown" and h.directory(job_id) == "done"
    assert job["attempts"][0]["outcome"] == "lost"
    assert job["exit_code"] is None
    assert h.launch_all() == []


@pytest.mark.parametrize("retries", [0, 1])
def test_a_fenced_attempt_is_lost_and_retried_as_an_infrastructure_failure(retries):
    """Its shim died while its command ran, and the coordinator terminated what was left:
    the command did not finish, so the job runs again within infrastructure_retries. With
    none left it fails rather than drains: how the attempt ended is known, so a
    retry_terminal may run it again."""
    h, job_id = launched(make_policy(infrastructure_retries=retries))
    h.go(job_id, "a1")
    h.observe(job_id, "a1", alive=False, ready=True, go=True, fenced=True,
              error="supervisor died: signal 9")
    job = h.job(job_id)
    [first] = job["attempts"]
    assert first["outcome"] == "lost" and first["exit_code"] is None
    assert first["error"] == "supervisor died: signal 9; command terminated"
    if retries:
        assert job["state"] == "queued" and job["reason"] == (
            "attempt a1 lost: supervisor died: signal 9; command terminated: "
            "retry 1 of 1 queued")
        assert h.launch_all() == [(job_id, "a2")]
    else:
        assert job["state"] == "failed" and h.directory(job_id) == "done"
        assert job["reason"].endswith("command terminated; no infrastructure retries left "
                                      "(0 used)")
        assert h.launch_all() == []


def test_fenced_losses_and_exits_75_share_a_rounds_retries():
    h, job_id = launched(make_policy(infrastructure_retries=2))
    for attempt_id, end in (("a1", "fenced"), ("a2", 75), ("a3", "fenced")):
        h.go(job_id, attempt_id)
        if end == "fenced":
            h.observe(job_id, attempt_id, alive=False, ready=True, go=True, fenced=True)
        else:
            h.exit(job_id, attempt_id, end)
        h.launch_all()
    job = h.job(job_id)
    assert [a["outcome"] for a in job["attempts"]] == ["lost", "infra_retry", "lost"]
    assert job["state"] == "failed" and "(2 used)" in job["reason"]
    assert job["attempts"][2]["error"] == "supervisor died; command terminated"


# -- request ids: retransmission and conflicts ---------------------------------------------


def test_retransmitted_request_gets_the_same_reply_and_is_not_journaled():
    h = Harness()
    first = h.submit("exp-1", name="r1.json")
    version, before = h.sched.version, copy.deepcopy(h.sched.snapshot())
    again = h.submit("exp-1", name="r1.json")
    assert again == first
    assert effects_of(h.last_effects, ConsumeRequest) == [ConsumeRequest(name="r1.json")]
    assert h.sched.version == version
    assert h.sched.snapshot() == before


def test_reused_request_id_with_other_content_is_rejected_and_the_reply_kept():
    h = Harness()
    first = h.submit("exp-1", name="r1.json")
    version, before = h.sched.version, copy.deepcopy(h.sched.snapshot())
    effects = h.handle(h.request_event({"peer": "peer-a", "tag": "exp-2", "argv": ["x"]},
                                       name="r1.json"))
    assert effects_of(effects, WriteReply) == []
    (reject,) = effects_of(effects, RejectRequest)
    assert reject.name == "r1.json"
    assert reject.error["field"] == "request_id" and reject.error["problem"]
    assert h.reply_files["r1"] == first
    assert h.sched.version == version and h.sched.snapshot() == before
    assert len(h.sched.jobs) == 1


def test_explicit_request_id_collides_across_file_names():
    h = Harness()
    h.submit("exp-1", name="a.json", request_id="rid-1")
    effects = h.handle(h.request_event(
        {"peer": "peer-a", "tag": "exp-2", "argv": ["x"], "request_id": "rid-1"}, name="b.json"))
    (reject,) = effects_of(effects, RejectRequest)
    assert reject.name == "b.json" and reject.error["field"] == "request_id"


# -- rejection before identity ------------------------------------------------------


def test_bad_request_gets_a_rejected_reply_without_a_job():
    h = Harness()
    reply = h.submit("../evil", name="bad-1.json")
    check_reply(reply, "rejected", None, None)
    assert reply["request_id"] == "bad-1"
    assert reply["field"] == "tag" and reply["problem"]
    (reject,) = effects_of(h.last_effects, RejectRequest)
    assert reject.name == "bad-1.json"
    assert reject.error["field"] == "tag" and reject.error["problem"] == reply["problem"]
    assert effects_of(h.last_effects, ConsumeRequest) == []
    assert h.sched.jobs == {}


def test_bad_request_without_a_usable_id_is_moved_aside_only():
    h = Harness()
    version = h.sched.version
    event = RequestSeen(at=h.tick(), name="bad name.json", digest="d", request_id=None,
                        error_field="request_id", error_problem="file name is not a safe id")
    effects = h.handle(event)
    assert effects == [RejectRequest(name="bad name.json", error=effects[0].error)]
    assert effects[0].error["field"] == "request_id" and effects[0].error["problem"]
    assert h.sched.version == version and h.sched.replies == {}


def test_unknown_profile_is_rejected_before_identity():
    h = Harness()
    reply = h.submit("exp-1", profile="tpu")
    check_reply(reply, "rejected", None, None)
    assert reply["field"] == "profile" and "tpu" in reply["problem"]
    (reject,) = effects_of(h.last_effects, RejectRequest)
    assert reject.error["field"] == "profile"
    assert h.sched.jobs == {}
    # the same tag is still free for a good request
    assert h.submit("exp-1")["outcome"] == "accepted"


def test_unknown_default_profile_names_profile():
    h = Harness(make_policy(default_profile="missing"))
    reply = h.submit("exp-1")
    check_reply(reply, "rejected", None, None)
    assert reply["field"] == "profile"


# -- status ------------------------------------------------------------------------


def test_status_counts_active_and_queue():
    h = Harness(make_policy(initial_concurrent_experiments=2))
    run1 = h.submit("exp-run-1", peer="p1", work_class="scout")["job_id"]
    run2 = h.submit("exp-run-2", peer="p2")["job_id"]
    wait = h.submit("exp-wait", peer="p3", work_class="ordinary")["job_id"]
    gpu = h.submit("exp-gpu", profile="gpu")["job_id"]
    done = h.submit("exp-done")["job_id"]
    h.launch_all()
    h.spawn(run1, "a1")
    pid1 = h.sched.jobs[run1].current.pid
    status = render_status(h.sched, h.now, {"observer": "inotify"})
    assert status["counts"]["running"] == 2 and status["counts"]["queued"] == 3
    assert sum(status["counts"].values()) == len(h.sched.jobs)
    assert status["running"] == 2
    assert status["coordinator"]["observer"] == "inotify"
    active = {a["job_id"]: a for a in status["active"]}
    assert set(active) == {run1, run2}
    assert active[run1]["attempt_id"] == "a1" and active[run1]["pid"] == pid1
    assert active[run1]["profile"] == "cpu" and active[run1]["peer"] == "p1"
    assert active[run1]["work_class"] == "scout"
    assert active[run2]["pid"] is None and active[run2]["peer"] == "p2"
    queue = [q["job_id"] for q in status["queue"]]
    assert queue == [wait, gpu, done]
    assert status["queue_length"] == 3
    reasons = {q["job_id"]: q["reason"] for q in status["queue"]}
    assert "slot" in reasons[wait] and "gpu" in reasons[gpu].lower()
    assert status["queue"][0]["work_class"] == "ordinary" and status["queue"][0]["peer"] == "p3"
    # finish one: counts move, the oldest waiting job takes the slot
    h.go(run1, "a1")
    h.exit(run1, "a1", 3)
    h.launch_all()
    status = render_status(h.sched, h.now, {})
    assert status["counts"]["failed"] == 1 and status["counts"]["running"] == 2
    assert {a["job_id"] for a in status["active"]} == {run2, wait}
    assert [q["job_id"] for q in status["queue"]] == [gpu, done]


def test_status_shows_each_attempt_phase_and_running_once_go_is_given():
    """launching (decided) -> barrier (shim recorded) -> running (GO), for a warm shim too
    (its pid and READY come in one sighting, GO with them)."""
    h = Harness(make_policy(initial_concurrent_experiments=2))
    cold, warm = (h.submit(tag)["job_id"] for tag in ("exp-cold", "exp-warm"))
    h.launch_all()

    def phases():
        return {a["job_id"]: a["phase"] for a in render_status(h.sched, h.now, {})["active"]}

    assert phases() == {cold: "launching", warm: "launching"}
    h.spawn(cold, "a1")
    assert phases()[cold] == "barrier"
    h.observe(cold, "a1", ready=True)
    h.observe(warm, "a1", handle=shim(5000, 1), ready=True)
    assert phases() == {cold: "running", warm: "running"}
    h.observe(cold, "a1", ready=True)  # READY seen again before the GO file: still running
    assert phases()[cold] == "running"


def test_status_is_deterministic_and_json_safe():
    import json

    h = Harness()
    h.submit("exp-1")
    h.launch_all()
    a = render_status(h.sched, 5000.0, {})
    b = render_status(h.sched, 5000.0, {})
    assert a == b
    assert json.loads(json.dumps(a)) == a


def test_launch_event_is_the_only_way_to_start_work():
    """next_launches decides but does not mutate; handle applies."""
    h = Harness()
    job_id = h.submit("exp-1")["job_id"]
    version, before = h.sched.version, copy.deepcopy(h.sched.snapshot())
    events = h.sched.next_launches(h.tick())
    assert events == [AttemptLaunched(at=h.now, job_id=job_id, attempt_id="a1")]
    assert h.sched.version == version and h.sched.snapshot() == before


def test_a_journal_from_before_tags_were_shared_replays_its_rejections():
    """A run journaled before ``same_tag_different_request`` rejected changed requests:
    its replay must decide as it did, so its policy, which lacks the key, is strict."""
    older = make_policy().to_dict()
    del older["same_tag_different_request"]
    h = Harness()
    h.handle(CoordinatorStarted(at=h.tick(), policy=older, pid=1, host="h", boot_id="b"))
    job_id = h.submit("exp-1", **BASE_SUBMIT)["job_id"]
    reply = h.submit("exp-1", **{**BASE_SUBMIT, **CHANGES["cwd"]})
    assert reply["outcome"] == "rejected" and job_id in reply["problem"]
    h.handle(CoordinatorStarted(at=h.tick(), policy=make_policy().to_dict(), pid=2,
                                host="h", boot_id="b"))  # a start of this version: shared
    assert h.submit("exp-1", **{**BASE_SUBMIT, **CHANGES["cwd"]})["differs"] == ["cwd"]
