"""The shim in Slurm mode, run as Slurm runs it (the entry script, with SLURM_*
variables), without Slurm: the file barrier, run-once, signal forwarding, exit.json
(SPEC R-DIST-1 "the same shim and attempt files on a shared filesystem")."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import subprocess
import sys

import pytest

from praxist_fs.backends.slurm.client import ENTRY, PACKAGE_ROOT, entry_script, write_spec
from tests.e2e.conftest import wait_for

SLURM_ENV = {"SLURM_JOB_ID": "77", "CUDA_VISIBLE_DEVICES": "1", "SLURM_RESTART_COUNT": "0"}


@pytest.fixture
def attempt(tmp_path):
    attempt = tmp_path / "attempts" / "j1" / "a1"
    attempt.mkdir(parents=True)
    (attempt / ENTRY).write_bytes(entry_script(sys.executable))
    return attempt


def spec(attempt, command, barrier_timeout_s=30.0, log=None):
    write_spec(attempt, {"argv": None, "command": command, "cwd": str(attempt.parent),
                         "env": {"PATH": os.defpath, "CUDA_VISIBLE_DEVICES": "stale"},
                         "log": str(log or attempt / "out.log"),
                         "barrier_timeout_s": barrier_timeout_s})


def start(attempt, **env):
    return subprocess.Popen(["/bin/sh", str(attempt / ENTRY), str(attempt)],
                            env={"PATH": os.defpath, **SLURM_ENV, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def ended(shim):
    """Its exit code, once it ended; its output pipe read and closed."""
    shim.communicate(timeout=30)
    return shim.returncode


def read(path):
    return json.loads(path.read_text())


def test_ready_then_go_runs_the_command_with_slurms_gpus(attempt):
    """READY says where it runs and which GPUs Slurm gave it; the command runs only after
    GO, with Slurm's CUDA_VISIBLE_DEVICES, and its exit is in exit.json and the job's code."""
    spec(attempt, 'echo "gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID"; exit 3')
    assert stat.S_IMODE((attempt / "spec.json").stat().st_mode) == 0o600  # secrets
    shim = start(attempt)
    ready = wait_for(lambda: (attempt / "READY").exists() and read(attempt / "READY"),
                     message="READY")
    assert (ready["slurm_job_id"], ready["cuda_visible_devices"]) == ("77", "1")
    assert ready["host"] == os.uname().nodename and ready["pid"] > 0
    assert not (attempt / "spec.json").exists()  # it may hold secrets
    assert not (attempt / "out.log").exists()  # nothing runs before GO
    (attempt / "GO").touch()
    assert ended(shim) == 3
    assert read(attempt / "exit.json")["exit_code"] == 3
    assert (attempt / "out.log").read_text() == "gpus=1 job=77\n"


@pytest.mark.parametrize("slurm_gave, bound", [("1", "1"), ("0,1", "0,1"), (None, "")])
def test_the_command_gets_slurms_gpus_bound_as_praxist_fs_binds_its_own(attempt, slurm_gave,
                                                                        bound):
    """Issue 28: ``praxist-fs bind`` works in a Slurm GPU job: the three variables a local
    attempt gets name the GPUs Slurm gave (here, without NVML, Slurm's ordinals); a job
    Slurm gave none keeps the submitted empty binding (forced CPU), and bind agrees."""
    write_spec(attempt, {
        "argv": [sys.executable, "-m", "praxist_fs", "bind", "--", "sh", "-c",
                 'echo "$PRAXIST_ASSIGNED_GPU_UUIDS|$CUDA_VISIBLE_DEVICES|'
                 '$NVIDIA_VISIBLE_DEVICES"'],
        "command": None, "cwd": str(attempt.parent), "log": str(attempt / "out.log"),
        "env": {"PATH": os.defpath, "PYTHONPATH": os.pathsep.join(sys.path),
                **dict.fromkeys(("PRAXIST_ASSIGNED_GPU_UUIDS", "CUDA_VISIBLE_DEVICES",
                                 "NVIDIA_VISIBLE_DEVICES"), "")},
        "barrier_timeout_s": 30.0})
    (attempt / "GO").touch()
    shim = start(attempt, CUDA_VISIBLE_DEVICES=slurm_gave) if slurm_gave else \
        subprocess.Popen(["/bin/sh", str(attempt / ENTRY), str(attempt)],
                         env={"PATH": os.defpath, "SLURM_JOB_ID": "77"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert ended(shim) == 0, (attempt / "out.log").read_text()
    assert (attempt / "out.log").read_text() == f"{bound}|{bound}|{bound}\n"
    assert read(attempt / "READY")["gpus"] == bound


def test_slurms_ordinals_become_uuids_where_nvml_knows_them():
    """What NVML on the node says of Slurm's ordinals; as given where it cannot say, and
    names Slurm gave already (UUIDs, MIG devices) kept."""
    from praxist_fs.backends.slurm.shim import slurm_gpus
    uuids = {0: "GPU-aaaa", 1: "GPU-bbbb"}

    def nvml(ordinals):
        return [uuids[o] for o in ordinals] if all(o in uuids for o in ordinals) else None
    assert slurm_gpus({"CUDA_VISIBLE_DEVICES": "1,0"}, nvml) == ["GPU-bbbb", "GPU-aaaa"]
    assert slurm_gpus({"CUDA_VISIBLE_DEVICES": "2"}, nvml) == ["2"]
    assert slurm_gpus({"CUDA_VISIBLE_DEVICES": "GPU-cccc"}, nvml) == ["GPU-cccc"]
    assert slurm_gpus({}, nvml) == [] and slurm_gpus({"CUDA_VISIBLE_DEVICES": ""}, nvml) == []


@pytest.mark.parametrize("why", ["READY", "restart"])
def test_it_refuses_to_run_twice(attempt, why):
    """A batch script Slurm starts again (a requeue, a node back) must not run the
    command a second time."""
    spec(attempt, "touch ran")
    env = {}
    if why == "READY":
        (attempt / "READY").write_text("{}")
    else:
        env["SLURM_RESTART_COUNT"] = "1"
    (attempt / "GO").touch()
    shim = start(attempt, **env)
    out, _ = shim.communicate(timeout=30)
    assert shim.returncode == 75
    assert b"refusing to run it twice" in out
    assert not (attempt.parent / "ran").exists() and not (attempt / "exit.json").exists()


def test_abort_never_runs_the_command(attempt):
    spec(attempt, "touch ran")
    (attempt / "ABORT").touch()
    assert ended(start(attempt)) == 0
    assert not (attempt.parent / "ran").exists() and not (attempt / "spec.json").exists()


def test_no_go_in_time_runs_nothing(attempt):
    """The coordinator died before GO: after the barrier timeout nothing has run, so the
    next one can release the attempt unconsumed."""
    spec(attempt, "touch ran", barrier_timeout_s=0.3)
    assert ended(start(attempt)) == 0
    assert (attempt / "READY").exists()
    assert not (attempt.parent / "ran").exists() and not (attempt / "exit.json").exists()


def warned_once_started(attempt, command: str):
    """The shim of ``command`` given GO, sent Slurm's USR2 warning once the command has
    printed ``started``."""
    spec(attempt, command)
    (attempt / "GO").touch()
    shim = start(attempt)
    wait_for(lambda: (attempt / "out.log").exists()
             and (attempt / "out.log").read_text() == "started\n", message="the command")
    shim.send_signal(signal.SIGUSR2)
    return shim


def test_a_warning_signal_reaches_the_command_as_it_is(attempt):
    """R-DIST-2: Slurm's warning before the time limit (``--signal=B:USR2@90``) reaches
    the batch script; the shim passes USR2 on to the command's group, which may
    checkpoint and exit as it likes (here 0), and the shim records that exit."""
    shim = warned_once_started(attempt, "trap 'echo warned; exit 0' USR2; echo started; "
                                        "sleep 60 & wait")
    assert ended(shim) == 0
    assert (attempt / "out.log").read_text() == "started\nwarned\n"
    assert read(attempt / "exit.json")["exit_code"] == 0


def test_a_command_that_does_not_handle_the_warning_dies_of_it_and_says_so(attempt):
    """A command without a USR2 handler dies of the warning (exit 140), as under srun;
    exit.json says the warning came (``warned``), which the backend adds to the reason:
    a failure before the time limit is not taken for the command's own."""
    from praxist_fs.backends.slurm.jobs import warning_reason
    shim = warned_once_started(attempt, "echo started; sleep 60")
    assert ended(shim) == 140
    record = read(attempt / "exit.json")
    assert (record["exit_code"], record["warned"]) == (140, signal.SIGUSR2)
    assert warning_reason(record) == \
        "it ended after Slurm's warning before its time limit (SIGUSR2)"
    assert warning_reason({"exit_code": 3}) is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_shim_ends_the_command_with_term(attempt, signum):
    """Slurm's scancel or time limit reach the batch script: the shim forwards TERM to
    the command's own process group and records its exit (143)."""
    spec(attempt, "echo started; sleep 60")
    (attempt / "GO").touch()
    shim = start(attempt)
    wait_for(lambda: (attempt / "out.log").exists()
             and (attempt / "out.log").read_text() == "started\n", message="the command")
    shim.send_signal(signum)
    assert ended(shim) == 143
    assert read(attempt / "exit.json")["signal"] == signal.SIGTERM


def test_a_signal_before_the_command_runs_is_forwarded_once_it_does(attempt):
    """A scancel that comes before the command's group exists (at the barrier here; the
    same holds while the command is being started) is not lost: the command gets TERM
    as soon as it runs, and the exit is recorded."""
    spec(attempt, "echo started; sleep 60")
    shim = start(attempt)
    wait_for(lambda: (attempt / "READY").exists(), message="READY")
    shim.send_signal(signal.SIGTERM)
    (attempt / "GO").touch()
    assert ended(shim) == 143
    assert read(attempt / "exit.json")["signal"] == signal.SIGTERM


def test_a_missing_spec_is_said_and_nothing_runs(attempt):
    """No spec (a coordinator that never wrote it): a message in slurm.out, no READY."""
    (attempt / "GO").touch()
    shim = start(attempt)
    out, _ = shim.communicate(timeout=30)
    assert shim.returncode == 66
    assert b"cannot read the attempt's spec" in out
    assert not (attempt / "READY").exists()


@pytest.mark.parametrize("damage", [b"", b'{"argv": null, "command": "touch ran"', b"{} {}"])
def test_a_torn_spec_is_said_and_nothing_runs(attempt, damage):
    """A spec.json cut short or damaged (read without the json module, which costs a
    Slurm job ~60 ms to import): a message in slurm.out, no READY, the command not run."""
    (attempt / "spec.json").write_bytes(damage)
    (attempt / "GO").touch()
    shim = start(attempt)
    out, _ = shim.communicate(timeout=30)
    assert shim.returncode == 66
    assert b"cannot read the attempt's spec" in out and b"not a JSON document" in out \
        or b"extra data" in out
    assert not (attempt / "READY").exists()
    assert not (attempt.parent / "ran").exists()


def test_a_link_put_in_place_of_the_attempt_directory_after_its_check_leads_nowhere(
        attempt, tmp_path):
    """R-SEC-4 after the check, as for the local shim: the shim opened and checked its
    attempt directory before READY; swapped for a link to elsewhere while it waits at the
    barrier (GO is found there, by its path), the command runs but nothing is written
    through the link: exit.json lands in the directory it checked."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spec(attempt, "exit 6", log=tmp_path / "out.log")  # logs/experiments/, outside
    shim = start(attempt)
    wait_for(lambda: (attempt / "READY").exists(), message="READY")
    checked = attempt.with_name("a1.checked")
    os.rename(attempt, checked)
    os.symlink(elsewhere, attempt)
    (elsewhere / "GO").touch()
    assert ended(shim) == 6
    assert os.listdir(elsewhere) == ["GO"]
    assert read(checked / "exit.json")["exit_code"] == 6


@pytest.mark.parametrize("which", ["attempt", "job"])
def test_an_attempt_directory_others_may_write_to_is_refused_and_nothing_runs(attempt,
                                                                             which):
    """A directory a peer could swap files in (group- or world-writable) is not the
    coordinator's own: the shim says so in slurm.out, writes no READY and runs nothing."""
    directory = attempt if which == "attempt" else attempt.parent
    spec(attempt, "touch ran")
    (attempt / "GO").touch()
    directory.chmod(0o775)
    shim = start(attempt)
    out, _ = shim.communicate(timeout=30)
    assert shim.returncode == 77
    assert b"refusing to run it: %s is writable by others" % bytes(directory) in out
    assert not (attempt / "READY").exists() and not (attempt.parent / "ran").exists()


def test_the_shim_loads_none_of_the_coordinators_modules(attempt):
    """Its start-up is on every Slurm job's path: of praxist_fs it loads the two shim
    modules and the packages they sit in (backends/slurm/ imports nothing), never the
    backends, the core or psutil."""
    spec(attempt, "exit 0")
    (attempt / "GO").touch()
    shim = start(attempt, PYTHONPROFILEIMPORTTIME="1")
    out, _ = shim.communicate(timeout=30)
    assert shim.returncode == 0, out
    modules = {line.rsplit(b"|", 1)[1].strip().decode() for line in out.splitlines()
               if line.startswith(b"import time:")}
    assert {module for module in modules if module.startswith("praxist_fs")} == {
        "praxist_fs", "praxist_fs.backends", "praxist_fs.backends.slurm",
        "praxist_fs.backends.slurm.shim", "praxist_fs.backends.shim_command"}
    assert "psutil" not in modules


def test_a_job_of_several_processes_exits_with_its_first_failure(tmp_path):
    """R-DIST-3: each task's wrapper records its exit and when; the job's exit is that of
    the first task that failed (by time, then rank), not srun's highest; 0 when all
    exited 0; srun's own where no task said."""
    from praxist_fs.backends.slurm.shim import first_failure
    srun = {"exit_code": 137, "signal": None, "started_at": 1.0, "ended_at": 2.0,
            "error": None}
    for rank, (code, at) in enumerate([(137, 300), (3, 200), (5, 250)]):
        (tmp_path / f"rank-{rank}.exit").write_text(f"{code} {at}\n")
    directory = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert first_failure(srun, str(tmp_path), directory) == dict(srun, exit_code=3,
                                                                     rank=1)
        for rank in range(3):
            (tmp_path / f"rank-{rank}.exit").write_text(f"0 {rank}\n")
        assert first_failure(dict(srun, exit_code=0), str(tmp_path),
                             directory)["exit_code"] == 0
        assert first_failure(srun, str(tmp_path / "nothing"), directory) == srun
    finally:
        os.close(directory)


def test_the_tasks_get_the_rendezvous_variables_through_srun(tmp_path):
    """R-DIST-3: srun starts the command once per task, behind a wrapper that sets RANK,
    LOCAL_RANK, NODE_RANK, WORLD_SIZE from Slurm's own; MASTER_ADDR is the first node
    (where the batch script runs), MASTER_PORT follows from the job id."""
    from praxist_fs.backends.slurm.shim import TASK_WRAPPER, across_tasks
    spec = {"argv": ["python", "train.py"], "command": None, "env": {"A": "1"}}
    spread = across_tasks(spec, str(tmp_path), {"SLURM_JOB_ID": "431"})
    assert spread["argv"][:6] == ["srun", "--kill-on-bad-exit=1", "--export=ALL", "/bin/sh",
                                  "-c", TASK_WRAPPER]
    assert spread["argv"][6:] == ["praxist-task", str(tmp_path), "python", "train.py"]
    assert spread["env"] == {"A": "1", "MASTER_ADDR": os.uname().nodename,
                             "MASTER_PORT": "20431"}
    env = {"PATH": os.defpath, "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2(x2)", "CUDA_VISIBLE_DEVICES": "1"}
    shown = subprocess.run(["/bin/sh", "-c", TASK_WRAPPER, "praxist-task", str(tmp_path),
                            "sh", "-c", 'echo "$RANK $LOCAL_RANK $NODE_RANK $WORLD_SIZE '
                            '$LOCAL_WORLD_SIZE $PRAXIST_ASSIGNED_GPU_UUIDS"; exit 4'],
                           env=env, capture_output=True, text=True, timeout=30)
    assert (shown.returncode, shown.stdout) == (4, "3 1 1 4 2 1\n")
    assert (tmp_path / "rank-3.exit").read_text().split()[0] == "4"


# The batch script sbatch was given by the releases before backends/slurm/ was a package
# (their slurm_client.entry_script): a job already queued in Slurm when the coordinator is
# upgraded runs this once Slurm starts it.
SUBMITTED_BEFORE_THE_PACKAGE = (
    "#!/bin/sh\n# praxist_fs: an attempt's Slurm-mode shim (praxist_fs/backends/slurm_shim.py)"
    "\nexec %s -S -c %s \"$@\"\n")


def test_a_job_submitted_before_the_upgrade_runs_the_shim_of_today(attempt):
    """An attempt whose Slurm job was queued by the release before the Slurm backend was
    a package still runs: its script's ``slurm_shim`` is today's shim, barrier and all."""
    bootstrap = ("import sys; sys.path[0] = %r; from praxist_fs.backends import slurm_shim; "
                 "sys.exit(slurm_shim.main())" % str(PACKAGE_ROOT))
    (attempt / ENTRY).write_text(SUBMITTED_BEFORE_THE_PACKAGE % (
        shlex.quote(sys.executable), shlex.quote(bootstrap)))
    spec(attempt, "echo ran; exit 4")
    shim = start(attempt)
    wait_for(lambda: (attempt / "READY").exists(), message="READY")
    assert not (attempt / "out.log").exists()
    (attempt / "GO").touch()
    assert ended(shim) == 4
    assert read(attempt / "exit.json")["exit_code"] == 4
    assert (attempt / "out.log").read_text() == "ran\n"
