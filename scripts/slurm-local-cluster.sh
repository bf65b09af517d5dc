#!/usr/bin/env bash
# A throw-away single-node Slurm on this machine, for testing the workflow's Slurm profile.
#
#   scripts/slurm-local-cluster.sh start [DIR]    start slurmctld + slurmd, wait until the node is idle
#   scripts/slurm-local-cluster.sh status [DIR]   sinfo / squeue
#   scripts/slurm-local-cluster.sh stop [DIR]     stop both daemons (by their PIDs) and remove the config
#
# DIR (default $SLURM_LOCAL_DIR or /tmp/slurm-local) holds state, spool, PID files and logs.
# Needs root and Debian's `slurm-wlm` (apt-get install -y slurm-wlm); no munge, no systemd,
# no cgroups, no accounting database: AuthType=auth/none, ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, AccountingStorageType=accounting_storage/none.
#
# The config is also installed at /etc/slurm/slurm.conf, because snakemake's Slurm job step
# clears every SLURM_* variable (SLURM_CONF too) before its inner `srun`. An existing
# /etc/slurm/slurm.conf that this script did not write is never overwritten (exit 3).
# Without accounting `sacct` does not work: run snakemake with --slurm-status-command squeue.
# Never use this on a real cluster node.
set -euo pipefail

cmd=${1:-}
DIR=${2:-${SLURM_LOCAL_DIR:-/tmp/slurm-local}}
ETC=/etc/slurm/slurm.conf
MARK="# written by slurm-local-cluster.sh"
CONF="$DIR/slurm.conf"

die() { echo "slurm-local-cluster: $*" >&2; exit "${2:-1}"; }

write_conf() {
    local host cpus mem_kb mem_mb
    host=$(hostname -s)
    cpus=$(nproc)
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    mem_mb=$(( mem_kb * 9 / 10 / 1024 ))
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
    cat > "$CONF" <<EOF
$MARK (DIR=$DIR)
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=300
KillWait=30
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-6817}
SlurmdPort=${SLURM_LOCAL_D_PORT:-6818}
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

install_conf() {
    mkdir -p /etc/slurm
    if [ -e "$ETC" ] && ! head -n 1 "$ETC" | grep -qF "$MARK"; then
        die "$ETC exists and was not written by this script; not touching it" 3
    fi
    cp "$CONF" "$ETC"
}

node_state() { SLURM_CONF=$CONF timeout 5 sinfo -h -o %t 2>/dev/null | head -n 1; }

stop_pid() {  # stop_pid NAME: SIGTERM the daemon whose PID we saved, then SIGKILL if needed
    local f="$DIR/$1.launch.pid" pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

case "$cmd" in
start)
    [ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs as their users)" 2
    for b in slurmctld slurmd sinfo sbatch squeue; do
        command -v "$b" >/dev/null || die "$b not found; install Debian's slurm-wlm (apt-get install -y slurm-wlm)" 2
    done
    if [ -f "$DIR/slurmctld.launch.pid" ] && kill -0 "$(cat "$DIR/slurmctld.launch.pid")" 2>/dev/null; then
        die "already running under $DIR (stop it first)" 4
    fi
    write_conf
    install_conf
    # -D: stay in the foreground (we keep the PIDs); -c: clear old state; -i: ignore stale state
    nohup slurmctld -D -c -i -f "$CONF" > "$DIR/log/slurmctld.out" 2>&1 &
    echo $! > "$DIR/slurmctld.launch.pid"
    nohup slurmd -D -f "$CONF" > "$DIR/log/slurmd.out" 2>&1 &
    echo $! > "$DIR/slurmd.launch.pid"
    for _ in $(seq 150); do
        state=$(node_state || true)
        case "$state" in
        idle*) echo "slurm-local-cluster: node $(hostname -s) idle (config $CONF, logs $DIR/log)"; exit 0 ;;
        down* | drain*) SLURM_CONF=$CONF scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true ;;
        esac
        for d in slurmctld slurmd; do
            kill -0 "$(cat "$DIR/$d.launch.pid")" 2>/dev/null || {
                tail -n 20 "$DIR/log/$d.out" "$DIR/log/$d.log" >&2 2>/dev/null || true
                stop_pid slurmctld; stop_pid slurmd
                die "$d exited during start-up (logs above)" 5
            }
        done
        sleep 0.2
    done
    tail -n 20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 2>/dev/null || true
    stop_pid slurmctld; stop_pid slurmd
    die "the node did not become idle within 30 s (state: ${state:-none})" 5
    ;;
stop)
    if [ -f "$DIR/slurmctld.launch.pid" ] || [ -f "$DIR/slurmd.launch.pid" ]; then
        SLURM_CONF=$CONF timeout 5 scancel --user=root >/dev/null 2>&1 || true
    fi
    stop_pid slurmd
    stop_pid slurmctld
    if [ -e "$ETC" ] && head -n 1 "$ETC" | grep -qF "$MARK (DIR=$DIR)"; then rm -f "$ETC"; fi
    echo "slurm-local-cluster: stopped ($DIR)"
    ;;
status)
    SLURM_CONF=$CONF sinfo && SLURM_CONF=$CONF squeue
    ;;
*)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || exit 2
    ;;
esac
