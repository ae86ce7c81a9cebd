"""The shim in Slurm mode: the batch script of one attempt's Slurm job (R-DIST-1).

Run by the entry script the Slurm backend submits, as
``python -S -c BOOTSTRAP ATTEMPT_DIR`` (or ``python -m praxist_fs.backends.slurm.shim
ATTEMPT_DIR``), on whichever node Slurm chose, with the attempt directory on a
filesystem every node shares. It speaks to the coordinator through files only, since
no pipe reaches another node (and NFS caches attributes, so GO and ABORT are found by
listing the directory, not by stat):

- it refuses to run twice: Slurm restarts a batch script from the top under the same
  job id (a requeue despite ``--no-requeue``, or a node that came back), and READY, or
  ``SLURM_RESTART_COUNT`` > 0, says it has run before;
- it writes READY: host, Slurm job id, the GPUs Slurm gave it (``gpus``, comma-separated
  as PRAXIST_ASSIGNED_GPU_UUIDS: by UUID where the node's NVML resolves Slurm's
  ordinals, else the ordinals), pid and start time;
- it waits for GO or ABORT (the coordinator journals the Slurm job id with GO first);
- it runs the command of spec.json (0600, removed once read: it may hold secrets) in a
  process group of its own (a job of several processes, spec.json's ``tasks``: once per
  task, through ``srun``, with the rendezvous variables torchrun sets, and the exit
  code of the first task that failed), with Slurm's SLURM_* variables and those GPUs bound as the
  local backend binds its own: PRAXIST_ASSIGNED_GPU_UUIDS, CUDA_VISIBLE_DEVICES and
  NVIDIA_VISIBLE_DEVICES all name them (``praxist-fs bind`` checks exactly that);
- it traps TERM, INT and HUP (scancel, the time limit) and forwards TERM to the
  command's group (one that came before the group was known, while the command was
  being started or before, is forwarded as soon as it is); USR1 and USR2 (the warning
  ``--signal=B:USR2@90`` before a time limit, a ``scancel --signal``) reach the
  command's group as they are, so that it may checkpoint; then it records the exit in
  exit.json, fsynced, in the local shim's format, and exits with the command's code.

Reading, running and recording it shares with the local shim: backends/shim_command.py.
"""

import _json
import _signal
import os
import posix
import sys
import time

from praxist_fs.backends import shim_command

SPEC = "spec.json"
TRAPPED = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)  # the command is to end
PASSED_ON = (_signal.SIGUSR1, _signal.SIGUSR2)  # a warning: the command decides
EX_NOINPUT = 66  # no spec to run
EX_NOPERM = 77  # its directory is not ours to write through: nothing ran
EX_TEMPFAIL = 75  # refused to run again: an infrastructure matter, as exit 75 means elsewhere
# The variables that name an attempt's GPUs (binding.py), for a CPU job the empty string.
GPU_VARIABLES = ("PRAXIST_ASSIGNED_GPU_UUIDS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
NVML = "libnvidia-ml.so.1"
_command_group = []  # the pid of the running command, which leads its process group
_asked_to_end = []  # the signals trapped so far
_warnings = []  # the warnings passed on (or to pass on once the command runs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].startswith("/"):
        shim_command.tell(2, b"usage: praxist_fs.backends.slurm.shim ATTEMPT_DIR (an absolute path)\n")
        return 2
    return serve(argv[0].rstrip("/") or "/", dict(os.environ))


def serve(attempt_dir, environ):
    """Run the attempt in ``attempt_dir`` once; the batch script's exit code."""
    directory, refusal = open_attempt_directory(attempt_dir)
    if refusal is not None:  # no READY: the coordinator sees a failed start
        code, why = refusal
        shim_command.tell(2, b"praxist_fs: %s\n" % why.encode("utf-8", "surrogateescape"))
        return code
    try:
        return serve_in(attempt_dir, directory, environ)
    finally:
        posix.close(directory)


def open_attempt_directory(attempt_dir):
    """The attempt's directory and its job's, opened and checked as the local shim opens
    its own (a real directory of ours nobody else may write to, never a link: R-SEC-4),
    so that every file of the attempt is read and written relative to what was checked:
    a link put in place of it later leads nowhere. (attempt fd, None), or (None, (exit
    code, why)). The coordinator made both (slurm/backend.py, mode 0755)."""
    job_dir = attempt_dir[:attempt_dir.rindex("/")] or "/"
    try:
        job_fd, problem = shim_command.open_directory(job_dir)
        if problem is not None:
            return None, (EX_NOPERM, "refusing to run it: %s %s" % (job_dir, problem))
        try:
            fd, problem = shim_command.open_directory(attempt_dir, job_fd)
        finally:
            posix.close(job_fd)
    except OSError as exc:
        return None, (EX_NOINPUT, "cannot open the attempt's directory: %s" % exc)
    if problem is not None:
        return None, (EX_NOPERM, "refusing to run it: %s %s" % (attempt_dir, problem))
    return fd, None


def serve_in(attempt_dir, directory, environ):
    """serve, with ``directory`` the attempt's directory as opened: every file is read and
    written relative to it. GO and ABORT alone are looked for by listing ``attempt_dir``
    by its path: on NFS only a fresh lookup refreshes the cached listing (an open
    directory's may lag by the attribute cache's 30-60 s), and a listing writes nothing."""
    restarts = environ.get("SLURM_RESTART_COUNT", "0")
    if restarts not in ("", "0") or shim_command.exists("READY", dir_fd=directory):
        shim_command.tell(2, b"praxist_fs: this attempt has run before (Slurm restart count "
                             b"%s); refusing to run it twice\n" % restarts.encode())
        return EX_TEMPFAIL
    for signum in TRAPPED:
        _signal.signal(signum, forward_term)
    for signum in PASSED_ON:
        _signal.signal(signum, pass_on)
    if "ABORT" in listing(attempt_dir):
        remove(SPEC, directory)
        return 0
    try:
        spec = parse_json(shim_command.read_small(SPEC, dir_fd=directory).decode())
    except (OSError, ValueError) as exc:  # no READY: the coordinator sees a failed start
        shim_command.tell(2, b"praxist_fs: cannot read the attempt's spec: %s\n"
                          % str(exc).encode())
        return EX_NOINPUT
    finally:
        remove(SPEC, directory)
    gpus = slurm_gpus(environ)
    ready = dict(shim_command.own_identity(), at=time.time(), host=posix.uname().nodename,
                 slurm_job_id=environ.get("SLURM_JOB_ID"),
                 slurm_node=environ.get("SLURMD_NODENAME"),
                 cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
                 gpus=",".join(gpus))
    # durable: on a shared filesystem READY's absence is the coordinator's proof that the
    # command never ran (its GO is given as soon as sbatch answers)
    for _ in shim_command.write_until_written(attempt_dir + "/READY",
                                              shim_command.to_json(ready), durable=True,
                                              dir_fd=directory):
        if "ABORT" in listing(attempt_dir):
            return 0
    ring(spec.get("notify"), attempt_dir)
    if not wait_for_go(attempt_dir, spec["barrier_timeout_s"]):
        return 0  # nothing ran: the coordinator releases the attempt unconsumed
    spec["env"] = command_env(spec["env"], environ, gpus)
    if spec.get("tasks"):  # several processes (R-DIST-3): srun starts one per task
        spec = across_tasks(spec, attempt_dir, environ)
    status_fd = posix.open("/dev/null", posix.O_WRONLY | posix.O_CLOEXEC)  # no coordinator pipe
    try:
        result = shim_command.run(spec, status_fd, own_group=True, on_start=_started)
    finally:
        posix.close(status_fd)
    if spec.get("tasks"):
        result = first_failure(result, attempt_dir, directory)
    if _warnings:  # the time limit's warning came: a failure may be its doing
        result = dict(result, warned=_warnings[-1])
    for _ in shim_command.write_until_written(attempt_dir + "/exit.json",
                                              shim_command.to_json(result), durable=True,
                                              dir_fd=directory):
        pass  # the exit exists only here until written: no giving up
    ring(spec.get("notify"), attempt_dir)
    return min(result["exit_code"], 255)


class _Strict:
    """What the C scanner of the json module reads (json.decoder's defaults), so the spec
    is parsed without importing json, whose re and enum cost a Slurm job ~60 ms."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int, parse_constant = float, int, float
    memo = {}


def parse_json(text):
    """One JSON document (ValueError if it is not one)."""
    start = len(text) - len(text.lstrip())
    try:
        document, end = _json.make_scanner(_Strict())(text, start)
    except Exception as exc:  # its errors come from json.decoder, which may not import
        raise ValueError(f"not a JSON document ({type(exc).__name__})") from None
    if text[end:].strip():
        raise ValueError("extra data after the JSON document")
    return document


# Each task of a job of several processes: the rendezvous variables torchrun and
# torch.distributed read, from Slurm's own per task; its GPUs bound as the shim binds a
# one-process job's; then the command, and its exit with the time it came, for
# first_failure. $1: the attempt directory; the rest: the command.
TASK_WRAPPER = (
    'dir=$1; shift; '
    'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID" '
    'WORLD_SIZE="$SLURM_NTASKS" LOCAL_WORLD_SIZE="${SLURM_NTASKS_PER_NODE%%(*}" '
    'PRAXIST_ASSIGNED_GPU_UUIDS="${CUDA_VISIBLE_DEVICES-}" '
    'NVIDIA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES-}"; '
    '"$@"; code=$?; '
    'printf "%s %s\\n" "$code" "$(date +%s%N)" > "$dir/rank-$RANK.exit"; exit $code')
MASTER_PORT_FIRST, MASTER_PORT_COUNT = 20000, 20000  # of which the job id picks one


def across_tasks(spec, attempt_dir, environ):
    """The spec that runs the command once per task of the allocation (srun, which
    inherits the allocation's layout and forwards our signals to every task; a task that
    fails ends the others, ``--kill-on-bad-exit``), with MASTER_ADDR (this, the first
    node) and MASTER_PORT (from the job id, so two jobs on one node differ)."""
    command = spec["argv"] or ["/bin/sh", "-c", spec["command"]]
    job_id = environ.get("SLURM_JOB_ID", "0")
    port = MASTER_PORT_FIRST + (int(job_id) if job_id.isdigit() else 0) % MASTER_PORT_COUNT
    env = dict(spec["env"], MASTER_ADDR=posix.uname().nodename, MASTER_PORT=str(port))
    return dict(spec, env=env, command=None, argv=[
        "srun", "--kill-on-bad-exit=1", "--export=ALL", "/bin/sh", "-c", TASK_WRAPPER,
        "praxist-task", attempt_dir, *command])


def first_failure(result, attempt_dir, directory):
    """The exit of a job of several processes: that of the first task that failed (by
    the time each wrapper recorded, then by rank), or 0 when every one exited 0; srun's
    own where no task said (none could start, or all were killed). ``rank`` names it.
    Each task's file is read relative to ``directory``, the attempt's as opened."""
    ended = []
    for name in listing(attempt_dir):
        if name.startswith("rank-") and name.endswith(".exit") and name[5:-5].isdigit():
            try:
                code, at = shim_command.read_small(name, dir_fd=directory).split()
                ended.append((int(at), int(name[5:-5]), int(code)))
            except (OSError, ValueError):
                continue
    failed = sorted(each for each in ended if each[2] != 0)
    if failed:
        _, rank, code = failed[0]
        return dict(result, exit_code=code, rank=rank,
                    signal=result["signal"] if code == result["exit_code"] else None)
    return result


def command_env(env, environ, gpus):
    """The submitted environment, with Slurm's SLURM_* variables and the GPUs Slurm
    placed (``gpus``) bound as the local backend binds its own; a job Slurm gave no GPU
    keeps the submitted binding, the empty string: forced CPU."""
    env = dict(env)
    for name, value in environ.items():
        if name.startswith("SLURM_"):
            env[name] = value
    if gpus:
        env.update(dict.fromkeys(GPU_VARIABLES, ",".join(gpus)))
    return env


def slurm_gpus(environ, uuids_of=None):
    """The GPUs Slurm gave the job (its CUDA_VISIBLE_DEVICES), as the command is to name
    them: the devices' UUIDs where the node's NVML resolves Slurm's ordinals (by NVML's
    device index, which is how Slurm's ``AutoDetect=nvml`` numbers them), else as Slurm
    gave them; [] without any. ``uuids_of``: ordinals -> UUIDs or None (NVML's, here)."""
    given = [part.strip() for part in (environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")
             if part.strip()]
    if not given or not all(part.isdigit() for part in given):
        return given  # none, or named already (UUIDs, MIG devices)
    return (uuids_of or nvml_uuids)([int(part) for part in given]) or given


def nvml_uuids(ordinals):
    """The UUIDs of NVML's devices ``ordinals``, or None where NVML cannot say (no driver,
    a device it does not know): through ctypes, since the shim runs without site packages."""
    try:
        import ctypes
        nvml = ctypes.CDLL(NVML)
    except (ImportError, OSError):
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        uuids = []
        for ordinal in ordinals:
            device, text = ctypes.c_void_p(), ctypes.create_string_buffer(96)
            if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(ordinal),
                                                   ctypes.byref(device)) != 0 or \
                    nvml.nvmlDeviceGetUUID(device, text, ctypes.c_uint(96)) != 0:
                return None
            uuids.append(text.value.decode("ascii", "replace"))
        return uuids
    finally:
        nvml.nvmlShutdown()


def forward_term(signum, frame):
    """TERM on scancel or at the time limit (or INT, HUP): the command is asked to end
    with TERM; we stay to record its exit."""
    _asked_to_end.append(signum)
    for group in _command_group:
        _terminate(group)


def pass_on(signum, frame):
    """USR1 or USR2, a warning (Slurm's ``--signal`` before the time limit): to the
    command's group as it is; one that comes before the command runs is passed on as
    soon as it does."""
    _warnings.append(signum)
    for group in _command_group:
        _send(group, signum)


def _started(group):
    """The command runs: a signal trapped before its group was known (it may come while
    the command is being started, or before GO) is forwarded now, not lost."""
    _command_group.append(group)
    for signum in _warnings:
        _send(group, signum)
    if _asked_to_end:
        _send(group, _signal.SIGTERM)


def _terminate(group):
    _send(group, _signal.SIGTERM)


def _send(group, signum):
    try:
        posix.kill(-group, signum)
    except OSError:
        pass  # the command's group is gone: its exit is being recorded


def ring(notify, attempt_dir):
    """One datagram, ``<job id>/<attempt id>``, to the coordinator's doorbell (``notify``:
    [numeric address, port]; slurm/doorbell.py): look at my files now. A hint it may
    never get: its polls find them anyway. Numeric, so no resolver is waited on."""
    if not notify:
        return
    try:
        import _socket
        address, port = notify
        sock = _socket.socket(_socket.AF_INET6 if ":" in address else _socket.AF_INET,
                              _socket.SOCK_DGRAM)
        try:
            sock.sendto("/".join(attempt_dir.split("/")[-2:]).encode(), (address, port))
        finally:
            sock.close()
    except Exception:  # whatever went wrong, the files are written: the polls find them
        pass


def listing(directory):
    """The directory's names, read afresh (a listing refreshes NFS's cached view)."""
    try:
        return posix.listdir(directory)
    except OSError:
        return ()


def wait_for_go(attempt_dir, timeout):
    """True once GO is there, False on ABORT or when none came in ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        names = listing(attempt_dir)
        if "ABORT" in names:
            return False
        if "GO" in names:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(shim_command.POLL_SECONDS)


def remove(name, directory):
    try:
        posix.unlink(name, dir_fd=directory)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
