"""What a shim costs the launch path: started by Popen, forked by the ShimServer, or reused.

    .venv/bin/python bench/bench_shim.py [--prestarts 50] [--attempts 200] [--json FILE]

Three measurements, each way (``popen``: ``launcher.prestart(layout)``, a fresh
``python -S`` per shim; ``server``: ``launcher.prestart(layout, server)``, a
supervisor forked by the one server started beforehand, retired after one
attempt, as a fork per attempt; ``supervisor``, in the last only: one supervisor
serving every attempt, each handed to it by ``Supervisor.warm``, as the
coordinator does; ``cold``, for reference in the last, a shim started for its
attempt by ``launcher.spawn`` without a warm one):

prestart        the ``prestart`` call alone, until it returns (median ms).
prestart+READY  ``prestart``, then at once ``spawn`` of a trivial attempt (argv
                ``true``) on that warm shim, until the shim's "R" on the status
                pipe (READY written): the honest cost, since a Popen'd shim is
                only ready once its interpreter has started (median ms).
attempts        N sequential trivial attempts end to end, each: prestart, spawn,
                READY, GO (the file, as the coordinator writes it, and the pipe),
                the status pipe's EOF (exit.json written: a supervisor is told its
                end is journaled as soon as it told it, as a coordinator tells it
                once that commit is durable, and leaves exit.json unsynced; any
                other shim fsyncs it), wait (a shim's exit; none for a
                supervisor, which serves on) and close (total s, and median ms per
                attempt).

And, on supervisors, the launch path from a commit on (``launch``): a real commit (1 KiB
appended to a file and fsynced, ``commit_ms`` alone), then GO on the pipe, to the first
act of the command (``sh -c 'date +%s%N > FILE'``, as make bench's latency row), the
supervisor told its attempt after the commit (``after_ms``: ``spawn``, the order of
a833c47 and of a spec too big for the pipe) or before it (``ahead_ms``: ``tell``, as the
coordinator does now), alternating attempt by attempt (median ms); ``spawn_ms``, for
reference, is the command's own start from a posix_spawn here to that first act.
Told ahead, the supervisor prepares while the commit's fsync runs, and whichever ends
last is on the path: ``ahead_ready_ms`` is from the tell to READY's ``at`` (its
directories made; the command's log and cwd come after READY, so this is a lower
bound of the preparation), ``ahead_ready_after_commit`` the share of those attempts
whose READY came after the commit returned, and ``go_to_start_ms`` (both orders) from
GO on the pipe to the command's first act.

And the end of an attempt on a supervisor (``end``), alternating attempt by attempt: told
its end journaled (``confirmed``: exit.json unsynced) or never told (``fsynced``, as with
no coordinator, and as every end was before: exit.json and its three directories
fsynced); for each, the median ms from the ``X`` on the status pipe to its EOF (the
supervisor idle again) and the supervisor's own CPU per attempt, GO to EOF
(/proc/PID/schedstat: its time on a CPU, in the kernel too, not its command's).

Every attempt gets its own directory in a fresh temporary run directory; the
shim's exit.json fsync is in every attempt, so the disk shows in the totals.
No coordinator, no journal: only the shim's part of a launch.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from praxist_fs.adapters.fsio import write_atomic
from praxist_fs.adapters.layout import RunLayout
from praxist_fs.backends.environment import attempt_environment
from praxist_fs.backends.local import launcher
from praxist_fs.core.effects import SpawnAttempt

READY_TIMEOUT_S = 15


def trivial(number: int, cwd: Path) -> SpawnAttempt:
    return SpawnAttempt(job_id=f"job-{number}", attempt_id="a1", argv=("true",), command=None,
                        cwd=str(cwd), env={"PATH": "/usr/bin:/bin"}, profile="cpu", gpus=(),
                        metadata={"peer": "bench"})


def read_status(fd: int) -> bytes:
    """The next bytes on a shim's (non-blocking) status pipe; b"" at EOF."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(READY_TIMEOUT_S * 1000):
        raise SystemExit(f"no word from a shim in {READY_TIMEOUT_S}s")
    return os.read(fd, 64)


def start_attempt(layout: RunLayout, number: int, warm: launcher.WarmShim | None
                  ) -> tuple[launcher.ShimHandle, Path]:
    effect = trivial(number, layout.root)
    handle = launcher.spawn(layout, effect, attempt_environment(layout, effect), warm)
    if read_status(handle.status_fd) != b"R":
        raise SystemExit(f"attempt {number}: no READY")
    return handle, layout.attempt_dir(effect.job_id, effect.attempt_id)


def finish_attempt(handle: launcher.ShimHandle, attempt_dir: Path, go: bool,
                   confirm: bool = True) -> float:
    """GO (and wait for the command's exit.json) or ABORT, as the coordinator writes them;
    with ``confirm``, the end the shim tells is confirmed journaled as soon as it is
    told. The time from the end told (``X``) to the EOF, in seconds (0 without one)."""
    write_atomic(attempt_dir / ("GO" if go else "ABORT"), b"", sync=False)
    handle.release_barrier(b"G" if go else b"A")
    said, told_at = b"", None
    while chunk := read_status(handle.status_fd):
        said += chunk
        if told_at is None and b"X" in said and said.endswith(b"\n"):
            told_at = time.perf_counter()
            if confirm:
                handle.confirm_end()
    ended_at = time.perf_counter()
    told, _, last = said.rpartition(b"\n")  # X and exit.json's bytes, when it ran
    if last != b"D" or go != told.startswith(b"X"):
        raise SystemExit(f"{attempt_dir}: {said!r} after READY on the status pipe, not "
                         f"{'X and ' if go else ''}D")
    if not isinstance(handle.popen, launcher.Supervisor):
        handle.popen.wait(timeout=READY_TIMEOUT_S)
    handle.close()
    if go and json.loads((attempt_dir / "exit.json").read_text())["exit_code"] != 0:
        raise SystemExit(f"{attempt_dir}: the command failed")
    return ended_at - told_at if told_at is not None else 0.0


def prestarter(layout: RunLayout, way: str, server: launcher.ShimServer):
    if way == "popen":
        return lambda: launcher.prestart(layout)
    if way == "server":
        return lambda: launcher.prestart(layout, server)
    if way == "supervisor":
        server.request()
        return server.receive().warm
    return lambda: None


def measure(way: str, prestarts: int, attempts: int, root: Path) -> dict:
    layout = RunLayout.at(root / way)
    layout.create()
    server = launcher.ShimServer.start(layout)
    try:
        server.prestart().dismiss()  # the server has started: its own start-up is not timed
        prestart = prestarter(layout, way, server)
        result = {}
        if way in ("popen", "server"):
            calls, readies = [], []
            for number in range(prestarts):
                began = time.perf_counter()
                warm = prestart()
                calls.append(time.perf_counter() - began)
                warm.dismiss()
            for number in range(prestarts):
                began = time.perf_counter()
                handle, attempt_dir = start_attempt(layout, number, prestart())
                readies.append(time.perf_counter() - began)
                finish_attempt(handle, attempt_dir, go=False)
                if way == "server":
                    handle.popen.close()
            result["prestart_ms"] = statistics.median(calls) * 1000
            result["prestart_ready_ms"] = statistics.median(readies) * 1000
        each = []
        began = time.perf_counter()
        for number in range(prestarts, prestarts + attempts):
            start = time.perf_counter()
            handle, attempt_dir = start_attempt(layout, number, prestart())
            finish_attempt(handle, attempt_dir, go=True)
            if way == "server":
                handle.popen.close()  # one fork per attempt
            each.append(time.perf_counter() - start)
        result["attempts_s"] = time.perf_counter() - began
        result["attempt_ms"] = statistics.median(each) * 1000
        return result
    finally:
        server.close()


def launch_path(attempts: int, root: Path) -> dict:
    """``launch`` in the module's docstring: commit -> the command's first act, the
    supervisor told its attempt after the commit or ahead of it."""
    layout = RunLayout.at(root / "launch")
    layout.create()
    stamps = root / "stamps"
    stamps.mkdir()
    journal = os.open(root / "journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    server = launcher.ShimServer.start(layout)
    warm = [launcher.prestart(layout, server) for _ in range(2)]
    times: dict[str, list[float]] = {"after_ms": [], "ahead_ms": [], "commit_ms": [],
                                     "ahead_ready_ms": [], "go_to_start_ms": [],
                                     "spawn_ms": []}
    ready_after_commit = 0
    try:
        for number in range(2 * attempts + 2):  # the first two are not timed
            ahead, stamp = number % 2 == 1, stamps / str(number)
            effect = replace(trivial(number, root), argv=None,
                             command=f"date +%s%N > {stamp}")
            env, shim = attempt_environment(layout, effect), warm.pop(0)
            began = time.time_ns()
            handle = launcher.tell(layout, effect, env, shim) if ahead else None
            os.write(journal, b"x" * 1024)
            os.fsync(journal)
            committed = time.time_ns()
            if handle is None:
                handle = launcher.spawn(layout, effect, env, shim)
            go = time.time_ns()
            handle.release_barrier(b"G")
            while not (stamp.exists() and stamp.read_text().endswith("\n")):
                time.sleep(0.0002)
            said = b""
            while chunk := read_status(handle.status_fd):  # X, D, then the EOF: idle again
                said += chunk
                if b"X" in said and said.endswith(b"\n"):
                    handle.confirm_end()  # as the coordinator, once the end's commit is durable
            supervisor = handle.popen
            handle.close()
            warm.append(supervisor.warm())
            if number >= 2:
                started = int(stamp.read_text())
                times["ahead_ms" if ahead else "after_ms"].append((started - began) / 1e6)
                times["commit_ms"].append((committed - began) / 1e6)
                times["go_to_start_ms"].append((started - go) / 1e6)
                if ahead:
                    ready = json.loads((layout.attempt_dir(effect.job_id, effect.attempt_id)
                                        / "READY").read_text())["at"] * 1e9
                    times["ahead_ready_ms"].append((ready - began) / 1e6)
                    ready_after_commit += ready > committed
        for number in range(attempts):
            stamp = stamps / f"spawn-{number}"
            began = time.time_ns()
            os.waitpid(os.posix_spawn("/bin/sh", ["/bin/sh", "-c", f"date +%s%N > {stamp}"],
                                      {"PATH": "/usr/bin:/bin"}), 0)
            times["spawn_ms"].append((int(stamp.read_text()) - began) / 1e6)
    finally:
        for shim in warm:
            shim.dismiss()
        server.close()
        os.close(journal)
    return {**{name: statistics.median(values) for name, values in times.items()},
            "ahead_ready_after_commit": ready_after_commit / attempts}


def end_path(attempts: int, root: Path) -> dict:
    """``end`` in the module's docstring: one supervisor, its attempts' ends confirmed
    journaled or fsynced, alternating."""
    layout = RunLayout.at(root / "end")
    layout.create()
    server = launcher.ShimServer.start(layout)
    server.request()
    supervisor = server.receive()
    times: dict[str, list[float]] = {"confirmed_ms": [], "fsynced_ms": []}
    cpu: dict[str, list[int]] = {"confirmed_ms": [], "fsynced_ms": []}
    waited = launcher.END_WAIT_S
    try:
        for number in range(2 * attempts + 2):  # the first two are not timed
            confirm = number % 2 == 0
            launcher.END_WAIT_S = waited if confirm else 0  # in the spec: fsync at once
            handle, attempt_dir = start_attempt(layout, number, supervisor.warm())
            before = on_cpu_ns(supervisor.pid)
            took = finish_attempt(handle, attempt_dir, go=True, confirm=confirm)
            if number >= 2:
                kind = "confirmed_ms" if confirm else "fsynced_ms"
                times[kind].append(took * 1000)
                cpu[kind].append(on_cpu_ns(supervisor.pid) - before)
    finally:
        launcher.END_WAIT_S = waited
        supervisor.close()
        server.close()
    return {**{kind: statistics.median(values) for kind, values in times.items()},
            **{f"{kind[:-3]}_cpu_ms": statistics.mean(values) / 1e6
               for kind, values in cpu.items()}}


def on_cpu_ns(pid: int) -> int:
    """The process's time on a CPU so far (schedstat: ns, kernel time included)."""
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prestarts", type=int, default=50)
    parser.add_argument("--attempts", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-shim-"))
    try:
        results = {way: measure(way, args.prestarts, args.attempts, root)
                   for way in ("popen", "server", "supervisor", "cold")}
        launch = launch_path(args.attempts, root)
        end = end_path(args.attempts, root)
    finally:
        shutil.rmtree(root)
    print(f"{'':10} {'prestart ms':>12} {'+READY ms':>10} "
          f"{f'{args.attempts} attempts s':>15} {'per attempt ms':>15}")
    for way, result in results.items():
        print(f"{way:10} {result.get('prestart_ms', float('nan')):12.2f} "
              f"{result.get('prestart_ready_ms', float('nan')):10.2f} "
              f"{result['attempts_s']:15.2f} {result['attempt_ms']:15.2f}")
    results["launch"] = launch
    print(f"launch     commit {launch['commit_ms']:.2f} ms, then the command's first act: "
          f"told after the commit {launch['after_ms']:.2f} ms, ahead of it "
          f"{launch['ahead_ms']:.2f} ms (a posix_spawn alone: {launch['spawn_ms']:.2f} ms)")
    print(f"           told ahead: READY {launch['ahead_ready_ms']:.2f} ms after the tell, "
          f"after the commit in {launch['ahead_ready_after_commit']:.0%} of attempts; "
          f"GO -> first act {launch['go_to_start_ms']:.2f} ms")
    results["end"] = end
    print(f"end        X -> idle, median: told journaled {end['confirmed_ms']:.2f} ms, "
          f"fsynced {end['fsynced_ms']:.2f} ms; the supervisor's CPU per attempt, mean: "
          f"{end['confirmed_cpu_ms']:.3f} / {end['fsynced_cpu_ms']:.3f} ms")
    print(f"medians over {args.prestarts} prestarts; {os.cpu_count()} CPUs")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
