#!/bin/sh
# A real Slurm on this host for the Slurm backend's tests (as root; idempotent).
# Installs slurmctld, slurmd, slurm-client and munge with apt-get when missing, writes
# slurm.conf and gres.conf into $PRAXIST_SLURM_DIR (default /tmp/praxist-slurm): node
# ci0 (two fake GPUs, feature fast), alone in the default partition main, and node ci1, a second
# slurmd on its own port, which shares partition pair with ci0 (where the node
# registry's tests need a node that is not the last); starts munged, slurmctld and a
# slurmd per node, waits until both nodes are idle, and prints SLURM_CONF=<path> on
# its last line.
# The recipe, measured on Debian 12 / Slurm 22.05: docs/OPERATIONS.md, "Running on Slurm", "Testing".
# Exit 77: Slurm cannot be had here (not root, no apt-get), or PRAXIST_NO_SLURM is set
# (a developer sharing the machine with a suite that holds the one Slurm); the reason
# is on stderr.
set -eu
dir=${PRAXIST_SLURM_DIR:-/tmp/praxist-slurm}
conf=$dir/slurm.conf
say() { echo "slurm setup: $*" >&2; }

if [ -n "${PRAXIST_NO_SLURM:-}" ]; then say "PRAXIST_NO_SLURM is set (one real Slurm per machine)"; exit 77; fi
if [ "$(id -u)" != 0 ]; then say "needs root (to install packages and start slurmd)"; exit 77; fi
all_idle() { [ "$(SLURM_CONF=$conf timeout 15 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ')" = "ci0 idle ci1 idle " ]; }
host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool-ci0" "$dir/spool-ci1" "$dir/log"
cat >"$conf.new" <<CONF
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
AccountingStorageType=accounting_storage/none
SchedulerParameters=batch_sched_delay=0
ReturnToService=1
KillWait=2
MinJobAge=300
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=ci0 NodeAddr=127.0.0.1 NodeHostname=$host Port=6818 CPUs=4 RealMemory=8000 Gres=gpu:fake:2 Features=fast
NodeName=ci1 NodeAddr=127.0.0.1 NodeHostname=$host Port=6819 CPUs=4 RealMemory=8000
PartitionName=main Nodes=ci0 Default=YES MaxTime=INFINITE State=UP
PartitionName=pair Nodes=ci0,ci1 MaxTime=INFINITE State=UP
CONF
cat >"$dir/gres.conf.new" <<CONF
AutoDetect=off
NodeName=ci0 Name=gpu Type=fake File=/dev/null
NodeName=ci0 Name=gpu Type=fake File=/dev/zero
CONF

if [ -f "$conf" ] && cmp -s "$conf" "$conf.new" && cmp -s "$dir/gres.conf" "$dir/gres.conf.new" \
        && all_idle; then
    rm -f "$conf.new" "$dir/gres.conf.new"; echo "SLURM_CONF=$conf"; exit 0  # already up
fi
# another configuration (an older setup's) is replaced: its daemons stop first
[ -f "$conf" ] && ! cmp -s "$conf" "$conf.new" && "$(dirname "$0")/teardown.sh"
mv "$conf.new" "$conf"; mv "$dir/gres.conf.new" "$dir/gres.conf"
missing=
for tool in slurmctld slurmd sbatch munged; do command -v $tool >/dev/null || missing=yes; done
if [ -n "$missing" ]; then
    if ! command -v apt-get >/dev/null; then say "Slurm is not installed and there is no apt-get"; exit 77; fi
    export DEBIAN_FRONTEND=noninteractive
    apt="apt-get -o Acquire::Retries=1 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20"
    if ! $apt install -y --no-install-recommends slurmctld slurmd slurm-client munge >&2; then
        $apt update >&2 || true
        $apt install -y --no-install-recommends slurmctld slurmd slurm-client munge >&2 \
            || { say "apt-get could not install slurmctld slurmd slurm-client munge"; exit 77; }
    fi
fi

# munge: a key (0400 munge:munge), its directories, the daemon as munge.
[ -f /etc/munge/munge.key ] || mungekey --create >&2
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m0755 /run/munge
install -d -o munge -g munge -m0700 /var/log/munge /var/lib/munge
if ! munge -n </dev/null >/dev/null 2>&1; then
    runuser -u munge -- munged
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.1; done
fi

export SLURM_CONF=$conf
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
pid_alive "$dir/slurmctld.pid" || slurmctld
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
for node in ci0 ci1; do pid_alive "$dir/slurmd-$node.pid" || slurmd -N $node; done
for _ in $(seq 300); do
    all_idle && { echo "SLURM_CONF=$conf"; exit 0; }
    for node in $(sinfo -h -N -t down,drain -o %N 2>/dev/null); do
        scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    done
    sleep 0.1
done
say "the nodes did not become idle in 30 s (sinfo says '$(sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')'); logs in $dir/log"
exit 1
