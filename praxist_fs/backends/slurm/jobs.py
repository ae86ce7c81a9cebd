"""The Slurm jobs the Slurm backend watches: each attempt's (``Tracked``) and each
offline node's probe (``NodeProbes``, R-BUD-2).

Apart from the backend (backend.py), which drives them from its loop turns and squeue's
answers: what it knows of a Slurm job between two polls, and the probes' own life
(placed, polled, settled into a node's outcome), which shares nothing with an attempt's
but the client and the poll.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from praxist_fs.backends.slurm.client import (
    PENDING_STATES, RUNNING_STATES, FinalExit, SlurmClient, SlurmRefused, SlurmState,
    SlurmUnavailable, run_tag, slurm_safe,
)
from praxist_fs.core.events import Event, NodeOutcome, NodeProbeStarted

if TYPE_CHECKING:
    from praxist_fs.core.nodes import NodeRegistry

log = logging.getLogger("praxist_fs")


@dataclass
class Tracked:
    """One attempt's Slurm job as this coordinator knows it."""

    slurm_id: str
    name: str
    state: SlurmState | None = None  # the last squeue answer; None: unknown to Slurm
    polled: bool = False  # a squeue answer came after the submission (None is news then)
    final: FinalExit | None = None  # sacct's record, for an end without exit.json
    final_asked: bool = False  # sacct was asked (it may have no record: no jobcomp)
    asked: str | None = None  # "cancel", "stop": what praxist_fs asked of it
    kill_at: float | None = None  # scancel --signal=KILL then (monotonic)
    killed_at: float | None = None  # when KILL was sent (wall clock): its command's end
    node_told: bool = False  # its end was reported against its node (R-BUD-2), once
    running_since: float | None = None  # (monotonic) when a poll first said it runs
    node: str = ""  # where a poll last said it runs
    no_ready: str | None = None  # why it was cancelled: no READY within the launch timeout
    exclude: list[str] | None = None  # its --exclude as last set; None: unknown (a restart)
    node_failed: float | None = None  # (monotonic) when Slurm first said its node failed


def warning_reason(exit_record: dict[str, Any]) -> str | None:
    """What a failure after the time limit's warning says (the shim's ``warned``): a
    command that does not handle the signal dies of it, before Slurm's TIMEOUT."""
    warned = exit_record.get("warned")
    if not isinstance(warned, int) or isinstance(warned, bool):
        return None
    try:
        name = signal.Signals(warned).name
    except ValueError:
        name = f"signal {warned}"
    return f"it ended after Slurm's warning before its time limit ({name})"


class NodeProbes:
    """The probes of offline nodes: ``probes`` (node -> its probe's Slurm job id) and
    their last states as squeue gave them (``probe_states``); ``nodes``: the core's node
    registry, read-only."""

    def __init__(self, client: SlurmClient, root: Path, partition: str,
                 nodes: Callable[[], NodeRegistry]) -> None:
        self.client = client
        self.root = root
        self.partition = partition
        self.nodes = nodes
        self.probes: dict[str, str] = {}  # node -> the Slurm job id of its probe
        self.probe_states: dict[str, SlurmState | None] = {}  # a probe's id -> its last state

    def take(self, asked_ids: set[str], states: dict[str, SlurmState]) -> None:
        """squeue's answer about the ids asked, for the probes among them."""
        for slurm_id in self.probes.values():
            if slurm_id in asked_ids:  # None: unknown to Slurm (purged)
                self.probe_states[slurm_id] = states.get(slurm_id)

    def due(self, now: float) -> list[Event]:
        """R-BUD-2: an offline node whose cool-down is over gets one probe, a tiny job
        pinned to it (``--nodelist``): it runs once the node takes work again, and its
        end brings the node back online or restarts the cool-down. A probe the journal
        placed but Slurm does not know (a restart) is closed without a verdict."""
        registry = self.nodes()
        events: list[Event] = []
        for name, node in registry.nodes.items():
            if node.probe_placed is not None and name not in self.probes:
                found = self._probe_job(name)
                if found is None:
                    events.append(NodeOutcome(at=now, node=name, partition=self.partition,
                                              infrastructure=None, probe=True,
                                              reason="its probe was not found in Slurm"))
                else:
                    self.probes[name] = found
        for name in registry.probes_due(now):
            if self._submit_probe(name):
                events.append(NodeProbeStarted(at=now, node=name))
        for name, slurm_id in list(self.probes.items()):
            if slurm_id not in self.probe_states:
                continue  # not polled since it was placed
            state = self.probe_states.pop(slurm_id)
            if state is not None and state.state in PENDING_STATES | RUNNING_STATES:
                self.probe_states[slurm_id] = state
                continue
            del self.probes[name]
            events.append(NodeOutcome(
                at=now, node=name, partition=self.partition, probe=True,
                infrastructure=None if state is None else state.state != "COMPLETED",
                reason=f"probe: Slurm {state.state if state else 'purged it unseen'}"))
        return events

    def _probe_name(self, node: str) -> str:
        return f"pxprobe-{run_tag(self.root)}-{slurm_safe(node)}"  # never swept

    def _probe_job(self, node: str) -> str | None:
        try:
            found = self.client.find(self._probe_name(node))
        except SlurmUnavailable:
            return None
        return found[0] if found else None

    def _submit_probe(self, node: str) -> bool:
        try:
            self.probes[node] = self.client.probe(node, self._probe_name(node))
        except (SlurmRefused, SlurmUnavailable) as exc:
            log.warning("node %s: its probe could not be submitted: %s", node, exc)
            return False
        return True
