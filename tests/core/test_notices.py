"""The core says what the shell used to infer (issue 30 item 2): which jobs an event
ended, which generation it closed, which completion hooks that calls, and which
requests' secrets no launch will need (``core/notices.py``). The hook sink, the vault and
any other sink carry these out without deciding anything."""

from __future__ import annotations

from praxist_fs.core.effects import (
    GenerationClosed, JobEnded, RunHook, ScrubSecrets, WriteJob,
)
from praxist_fs.core.policy import Hooks
from praxist_fs.core.secrets import PREFIX

from .helpers import Harness, control, make_policy

HOOKS = Hooks(on_job_end=(("notify", "--job"), ("log-end",)),
              on_generation_close=(("archive",),))


def notices(effects: list) -> list:
    return [e for e in effects if isinstance(e, (JobEnded, GenerationClosed, RunHook,
                                                 ScrubSecrets))]


def test_an_exit_ends_its_job_once_and_calls_each_job_end_hook_with_its_file():
    h = Harness(make_policy(hooks=HOOKS))
    reply = h.submit("train", retry_terminal=True)
    job_id = reply["job_id"]
    (launch,) = h.launch_all()
    assert notices(h.go(*launch)) == []  # running: nothing ended
    effects = h.exit(*launch, 3)
    document = h.sched.written_document(next(e for e in effects if isinstance(e, WriteJob)))
    env = {"PRAXIST_HOOK": "job_end", "PRAXIST_JOB_ID": job_id, "PRAXIST_JOB_STATE": "failed",
           "PRAXIST_EXIT_CODE": "3", "PRAXIST_TAG": "train", "PRAXIST_PEER": "peer-a",
           "PRAXIST_GENERATION": ""}
    assert notices(effects) == [
        JobEnded(job_id=job_id, state="failed"),
        RunHook(name=f"job_end-{job_id}-0", argv=("notify", "--job"), document=document,
                env=env),
        RunHook(name=f"job_end-{job_id}-1", argv=("log-end",), document=document, env=env)]
    # a late sighting of the ended attempt ends nothing again
    assert notices(h.exit(*launch, 3)) == []


def test_without_hooks_an_end_is_noticed_and_calls_nothing():
    h = Harness()
    job_id = h.submit("train")["job_id"]
    (launch,) = h.launch_all()
    h.go(*launch)
    assert [type(e) for e in notices(h.exit(*launch, 0))] == [JobEnded]


# what the vault leaves of a secret in a request's env (``Vault.redact``)
SECRET = {"API_TOKEN": PREFIX + "0" * 64}


def test_a_job_whose_env_held_a_secret_lets_it_go_when_it_ends_and_no_other_job_scrubs():
    h = Harness()
    plain = h.submit("plain", name="plain.json")
    secret = h.submit("secret", name="secret.json", env=SECRET)
    ended = []
    for launch in h.launch_all():
        h.go(*launch)
        ended += notices(h.exit(*launch, 0))
    assert ended == [JobEnded(job_id=plain["job_id"], state="completed"),
                     JobEnded(job_id=secret["job_id"], state="completed"),
                     ScrubSecrets(request_id=secret["request_id"])]


def test_a_reply_that_queues_nothing_lets_its_secrets_go_and_an_acceptance_keeps_them():
    h = Harness()
    h.submit("train", name="first.json", env=SECRET)
    accepted = notices(h.last_effects)
    again = h.submit("train", name="again.json", env=SECRET)  # the same tag: queues nothing
    assert again["outcome"] == "duplicate"
    assert accepted == [] and notices(h.last_effects) == [ScrubSecrets(request_id="again")]
    h.submit("train", name="plain.json")  # a duplicate too, but nothing of it was kept
    assert notices(h.last_effects) == []
    h.submit("train", argv=None, name="bad.json")  # unreadable as a request: nothing kept
    assert notices(h.last_effects) == []


def test_a_cancelled_queued_job_ends_too():
    h = Harness(make_policy(hooks=HOOKS, initial_concurrent_experiments=1))
    h.submit("first")
    h.launch_all()
    waiting = h.submit("second")["job_id"]
    control(h, "cancel", jobs=[waiting])
    assert [e.name for e in notices(h.last_effects) if isinstance(e, RunHook)] == [
        f"job_end-{waiting}-0", f"job_end-{waiting}-1"]
    assert JobEnded(job_id=waiting, state="cancelled") in h.last_effects


def test_a_generation_that_closes_is_noticed_and_calls_its_hook_with_its_status():
    h = Harness(make_policy(hooks=HOOKS, drain_grace_min_seconds=10.0,
                            drain_grace_max_seconds=10.0))
    control(h, "generation_open", generation=1)
    control(h, "generation_close", generation=1)
    assert not [e for e in h.last_effects if isinstance(e, GenerationClosed)]  # closing
    deadline = h.sched.generations[1].closing_signal["drain"]["deadline"]
    h.now = deadline
    (event,) = [e for e in h.sched.due(deadline) if e.phase == "closed"]
    effects = notices(h.handle(event))
    status = h.sched.generation_status(h.sched.generations[1], soft=False)
    assert effects == [
        GenerationClosed(generation=1, reason=event.reason),
        RunHook(name="generation_close-1-0", argv=("archive",), document=status,
                env={"PRAXIST_HOOK": "generation_close", "PRAXIST_GENERATION": "1",
                     "PRAXIST_CLOSE_REASON": event.reason})]
