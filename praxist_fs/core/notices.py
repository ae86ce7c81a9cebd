"""What a handled event did that no file effect says by itself, decided here so that the
shell only carries it out: the jobs it ended and the generation it closed (notices for
the sinks after the commit), the task's completion hooks they call (issue 17 item 4,
OPERATIONS.md *Completion hooks*), and the requests whose secrets no launch will need
again (R-SEC-2: a reply that queued nothing, or a job that ended). Only a request whose
env held a secret (a placeholder now) has any kept, so only such a request is scrubbed:
for the others a scrub was a failing unlink per ended job on the loop.

Pure, like the rest of the core; ``Scheduler.handle`` appends these to an event's
effects. A hook's document and variables are the core's; the shell's hook sink adds only
the run directory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .effects import Effect, GenerationClosed, JobEnded, RunHook, ScrubSecrets, WriteReply
from .events import Event, GenerationPhase, RequestSeen
from .secrets import holds_placeholder
from .states import GenerationStage

if TYPE_CHECKING:
    from .scheduler import Scheduler

LAUNCHING = ("accepted", "retry_accepted")  # the reply outcomes after which work may launch


def notices(sched: Scheduler, event: Event, effects: list[Effect],
            ended: list[str]) -> list[Effect]:
    """The notices, hooks and scrubs of ``event``, whose handling returned ``effects``
    and ended the jobs ``ended`` (in the order they ended)."""
    hooks = sched.policy.hooks
    found: list[Effect] = []
    for job_id in ended:
        job = sched.jobs.peek(job_id)
        found.append(JobEnded(job_id=job_id, state=job.state.value))
        if holds_placeholder(job.request.env):
            found.append(ScrubSecrets(request_id=job.request.request_id))
        if hooks.on_job_end:
            found += job_end_hooks(hooks.on_job_end, job_id, sched.job_document(job))
    for effect in effects:
        if isinstance(effect, WriteReply) and _kept_secrets(event) \
                and _never_launches(sched, effect.document):
            found.append(ScrubSecrets(request_id=effect.request_id))
    if isinstance(event, GenerationPhase) and event.phase == GenerationStage.CLOSED:
        found.append(GenerationClosed(generation=event.generation, reason=event.reason))
        if hooks.on_generation_close:
            found += generation_close_hooks(
                hooks.on_generation_close, event.generation, event.reason,
                sched.generation_status(sched.generations[event.generation], soft=False))
    return found


def _kept_secrets(event: Event) -> bool:
    """Whether the vault may keep secrets of the request a reply to ``event`` answers: a
    request read without one (or not read at all) had nothing kept. A reply to any other
    event is taken to have some (fail closed)."""
    if not isinstance(event, RequestSeen):
        return True
    return event.request is not None and holds_placeholder(event.request.env)


def _never_launches(sched: Scheduler, reply: dict[str, Any]) -> bool:
    """A reply after which its request's secrets are not needed: it queued no work, or
    named a job that has ended."""
    state = sched.state_of(reply["job_id"] or "")
    return reply["outcome"] not in LAUNCHING or (state is not None and state.terminal)


def job_end_hooks(commands: tuple[tuple[str, ...], ...], job_id: str,
                  document: dict[str, Any]) -> list[RunHook]:
    """``on_job_end``'s commands for a job that ended; ``document`` is its job file."""
    exit_code, generation = document["exit_code"], document["generation"]
    return _calls("job_end", job_id, commands, document, {
        "PRAXIST_JOB_ID": job_id, "PRAXIST_JOB_STATE": document["state"],
        "PRAXIST_EXIT_CODE": "" if exit_code is None else str(exit_code),
        "PRAXIST_TAG": document["tag"], "PRAXIST_PEER": document["peer"],
        "PRAXIST_GENERATION": "" if generation is None else str(generation)})


def generation_close_hooks(commands: tuple[tuple[str, ...], ...], number: int, reason: str,
                           status: dict[str, Any]) -> list[RunHook]:
    """``on_generation_close``'s commands for a generation that closed; ``status`` is its
    status document."""
    return _calls("generation_close", str(number), commands, status,
                  {"PRAXIST_GENERATION": str(number), "PRAXIST_CLOSE_REASON": reason})


def _calls(kind: str, subject: str, commands: tuple[tuple[str, ...], ...],
           document: dict[str, Any], env: dict[str, str]) -> list[RunHook]:
    return [RunHook(name=f"{kind}-{subject}-{n}", argv=argv, document=document,
                    env={"PRAXIST_HOOK": kind, **env})
            for n, argv in enumerate(commands)]
