#!/usr/bin/env bash
# GPU machine check for praxist_fs (one NVIDIA H200; torch, pynvml, psutil,
# pyyaml, filelock and pytest installed; watchdog carried as a wheel).
#
#   bash tests/gpu/run_gpu_check.sh        # from anywhere; about 2-3 minutes, < 5
#
# Prints a PASS/FAIL (or WARN, informational) line for everything it checks, a
# recap of the FAIL and WARN lines, and last `GPU CHECK: N passed, M failed`;
# exits non-zero when any check FAILs. See tests/gpu/README.md.
#
# Files: logs go to a temporary directory; when $OUT is set (the device runner
# brings back at most 8 files from it) the script writes there only
#   gpu_check_transcript.txt  everything printed
#   gpu_check_logs.tar.gz     the log directory (section logs, coordinator log,
#                             the e2e run directory, observations)
#   e2e_observations.json     what the coordinator end-to-end check sampled
#   profile.jsonl             the praxist-fs profile series
#
# Environment:
#   PYTHON                    interpreter (default python3)
#   GPU_CHECK_JOB_SECONDS     seconds of matmuls per torch job (default 15)
#   GPU_CHECK_BUDGET_S        the coordinator and profile sections are skipped (FAIL)
#                             rather than cut off when less time is left of this
#                             many seconds since the start (default 450)
#   GPU_CHECK_DRY=1           no GPU needed: skips the NVML/torch sections and runs
#                             the coordinator end to end on a one-device copy of
#                             $PRAXIST_FAKE_GPUS (default fixtures/gpus/two_h200.json)
#                             with a sleeping shell job instead of the torch job
#                             (GPU_CHECK_DRY_JOB_SECONDS, default 8). Proves the
#                             orchestration only; the real path is the default.
set -u -o pipefail

cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
PY=${PYTHON:-$(command -v python3 || command -v python)}
DRY=0
case "${GPU_CHECK_DRY:-0}" in 0|"") ;; *) DRY=1 ;; esac
if [ "$DRY" = 1 ]; then
    JOB_SECONDS=${GPU_CHECK_DRY_JOB_SECONDS:-8}
else
    JOB_SECONDS=${GPU_CHECK_JOB_SECONDS:-15}
fi
export GPU_CHECK_JOB_SECONDS=$JOB_SECONDS
BUDGET=${GPU_CHECK_BUDGET_S:-450}
LOGS=$(mktemp -d /tmp/gpu_check.XXXXXX)
ARTIFACTS=${OUT:-$LOGS}
mkdir -p "$ARTIFACTS" || exit 2
exec > >(tee "$ARTIFACTS/gpu_check_transcript.txt") 2>&1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # works even if pip install -e fails
export PYTHONDONTWRITEBYTECODE=1
RESULTS=$LOGS/results.txt
: >"$RESULTS"
T0=$(date +%s)

record() { echo "$*"; echo "$*" >>"$RESULTS"; }
pass() { record "PASS $*"; }
fail() { record "FAIL $*"; }
warn() { record "WARN $*"; }
skip() { echo "SKIP $*"; }
section() { echo; echo "=== $* (t=$(( $(date +%s) - T0 ))s)"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# cap WANT [RESERVE]: WANT seconds, or what is left of the budget less RESERVE if that is less.
cap() {
    local have=$(( $(left) - ${2:-10} ))
    if [ "$have" -lt 5 ]; then have=5; fi  # never 0: `timeout 0` means no limit
    if [ "$have" -lt "$1" ]; then echo "$have"; else echo "$1"; fi
}
# Collect the PASS/FAIL/WARN lines a logged step printed; fail if it died without saying why.
collect() {  # collect NAME LOG RC
    local n
    grep -E '^(PASS|FAIL|WARN) ' "$2" >>"$RESULTS"
    n=$(grep -cE '^FAIL ' "$2")
    if [ "$3" -ne 0 ] && [ "$n" -eq 0 ]; then fail "$1: exited $3"; fi
}
# Run a python snippet that prints its own PASS/FAIL/WARN lines.
check_py() {  # check_py NAME <<'EOF' ... EOF
    local name=$1 log="$LOGS/$1.log"
    timeout -k 10 "$(cap 240 60)" "$PY" - 2>&1 | tee "$log"
    collect "$name" "$log" "${PIPESTATUS[0]}"
}
# Run a command that prints its own PASS/FAIL/WARN lines, under a time limit.
check_cmd() {  # check_cmd NAME SECONDS CMD...
    local name=$1 limit=$2 log="$LOGS/$1.log"
    shift 2
    timeout -k 20 "$limit" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then fail "$name: killed after ${limit}s"; fi
    collect "$name" "$log" "$rc"
}
finish() {
    if [ -n "${OUT:-}" ]; then
        [ -f "$LOGS/e2e_observations.json" ] && cp "$LOGS/e2e_observations.json" "$OUT/"
        tar -czf "$OUT/gpu_check_logs.tar.gz" -C "$(dirname "$LOGS")" "$(basename "$LOGS")" \
            2>/dev/null || true
    fi
}
trap finish EXIT
trap 'echo "interrupted"; exit 143' TERM INT

section "environment"
echo "python: $PY ($("$PY" --version 2>&1)); repo: $ROOT; logs: $LOGS; artifacts: $ARTIFACTS"
echo "mode: $([ "$DRY" = 1 ] && echo "DRY RUN (fake inventory, no torch)" || echo "real NVML + torch"); job seconds: $JOB_SECONDS; budget: ${BUDGET}s"
uname -srm
if [ "$DRY" = 1 ]; then
    if "$PY" -c "import psutil, yaml, filelock, pytest"; then
        pass "imports: psutil yaml filelock pytest (dry run: torch and pynvml not needed)"
    else
        fail "imports: a required package is missing"
    fi
elif "$PY" -c "import torch, pynvml, psutil, yaml, filelock, pytest
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())
print('pynvml', getattr(pynvml, '__version__', '?'), 'psutil', psutil.__version__, 'pytest', pytest.__version__)"; then
    pass "imports: torch pynvml psutil yaml filelock pytest"
else
    fail "imports: a required package is missing"
fi

section "watchdog from tests/gpu/wheels"
if [ "$DRY" = 1 ]; then
    skip "dry run: the wheel is not installed into this environment"
elif ls tests/gpu/wheels/watchdog-*.whl >/dev/null 2>&1; then
    ls -l tests/gpu/wheels/
    timeout "$(cap 120 60)" "$PY" -m pip install -q --no-index --find-links tests/gpu/wheels watchdog \
        || warn "pip install of the watchdog wheel failed (see above)"
else
    warn "no watchdog wheel in tests/gpu/wheels"
fi
if "$PY" -c "import watchdog.observers, watchdog.version as v; print('watchdog', v.VERSION_STRING)"; then
    pass "watchdog importable"
else
    fail "watchdog not importable (the coordinator needs it)"
fi

section "install praxist_fs"
if [ "$DRY" = 1 ]; then
    skip "dry run: not installed, PYTHONPATH=$ROOT"
elif timeout "$(cap 120 60)" "$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$LOGS/pip_install.log" 2>&1; then
    pass "pip install --no-deps --no-build-isolation -e ."
else
    tail -5 "$LOGS/pip_install.log"
    warn "editable install failed; using PYTHONPATH=$ROOT (no praxist-fs script: use python -m praxist_fs)"
fi
if "$PY" -c "import praxist_fs.adapters.gpus, praxist_fs.config"; then
    pass "praxist_fs importable"
else
    fail "praxist_fs not importable"
fi

UUID0=
if [ "$DRY" = 1 ]; then
    section "dry run: one-device fake inventory instead of NVML"
    FAKE_SRC=${PRAXIST_FAKE_GPUS:-fixtures/gpus/two_h200.json}
    FAKE=$LOGS/fake_gpus.json
    # The GPU machine has one H200; with two fake devices the second job would take the
    # emptier device 1, so the dry run serves device 0 of the fixture alone (a copy that
    # coordinator_e2e.py edits while the jobs run, as NVML would show their processes).
    if UUID0=$("$PY" - "$FAKE_SRC" "$FAKE" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
device = dict(sorted(doc["devices"], key=lambda d: d["index"])[0], processes=[])
json.dump({"devices": [device]}, open(sys.argv[2], "w"), indent=2)
print(device["uuid"])
EOF
    ) && [ -n "$UUID0" ]; then
        pass "fake inventory $FAKE from $FAKE_SRC: device 0 is $UUID0"
    else
        fail "cannot derive a fake inventory from $FAKE_SRC"
        UUID0=
    fi
    for what in "nvidia-smi -L" "contract tests (NVML half required)" "NVML sample as JSON" \
        "torch binding job, standalone" "torch binding job refuses a wrong assignment"; do
        section "$what"
        skip "dry run"
    done
else
section "nvidia-smi -L"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L || warn "nvidia-smi -L failed"
    nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,mig.mode.current \
        --format=csv 2>/dev/null || true
else
    warn "nvidia-smi not on PATH"
fi

section "contract tests (NVML half required)"
PRAXIST_REQUIRE_NVML=1 timeout "$(cap 240 60)" "$PY" -m pytest -q -rs --tb=short -p no:cacheprovider \
    tests/adapters/test_gpu_inventory.py 2>&1 | tee "$LOGS/pytest.log"
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
    pass "pytest tests/adapters/test_gpu_inventory.py (PRAXIST_REQUIRE_NVML=1)"
else
    fail "pytest tests/adapters/test_gpu_inventory.py"
fi
if grep -q "SKIPPED" "$LOGS/pytest.log"; then
    fail "some inventory tests were skipped on the GPU machine"
fi

section "NVML sample as JSON"
UUID_FILE=$LOGS/uuid0 check_py nvml_sample <<'EOF'
import dataclasses, json, os
from praxist_fs.adapters.gpus import open_inventory
inv = open_inventory(None)
sample = inv.sample()
inv.close()
print(json.dumps(dataclasses.asdict(sample), indent=2))
ok = sample.source == "nvml" and sample.error is None and len(sample.devices) >= 1
print(("PASS" if ok else "FAIL"), f"open_inventory(None): source={sample.source} "
      f"devices={len(sample.devices)} error={sample.error}")
if sample.devices:
    d = sample.devices[0]
    print("PASS" if d.uuid.startswith("GPU-") else "FAIL", f"device 0 uuid {d.uuid}")
    print("INFO device 0:", d.name, f"{d.memory_total_mib:.0f} MiB",
          f"mig_mode={d.mig_mode} processes_visible={d.processes_visible}")
    with open(os.environ["UUID_FILE"], "w") as f:
        f.write(d.uuid)
EOF
UUID0=$(cat "$LOGS/uuid0" 2>/dev/null || true)
export UUID0

section "torch binding job, standalone, bound to device 0 by UUID"
if [ -z "$UUID0" ]; then
    fail "no NVML UUID for device 0; skipping the torch checks"
else
    check_py torch_standalone <<'EOF'
# Runs the job with CUDA_VISIBLE_DEVICES=<NVML uuid of device 0> and watches
# NVML while it runs: binding, memory accounting, utilization, pid attribution.
import json, os, subprocess, sys, time
from praxist_fs.adapters.gpus import NvmlInventory

uuid0 = os.environ["UUID0"]
inv = NvmlInventory()
def dev0():
    s = inv.sample()
    return next((d for d in s.devices if d.uuid == uuid0), None), s.error
before, err = dev0()
print(f"INFO before: used={before.memory_used_mib:.0f} MiB util={before.utilization_pct}% "
      f"processes={[(p.pid, p.used_memory_mib) for p in before.processes]} error={err}")
env = dict(os.environ, CUDA_VISIBLE_DEVICES=uuid0, PRAXIST_ASSIGNED_GPU_UUIDS=uuid0)
start = time.monotonic()
job = subprocess.Popen([sys.executable, "tests/gpu/torch_binding_job.py",
                        "--memory-gb", "4", "--seconds", os.environ["GPU_CHECK_JOB_SECONDS"]],
                       env=env, stdout=subprocess.PIPE, text=True)
max_used, max_util, seen, all_pids, proc_rows = before.memory_used_mib, 0.0, False, set(), []
while job.poll() is None and time.monotonic() - start < 120:
    d, err = dev0()
    if d is not None:
        max_used = max(max_used, d.memory_used_mib)
        max_util = max(max_util, d.utilization_pct)
        all_pids.update(p.pid for p in d.processes)
        for p in d.processes:
            if p.pid == job.pid:
                seen = True
                proc_rows.append((round(time.monotonic() - start, 1), p.used_memory_mib, p.sm_util_pct))
    time.sleep(0.5)
try:
    out, _ = job.communicate(timeout=60)
except subprocess.TimeoutExpired:
    job.kill(); out, _ = job.communicate()
inv.close()
print("INFO job output:", out.strip())
try:
    report = json.loads(out.strip().splitlines()[-1])
except Exception as exc:
    report = {}
    print("FAIL job printed no JSON:", exc)
print("PASS" if job.returncode == 0 else "FAIL", f"torch job exit code {job.returncode}")
print("PASS" if report.get("binding_ok") else "FAIL", f"binding_ok={report.get('binding_ok')}")
print("PASS" if report.get("device_count") == 1 else "FAIL",
      f"torch device_count={report.get('device_count')} with CUDA_VISIBLE_DEVICES=<uuid>")
tu = (report.get("torch_uuid") or "").lower()
print("PASS" if tu == uuid0.lower() else "FAIL", f"torch uuid {report.get('torch_uuid')} == NVML uuid {uuid0}")
delta = max_used - before.memory_used_mib
print("PASS" if delta >= 3 * 1024 else "FAIL", f"NVML device memory rose by {delta:.0f} MiB (>= 3072 expected for a 4 GiB job)")
print("PASS" if max_util >= 10 else "FAIL", f"NVML device utilization peaked at {max_util}% while the job ran")
if seen:
    print(f"PASS NVML attributed job pid {job.pid}; (t, used MiB, sm%) samples: {proc_rows[:3]} ... {proc_rows[-3:]}")
    print("PASS" if any(r[2] is not None for r in proc_rows) else "WARN",
          "per-process SM utilization reported at least once")
else:
    print(f"WARN NVML never listed job pid {job.pid} (pids seen: {sorted(all_pids)}); "
          "pid namespaces? attribution would be 'unavailable'")
EOF
fi

section "torch binding job refuses a wrong assignment"
if [ -n "$UUID0" ]; then
    BOGUS=GPU-00000000-0000-0000-0000-000000000000
    OUTPUT=$(CUDA_VISIBLE_DEVICES=$UUID0 PRAXIST_ASSIGNED_GPU_UUIDS=$BOGUS \
        timeout "$(cap 120 60)" "$PY" tests/gpu/torch_binding_job.py --seconds 1 2>"$LOGS/torch_wrong.err")
    RC=$?
    echo "$OUTPUT"
    if [ "$RC" -eq 3 ]; then pass "wrong assignment -> exit 3"; else fail "wrong assignment -> exit $RC (want 3)"; fi
fi

fi  # the NVML and torch sections (not in a dry run)

section "coordinator end-to-end: serve on real NVML, two torch_small jobs share device 0, too_big waits, SIGTERM"
if [ "$DRY" = 1 ]; then echo "(dry run: fake inventory $FAKE, shell jobs of ${JOB_SECONDS}s)"; fi
if [ -z "$UUID0" ]; then
    fail "coordinator end-to-end not run: no UUID for device 0"
elif [ "$(left)" -lt $(( JOB_SECONDS + 60 )) ]; then
    fail "coordinator end-to-end not run: only $(left)s left of the ${BUDGET}s budget"
else
    E2E=(--uuid "$UUID0" --logs "$LOGS" --job-seconds "$JOB_SECONDS" --python "$PY")
    if [ "$DRY" = 1 ]; then E2E+=(--dry --fake-gpus "$FAKE"); fi
    check_cmd coordinator_e2e "$(cap $(( JOB_SECONDS + 240 )) 40)" \
        "$PY" tests/gpu/coordinator_e2e.py coordinator "${E2E[@]}"
fi

section "praxist-fs profile of one torch job (CUDA_VISIBLE_DEVICES=<uuid of device 0>)"
if [ -z "$UUID0" ]; then
    fail "profile not run: no UUID for device 0"
elif [ "$(left)" -lt $(( JOB_SECONDS + 30 )) ]; then
    fail "profile not run: only $(left)s left of the ${BUDGET}s budget"
else
    PROFILE=(--uuid "$UUID0" --logs "$LOGS" --job-seconds "$JOB_SECONDS" --python "$PY"
             --out "$ARTIFACTS/profile.jsonl")
    if [ "$DRY" = 1 ]; then PROFILE+=(--dry --fake-gpus "$FAKE"); fi
    check_cmd profile "$(cap $(( JOB_SECONDS + 120 )) 5)" \
        "$PY" tests/gpu/coordinator_e2e.py profile "${PROFILE[@]}"
fi

section "summary"
PASSED=$(grep -c '^PASS ' "$RESULTS")
FAILED=$(grep -c '^FAIL ' "$RESULTS")
WARNED=$(grep -c '^WARN ' "$RESULTS")
grep -E '^(FAIL|WARN) ' "$RESULTS" | sed 's/^/  /'
echo "warnings: $WARNED; logs: $LOGS$([ -n "${OUT:-}" ] && echo " (packed into $OUT/gpu_check_logs.tar.gz)")"
if [ "$DRY" = 1 ]; then echo "DRY RUN: orchestration only, no GPU was used"; fi
echo "GPU CHECK: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
