"""The node registry (R-BUD-2): which nodes of a cluster backend get new attempts.

Every rule of node health lives here; the moves between its states are
``NODE_TRANSITIONS`` in core/states.py, beside the other machines. Like the rest of the core it knows no clock,
path or Slurm command: time comes in as ``at``, facts as the journaled events
``NodeOutcome`` and ``NodeProbeStarted``, and ``handle`` is the only mutator, so
replaying the journal rebuilds the registry; ``to_dict`` / ``from_dict`` are its
snapshot.

- An attempt's end blames its node (NODE_FAIL or BOOT_FAIL, no READY within the
  launch timeout, exit 75), clears it (it ran its command and ended otherwise), or
  says nothing about it (cancelled before it ran). The backend, which maps Slurm's
  states, says which in ``NodeOutcome.infrastructure``.
- Failures in a row are counted per node; a success resets the count and brings the
  node back online. Two in a row take it offline: ``excluded`` names it, and the
  backend passes that list to ``sbatch --exclude``.
- Never the last node: a node whose exclusion would leave one of its partitions with
  no node that takes work stays ``suspect`` instead (in rotation; status says why),
  and goes offline as soon as another node of that partition takes work again.
- ``cooldown_s`` after its latest failure an offline node is ``probing``: exactly one
  probe may be placed there (``probes_due``); the probe's success brings the node back
  online, its failure restarts the cool-down.
- Silence is not failure: time alone never offlines a node, only outcomes do.
- A node listed by the backend before it ran any of the run's work (``NodeListed``) is
  new: offline with its cool-down over, so its probe goes first and its success is what
  brings it into rotation; a failed first probe starts the cool-down (issue 28).

The implicit local node (seed 003): a run that uses this host and another backend
shows this host first, as ``local``, beside the cluster's nodes (``status``'s ``here``);
it is never stored: this host's health is its pressure, not outcomes.

Partitions are learned from outcomes: a node belongs to each partition one of our
attempts ended in on it. A node that never ran our work (listed by ``sinfo`` but
down, say) does not count as another node of its partition, so the rule errs toward
keeping a node in rotation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidTransition
from .events import Event, NodeListed, NodeOutcome, NodeProbeStarted, node_name_problem
from .policy import NODE_COOLDOWN_S as COOLDOWN_S  # the task file's default
from .states import NodeState, NodeTrigger, node_transition

FAILURES_TO_OFFLINE = 2  # R-BUD-2: this many infrastructure failures in a row
LOCAL_NODE = "local"  # seed 003's implicit local node: this host, never declared


_STORED = (NodeState.ONLINE, NodeState.SUSPECT, NodeState.OFFLINE)


@dataclass(slots=True)
class Node:
    name: str
    partitions: tuple[str, ...]  # sorted
    since: float  # when it entered ``state``; offline: its latest failure
    state: NodeState = NodeState.ONLINE
    failures: int = 0  # infrastructure failures in a row
    last_failure: str | None = None
    probe_after: float | None = None  # offline: when its cool-down ends
    probe_placed: float | None = None  # when its probe in flight was placed
    last_seen: float | None = None  # its latest outcome: shown, never a reason to offline

    @property
    def takes_work(self) -> bool:
        return self.state is not NodeState.OFFLINE


class NodeRegistry:
    """Nodes by name. ``cooldown_s`` comes from the policy in force: a coordinator that
    starts with another one sets it, and it applies from the next cool-down on."""

    def __init__(self, cooldown_s: float = COOLDOWN_S) -> None:
        if (not isinstance(cooldown_s, (int, float)) or isinstance(cooldown_s, bool)
                or not math.isfinite(cooldown_s) or cooldown_s < 0):
            raise ValueError(f"cooldown_s must be a number of seconds >= 0, got {cooldown_s!r}")
        self.cooldown_s = float(cooldown_s)
        self.nodes: dict[str, Node] = {}
        # indexes of ``nodes``: partition -> its nodes; the suspects
        self._members: dict[str, set[str]] = {}
        self._suspects: set[str] = set()

    def handle(self, event: Event) -> None:
        """The one way the registry changes: a journaled node event, live or replayed."""
        if isinstance(event, NodeOutcome):
            self._on_outcome(event)
        elif isinstance(event, NodeProbeStarted):
            self._on_probe(event)
        elif isinstance(event, NodeListed):
            if event.node not in self.nodes:  # known already: its state stands
                self._add(Node(event.node, (event.partition,), since=event.at,
                               state=NodeState.OFFLINE, probe_after=event.at))
        else:
            raise InvalidTransition(f"the node registry can't handle {type(event).__name__}")

    def excluded(self) -> list[str]:
        """The nodes new attempts must not go to (``--exclude``), probing ones included:
        only their probe goes there."""
        return sorted(name for name, node in self.nodes.items() if not node.takes_work)

    def takes_work(self) -> bool:
        """Whether any node known takes the run's work (none yet: a new cluster's first
        probes have not answered, and real work waits for them)."""
        return any(node.takes_work for node in self.nodes.values())

    def probes_due(self, at: float) -> list[str]:
        """Offline nodes whose cool-down is over and that have no probe in flight: place
        one probe on each (``--nodelist=NODE``, not ``--exclude``d), journaling
        ``NodeProbeStarted`` first. A placed probe that a restart finds no trace of is
        ended by ``NodeOutcome(probe=True, infrastructure=None)``, which frees its place."""
        return sorted(name for name, node in self.nodes.items()
                      if node.state is NodeState.OFFLINE and node.probe_placed is None
                      and at >= node.probe_after)

    def status(self, at: float, running: dict[str, int] | None = None,
               here: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """One row per node, by name, as status shows them, with the jobs ``running`` on
        each (a node running some before any outcome there: online, no partition yet);
        ``here``: the implicit local node's ``since``, ``last_seen``, ``running`` and
        ``labels``, shown first (a run that uses this host beside a cluster)."""
        running = running or {}
        local = [{"node": LOCAL_NODE, "kind": "local", "partition": "", "state": "online",
                  "consecutive_failures": 0, "reason": None, "probe_after": None,
                  **here}] if here is not None else []
        return local + [self._row(name, at, running.get(name, 0))
                        for name in sorted(self.nodes.keys() | running.keys())]

    def _row(self, name: str, at: float, running: int) -> dict[str, Any]:
        node = self.nodes.get(name)
        if node is None:  # runs the run's work, with no outcome there yet
            return {"node": name, "kind": "cluster", "partition": "", "state": "online",
                    "consecutive_failures": 0, "reason": None, "since": None,
                    "probe_after": None, "last_seen": None, "running": running,
                    "labels": {"partitions": []}}
        return {"node": name, "kind": "cluster", "partition": ",".join(node.partitions),
                "state": self._shown(node, at).value, "consecutive_failures": node.failures,
                "reason": self._reason(node, at), "since": node.since,
                "probe_after": node.probe_after, "last_seen": node.last_seen,
                "running": running, "labels": {"partitions": list(node.partitions)}}

    def to_dict(self) -> dict[str, Any]:
        return {"cooldown_s": self.cooldown_s,
                "nodes": [{"name": node.name, "partitions": list(node.partitions),
                           "since": node.since, "state": node.state.value,
                           "failures": node.failures, "last_failure": node.last_failure,
                           "probe_after": node.probe_after, "probe_placed": node.probe_placed,
                           "last_seen": node.last_seen}
                          for _, node in sorted(self.nodes.items())]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeRegistry:
        """The registry ``to_dict`` wrote; ValueError, KeyError or TypeError if damaged
        (a snapshot's reader turns them into its own error)."""
        registry = cls(data["cooldown_s"])
        for doc in data["nodes"]:
            node = Node(**{**doc, "partitions": tuple(doc["partitions"]),
                           "state": NodeState(doc["state"])})
            if (node.state not in _STORED or not node.partitions
                    or any(map(node_name_problem, (node.name, *node.partitions)))
                    or (node.state is NodeState.OFFLINE) != (node.probe_after is not None)):
                raise ValueError(f"damaged node entry {doc!r}")
            registry._add(node)
        return registry

    def _on_outcome(self, ev: NodeOutcome) -> None:
        node = self.nodes.get(ev.node)
        if ev.infrastructure is None:  # no verdict: a probe that never ran frees its place
            if node is not None and ev.probe:
                node.probe_placed = None
            return
        if node is None:
            node = self._add(Node(ev.node, (ev.partition,), since=ev.at))
        elif ev.partition not in node.partitions:
            node.partitions = tuple(sorted((*node.partitions, ev.partition)))
            self._members.setdefault(ev.partition, set()).add(node.name)
        node.last_seen = ev.at
        if ev.probe:
            node.probe_placed = None
        if ev.infrastructure:
            self._failed(node, ev.reason, ev.at)
        else:
            self._succeeded(node, ev.at)
        if node.takes_work:
            self._relieve(node, ev.at)

    def _add(self, node: Node) -> Node:
        self.nodes[node.name] = node
        for partition in node.partitions:
            self._members.setdefault(partition, set()).add(node.name)
        if node.state is NodeState.SUSPECT:
            self._suspects.add(node.name)
        return node

    def _on_probe(self, ev: NodeProbeStarted) -> None:
        """Accepted whatever the time: a coordinator that replays with a longer
        cool-down must still read a journal a shorter one wrote."""
        node = self.nodes.get(ev.node)
        if node is None or node.state is not NodeState.OFFLINE or node.probe_placed is not None:
            found = ("unknown" if node is None else "probed already"
                     if node.state is NodeState.OFFLINE else node.state.value)
            raise InvalidTransition(f"can't place a probe on node {ev.node!r}: it is {found}")
        node.probe_placed = ev.at

    def _failed(self, node: Node, reason: str, at: float) -> None:
        """Offline from the second in a row, unless that leaves a partition without a node
        that takes work (an offline node too can be the last: of a partition it was just
        learned in); an offline node still failing starts its cool-down again."""
        node.failures += 1
        node.last_failure = reason
        if node.failures < FAILURES_TO_OFFLINE:
            if node.state is NodeState.OFFLINE:  # new, its first probe failed: cool down
                self._enter(node, NodeTrigger.FAIL, at)
            return
        if not self._last_of(node):
            self._enter(node, NodeTrigger.FAIL, at)
        elif node.state is not NodeState.SUSPECT:
            self._enter(node, NodeTrigger.FAIL_LAST, at)

    def _succeeded(self, node: Node, at: float) -> None:
        node.failures, node.last_failure = 0, None
        if node.state is not NodeState.ONLINE:
            self._enter(node, NodeTrigger.SUCCEED, at)

    def _enter(self, node: Node, trigger: NodeTrigger, at: float) -> None:
        """The state ``trigger`` leads to from the node's (core/states.py's table):
        ``since`` starts again, and an offline node's cool-down with it."""
        state = node_transition(node.name, node.state, trigger)
        node.state, node.since = state, at
        node.probe_after = at + self.cooldown_s if state is NodeState.OFFLINE else None
        if state is NodeState.SUSPECT:
            self._suspects.add(node.name)
        else:
            self._suspects.discard(node.name)

    def _relieve(self, node: Node, at: float) -> None:
        """``node`` takes work: a suspect that it leaves no longer the last goes offline."""
        for name in sorted(self._suspects - {node.name}):
            if not self._last_of(self.nodes[name]):
                self._enter(self.nodes[name], NodeTrigger.RELIEVE, at)

    def _last_of(self, node: Node) -> list[str]:
        """The partitions of ``node`` where no other node takes work."""
        return [partition for partition in node.partitions
                if not any(name != node.name and self.nodes[name].takes_work
                           for name in self._members[partition])]

    @staticmethod
    def _shown(node: Node, at: float) -> NodeState:
        if node.state is NodeState.OFFLINE and at >= node.probe_after:
            return node_transition(node.name, node.state, NodeTrigger.COOL)
        return node.state

    def _reason(self, node: Node, at: float) -> str | None:
        if not node.failures:  # offline without a failure: new (``NodeListed``)
            return None if node.state is not NodeState.OFFLINE else (
                "new: its probe runs before its first job" if node.probe_placed is not None
                else "new: a probe is due before its first job")
        failed = (f"{node.failures} infrastructure failures in a row, the last: "
                  if node.failures > 1 else "1 infrastructure failure: ") + str(node.last_failure)
        if node.state is NodeState.SUSPECT:
            return (f"{failed}; kept in rotation: the last node of partition "
                    f"{','.join(self._last_of(node))} that takes work")
        if node.state is NodeState.ONLINE:
            return failed
        if node.probe_placed is not None:
            return f"{failed}; excluded, its probe runs"
        if at >= node.probe_after:
            return f"{failed}; excluded, cool-down over: a probe is due"
        return f"{failed}; excluded until a probe after the cool-down succeeds"
