"""The managed NVIDIA/CUDA descendant binding contract (seed 000): UUID,
multi-UUID, missing mask, conflicting mask, standalone and forced CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from praxist_fs.binding import BindingConflict, bound_environment
from praxist_fs.errors import PraxistError

A = "GPU-1b2c3d4e-0000-1111-2222-333344445555"
B = "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"
MASKS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def _masks(env: dict[str, str]) -> tuple[str | None, ...]:
    return tuple(env.get(name) for name in MASKS)


def test_single_uuid_kept():
    env = bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": A,
                             "CUDA_VISIBLE_DEVICES": A, "NVIDIA_VISIBLE_DEVICES": A})
    assert _masks(env) == (A, A)


def test_multi_uuid_order_preserved():
    assigned = f"{B},{A}"
    env = bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": assigned})
    assert _masks(env) == (assigned, assigned)


def test_multi_uuid_whitespace_is_the_same_list():
    env = bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": f"{A},{B}",
                             "CUDA_VISIBLE_DEVICES": f"{A}, {B}"})
    assert _masks(env) == (f"{A},{B}", f"{A},{B}")


@pytest.mark.parametrize("present", [(), ("CUDA_VISIBLE_DEVICES",), ("NVIDIA_VISIBLE_DEVICES",)])
def test_missing_mask_restored_from_assignment(present):
    environ = {"PRAXIST_ASSIGNED_GPU_UUIDS": A, "PATH": "/bin"}
    environ.update({name: A for name in present})
    env = bound_environment(environ)
    assert _masks(env) == (A, A)
    assert env["PATH"] == "/bin"


def test_input_mapping_not_mutated():
    environ = {"PRAXIST_ASSIGNED_GPU_UUIDS": A}
    bound_environment(environ)
    assert environ == {"PRAXIST_ASSIGNED_GPU_UUIDS": A}


@pytest.mark.parametrize("variable", MASKS)
@pytest.mark.parametrize("assigned, mask, why", [
    (A, B, "other devices"),
    (A, "0", "local device ordinal"),
    (f"{A},{B}", "0,1", "local device ordinal"),
    (f"{A},{B}", f"{B},{A}", "another order"),
    (f"{A},{B}", A, "other devices"),
    (A, "", "other devices"),
])
def test_conflicting_mask_fails_clearly(variable, assigned, mask, why):
    with pytest.raises(BindingConflict) as caught:
        bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": assigned, variable: mask})
    message = str(caught.value)
    assert variable in message and repr(mask) in message and assigned in message
    assert why in message
    assert isinstance(caught.value, PraxistError)
    assert caught.value.variable == variable


def test_standalone_unchanged():
    environ = {"CUDA_VISIBLE_DEVICES": "0", "NVIDIA_VISIBLE_DEVICES": "all", "HOME": "/h"}
    assert bound_environment(environ) == environ
    assert bound_environment({}) == {}


def test_forced_cpu_sets_empty_masks():
    env = bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": ""})
    assert _masks(env) == ("", "")
    env = bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": "", "CUDA_VISIBLE_DEVICES": ""})
    assert _masks(env) == ("", "")


@pytest.mark.parametrize("mask", ["0", A, "all"])
def test_forced_cpu_rejects_any_device(mask):
    with pytest.raises(BindingConflict, match="forced CPU"):
        bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": "", "NVIDIA_VISIBLE_DEVICES": mask})


def test_malformed_assignment_fails():
    with pytest.raises(BindingConflict, match="empty entry"):
        bound_environment({"PRAXIST_ASSIGNED_GPU_UUIDS": f"{A},,{B}"})


# --- the exec path: praxist-fs bind -- CMD ---------------------------------------

_BIND = ("from praxist_fs.binding import main_bind; import sys; "
         "sys.exit(main_bind(sys.argv[1:]))")


def _bind(env_extra: dict[str, str], *cmd: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in (*MASKS, "PRAXIST_ASSIGNED_GPU_UUIDS")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", _BIND, "--", *cmd], env=env,
                          capture_output=True, text=True, timeout=30)


def test_bind_execs_with_restored_masks():
    done = _bind({"PRAXIST_ASSIGNED_GPU_UUIDS": f"{A},{B}"},
                 "sh", "-c", 'echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES"; exit 7')
    assert done.returncode == 7  # exec'd: the command's own exit code
    assert done.stdout.strip() == f"{A},{B}|{A},{B}"


def test_bind_conflict_exits_3_without_running():
    done = _bind({"PRAXIST_ASSIGNED_GPU_UUIDS": A, "CUDA_VISIBLE_DEVICES": "0"},
                 "sh", "-c", "echo ran")
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr.startswith("praxist-fs bind: CUDA_VISIBLE_DEVICES='0'")


def test_bind_standalone_passes_environment_through():
    done = _bind({"CUDA_VISIBLE_DEVICES": "0"},
                 "sh", "-c", 'echo "${NVIDIA_VISIBLE_DEVICES-unset}"')
    assert done.returncode == 0
    assert done.stdout.strip() == "unset"


def test_bind_usage_and_missing_command():
    assert _bind({}).returncode == 2
    done = _bind({}, "praxist-no-such-command-xyz")
    assert done.returncode == 127
    assert "command not found" in done.stderr
