"""The simulation's invariants (tests/core/simulation.py): ``check`` after every step,
and ``check_launch`` / ``check_preemption`` / ``check_grant`` at each decision, recomputed
from the sample the scheduler decided with (R-GPU-2's hard limits, exclusive devices, MIG,
pressure, the concurrency target, assessment, stop), never from the scheduler's own
bookkeeping."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from praxist_fs.core.events import AttemptLaunched, AttemptPreempted, AttemptResumed, LeaseGranted
from praxist_fs.core.model import AttemptPhase
from praxist_fs.core.observations import Envelope, GpuDevice
from praxist_fs.core.preemption import MAX_PREEMPTIONS_FOR_ONE, times_preempted
from praxist_fs.core.queues import queue_of_class
from praxist_fs.core.states import JobState
from praxist_fs.core.status import render_status
from praxist_fs.core.supply import LEASE_OUTCOMES, PRIORITIES

if TYPE_CHECKING:
    from .simulation import Simulation

MIB = 1024.0
QUEUE_HOLDS = ("queue ", "queues.", "backfill")  # reasons a queue's own rules give
BACKOFF = "launch barrier released"  # a job whose barrier keeps failing waits (R-SUB-4)


class Invariants:
    """What must hold of a ``Simulation``, whatever it drew."""


    def snapshot_check(self: Simulation, replayed: dict[str, Any], live: dict[str, Any],
                       when: str = "") -> None:
        if replayed == live:
            return
        raise AssertionError(f"replay(journal) != live state {when}: " + diff(replayed, live))

    def check_launch(self: Simulation, ev: AttemptLaunched) -> None:
        """At the moment of each placement decision, from the sample it was taken with."""
        s = self.sched
        job = s.jobs[ev.job_id]
        profile = self.policy.profiles[job.profile]
        assert job.state is JobState.QUEUED, f"launching {job.job_id} in state {job.state}"
        running = s.count(JobState.RUNNING)
        assert running < s.concurrency_target(), (
            f"launch of {job.job_id} with {running} running and target "
            f"{s.concurrency_target()}")
        by_class = queue_of_class(self.policy.queue_set())
        queue = by_class[job.request.work_class]
        if queue.max_running is not None:
            in_queue = sum(1 for j in s.running() if by_class[j.request.work_class] is queue)
            assert in_queue < queue.max_running, (
                f"launch of {job.job_id} with {in_queue} running in queue {queue.name} "
                f"(max_running {queue.max_running})")
        for domain in profile.pressure_domains:
            value = self.view_pressure.get(domain) if self.view_pressure else None
            high = self.policy.pressure_thresholds[domain].high
            assert value is None or value <= high, (
                f"{job.job_id} ({job.profile}) launched with {domain} pressure {value} > {high}")
        gen = s.generations.get(job.generation) if job.generation is not None else None
        assert not s.stopped, f"{job.job_id} launched in a stopped run"
        if gen is not None:
            assert gen.accepting, \
                f"{job.job_id} launched in generation {gen.number}, which is {gen.phase}"
        if gen is not None and gen.phase == "assessment":
            assert job.request.work_class == "mature", \
                f"{job.job_id} ({job.request.work_class}) launched during assessment"
        self.stats["launches"] += 1
        if not profile.uses_gpu:
            assert ev.gpus == (), f"CPU job {job.job_id} got GPUs {ev.gpus}"
            return
        self.stats["gpu_launches"] += 1
        assert self.view_gpus is not None and self.view_gpus.devices, \
            f"GPU job {job.job_id} launched without a GPU inventory"
        assert len(ev.gpus) == profile.gpu_count == len(set(ev.gpus)), ev
        devices = {d.uuid: d for d in self.view_gpus.devices}
        held = self.held_envelopes() + [e for e in self.view_others if not e.speculative]
        exclusive = not profile.demand_known
        if exclusive:
            self.stats["exclusive_launches"] += 1
        for uuid in ev.gpus:
            device = devices[uuid]
            assert not device.mig_mode, f"{job.job_id} placed on MIG device {uuid}"
            mine = [e for e in held if e.uuid == uuid]
            ext_util, ext_mem = external_load(device, mine)
            where = f"{job.job_id} ({job.profile}) on {uuid}"
            assert not any(e.exclusive for e in mine), f"{where}: device held exclusively"
            if exclusive:
                assert not mine, f"{where}: exclusive job shares the device with {mine}"
                assert ext_util < 5.0 and ext_mem < 0.02 * device.memory_total_mib, \
                    f"{where}: exclusive job on a busy device ({ext_util}%, {ext_mem} MiB)"
                continue
            util = sum(e.utilization_pct for e in mine) + ext_util + profile.gpu_utilization_pct
            mem = sum(e.memory_mib for e in mine) + ext_mem + profile.gpu_memory_gb * MIB
            assert util <= 100.0 + 1e-6, f"{where}: utilization {util:.3f}% > 100%"
            assert mem < 0.95 * device.memory_total_mib + 1e-6, (
                f"{where}: memory {mem:.1f} MiB >= 95% of {device.memory_total_mib}")

    def held_envelopes(self: Simulation) -> list[Envelope]:
        """This run's running jobs' envelopes, computed from the policy (not the scheduler);
        a suspended job keeps its memory (and an exclusive device), not its utilization."""
        envelopes = []
        for job in self.sched.in_flight():
            profile = self.policy.profiles[job.profile]
            suspended = job.state is JobState.SUSPENDED
            for uuid in job.current.gpus:
                if profile.demand_known:
                    envelopes.append(Envelope(uuid=uuid,
                                              utilization_pct=0.0 if suspended else
                                              profile.gpu_utilization_pct,
                                              memory_mib=profile.gpu_memory_gb * MIB,
                                              owner=job.job_id))
                else:
                    envelopes.append(Envelope(uuid=uuid, utilization_pct=100.0, memory_mib=0.0,
                                              exclusive=True, owner=job.job_id))
        return envelopes

    def check_preemption(self: Simulation, ev: AttemptPreempted | AttemptResumed) -> None:
        """At each preemption or resume decision (R-POL-3), before it is applied."""
        s = self.sched
        job = s.jobs[ev.job_id]
        by_class = queue_of_class(self.policy.queue_set())
        profile = self.policy.profiles[job.profile]
        if isinstance(ev, AttemptResumed):
            assert job.state is JobState.SUSPENDED, f"resuming {job.job_id} in {job.state}"
            assert s.count(JobState.RUNNING) < s.concurrency_target(), \
                f"resuming {job.job_id} with every slot taken"
            self.stats["resumes"] += 1
            if not profile.uses_gpu or not profile.demand_known:
                return
            devices = {d.uuid: d for d in self.view_gpus.devices}
            held = self.held_envelopes() + [e for e in self.view_others if not e.speculative]
            for uuid in job.current.gpus:
                mine = [e for e in held if e.uuid == uuid]
                util = sum(e.utilization_pct for e in mine) + external_load(
                    devices[uuid], mine)[0] + profile.gpu_utilization_pct
                assert util <= 100.0 + 1e-6, f"{job.job_id} resumed on {uuid} at {util:.3f}%"
            return
        beneficiary = s.jobs[ev.by]
        victim_queue = by_class[job.request.work_class]
        queue = by_class[beneficiary.request.work_class]
        assert job.state is JobState.RUNNING and job.current.pid is not None, \
            f"preempting {job.job_id} ({job.state}, pid {job.current.pid})"
        assert beneficiary.state is JobState.QUEUED, f"{ev.by} preempts while {beneficiary.state}"
        assert times_preempted(job, ev.by) < MAX_PREEMPTIONS_FOR_ONE, (
            f"{job.job_id} preempted for {ev.by} once more than the bound")
        assert victim_queue.name in queue.preemptible_queues and \
            victim_queue.priority < queue.priority and ev.mode == queue.preempt, (
                f"{queue.name} (priority {queue.priority}) preempted {job.job_id} of "
                f"{victim_queue.name} (priority {victim_queue.priority}) by {ev.mode}")
        self.stats[f"preempted_{ev.mode}"] += 1

    def check_grant(self: Simulation, ev: LeaseGranted) -> None:
        gen = self.sched.generations[ev.generation]
        assert gen.accepting, f"lease {ev.lease_id} granted in a {gen.phase} generation"
        assert not self.sched.stopped, f"lease {ev.lease_id} granted in a stopped run"
        assert ev.lease_id not in gen.leases, f"lease id {ev.lease_id} granted twice"
        assert not any(lease.peer == ev.peer for lease in gen.outstanding()), \
            f"{ev.peer} got a second outstanding lease"
        assert ev.expires_at >= ev.at + 180
        assert ev.profiles, f"lease {ev.lease_id} names no profile"

    def check(self: Simulation) -> None:
        s, shadow = self.sched, self.catch_up()
        self.snapshot_check(shadow.snapshot(), s.snapshot())
        assert s.version == shadow.version, \
            f"live version {s.version} != replayed version {shadow.version}"
        # each job in exactly one state, and its file in exactly one directory
        assert sum(s.count(state) for state in JobState) == len(s.jobs)
        for state, view in ((JobState.RUNNING, s.running), (JobState.QUEUED, s.queued),
                            (JobState.SUSPENDED, s.suspended)):
            indexed = {j.job_id for j in view()}
            assert indexed == {jid for jid, j in s.jobs.items() if j.state is state}, state
        for job_id, job in s.jobs.items():
            holders = [d for d, folder in self.disk.jobs.items() if job_id in folder]
            assert holders == [job.state.directory], (job_id, holders, job.state)
            written = dict(self.disk.jobs[holders[0]][job_id])
            expected = job.to_dict()
            if job.state is JobState.QUEUED:  # the soft "why pending" is in the file
                written.pop("reason")
                expected.pop("reason")
            assert written == expected, f"stale job file for {job_id}"
            ids = [a.attempt_id for a in job.attempts]
            assert ids == [f"a{n}" for n in range(1, len(ids) + 1)], (job_id, ids)
            open_attempts = [a for a in job.attempts if a.phase != AttemptPhase.ENDED]
            assert len(open_attempts) <= 1, f"{job_id} has two attempts in flight"
            if job.state in (JobState.RUNNING, JobState.SUSPENDED):
                assert open_attempts == [job.current], job_id
                last = job.current.preemptions[-1] if job.current.preemptions else {}
                assert (last.get("mode") == "suspend" and last["resumed_at"] is None) is (
                    job.state is JobState.SUSPENDED), job_id
            else:
                assert open_attempts == [], (job_id, job.state)
            for attempt in job.attempts:
                key = (job_id, attempt.attempt_id)
                if attempt.outcome == "released":
                    assert key not in self.started, f"{key} released but its command ran"
                if attempt.outcome in ("completed", "infra_retry") or (
                        attempt.outcome == "failed" and key not in self.spawn_failed and
                        attempt.exit_code is not None and key in self.host.attempts and
                        self.host.attempts[key].exit is not None):
                    assert key in self.started, f"{key} has an exit code but never ran"
                    assert attempt.exit_code == self.host.attempts[key].exit[0], key
            profile = self.policy.profiles[job.profile]
            for attempt in job.attempts:
                if attempt.round == job.round and attempt.phase != AttemptPhase.ENDED:
                    assert len(attempt.gpus) == (profile.gpu_count if profile.uses_gpu else 0)
        assert sum(len(folder) for folder in self.disk.jobs.values()) == len(s.jobs)
        if s.stopped:
            self.stats["stopped_steps"] += 1
            assert not s.queued(), f"the run is stopped with {len(s.queued())} queued"
            assert not any(g.outstanding() for g in s.generations.values()), \
                "the run is stopped with outstanding leases"
        # liveness: a free slot is never left empty while a CPU job that nothing holds waits
        for job in s.queued():
            profile = self.policy.profiles[job.profile]
            gen = s.generations.get(job.generation) if job.generation is not None else None
            if profile.uses_gpu or job.request.work_class == "mature" or (
                    gen is not None and gen.phase != "open") or \
                    s.pending.get(job.job_id, "").startswith((*QUEUE_HOLDS, BACKOFF)) or any(
                    (self.view_pressure.get(d) or 0.0) > self.policy.pressure_thresholds[d].high
                    for d in profile.pressure_domains):
                continue
            assert s.count(JobState.RUNNING) >= s.concurrency_target(), (
                f"{job.job_id} waits ({s.pending.get(job.job_id)!r}) with "
                f"{s.count(JobState.RUNNING)} running of {s.concurrency_target()}")
        # status.json agrees with the state it renders
        status = render_status(s, self.now, {"state": "serving"})
        assert status["counts"] == {state.value: s.count(state) for state in JobState}
        assert status["running"] == s.count(JobState.RUNNING) == len(status["active"])
        assert status["queue_length"] == s.count(JobState.QUEUED)
        for device in status["gpus"]["devices"]:
            assert sorted(device["jobs"]) == sorted(
                e.owner for e in self.held_envelopes() if e.uuid == device["uuid"])
        # exclusive (unknown-demand) jobs never share a device with this run's other jobs
        per_device: dict[str, list[Envelope]] = {}
        for envelope in self.held_envelopes():
            per_device.setdefault(envelope.uuid, []).append(envelope)
        for uuid, envelopes in per_device.items():
            owners = [e.owner for e in envelopes]
            assert len(owners) == len(set(owners)), f"a job holds {uuid} twice: {owners}"
            if any(e.exclusive for e in envelopes):
                assert len(envelopes) == 1, f"exclusive device {uuid} shared by {owners}"
        # replies: each names a job that exists, and the file says what the state says
        for rid, reply in s.replies.items():
            assert reply.job_id is None or reply.job_id in s.jobs, (rid, reply.job_id)
            if reply.job_id is None:
                assert reply.outcome == "rejected", reply
        assert self.disk.replies == {rid: r.to_dict() for rid, r in s.replies.items()}
        for rid, reply in self.disk.replies.items():
            assert reply["job_id"] is None or reply["job_id"] in s.jobs
        assert self.disk.control_replies == {rid: c["document"]
                                             for rid, c in s.control_replies.items()}
        # leases: every grant is accounted for, none outlives its generation or expiry
        for number, gen in s.generations.items():
            outstanding = gen.outstanding()
            for priority in PRIORITIES:
                stats = gen.stats[priority]
                mine = sum(1 for lease in outstanding if lease.priority == priority)
                assert stats["granted"] == sum(stats[k] for k in LEASE_OUTCOMES) + mine, \
                    f"gen {number} {priority}: {stats} with {mine} outstanding"
            assert len(gen.leases) == sum(gen.stats[p]["granted"] for p in PRIORITIES)
            if not gen.accepting:
                assert not outstanding, f"gen {number} is {gen.phase} with outstanding leases"
            if gen.phase == "closed":
                left = [j.job_id for j in (*s.queued(), *s.in_flight())
                        if j.generation == number]
                assert not left, f"gen {number} is closed with {left} queued or running"
            for lease in outstanding:
                assert lease.expires_at > self.now, f"lease {lease.lease_id} outlived expiry"
            assert self.disk.generation.get((number, "stats", "stats")) == \
                gen.stats_document(), f"gen {number}: stale stats.json"
            latest: dict[str, Any] = {}
            for lease in gen.leases.values():
                if lease.peer not in latest or lease.granted_at >= latest[lease.peer].granted_at:
                    latest[lease.peer] = lease
            for peer, lease in latest.items():
                written = self.disk.generation.get((number, "lease", peer))
                assert written is not None and written["lease_id"] == lease.lease_id, (
                    f"gen {number}: {peer}'s lease file shows "
                    f"{written and written['lease_id']}, its latest lease is {lease.lease_id}")
                assert written == {**lease.to_dict(),
                                   "release_pending": lease.lease_id in s.release_pending}
            if gen.closing_signal is not None:
                assert self.disk.generation.get((number, "closing", "CLOSING_SIGNAL")) == \
                    gen.closing_signal



def external_load(device: GpuDevice, held: list[Envelope]) -> tuple[float, float]:
    """R-GPU-2's external load, from the sample alone: what the device shows beyond the
    processes attributed to praxist jobs, plus whatever a job uses beyond its envelope;
    everything when the driver hides its processes."""
    if not device.processes_visible:
        return device.utilization_pct, device.memory_used_mib
    used_util: Counter[str] = Counter()
    used_mem: Counter[str] = Counter()
    for process in device.processes:
        if process.owner is not None:
            used_util[process.owner] += process.sm_util_pct or 0.0
            used_mem[process.owner] += process.used_memory_mib or 0.0
    declared_util: Counter[str] = Counter()
    declared_mem: Counter[str] = Counter()
    for envelope in held:
        declared_util[envelope.owner] += 100.0 if envelope.exclusive else envelope.utilization_pct
        declared_mem[envelope.owner] += envelope.memory_mib
    util = max(0.0, device.utilization_pct - sum(used_util.values())) + sum(
        max(0.0, used - declared_util[owner]) for owner, used in used_util.items())
    mem = max(0.0, device.memory_used_mib - sum(used_mem.values())) + sum(
        max(0.0, used - declared_mem[owner]) for owner, used in used_mem.items())
    return util, mem


def diff(expected: Any, actual: Any, path: str = "") -> str:
    """The first place two plain values differ, as a short path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual), key=str):
            if expected.get(key, "<missing>") != actual.get(key, "<missing>"):
                return diff(expected.get(key, "<missing>"), actual.get(key, "<missing>"),
                            f"{path}/{key}")
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (a, b) in enumerate(zip(expected, actual)):
            if a != b:
                return diff(a, b, f"{path}[{i}]")
    return f"{path or '/'}: replayed {expected!r} != live {actual!r}"

