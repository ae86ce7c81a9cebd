"""The node registry (SPEC R-BUD-2): offline after two infrastructure failures in a
row, never the last node of a partition, a probe after the cool-down, silence never
counts, and replay or a snapshot rebuild it exactly."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from praxist_fs.core.events import (
    NODE_NAME_MAX, AttemptResumed, CoordinatorStarted, NodeListed, NodeOutcome,
    NodeProbeStarted,
    from_record, to_record,
)
from praxist_fs.core.capabilities import BEFORE_CAPABILITIES
from praxist_fs.core.nodes import COOLDOWN_S, NodeRegistry
from praxist_fs.core.policy import Policy
from praxist_fs.core.scheduler import Scheduler
from praxist_fs.core.snapshot import capture, restore
from praxist_fs.errors import InvalidTransition

T0 = 1_000_000.0
# what status shows of a cluster node beside its health (issue 28): none of these run jobs
CLUSTER_ROW = {"kind": "cluster", "running": 0, "labels": {"partitions": ["main"]}}


def outcome(registry, at, node, infrastructure=True, *, partition="main",
            reason="NODE_FAIL", probe=False):
    registry.handle(NodeOutcome(at=at, node=node, partition=partition,
                                infrastructure=infrastructure, reason=reason, probe=probe))


def row(registry, at, node):
    return next(r for r in registry.status(at) if r["node"] == node)


def two_node_partition(at=T0):
    """n1 and n2 both ran work in partition main."""
    registry = NodeRegistry()
    outcome(registry, at, "n1", False, reason="exit 0")
    outcome(registry, at, "n2", False, reason="exit 0")
    return registry


def offline_n1(at=T0):
    registry = two_node_partition(at)
    outcome(registry, at + 1, "n1")
    outcome(registry, at + 2, "n1")
    return registry


def test_two_infrastructure_failures_in_a_row_take_a_node_offline_and_exclude_it():
    """SPEC R-BUD-2: "A node goes offline after 2 consecutive channel failures"; issue 16
    item 3: offline nodes are the ``--exclude`` list. Whatever the failure (the backend
    classifies NODE_FAIL, no READY within the launch timeout, exit 75), status names the
    last one."""
    registry = two_node_partition()
    outcome(registry, T0 + 1, "n1", reason="no READY within the launch timeout")
    assert row(registry, T0 + 1, "n1") == {
        "node": "n1", "partition": "main", "state": "online", "consecutive_failures": 1,
        "reason": "1 infrastructure failure: no READY within the launch timeout",
        "since": T0, "probe_after": None, **CLUSTER_ROW, "last_seen": T0 + 1}
    assert registry.excluded() == []

    outcome(registry, T0 + 2, "n1", reason="exit 75")
    assert row(registry, T0 + 2, "n1") == {
        "node": "n1", "partition": "main", "state": "offline", "consecutive_failures": 2,
        "reason": "2 infrastructure failures in a row, the last: exit 75; excluded until "
                  "a probe after the cool-down succeeds",
        "since": T0 + 2, "probe_after": T0 + 2 + COOLDOWN_S, **CLUSTER_ROW, "last_seen": T0 + 2}
    assert registry.excluded() == ["n1"]
    assert row(registry, T0 + 2, "n2")["state"] == "online"


def test_a_success_in_between_resets_the_count():
    """SPEC R-BUD-2: only *consecutive* failures count: an attempt that ran its command
    and ended otherwise (any exit but 75) resets the node's count."""
    registry = two_node_partition()
    outcome(registry, T0 + 1, "n1")
    outcome(registry, T0 + 2, "n1", False, reason="exit 3")
    assert row(registry, T0 + 2, "n1")["consecutive_failures"] == 0
    assert row(registry, T0 + 2, "n1")["reason"] is None
    outcome(registry, T0 + 3, "n1")
    assert row(registry, T0 + 3, "n1")["state"] == "online"
    assert row(registry, T0 + 3, "n1")["consecutive_failures"] == 1
    assert registry.excluded() == []


def test_the_last_node_of_a_partition_is_never_excluded():
    """SPEC R-BUD-2 with issue 16 item 3: "the last node of a partition is never
    excluded": it stays suspect and in rotation, status says why, and it goes offline
    once another node of the partition takes work."""
    registry = NodeRegistry()
    outcome(registry, T0, "n1")
    outcome(registry, T0 + 1, "n1")
    outcome(registry, T0 + 2, "n1")
    assert registry.excluded() == []
    assert row(registry, T0 + 2, "n1") == {
        "node": "n1", "partition": "main", "state": "suspect", "consecutive_failures": 3,
        "reason": "3 infrastructure failures in a row, the last: NODE_FAIL; kept in "
                  "rotation: the last node of partition main that takes work",
        "since": T0 + 1, "probe_after": None, **CLUSTER_ROW, "last_seen": T0 + 2}

    outcome(registry, T0 + 3, "n2", False, reason="exit 0")  # main has another node now
    assert registry.excluded() == ["n1"]
    assert row(registry, T0 + 3, "n1")["state"] == "offline"
    assert row(registry, T0 + 3, "n1")["probe_after"] == T0 + 3 + COOLDOWN_S

    outcome(registry, T0 + 4, "n2")  # n1 is out: n2 is the last of main now
    outcome(registry, T0 + 5, "n2")
    assert registry.excluded() == ["n1"]
    assert row(registry, T0 + 5, "n2")["state"] == "suspect"


def test_a_node_in_two_partitions_stays_while_it_is_the_last_of_either():
    """SPEC R-BUD-2 (never the last node): n1 serves main and gpu, n2 only main; n1
    failing is kept for gpu, and a success of n1 brings it back online."""
    registry = NodeRegistry()
    outcome(registry, T0, "n2", False, reason="exit 0")
    outcome(registry, T0 + 1, "n1", partition="gpu")
    outcome(registry, T0 + 2, "n1", partition="main")
    assert registry.excluded() == []
    assert row(registry, T0 + 2, "n1")["partition"] == "gpu,main"
    assert row(registry, T0 + 2, "n1")["reason"].endswith("the last node of partition gpu "
                                                          "that takes work")
    outcome(registry, T0 + 3, "n1", False, partition="gpu", reason="exit 0")
    assert row(registry, T0 + 3, "n1")["state"] == "online"
    assert row(registry, T0 + 3, "n1")["consecutive_failures"] == 0


def test_after_the_cool_down_one_probe_brings_the_node_back_online():
    """SPEC R-BUD-2: "back online on the next success"; issue 16 item 3: "a probe job
    after a cool-down brings it back", exactly one probe per node."""
    registry = offline_n1()
    back = T0 + 2 + COOLDOWN_S
    assert registry.probes_due(back - 1) == []
    assert row(registry, back - 1, "n1")["state"] == "offline"
    assert registry.probes_due(back) == ["n1"]
    assert row(registry, back, "n1")["state"] == "probing"
    assert row(registry, back, "n1")["reason"].endswith("cool-down over: a probe is due")
    assert registry.excluded() == ["n1"]  # only the probe goes there

    registry.handle(NodeProbeStarted(at=back, node="n1"))
    assert registry.probes_due(back + 60) == []
    assert row(registry, back + 60, "n1")["reason"].endswith("excluded, its probe runs")
    before = registry.to_dict()
    with pytest.raises(InvalidTransition, match="node 'n1': it is probed already"):
        registry.handle(NodeProbeStarted(at=back + 1, node="n1"))
    assert registry.to_dict() == before  # a refused event changes nothing

    outcome(registry, back + 70, "n1", False, reason="exit 0", probe=True)
    assert registry.excluded() == []
    assert row(registry, back + 70, "n1") == {
        "node": "n1", "partition": "main", "state": "online", "consecutive_failures": 0,
        "reason": None, "since": back + 70, "probe_after": None, **CLUSTER_ROW,
        "last_seen": back + 70}


def test_a_failed_probe_takes_the_node_offline_again_with_a_new_cool_down():
    """SPEC R-BUD-2 with issue 16 item 3: a probe failure restarts the cool-down."""
    registry = offline_n1()
    back = T0 + 2 + COOLDOWN_S
    registry.handle(NodeProbeStarted(at=back, node="n1"))
    outcome(registry, back + 50, "n1", reason="NODE_FAIL", probe=True)
    assert row(registry, back + 50, "n1") == {
        "node": "n1", "partition": "main", "state": "offline", "consecutive_failures": 3,
        "reason": "3 infrastructure failures in a row, the last: NODE_FAIL; excluded until "
                  "a probe after the cool-down succeeds",
        "since": back + 50, "probe_after": back + 50 + COOLDOWN_S, **CLUSTER_ROW,
        "last_seen": back + 50}
    assert registry.excluded() == ["n1"]
    assert registry.probes_due(back + 50 + COOLDOWN_S - 1) == []
    assert registry.probes_due(back + 50 + COOLDOWN_S) == ["n1"]


def test_a_probe_that_never_ran_frees_its_place_for_the_next():
    """SPEC R-BUD-2: a probe cancelled before it ran says nothing about the node; the
    node stays offline and may be probed again."""
    registry = offline_n1()
    back = T0 + 2 + COOLDOWN_S
    registry.handle(NodeProbeStarted(at=back, node="n1"))
    outcome(registry, back + 5, "n1", None, reason="CANCELLED", probe=True)
    assert registry.probes_due(back + 5) == ["n1"]
    assert row(registry, back + 5, "n1")["consecutive_failures"] == 2
    assert registry.excluded() == ["n1"]


def test_a_probe_is_refused_on_a_node_that_is_not_offline():
    """SPEC R-BUD-2: only an offline node is probed; the refusal leaves state alone."""
    registry = two_node_partition()
    before = registry.to_dict()
    for node, found in (("n1", "online"), ("n9", "unknown")):
        with pytest.raises(InvalidTransition, match=f"node '{node}': it is {found}"):
            registry.handle(NodeProbeStarted(at=T0 + 1, node=node))
    with pytest.raises(InvalidTransition, match="can't handle AttemptResumed"):
        registry.handle(AttemptResumed(at=T0, job_id="j", attempt_id="a"))
    assert registry.to_dict() == before


def test_idle_silence_never_offlines_a_node():
    """SPEC R-BUD-2: "idle silence never offlines a node" (seed 003 "Fleet node
    registry": "an idle node is never auto-offlined for silence, because no signal is
    expected from a node with no work")."""
    registry = two_node_partition()
    outcome(registry, T0 + 1, "n1")
    a_month = T0 + 30 * 86400
    assert [(r["node"], r["state"], r["consecutive_failures"])
            for r in registry.status(a_month)] == [("n1", "online", 1), ("n2", "online", 0)]
    assert registry.excluded() == [] and registry.probes_due(a_month) == []
    outcome(registry, a_month, "n1")  # the second failure, however late, still counts
    assert registry.excluded() == ["n1"]


@pytest.mark.parametrize("name, problem", [
    ("", "a non-empty string"),
    ("x" * (NODE_NAME_MAX + 1), f"at most {NODE_NAME_MAX} characters"),
    ("gpu[1-4]", "one name"),
    ("n1,n2", "one name"),
    ("n 1", "one name"),
    ("n1\n", "one name"),
    ("n1\x00", "one name"),
    (None, "a non-empty string"),
])
def test_a_name_slurm_could_not_mean_as_one_node_is_refused(name, problem):
    """SPEC R-BUD-2: a node name comes from Slurm's output and goes back to Slurm in
    ``--exclude``; what is not one node's name is refused with an error naming the
    field, before it reaches the registry or the journal (a short message even for a
    very long name)."""
    with pytest.raises(ValueError, match=f"NodeOutcome.node must be {problem}") as error:
        NodeOutcome(at=T0, node=name, partition="main", infrastructure=True, reason="x")
    assert len(str(error.value)) < 200
    with pytest.raises(ValueError, match="NodeProbeStarted.node must be"):
        NodeProbeStarted(at=T0, node=name)
    with pytest.raises(ValueError, match="NodeOutcome.partition must be"):
        NodeOutcome(at=T0, node="n1", partition=name, infrastructure=True, reason="x")
    record = {"type": "node_outcome", "at": T0, "node": name, "partition": "main",
              "infrastructure": True, "reason": "x", "probe": False}
    with pytest.raises(ValueError):
        from_record(record)


def test_odd_but_single_node_names_are_kept_as_slurm_printed_them():
    """SPEC R-BUD-2: non-ASCII and long (up to the limit) names are one node each: kept
    verbatim, so ``--exclude`` names exactly the node Slurm reported."""
    long_name = "n" * NODE_NAME_MAX
    registry = NodeRegistry()
    outcome(registry, T0, "nœud-ü1", False, reason="exit 0")
    for node in ("gpü-ñode", long_name):
        outcome(registry, T0 + 1, node)
        outcome(registry, T0 + 2, node)
    assert registry.excluded() == sorted(["gpü-ñode", long_name])
    assert NodeRegistry.from_dict(json.loads(json.dumps(registry.to_dict()))).to_dict() \
        == registry.to_dict()
    with pytest.raises(ValueError, match="infrastructure must be true, false or null"):
        NodeOutcome(at=T0, node="n1", partition="main", infrastructure=1, reason="x")


def test_from_dict_round_trips_every_stored_state():
    """SPEC R-BUD-2: a snapshot keeps the registry (offline, suspect, a probe in flight,
    counts, cool-downs) exactly; a damaged one is refused."""
    registry = offline_n1()
    outcome(registry, T0 + 3, "s1", partition="solo")
    outcome(registry, T0 + 4, "s1", partition="solo")
    registry.handle(NodeProbeStarted(at=T0 + 2 + COOLDOWN_S, node="n1"))
    doc = json.loads(json.dumps(registry.to_dict()))
    restored = NodeRegistry.from_dict(doc)
    assert restored.to_dict() == registry.to_dict()
    later = T0 + 10 * COOLDOWN_S
    assert restored.status(later) == registry.status(later)
    assert {r["state"] for r in restored.status(T0 + 5)} == {"offline", "online", "suspect"}

    assert doc["nodes"][0]["state"] == "offline"
    for damage in ({"state": "probing"}, {"state": "gone"}, {"partitions": []},
                   {"name": "a,b"}, {"surprise": 1}, {"probe_after": None}):
        broken = {**doc, "nodes": [{**doc["nodes"][0], **damage}, *doc["nodes"][1:]]}
        with pytest.raises((ValueError, TypeError)):
            NodeRegistry.from_dict(broken)
    with pytest.raises(ValueError, match="cooldown_s must be a number of seconds >= 0"):
        NodeRegistry.from_dict({**doc, "cooldown_s": -1})


class Driver:
    """Feeds random node events to a live registry the way the backend would, and
    journals each one through its JSON record."""

    def __init__(self) -> None:
        self.live = NodeRegistry(cooldown_s=50.0)
        self.now = T0
        self.journal: list[str] = []

    def feed(self, event) -> None:
        self.live.handle(event)
        self.journal.append(json.dumps(to_record(event)))

    def step(self, data) -> None:
        self.now += data.draw(st.sampled_from([0.0, 1.0, 30.0, 60.0]))
        due = self.live.probes_due(self.now)
        if due and data.draw(st.booleans()):
            self.feed(NodeProbeStarted(at=self.now, node=data.draw(st.sampled_from(due))))
            return
        node = data.draw(st.sampled_from(["n1", "n2", "n3", "gpü"]))
        if data.draw(st.integers(0, 5)) == 0:  # the backend listed it (issue 28)
            self.feed(NodeListed(at=self.now, node=node,
                                 partition=data.draw(st.sampled_from(["main", "gpu"]))))
            return
        known = self.live.nodes.get(node)
        self.feed(NodeOutcome(
            at=self.now, node=node, partition=data.draw(st.sampled_from(["main", "gpu"])),
            infrastructure=data.draw(st.sampled_from([True, True, False, None])),
            reason=data.draw(st.sampled_from(["NODE_FAIL", "exit 75", "exit 0"])),
            probe=known is not None and known.probe_placed is not None
            and data.draw(st.booleans())))


def replay(journal: list[str], registry: NodeRegistry | None = None) -> NodeRegistry:
    registry = registry or NodeRegistry(cooldown_s=50.0)
    for line in journal:
        registry.handle(from_record(json.loads(line)))
    return registry


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_replay_and_a_snapshot_plus_the_tail_rebuild_the_same_registry(data):
    """SPEC R-BUD-2 (offline is journaled): replaying the journaled node events rebuilds
    the live registry exactly, and so does a snapshot at any point plus the rest."""
    driver = Driver()
    for _ in range(data.draw(st.integers(1, 40))):
        driver.step(data)
    live = driver.live
    assert replay(driver.journal).to_dict() == live.to_dict()
    assert replay(driver.journal).status(driver.now) == live.status(driver.now)
    cut = data.draw(st.integers(0, len(driver.journal)))
    snapshot = json.loads(json.dumps(replay(driver.journal[:cut]).to_dict()))
    resumed = replay(driver.journal[cut:], NodeRegistry.from_dict(snapshot))
    assert resumed.to_dict() == live.to_dict()
    # the rules hold in every reachable state: no partition is left without a node that
    # takes work, and a failing node is kept only where it is the last; a new node (listed,
    # offline with fewer failures, all of its probes) is out until a probe passes
    taking = {name: node.partitions for name, node in live.nodes.items()
              if name not in live.excluded()}
    for name, node in live.nodes.items():
        new = node.state == "offline" and node.failures < 2
        assert new or any(p in partitions for p in node.partitions
                          for partitions in taking.values())
        if node.state == "suspect":
            assert node.failures >= 2 and any(
                not any(p in parts for other, parts in taking.items() if other != name)
                for p in node.partitions), name
        assert node.state == "online" or node.failures >= 2 or new, name


def test_an_offline_node_found_in_a_new_partition_stays_for_it():
    """SPEC R-BUD-2 (never the last node): an attempt submitted before n1 went offline
    ends on it in partition gpu, where no other node ever ran our work: excluding n1
    would leave gpu with none, so it is suspect, not offline."""
    registry = offline_n1()
    outcome(registry, T0 + 3, "n1", partition="gpu")
    assert registry.excluded() == []
    assert row(registry, T0 + 3, "n1")["state"] == "suspect"
    assert row(registry, T0 + 3, "n1")["reason"].endswith("the last node of partition gpu "
                                                          "that takes work")


def test_any_success_brings_an_offline_node_back_online():
    """SPEC R-BUD-2: "back online on the next success": an attempt submitted before n1
    went offline still runs its command there and exits 0; n1 is online again without
    waiting for its probe."""
    registry = offline_n1()
    outcome(registry, T0 + 10, "n1", False, reason="exit 0")
    assert registry.excluded() == []
    assert registry.probes_due(T0 + 10 * COOLDOWN_S) == []
    assert row(registry, T0 + 10, "n1")["state"] == "online"
    assert row(registry, T0 + 10, "n1")["since"] == T0 + 10


def test_the_cool_down_is_the_task_files_and_replays():
    """R-BUD-2 with ``slurm.node_cooldown_s``: the coordinator's policy sets the cool-down
    (journaled with its start), so the live scheduler, a replay of its journal and a
    snapshot agree on when an offline node's probe is due; a later coordinator with
    another setting applies it from the next cool-down on."""
    def started(at, cooldown):
        policy = Policy(backend="slurm", capabilities=BEFORE_CAPABILITIES["slurm"],
                        slurm={"node_cooldown_s": cooldown})
        return CoordinatorStarted(at=at, policy=policy.to_dict(), pid=1, host="h",
                                  boot_id="b")
    journal = [started(T0, 30), *(NodeOutcome(at=T0 + i, node=node, partition="main",
                                              infrastructure=fails, reason="NODE_FAIL")
                                  for i, node, fails in ((1, "n2", False), (2, "n1", True),
                                                         (3, "n1", True)))]
    live = Scheduler()
    for event in journal:
        live.handle(event)
    assert live.nodes.excluded() == ["n1"]
    assert row(live.nodes, T0 + 3, "n1")["probe_after"] == T0 + 3 + 30
    assert live.nodes.probes_due(T0 + 32) == [] and live.nodes.probes_due(T0 + 33) == ["n1"]
    replayed = Scheduler()
    for event in journal:
        replayed.handle(from_record(json.loads(json.dumps(to_record(event)))))
    assert replayed.nodes.to_dict() == live.nodes.to_dict()
    assert restore(json.loads(json.dumps(capture(live)))).nodes.to_dict() == live.nodes.to_dict()
    live.handle(started(T0 + 4, 600))  # a restart with a longer cool-down
    live.handle(NodeOutcome(at=T0 + 5, node="n1", partition="main", infrastructure=True,
                            reason="probe: Slurm FAILED", probe=True))
    assert row(live.nodes, T0 + 5, "n1")["probe_after"] == T0 + 5 + 600


def test_a_new_node_gets_its_probe_before_any_work_and_a_failed_one_waits_the_cool_down():
    """Issue 28 item 4: a node listed before it ran any of the run's work is out of
    rotation, its probe due at once; its success brings it in. A failed first probe
    keeps it out for a cool-down, then it is probed again. A listing of a node known
    already changes nothing; while no node takes work, the backend holds its jobs."""
    registry = NodeRegistry()
    for node in ("n1", "n2"):
        registry.handle(NodeListed(at=T0, node=node, partition="main"))
    assert not registry.takes_work()
    assert registry.excluded() == ["n1", "n2"] and registry.probes_due(T0) == ["n1", "n2"]
    assert row(registry, T0, "n1")["reason"] == "new: a probe is due before its first job"
    for node in ("n1", "n2"):
        registry.handle(NodeProbeStarted(at=T0, node=node))
    assert row(registry, T0, "n1")["reason"] == "new: its probe runs before its first job"
    outcome(registry, T0 + 1, "n1", False, reason="probe: Slurm COMPLETED", probe=True)
    outcome(registry, T0 + 1, "n2", True, reason="probe: Slurm FAILED", probe=True)
    assert registry.takes_work() and registry.excluded() == ["n2"]
    assert row(registry, T0 + 1, "n1")["state"] == "online"
    assert row(registry, T0 + 1, "n2")["probe_after"] == T0 + 1 + COOLDOWN_S
    assert registry.probes_due(T0 + COOLDOWN_S) == []
    assert registry.probes_due(T0 + 1 + COOLDOWN_S) == ["n2"]
    before = registry.to_dict()
    registry.handle(NodeListed(at=T0 + 5, node="n1", partition="gpu"))
    assert registry.to_dict() == before
    assert NodeRegistry.from_dict(json.loads(json.dumps(before))).to_dict() == before
