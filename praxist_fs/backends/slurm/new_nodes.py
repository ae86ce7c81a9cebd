"""A probe before a new node's first job (issue 28 item 4, ``slurm.probe_new_nodes``).

The node registry learns a node from the run's own outcomes, so without this a node
that never ran the run's work gets real work first, and only its failures (each one a
job's retry) take it out. With it, the Slurm backend lists its partition's nodes once
(``sinfo``, on the poll thread, again after a failure) and journals each the registry
does not know as ``NodeListed``: the registry keeps it out of rotation, its probe due at
once, and its probe's success brings it in (core/nodes.py). While no node takes work (a
run's start, before the first probe answered) jobs are submitted ``--hold`` and without
an exclusion Slurm would refuse (every node of the partition); once a node has passed,
the held jobs get their exclusion made current and are released. Held means Slurm's
``JobHeldUser``: squeue says so after a restart too.

Cheap: one sinfo per coordinator start, one tiny probe job per node new to the run.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from praxist_fs.backends.slurm.client import SlurmClient, SlurmUnavailable
from praxist_fs.core.events import Event, NodeListed

if TYPE_CHECKING:
    from praxist_fs.core.nodes import NodeRegistry

log = logging.getLogger(__name__)

HELD = "JobHeldUser"  # squeue's reason for a job submitted --hold


class NewNodes:
    """The listing and the hold: ``enabled`` from the task file; ``pool``: the backend's
    poll thread, whose answers wake the loop (``wake``)."""

    def __init__(self, client: SlurmClient, partition: str, enabled: bool,
                 pool: ThreadPoolExecutor, wake: Callable[[], None]) -> None:
        self.client, self.partition, self.enabled = client, partition, enabled
        self.pool, self.wake = pool, wake
        self.listing: Future | None = None
        self.listed = not enabled  # nothing to list unless asked

    def ask(self) -> None:
        """List the partition's nodes on the poll thread, unless listed or asked already."""
        if not self.listed and self.listing is None:
            self.listing = self.pool.submit(self.client.list_nodes)
            self.listing.add_done_callback(lambda _: self.wake())

    def answered(self, registry: NodeRegistry) -> list[Event]:
        """The listing, once it answered: the nodes the registry does not know yet."""
        if self.listing is None or not self.listing.done():
            return []
        listing, self.listing = self.listing, None
        try:
            names = listing.result()
        except SlurmUnavailable as exc:
            log.warning("sinfo did not answer (%s); the partition's nodes are listed later",
                        exc)
            return []
        self.listed = True
        now = time.time()
        events: list[Event] = []
        for name in names:
            if name not in registry.nodes:
                try:
                    events.append(NodeListed(at=now, node=name, partition=self.partition))
                except ValueError as exc:  # a name Slurm could not mean as one node
                    log.warning("node %r not listed: %s", name, exc)
        return events

    def hold(self, registry: NodeRegistry) -> bool:
        """Whether a job submitted now waits, held: no node has passed a probe yet."""
        return self.enabled and not registry.takes_work()

    def releasable(self, registry: NodeRegistry, held: dict[str, str]) -> list[str]:
        """The held jobs (Slurm id -> squeue's reason) to release: once a node takes work."""
        if not self.enabled or not registry.takes_work():
            return []
        return [slurm_id for slurm_id, reason in held.items() if reason == HELD]
