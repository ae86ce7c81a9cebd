"""R-API-1: the Executor runs Python calls as jobs of a real coordinator, with the
protocol's tag identity: an identical call shares its job and its result."""

from __future__ import annotations

import concurrent.futures
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from praxist_fs import callworker
from praxist_fs.api import Client
from praxist_fs.executor import DifferentCall, JobExecutor, JobFailed, pack_call

from .calls import Diverged, train, wait_for_file, whoami
from .conftest import TASK, wait_for

LRS = [round(0.05 * (i + 1), 2) for i in range(19)] + [1.5]  # 20 points, the last diverges


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def sweep_run(make_run):
    run = make_run(slots=4)
    run.start()
    return run


def test_a_sweep_of_20_points_runs_through_the_queue_one_fails_one_repeat_shares(
        sweep_run, tmp_path):
    trace = tmp_path / "trace"
    configs = [{"lr": lr, "trace": str(trace)} for lr in LRS]
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as executor:
        futures = [executor.submit(train, config) for config in configs]
        again = executor.submit(train, dict(configs[4]))  # the same point, resubmitted
        done, not_done = concurrent.futures.wait(futures + [again], timeout=120)
    assert not not_done

    for future, lr in zip(futures[:19], LRS):
        assert future.result() == {"lr": lr, "loss": round(1 / (1 + lr), 6)}
    with pytest.raises(Diverged, match="loss is NaN at lr 1.5") as failed:
        futures[19].result()
    assert any("raised in job" in note and "Diverged" in note
               for note in failed.value.__notes__)  # the remote traceback
    assert again.result() == futures[4].result()

    # One job per point: the repeat was a duplicate of the point's job, which ran once.
    assert (futures[4].reply.outcome, again.reply.outcome) == ("accepted", "duplicate")
    assert again.job_id == futures[4].job_id
    assert len({f.job_id for f in futures}) == 20
    ran = lines(trace)
    assert len(ran) == 20 and sorted(float(line.split()[0]) for line in ran) == sorted(LRS)
    assert len(client.jobs(tag="train.*")) == 20
    states = [client.job(future.job_id).state for future in futures]
    assert states == ["completed"] * 19 + ["failed"]


def test_submitting_the_sweep_again_shares_every_job_and_runs_nothing(sweep_run, tmp_path):
    """A second executor (a driver that restarted, say) gets every known result back,
    the failure included, without running any point again."""
    trace = tmp_path / "trace"
    configs = [{"lr": lr, "trace": str(trace)} for lr in (0.1, 0.2, 1.0)]
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as first:
        results = [f.exception() or f.result() for f in map(first.submit, [train] * 3, configs)]
    assert len(lines(trace)) == 3

    with JobExecutor(client, folder=tmp_path / "calls") as second:
        futures = [second.submit(train, config) for config in configs]
        assert list(second.map(train, configs[:2])) == results[:2]
    assert [f.reply.outcome for f in futures] == ["duplicate", "duplicate",
                                                  "terminal_duplicate"]
    assert [f.result() for f in futures[:2]] == results[:2]
    assert isinstance(futures[2].exception(), Diverged)
    assert len(lines(trace)) == 3  # nothing ran again

    with JobExecutor(client, folder=tmp_path / "calls", retry_terminal=True) as third:
        rerun = third.submit(train, configs[2])
        assert isinstance(rerun.exception(timeout=60), Diverged)
    assert rerun.reply.outcome == "retry_accepted" and len(lines(trace)) == 4


def test_a_cancelled_future_cancels_the_job_it_created_but_not_one_it_shares(
        sweep_run, tmp_path):
    gate = tmp_path / "gate"
    client = Client(sweep_run.root, peer="sweeper")
    executor = JobExecutor(client, folder=tmp_path / "calls")
    created = executor.submit(wait_for_file, str(gate))
    job_id = wait_for(lambda: (job := created.job()) and job.state == "running" and job.job_id,
                      message="the call's job running")
    other = JobExecutor(client, folder=tmp_path / "calls")
    shared = other.submit(wait_for_file, str(gate))
    wait_for(lambda: shared.reply is not None, message="the duplicate's reply")
    assert (shared.reply.outcome, shared.job_id) == ("duplicate", job_id)

    assert shared.cancel() and shared.cancelled()
    assert client.job(job_id).state == "running"  # the duplicate only let go of it

    assert created.cancel() and created.cancelled()
    assert sweep_run.wait_state(job_id, "cancelled")["reason"].startswith("cancelled by sweeper")
    with pytest.raises(concurrent.futures.CancelledError):
        created.result()
    executor.shutdown()
    other.shutdown()


def test_a_job_cancelled_by_anyone_cancels_its_future(sweep_run, tmp_path):
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as executor:
        future = executor.submit(wait_for_file, str(tmp_path / "never"))
        wait_for(lambda: future.reply is not None, message="the reply")
        client.cancel([future.job_id], reason="not needed")
        with pytest.raises(concurrent.futures.CancelledError):
            future.result(timeout=30)


def test_a_job_that_dies_without_a_result_fails_its_future_with_the_job(sweep_run, tmp_path):
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as executor:
        future = executor.submit(os._exit, 9)  # no exception, no result: the process ends
        error = future.exception(timeout=60)
    assert isinstance(error, JobFailed)
    assert error.job.state == "failed" and error.job.exit_code == 9
    assert "without a result" in str(error) and "a1.log" in str(error)


def test_sys_exit_75_asks_for_an_infrastructure_retry(make_run, tmp_path):
    run = make_run(retries=1)
    run.start()
    client = Client(run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as executor:
        future = executor.submit(exit_once, str(tmp_path / "marker"))
        assert future.result(timeout=60) == "second attempt"
    assert [a.outcome for a in future.job().attempts] == ["infra_retry", "completed"]


def exit_once(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).touch()
        raise SystemExit(75)
    return "second attempt"


def test_two_calls_under_one_tag_do_not_take_each_others_results(sweep_run, tmp_path):
    """The executor's ``tag`` gave two different calls one tag: the second never gets
    the first's result; the coordinator shares the job by its tag (R-SUB-7), and the
    future is told that the job runs another call."""
    trace = str(tmp_path / "trace")
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls", tag=lambda config: "one-tag") as ex:
        first = ex.submit(train, {"lr": 0.1, "trace": trace})
        second = ex.submit(train, {"lr": 0.2, "trace": trace})
        assert first.result(timeout=60)["lr"] == 0.1
        with pytest.raises(DifferentCall, match="one-tag"):
            second.result(timeout=60)


def test_a_call_that_cannot_be_pickled_by_reference_is_refused_before_anything_is_sent(
        sweep_run, tmp_path):
    client = Client(sweep_run.root, peer="sweeper")
    with JobExecutor(client, folder=tmp_path / "calls") as executor:
        with pytest.raises(TypeError, match="module-level function"):
            executor.submit(lambda: 1)
    assert not list((sweep_run.sched / "spool" / "replies").glob("*.json"))


def test_shutdown_without_waiting_leaves_the_jobs_to_the_coordinator(sweep_run, tmp_path):
    gate = tmp_path / "gate"
    client = Client(sweep_run.root, peer="sweeper")
    executor = JobExecutor(client, folder=tmp_path / "calls")
    future = executor.submit(wait_for_file, str(gate))
    wait_for(lambda: future.reply is not None, message="the reply")
    executor.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="after shutdown"):
        executor.submit(wait_for_file, str(gate))
    gate.write_text("opened")
    assert future.result(timeout=60) == "opened"
    assert client.job(future.job_id).ok
    executor.shutdown()  # joins its watcher, which ends with its last future


def test_the_worker_writes_what_the_call_raised_when_it_cannot_be_pickled(
        tmp_path, monkeypatch):
    """callworker alone, as a job runs it: an unpicklable exception comes back as a
    RemoteError that says what it was."""
    identity, data = pack_call(raise_unpicklable, (), {})
    call = tmp_path / "calls" / f"{identity}.pickle"
    callworker.write_whole(call, data)
    monkeypatch.setenv("PRAXIST_EXPERIMENT_ID", "j")
    monkeypatch.setenv("PRAXIST_EXPERIMENT_ATTEMPT_ID", "a1")
    assert callworker.main(["--results", str(tmp_path / "results"), str(call)]) == 1
    document = pickle.loads((tmp_path / "results" / "j" / "a1.pickle").read_bytes())
    assert not document["ok"] and isinstance(document["value"], callworker.RemoteError)
    assert "Unpicklable" in str(document["value"]) and "cannot be pickled back" in str(
        document["value"])


class Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("holds a lock")
        self.lock = __import__("threading").Lock()


def raise_unpicklable() -> None:
    raise Unpicklable()


SCRIPT = '''
import os
import sys

from praxist_fs.api import Client
from praxist_fs.executor import JobExecutor


def square(x):
    return x * x, __name__


if __name__ == "__main__":
    client = Client(os.environ["RUN"], peer="script")
    with JobExecutor(client, folder=os.environ["FOLDER"]) as executor:
        print(list(executor.map(square, [2, 3])))
'''


@pytest.mark.parametrize("how", ["file", "module"])
def test_the_submitting_scripts_own_functions_are_found_by_running_it_again(
        sweep_run, tmp_path, how):
    """A function of ``__main__`` travels as the script (``python sweep.py``) or its module
    name (``python -m sweep``), which the worker runs again as ``__mp_main__``."""
    (tmp_path / "sweep.py").write_text(SCRIPT)
    command = [sys.executable, "sweep.py"] if how == "file" else \
        [sys.executable, "-m", "sweep"]
    env = {**os.environ, "RUN": str(sweep_run.root), "FOLDER": str(tmp_path / "calls")}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[(4, '__mp_main__'), (9, '__mp_main__')]\n"


def sweep_as_peer(root: str, folder: str) -> dict:
    """As a peer of another uid: a sweep through the root coordinator, with an interpreter
    that uid may run (pytest's own may live in root's home)."""
    python = next(path for path in (sys.executable, "/usr/bin/python3", "/usr/bin/python")
                  if os.access(path, os.X_OK))
    client = Client(root, peer="other-uid")
    with JobExecutor(client, folder=folder, python=python) as executor:
        return {"results": list(executor.map(whoami, [2, 3]))}


def test_a_peer_of_another_uid_gets_its_results_from_jobs_run_as_itself(tmp_path):
    """docs/PYTHON.md: under a root coordinator each call runs as its submitter, who
    reads and writes the folder as it is (0700, its own)."""
    from .peers import as_peer, shared_run, users

    with users(1) as (peer,), shared_run(peer.gid, TASK.format(slots=2, retries=0)) as run:
        run.start()
        folder = run.root.parent / "peer-folder"
        folder.mkdir(mode=0o700)
        os.chown(folder, peer.uid, peer.gid)
        found = as_peer(peer, sweep_as_peer, str(run.root), str(folder))
    assert found == {"results": [[peer.uid, 4], [peer.uid, 9]]}, found
