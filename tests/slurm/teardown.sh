#!/bin/sh
# Stop what tests/slurm/setup.sh started: the slurmd of each node, slurmctld (munged stays: other users of
# this host may rely on it). Idempotent.
set -u
dir=${PRAXIST_SLURM_DIR:-/tmp/praxist-slurm}
for daemon in slurmd-ci0 slurmd-ci1 slurmd slurmctld; do  # slurmd: an older setup's
    pidfile=$dir/$daemon.pid
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
done
exit 0
