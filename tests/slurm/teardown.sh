#!/bin/sh
# Stop all that tests/slurm/setup.sh started in $PRAXIST_SLURM_DIR, and nothing else:
# its jobs (cancelled while slurmd can still end them), each slurmd, slurmctld and its
# munged; then whatever of it still runs: a daemon with this Slurm's configuration or
# munge socket on its command line, or a process with this Slurm's SLURM_CONF in its
# environment (a slurmstepd, a job). Names on stderr what it had to kill; exits 1 if something survived. Idempotent.
set -u
dir=${PRAXIST_SLURM_DIR:?"the directory that setup.sh used"}
dir=$(cd "$dir" 2>/dev/null && pwd) || exit 0  # never set up: nothing runs
conf=$dir/slurm.conf
# Our own environment must not match the sweep below (nor the subshells that inherit it).
if [ -n "${SLURM_CONF+set}" ]; then exec env -u SLURM_CONF "$0" "$@"; fi
say() { echo "slurm teardown: $*" >&2; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if alive "$dir/slurmctld.pid"; then
    jobs=$(SLURM_CONF=$conf timeout 15 squeue -h -o %i 2>/dev/null)
    [ -z "$jobs" ] || SLURM_CONF=$conf timeout 15 scancel $jobs 2>/dev/null
    for _ in $(seq 150); do
        [ -z "$(SLURM_CONF=$conf timeout 15 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.1
    done
fi
# SIGTERM to each daemon named, then wait (10 s at most) for all of them to end: each
# takes 1.4-2.6 s to: one after the other the four took 8 s of each test worker's end,
# two groups 3.6 s.
stop() {
    pids=
    for daemon in "$@"; do
        pidfile=$dir/$daemon
        case $daemon in slurm*) pidfile=$pidfile.pid ;; esac
        alive "$pidfile" || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null && pids="$pids $pid"
    done
    for _ in $(seq 100); do
        running=
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && running=yes; done
        [ -z "$running" ] && break
        sleep 0.1
    done
}
# the nodes first, while their controller and munge still answer their last messages;
# then the controller, whose state save needs munge no more, with munge
stop slurmd-ci0 slurmd-ci1
stop slurmctld munge/pid

ours() {
    for proc in /proc/[0-9]*; do
        [ "${proc#/proc/}" = $$ ] && continue
        case " $(tr '\0' ' ' 2>/dev/null <"$proc/cmdline")" in
            *" -f $conf "*|*" --socket=$dir/munge/socket "*) echo "${proc#/proc/}"; continue ;;
        esac
        tr '\0' '\n' 2>/dev/null <"$proc/environ" | grep -qxF "SLURM_CONF=$conf" && echo "${proc#/proc/}"
    done
}
left=$(ours)
[ -z "$left" ] && exit 0
for pid in $left; do
    say "still running, killed: $pid $(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline")"
    kill -KILL "$pid" 2>/dev/null
done
for _ in $(seq 50); do left=$(ours); [ -z "$left" ] && exit 0; sleep 0.1; done
say "could not stop: $left"
exit 1
