#!/bin/sh
# A private Slurm on this host for the Slurm backend's tests (as root; idempotent), beside
# any other Slurm or munge on the machine: everything of it lives in $PRAXIST_SLURM_DIR
# (default: a fresh `mktemp -d`) and listens on ports that were free when it started.
# Installs slurmctld, slurmd, slurm-client and munge with apt-get when missing (with a
# policy-rc.d that keeps the packages from starting the system's own daemons); writes a
# munge key, slurm.conf and gres.conf into the directory: node ci0 (two fake GPUs,
# feature fast), alone in the default partition main, and node ci1, a second slurmd on
# its own port, which shares partition pair with ci0 (where the node registry's tests
# need a node that is not the last); starts a munged of its own (its own key and
# socket), slurmctld and a slurmd per node, each with the directory on its command line,
# waits until both nodes are idle, and prints SLURM_CONF=<path> on its last line.
# tests/slurm/teardown.sh, given the same directory, stops all of it.
# The recipe, measured on Debian 12 / Slurm 22.05: docs/OPERATIONS.md, "Running on Slurm", "Testing".
# Exit 77: Slurm cannot be had here (not root, no apt-get); the reason is on stderr.
set -eu
say() { echo "slurm setup: $*" >&2; }

if [ "$(id -u)" != 0 ]; then say "needs root (to install packages and start slurmd)"; exit 77; fi
dir=${PRAXIST_SLURM_DIR:-$(mktemp -d /tmp/praxist-slurm.XXXXXX)}
mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
conf=$dir/slurm.conf
export SLURM_CONF=$conf
all_idle() { [ "$(timeout 15 sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ')" = "ci0 idle ci1 idle " ]; }
if [ -f "$conf" ] && all_idle; then echo "SLURM_CONF=$conf"; exit 0; fi  # already up
[ -f "$conf" ] && PRAXIST_SLURM_DIR=$dir "$(dirname "$0")/teardown.sh"  # half up: anew

missing=
for tool in slurmctld slurmd sbatch munged mungekey; do command -v $tool >/dev/null || missing=yes; done
if [ -n "$missing" ]; then
    if ! command -v apt-get >/dev/null; then say "Slurm is not installed and there is no apt-get"; exit 77; fi
    export DEBIAN_FRONTEND=noninteractive
    apt="apt-get -o Acquire::Retries=1 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20"
    packages="slurmctld slurmd slurm-client munge"
    policy=/usr/sbin/policy-rc.d  # Debian's switch: exit 101 = start no service now
    own_policy=
    if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' >$policy; chmod 755 $policy; own_policy=yes; fi
    installed=yes
    $apt install -y --no-install-recommends $packages >&2 \
        || { $apt update >&2 || true; $apt install -y --no-install-recommends $packages >&2; } \
        || installed=
    [ -z "$own_policy" ] || rm -f $policy
    [ -n "$installed" ] || { say "apt-get could not install $packages"; exit 77; }
fi

# Three ports outside the kernel's ephemeral range (where outgoing connections take
# theirs), free now: slurmctld's and one per slurmd.
set -- $(python3 - <<'PY'
import random, socket
low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
candidates = [p for p in range(10000, 30000) if not low <= p <= high]
random.shuffle(candidates)
held = []
for port in candidates:
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        continue
    held.append(sock)
    if len(held) == 3:
        break
print(*(s.getsockname()[1] for s in held))
PY
)
ctld_port=$1 ci0_port=$2 ci1_port=$3
host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool-ci0" "$dir/spool-ci1" "$dir/log" "$dir/munge"
chmod 0700 "$dir/munge"
cat >"$conf" <<CONF
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
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
NodeName=ci0 NodeAddr=127.0.0.1 NodeHostname=$host Port=$ci0_port CPUs=4 RealMemory=8000 Gres=gpu:fake:2 Features=fast
NodeName=ci1 NodeAddr=127.0.0.1 NodeHostname=$host Port=$ci1_port CPUs=4 RealMemory=8000
PartitionName=main Nodes=ci0 Default=YES MaxTime=INFINITE State=UP
PartitionName=pair Nodes=ci0,ci1 MaxTime=INFINITE State=UP
CONF
cat >"$dir/gres.conf" <<CONF
AutoDetect=off
NodeName=ci0 Name=gpu Type=fake File=/dev/null
NodeName=ci0 Name=gpu Type=fake File=/dev/zero
CONF

# munge of our own: a key (0400, root's: the daemon runs as root here), a socket, a log.
[ -f "$dir/munge/key" ] || mungekey --create --keyfile="$dir/munge/key" >&2
chmod 0400 "$dir/munge/key"
munge_ok() { munge --socket="$dir/munge/socket" -n </dev/null >/dev/null 2>&1; }
if ! munge_ok; then
    munged --force --socket="$dir/munge/socket" --key-file="$dir/munge/key" \
        --pid-file="$dir/munge/pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/seed" >&2
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
fi

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
pid_alive "$dir/slurmctld.pid" || slurmctld -f "$conf"
for _ in $(seq 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
for node in ci0 ci1; do pid_alive "$dir/slurmd-$node.pid" || slurmd -f "$conf" -N $node; done
for _ in $(seq 300); do
    all_idle && { echo "SLURM_CONF=$conf"; exit 0; }
    for node in $(sinfo -h -N -t down,drain -o %N 2>/dev/null); do
        scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    done
    sleep 0.1
done
say "the nodes did not become idle in 30 s (sinfo says '$(sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')'); logs in $dir/log"
exit 1
