"""A small PyTorch job that proves which GPU it was bound to (run on the GPU machine).

It checks the binding first (so a wrong binding fails in seconds), then holds
about ``--memory-gb`` GiB on cuda:0 and runs matmuls for ``--seconds`` (default:
``$GPU_CHECK_JOB_SECONDS``, else 20, so a job submitted through
``praxist-fs launch`` without arguments can be shortened from the submitting
environment), and prints one JSON line:

    {"device_count", "device_name", "torch_uuid", "cuda_visible_devices",
     "assigned_gpu_uuids", "pid", "binding_ok", "matmuls", "seconds", "allocated_gib"}

Exit codes: 0 binding as assigned (or nothing assigned) and the work ran;
3 the UUIDs torch sees are not the ones in PRAXIST_ASSIGNED_GPU_UUIDS
(comma-separated, in CUDA order); 4 no CUDA device or no UUID from torch.

Not a pytest file on purpose (no ``test_`` prefix): it needs torch and a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def torch_uuid(torch, index: int) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else "GPU-" + text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-gb", type=float, default=4.0)
    parser.add_argument("--seconds", type=float,
                        default=float(os.environ.get("GPU_CHECK_JOB_SECONDS") or 20.0))
    parser.add_argument("--matmul-size", type=int, default=8192)
    args = parser.parse_args()

    import torch

    assigned_env = os.environ.get("PRAXIST_ASSIGNED_GPU_UUIDS")
    assigned = [u.strip() for u in assigned_env.split(",") if u.strip()] if assigned_env else []
    report: dict = {
        "pid": os.getpid(),
        "cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"]
        if "CUDA_VISIBLE_DEVICES" in os.environ else None,
        "assigned_gpu_uuids": assigned_env,
        "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }

    def finish(code: int, **extra) -> int:
        report.update(extra)
        print(json.dumps(report), flush=True)
        return code

    if report["device_count"] < 1:
        return finish(4, binding_ok=False, problem="torch sees no CUDA device")
    report["device_name"] = torch.cuda.get_device_name(0)
    uuids = [torch_uuid(torch, i) for i in range(report["device_count"])]
    report["torch_uuid"] = uuids[0]
    report["torch_uuids"] = uuids
    if any(u is None for u in uuids):
        return finish(4, binding_ok=False,
                      problem="torch.cuda.get_device_properties(i).uuid is unavailable")
    if assigned:
        seen = [u.lower() for u in uuids]
        want = [u.lower() for u in assigned]
        if seen != want:
            return finish(3, binding_ok=False,
                          problem=f"torch sees {uuids}, assigned {assigned}")
    report["binding_ok"] = True

    device = torch.device("cuda:0")
    n = args.matmul_size
    matmul_bytes = 3 * n * n * 4
    ballast_bytes = max(0, int(args.memory_gb * 2**30) - matmul_bytes)
    ballast = torch.ones(ballast_bytes // 4, dtype=torch.float32, device=device)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    c = torch.empty(n, n, device=device)
    torch.cuda.synchronize()
    report["allocated_gib"] = round(torch.cuda.memory_allocated(0) / 2**30, 3)

    start = time.monotonic()
    matmuls = 0
    while time.monotonic() - start < args.seconds:
        for _ in range(10):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        matmuls += 10
    elapsed = time.monotonic() - start
    checksum = float(c[0, 0].item()) + float(ballast[0].item())
    return finish(0, matmuls=matmuls, seconds=round(elapsed, 2),
                  finite=checksum == checksum)


if __name__ == "__main__":
    sys.exit(main())
