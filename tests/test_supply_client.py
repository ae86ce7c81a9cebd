"""The peer/operator side of generations and idle supply, against real files.

No coordinator implements the control directory or leases yet, so each test plays
the coordinator with a thread that writes the files a coordinator would write,
joined before the test ends. watchdog is real.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from praxist_fs import client, supply_client as sc
from praxist_fs.commands import supply
from praxist_fs.adapters.fsio import read_json, write_json
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.adapters.lock import write_endpoint


@pytest.fixture
def live(layout: RunLayout) -> RunLayout:
    """endpoint.json naming this test process: a live coordinator as clients see it."""
    write_endpoint(layout, since=time.time())
    return layout


def set_generation(layout: RunLayout, number: int | None, phase: str = "open") -> None:
    write_json(layout.status, {"generation": None if number is None else
                               {"number": number, "phase": phase}})


def lease_doc(lease_id: str, state: str = "granted", peer: str = "alice",
              generation: int = 1) -> dict:
    return {"lease_id": lease_id, "peer": peer, "generation": generation,
            "priority": "mature", "profiles": ["gpu_work"], "granted_at": time.time(),
            "expires_at": time.time() + 60, "state": state, "release_pending": False,
            "reason": "idle supply"}


class Later:
    """Run ``steps`` (delay, callable) in a thread; always joined by the test."""

    def __init__(self, *steps) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(steps,), daemon=True)
        self.thread.start()

    def _run(self, steps) -> None:
        try:
            for delay, step in steps:
                time.sleep(delay)
                step()
        except BaseException as exc:  # surfaced by join()
            self.error = exc

    def join(self) -> None:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def lease_while(layout: RunLayout, *steps, **options) -> dict:
    """Alice's ``lease_wait`` (10 s at most) while ``steps`` run as ``Later``'s."""
    later = Later(*steps)
    try:
        return sc.lease_wait(layout.root, "alice", **{"timeout": 10, "out": io.StringIO(),
                                                      **options})
    finally:
        later.join()


def grant(layout: RunLayout, doc: dict, generation: int = 1, peer: str = "alice"):
    def step() -> None:
        directory = sc.leases_dir(layout, generation)
        directory.mkdir(parents=True, exist_ok=True)
        write_json(directory / f"{peer}.json", doc)
    return step


def hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# -- lease wait -------------------------------------------------------------------------


def test_lease_wait_returns_a_granted_lease(layout):
    set_generation(layout, 1)
    seen_idle = {}

    def check_idle() -> None:
        seen_idle.update(read_json(sc.idle_file(layout, 1, "alice")) or {})

    later = Later((0.2, check_idle), (0.0, grant(layout, lease_doc("L1"))))
    out = io.StringIO()
    try:
        started = time.monotonic()
        lease = sc.lease_wait(layout.root, "alice", timeout=10, out=out)
        elapsed = time.monotonic() - started
    finally:
        later.join()
    assert lease["lease_id"] == "L1" and lease["state"] == "granted"
    assert json.loads(out.getvalue()) == lease
    assert elapsed < 0.9, "the watchdog doorbell, not the 1 s re-check, should wake the wait"
    # the idle registration held exactly the contract fields while waiting ...
    assert set(seen_idle) == {"peer", "generation", "at"}
    assert seen_idle["peer"] == "alice" and seen_idle["generation"] == 1
    assert abs(seen_idle["at"] - time.time()) < 10
    # ... and is gone now, with no temp file left behind
    idle = sc.idle_dir(layout, 1)
    assert not sc.idle_file(layout, 1, "alice").exists()
    assert hidden(idle) == [] and sorted(os.listdir(idle)) == []


def test_lease_wait_ignores_the_lease_already_there(layout):
    set_generation(layout, 2)
    grant(layout, lease_doc("OLD", generation=2), generation=2)()
    lease = lease_while(layout, (0.3, grant(layout, lease_doc("OLD", generation=2), generation=2)),
                        (0.3, grant(layout, lease_doc("NEW", generation=2), generation=2)))
    assert lease["lease_id"] == "NEW"


def test_lease_wait_ignores_states_other_than_granted(layout):
    set_generation(layout, 1)
    steps = [(0.1, grant(layout, lease_doc(f"X{state}", state=state)))
             for state in ("consumed", "declined", "expired", "revoked")]
    steps += [(0.1, grant(layout, lease_doc("OTHER", peer="bob"))),       # not ours
              (0.1, grant(layout, lease_doc("G9", generation=9))),        # wrong generation
              (0.3, grant(layout, lease_doc("GOOD")))]
    assert lease_while(layout, *steps)["lease_id"] == "GOOD"


def test_lease_wait_times_out_cleanly(layout):
    set_generation(layout, 1)
    grant(layout, lease_doc("OLD"))()  # already there: does not count
    threads = set(threading.enumerate())
    out = io.StringIO()
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="no lease for peer alice in generation 1 within"):
        sc.lease_wait(layout.root, "alice", timeout=0.3, out=out)
    assert 0.3 <= time.monotonic() - started < 3
    assert out.getvalue() == ""
    assert not sc.idle_file(layout, 1, "alice").exists()
    assert [t for t in threading.enumerate() if t not in threads and t.is_alive()] == []


def test_lease_wait_explicit_generation_without_status(layout):
    lease = lease_while(layout, (0.2, grant(layout, lease_doc("L3", generation=3), generation=3)),
                        generation=3)
    assert lease["generation"] == 3


def test_lease_wait_rechecks_without_a_doorbell(layout, monkeypatch):
    """A missed event only delays: with no observer at all the 1 s re-check finds it."""
    set_generation(layout, 1)
    monkeypatch.setattr(sc._Doorbell, "__init__",
                        lambda self, directory, bell: setattr(self, "observer", None))
    assert lease_while(layout, (0.1, grant(layout, lease_doc("L1"))))["lease_id"] == "L1"


def test_lease_wait_needs_a_generation(layout):
    with pytest.raises(sc.SupplyError, match="no status.json.*--generation"):
        sc.lease_wait(layout.root, "alice", timeout=0)
    set_generation(layout, None)
    with pytest.raises(sc.SupplyError, match="shows no current generation"):
        sc.lease_wait(layout.root, "alice", timeout=0)
    assert not any(layout.root.glob("gen_*"))


def test_a_generation_opened_just_before_is_found_though_status_json_lags(live):
    """status.json is rewritten up to 0.2 s (5 s when idle) after a change: the current
    generation is read from a status.json written after the question was asked."""
    layout = live
    write_json(layout.status, {"generation": None, "updated_at": time.time() - 1})
    later = threading.Timer(0.3, lambda: write_json(layout.status, {
        "generation": {"number": 3, "phase": "open"}, "updated_at": time.time()}))
    later.start()
    try:
        assert sc.current_generation(layout) == 3
    finally:
        later.join()


@pytest.mark.parametrize("peer, problem", [
    ("../evil", "not a valid name"), ("", "a peer id is needed"), (".hidden", "not a valid name"),
    ("a/b", "not a valid name"), ("x" * 129, "not a valid name"),
    ("bob.decline", "reserves for decline files"),
])
def test_bad_peer_names_are_refused(layout, peer, problem):
    set_generation(layout, 1)
    with pytest.raises(sc.SupplyError, match=problem):
        sc.lease_wait(layout.root, peer, timeout=0)
    with pytest.raises(sc.SupplyError, match=problem):
        sc.lease_decline(layout.root, peer, lease_id="L1")
    assert not any(layout.root.glob("gen_*"))


@pytest.mark.parametrize("generation", [0, -1, True, 1.0, "1"])
def test_bad_generations_are_refused(layout, generation):
    with pytest.raises(sc.SupplyError, match="expected an integer >= 1"):
        sc.lease_wait(layout.root, "alice", generation=generation, timeout=0)
    with pytest.raises(sc.SupplyError, match="expected an integer >= 1"):
        sc.lease_decline(layout.root, "alice", lease_id="L1", generation=generation)


def test_lease_wait_needs_a_run_directory(tmp_path):
    with pytest.raises(sc.SupplyError, match="not a run directory"):
        sc.lease_wait(tmp_path / "nothing", "alice", generation=1, timeout=0)


# -- lease decline ----------------------------------------------------------------------


def test_decline_reads_the_granted_lease(layout):
    set_generation(layout, 1)
    grant(layout, lease_doc("L7"))()
    written = sc.lease_decline(layout.root, "alice")
    assert written == {"peer": "alice", "generation": 1, "lease_id": "L7"}
    path = sc.idle_dir(layout, 1) / "alice.decline.json"
    assert json.loads(path.read_text()) == written
    assert hidden(path.parent) == []


def test_decline_with_explicit_lease_and_generation(layout):
    written = sc.lease_decline(layout.root, "alice", lease_id="L8", generation=4)
    assert written == {"peer": "alice", "generation": 4, "lease_id": "L8"}
    assert read_json(sc.idle_dir(layout, 4) / "alice.decline.json") == written


def test_decline_refuses_without_a_granted_lease(layout):
    set_generation(layout, 1)
    with pytest.raises(sc.SupplyError, match="has no lease in generation 1"):
        sc.lease_decline(layout.root, "alice")
    grant(layout, lease_doc("L1", state="consumed"))()
    with pytest.raises(sc.SupplyError, match="is 'consumed', not granted"):
        sc.lease_decline(layout.root, "alice")
    with pytest.raises(sc.SupplyError, match="lease id '../x' is not a valid name"):
        sc.lease_decline(layout.root, "alice", lease_id="../x")
    assert not (sc.idle_dir(layout, 1) / "alice.decline.json").exists()


# -- generation control -----------------------------------------------------------------


class FakeControl:
    """Plays the coordinator's control directory: answers each request it finds."""

    def __init__(self, layout: RunLayout, outcome: str = "ok", delay: float = 0.1) -> None:
        self.layout, self.outcome, self.delay = layout, outcome, delay
        self.requests: list[dict] = []
        self.leftovers: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        control = self.layout.control
        while not self.stop.wait(0.01):
            for path in sorted(control.glob("*.json")):
                self.leftovers = sorted(os.listdir(control / "tmp"))
                request = json.loads(path.read_bytes())
                self.requests.append(request)
                path.unlink()
                time.sleep(self.delay)
                generation = {"number": request["generation"], "phase": "open"} \
                    if self.outcome == "ok" else None
                replies = control / "replies"
                replies.mkdir(exist_ok=True)
                write_json(replies / f"{request['request_id']}.json", {
                    "request_id": request["request_id"], "outcome": self.outcome,
                    "reason": "" if self.outcome == "ok" else "generation 2 is not open",
                    "generation": generation})

    def join(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


def test_generation_open_writes_the_exact_request_and_returns_the_reply(live):
    fake = FakeControl(live)
    try:
        reply = sc.generation_command(live.root, "open", 3, cohort=["alice", "bob"],
                                      deadline="2030-01-01T12:00:00+02:00", timeout=10,
                                      request_id="op-1")
    finally:
        fake.join()
    assert fake.requests == [{"request_id": "op-1", "action": "generation_open",
                              "generation": 3, "cohort": ["alice", "bob"],
                              "deadline": "2030-01-01T12:00:00+02:00"}]
    assert fake.leftovers == []  # renamed out of control/tmp, no temp file left
    assert reply == {"request_id": "op-1", "outcome": "ok", "reason": "",
                     "generation": {"number": 3, "phase": "open"}}


def test_generation_assess_and_close_send_only_the_number(live):
    fake = FakeControl(live, outcome="rejected", delay=0)
    try:
        assess = sc.generation_command(live.root, "assess", 2, timeout=10)
        close = sc.generation_command(live.root, "close", 2, timeout=10)
    finally:
        fake.join()
    assert [sorted(r) for r in fake.requests] == [["action", "generation", "request_id"]] * 2
    assert [r["action"] for r in fake.requests] == ["generation_assess", "generation_close"]
    assert all(r["request_id"].startswith(f"generation-{a}-2-")
               for r, a in zip(fake.requests, ("assess", "close")))
    assert assess["outcome"] == close["outcome"] == "rejected"
    assert close["reason"] == "generation 2 is not open"


def test_generation_command_without_a_live_coordinator(layout):
    with pytest.raises(client.NoCoordinator, match="no live coordinator owns .*praxist-fs serve"):
        sc.generation_command(layout.root, "open", 1, timeout=1)
    assert list(layout.control.glob("*.json")) == []


def test_generation_command_times_out_and_withdraws(live):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no reply to generation_close of generation 5 "
                       r"within 0.3s .*alive.*withdrawn unprocessed"):
        sc.generation_command(live.root, "close", 5, timeout=0.3)
    assert time.monotonic() - started < 3
    assert list(live.control.glob("*.json")) == []


@pytest.mark.parametrize("kwargs, problem", [
    (dict(action="reopen", number=1), "action 'reopen' is not valid"),
    (dict(action="open", number=0), "generation 0 is not valid"),
    (dict(action="open", number=True), "generation True is not valid"),
    (dict(action="open", number=1, deadline="2030-01-01T12:00:00"), "has no timezone"),
    (dict(action="open", number=1, deadline="tomorrow"), "not an ISO-8601 date-time"),
    (dict(action="open", number=1, cohort=["ok", "../bad"]), "peer '../bad' is not a valid"),
    (dict(action="open", number=1, cohort=["a", "a"]), "appears twice"),
    (dict(action="open", number=1, cohort="alice"), "not one string"),
    (dict(action="close", number=1, cohort=["a"]), "apply to 'open' only"),
    (dict(action="assess", number=1, deadline="2030-01-01T12:00:00Z"), "apply to 'open' only"),
    (dict(action="open", number=1, request_id="-x"), "request_id '-x' is not a valid name"),
    (dict(action="open", number=1, timeout=-1), "timeout -1 is not valid"),
])
def test_generation_command_refuses_bad_input(live, kwargs, problem):
    with pytest.raises(sc.SupplyError, match=problem):
        sc.generation_command(live.root, **kwargs)
    assert list(live.control.glob("*.json")) == []


def test_zulu_deadline_is_sent_as_given(live):
    fake = FakeControl(live, delay=0)
    try:
        sc.generation_command(live.root, "open", 1, deadline="2030-01-01T00:00:00Z", timeout=10)
    finally:
        fake.join()
    assert fake.requests[0]["deadline"] == "2030-01-01T00:00:00Z"
    assert "cohort" not in fake.requests[0]


# -- command line -----------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="praxist-fs")
    sub = parser.add_subparsers(dest="command")
    supply.add_parsers(sub)
    return parser.parse_args(argv)


def test_cli_generation_open(live, capsys):
    fake = FakeControl(live, delay=0)
    try:
        args = parse(["generation", "open", "--run-dir", str(live.root), "2",
                      "--cohort", "alice", "bob", "--cohort", "carol",
                      "--deadline", "2030-01-01T00:00:00+00:00"])
        code = args.func(args)
    finally:
        fake.join()
    assert code == 0
    assert fake.requests[0]["cohort"] == ["alice", "bob", "carol"]
    assert json.loads(capsys.readouterr().out)["outcome"] == "ok"


def test_cli_generation_exit_codes(layout, capsys):
    args = parse(["generation", "close", "--run-dir", str(layout.root), "1"])
    assert args.func(args) == supply.EXIT_NO_COORDINATOR
    assert "no live coordinator" in capsys.readouterr().err
    args = parse(["generation", "open", "--run-dir", str(layout.root), "1",
                  "--deadline", "2030-01-01T00:00"])
    assert args.func(args) == supply.EXIT_ERROR
    assert "has no timezone" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --cohort belongs to open only
        parse(["generation", "close", "--run-dir", str(layout.root), "1", "--cohort", "a"])
    write_endpoint(layout, since=time.time())
    fake = FakeControl(layout, outcome="rejected", delay=0)
    try:
        args = parse(["generation", "assess", "--run-dir", str(layout.root), "2"])
        assert args.func(args) == supply.EXIT_ERROR
    finally:
        fake.join()
    captured = capsys.readouterr()
    assert json.loads(captured.out)["outcome"] == "rejected"
    assert "rejected: generation 2 is not open" in captured.err


def test_cli_lease_wait_and_decline(layout, capsys, monkeypatch):
    monkeypatch.setenv("PRAXIST_RUN_DIR", str(layout.root))
    monkeypatch.setenv("PRAXIST_PEER_ID", "alice")
    set_generation(layout, 1)
    later = Later((0.2, grant(layout, lease_doc("L1"))))
    try:
        args = parse(["lease", "wait", "--timeout", "10"])
        assert args.func(args) == 0
    finally:
        later.join()
    assert json.loads(capsys.readouterr().out)["lease_id"] == "L1"
    args = parse(["lease", "decline"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == {"peer": "alice", "generation": 1,
                                                   "lease_id": "L1"}
    args = parse(["lease", "wait", "--timeout", "0.1"])
    assert args.func(args) == supply.EXIT_TIMEOUT
    assert "no lease for peer alice" in capsys.readouterr().err
    args = parse(["lease", "decline", "--peer", "a/b"])
    assert args.func(args) == supply.EXIT_ERROR
    monkeypatch.delenv("PRAXIST_RUN_DIR")
    args = parse(["lease", "wait"])
    assert args.func(args) == supply.EXIT_ERROR
    assert "needs --run-dir" in capsys.readouterr().err
