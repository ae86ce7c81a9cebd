"""Host facts for `auto`: cgroup files, process-tree RSS, the real host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from praxist_fs.adapters.capacity import (
    CgroupLimits,
    read_cgroup_limits,
    read_host_capacity,
    tree_rss_mib,
)

MIB = 1024 * 1024
BOUND = re.compile(r"(cap|cpu|memory|cgroup-memory|cgroup-cpu)-bound at [1-9][0-9]*")
V1_UNLIMITED = "9223372036854771712"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v2_tree(tmp_path: Path, cgroup: str = "0::/user.slice/job\n") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    write(root / "cgroup.controllers", "cpu memory io\n")
    (root / "user.slice" / "job").mkdir(parents=True)
    write(tmp_path / "proc_cgroup", cgroup)
    return root, tmp_path / "proc_cgroup"


def v1_tree(tmp_path: Path, memory_path: str = "/docker/abc", cpu_dir: str = "cpu,cpuacct"):
    root = tmp_path / "cgroup"
    write(tmp_path / "proc_cgroup",
          f"12:memory:{memory_path}\n4:{cpu_dir}:{memory_path}\n1:name=systemd:/\n0::/\n")
    (root / "memory" / memory_path.strip("/")).mkdir(parents=True)
    (root / cpu_dir / memory_path.strip("/")).mkdir(parents=True)
    (root / "unified").mkdir()
    return root, tmp_path / "proc_cgroup"


# --- cgroup v2 ----------------------------------------------------------------------


def test_v2_memory_and_cpu_limits(tmp_path):
    root, proc = v2_tree(tmp_path)
    leaf = root / "user.slice" / "job"
    write(leaf / "memory.max", f"{8 * 1024 * MIB}\n")
    write(leaf / "cpu.max", "150000 100000\n")
    write(leaf / "memory.current", f"{3 * 1024 * MIB}\n")
    write(leaf / "memory.stat", f"anon 1\ninactive_file {1024 * MIB}\nactive_file 5\n")
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert limits == CgroupLimits(version="v2", memory_limit_mib=8192.0,
                                  memory_used_mib=2048.0, cpu_limit=1.5)


def test_v2_max_is_unlimited(tmp_path):
    root, proc = v2_tree(tmp_path)
    leaf = root / "user.slice" / "job"
    write(leaf / "memory.max", "max\n")
    write(leaf / "cpu.max", "max 100000\n")
    write(leaf / "memory.current", "12345\n")
    assert read_cgroup_limits(proc_cgroup=proc, cgroup_root=root) == CgroupLimits(version="v2")


def test_v2_an_ancestor_limit_binds_and_the_smallest_wins(tmp_path):
    root, proc = v2_tree(tmp_path)
    write(root / "user.slice" / "memory.max", f"{4 * 1024 * MIB}\n")
    write(root / "user.slice" / "cpu.max", "200000 100000\n")
    write(root / "user.slice" / "job" / "memory.max", "max\n")
    write(root / "user.slice" / "job" / "cpu.max", "50000 100000\n")
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert (limits.memory_limit_mib, limits.cpu_limit) == (4096.0, 0.5)
    assert limits.memory_used_mib is None  # no memory.current to read


def test_v2_path_not_visible_uses_the_mount_root(tmp_path):
    """A container with its own cgroup namespace-less mount sees its group at the root."""
    root, proc = v2_tree(tmp_path, cgroup="0::/kubepods/pod1/ctr\n")
    write(root / "memory.max", f"{2 * 1024 * MIB}\n")
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert limits.memory_limit_mib == 2048.0


@pytest.mark.parametrize("memory_max,cpu_max", [
    ("lots\n", "100000\n"),
    ("", "a b\n"),
    ("-5\n", "0 100000\n"),
    ("0\n", "100000 0\n"),
])
def test_v2_malformed_files_are_no_limit(tmp_path, memory_max, cpu_max):
    root, proc = v2_tree(tmp_path)
    write(root / "user.slice" / "job" / "memory.max", memory_max)
    write(root / "user.slice" / "job" / "cpu.max", cpu_max)
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert (limits.version, limits.memory_limit_mib, limits.cpu_limit) == ("v2", None, None)


# --- cgroup v1 ----------------------------------------------------------------------


def test_v1_memory_and_cpu_limits(tmp_path):
    root, proc = v1_tree(tmp_path)
    memory = root / "memory" / "docker" / "abc"
    write(memory / "memory.limit_in_bytes", f"{6 * 1024 * MIB}\n")
    write(memory / "memory.usage_in_bytes", f"{2 * 1024 * MIB}\n")
    write(memory / "memory.stat", f"cache 9\ntotal_inactive_file {512 * MIB}\n"
                                  f"hierarchical_memory_limit {6 * 1024 * MIB}\n")
    cpu = root / "cpu,cpuacct" / "docker" / "abc"
    write(cpu / "cpu.cfs_quota_us", "250000\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert limits == CgroupLimits(version="v1", memory_limit_mib=6144.0,
                                  memory_used_mib=1536.0, cpu_limit=2.5)


def test_v1_unlimited_and_separate_cpu_mount(tmp_path):
    root, proc = v1_tree(tmp_path, cpu_dir="cpu")
    write(root / "memory" / "docker" / "abc" / "memory.limit_in_bytes", V1_UNLIMITED + "\n")
    write(root / "memory" / "docker" / "abc" / "memory.usage_in_bytes", "4096\n")
    write(root / "cpu" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")
    write(root / "cpu" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert read_cgroup_limits(proc_cgroup=proc, cgroup_root=root) == CgroupLimits(version="v1")


def test_v1_hierarchical_limit_of_a_parent(tmp_path):
    root, proc = v1_tree(tmp_path)
    memory = root / "memory" / "docker" / "abc"
    write(memory / "memory.limit_in_bytes", V1_UNLIMITED + "\n")
    write(memory / "memory.stat", f"hierarchical_memory_limit {3 * 1024 * MIB}\n")
    write(root / "cpu,cpuacct" / "docker" / "cpu.cfs_quota_us", "100000\n")
    write(root / "cpu,cpuacct" / "docker" / "cpu.cfs_period_us", "100000\n")
    limits = read_cgroup_limits(proc_cgroup=proc, cgroup_root=root)
    assert (limits.memory_limit_mib, limits.cpu_limit) == (3072.0, 1.0)


def test_no_cgroup_information_at_all(tmp_path):
    assert read_cgroup_limits(proc_cgroup=tmp_path / "absent",
                              cgroup_root=tmp_path / "absent-too") == CgroupLimits(version="none")
    write(tmp_path / "garbage", "not a cgroup file\n::\n")
    assert read_cgroup_limits(proc_cgroup=tmp_path / "garbage",
                              cgroup_root=tmp_path).version == "none"


def test_the_real_hosts_cgroup_reads_without_error():
    limits = read_cgroup_limits()
    assert limits.version in ("v1", "v2", "none")
    assert limits.memory_limit_mib is None or limits.memory_limit_mib > 0
    assert limits.cpu_limit is None or limits.cpu_limit > 0


# --- own running memory ---------------------------------------------------------------


def test_tree_rss_counts_descendants_once_and_skips_the_dead():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"  # fully started: its RSS holds still
        me = tree_rss_mib([os.getpid()])
        alone = psutil.Process().memory_info().rss / MIB
        assert me > alone  # the child's RSS is part of the tree
        assert tree_rss_mib([os.getpid(), child.pid, os.getpid()]) == pytest.approx(me, rel=0.2)
        assert tree_rss_mib([]) == 0.0
        assert tree_rss_mib([2**22 + 12345]) == 0.0  # no such process
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


# --- the real host -------------------------------------------------------------------


def test_real_host_capacity_is_sane():
    result = read_host_capacity(4 * 1024, [os.getpid()])
    assert 1 <= result.limit <= 8
    assert BOUND.fullmatch(result.bound), result.bound
    assert result.bound.endswith(f" at {result.limit}")
    assert result.limit == min(result.details.values())
    assert result.details["cpu"] == len(os.sched_getaffinity(0))


def test_real_host_with_a_fake_cgroup_quota(tmp_path):
    root, proc = v2_tree(tmp_path)
    write(root / "user.slice" / "job" / "cpu.max", "50000 100000\n")
    write(root / "user.slice" / "job" / "memory.max",
          f"{int(psutil.virtual_memory().total * 2)}\n")  # above physical memory: ignored
    result = read_host_capacity(1.0, [], proc_cgroup=proc, cgroup_root=root, cap=4)
    assert result.details["cgroup-cpu"] == 1 and result.limit == 1
    assert "cgroup-memory" not in result.details
    assert read_host_capacity(1.0, [], cap=3, proc_cgroup=proc,
                              cgroup_root=tmp_path / "none").limit <= 3
