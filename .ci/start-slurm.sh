#!/usr/bin/env bash
# Start a real single-node Slurm cluster with accounting on this machine (Debian 12, run as root).
#
#   sudo .ci/start-slurm.sh            # installs what is missing, starts what is not running, waits until ready
#
# Idempotent: every step checks first, so a second run on a running cluster only re-checks and returns.
# Services: munged, MariaDB (mysqld_safe), slurmdbd (accounting, so that `sacct` and NeMo-Run's status work),
# slurmctld and slurmd for one node named `$(hostname -s)` with CPUs = nproc.
# The submitting user (SLURM_SUBMIT_USER, default: the sudo caller or the current user) is registered with
# sacctmgr under the account SLURM_ACCOUNT so that `sbatch --account=...` from the presets is accepted.
#
# Environment overrides: SLURM_CLUSTER_NAME (nemo-ci), SLURM_ACCOUNT (ci), SLURM_PARTITION (debug),
# SLURM_SUBMIT_USER, SLURM_READY_TIMEOUT (seconds, 120).
set -euo pipefail

CLUSTER=${SLURM_CLUSTER_NAME:-nemo-ci}
ACCOUNT=${SLURM_ACCOUNT:-ci}
PARTITION=${SLURM_PARTITION:-debug}
SUBMIT_USER=${SLURM_SUBMIT_USER:-${SUDO_USER:-$(id -un)}}
READY_TIMEOUT=${SLURM_READY_TIMEOUT:-120}
NODE=$(hostname -s)
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
START=$(date +%s)

log() { printf '[start-slurm %3ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf '[start-slurm] ERROR: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (it installs packages and starts system daemons): sudo $0"

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local timeout=$1 what=$2; shift 2
    local deadline=$(($(date +%s) + timeout))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${timeout}s waiting for $what"
        sleep 0.5
    done
}

running() {  # running PIDFILE: the process named in PIDFILE is alive
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# ---- 1. packages ----
missing=()
for cmd_pkg in slurmctld:slurm-wlm slurmd:slurm-wlm sbatch:slurm-wlm munged:munge slurmdbd:slurmdbd \
               mysqld_safe:mariadb-server; do
    command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || missing+=("${cmd_pkg#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: slurm-wlm munge slurmdbd mariadb-server"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends slurm-wlm munge slurmdbd mariadb-server >/dev/null
fi
# The Debian packages create the `slurm` and `munge` users; fall back to root where they are missing.
SLURM_USER=slurm
id -u "$SLURM_USER" >/dev/null 2>&1 || SLURM_USER=root

# ---- 2. munge ----
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating the munge key"
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    wait_for 20 munged sh -c 'munge -n | unmunge'
fi

# ---- 3. MariaDB and the accounting database ----
install -d -o mysql -g mysql -m 0755 /run/mysqld
if [ ! -d /var/lib/mysql/mysql ]; then
    log "initialising the MariaDB data directory"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
fi
if ! mysqladmin --protocol=socket ping >/dev/null 2>&1; then
    log "starting MariaDB"
    setsid nohup mysqld_safe --user=mysql >/var/log/mysqld_safe.log 2>&1 < /dev/null &
    wait_for 60 MariaDB mysqladmin --protocol=socket ping
fi
# slurmdbd runs as $SLURM_USER and logs in through the Unix socket (unix_socket authentication): no password at all.
mysql --protocol=socket <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS '${SLURM_USER}'@'localhost' IDENTIFIED VIA unix_socket;
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO '${SLURM_USER}'@'localhost';
SQL

# ---- 4. configuration ----
install -d -m 0755 "$CONF_DIR"
install -d -o "$SLURM_USER" -m 0755 "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /var/lib/slurm
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
FAKE_GPUS=2

write_if_changed() {  # write_if_changed FILE MODE OWNER < content; prints "changed" when the file was rewritten
    local file=$1 mode=$2 owner=$3 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then
        rm -f "$tmp"
    else
        install -m "$mode" -o "$owner" "$tmp" "$file"
        rm -f "$tmp"
        echo changed
    fi
}

dbd_changed=$(write_if_changed "$CONF_DIR/slurmdbd.conf" 0600 "$SLURM_USER" <<EOF
# Written by nemo-recipes .ci/start-slurm.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=${SLURM_USER}
PidFile=/run/slurmdbd.pid
LogFile=${LOG_DIR}/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=${SLURM_USER}
StorageLoc=slurm_acct_db
EOF
)

conf_changed=$(write_if_changed "$CONF_DIR/slurm.conf" 0644 root <<EOF
# Written by nemo-recipes .ci/start-slurm.sh: one node, CPU only, with accounting.
ClusterName=${CLUSTER}
SlurmctldHost=${NODE}
SlurmUser=${SLURM_USER}
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
MinJobAge=300
KillWait=5
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
# Two count-only GPUs (gres.conf, no device files): recipes that train on GPUs are refused on an executor that asks
# for none (executors/plugin.py), so the launch tests ask for one; nothing in CI touches a GPU.
GresTypes=gpu
NodeName=${NODE} CPUs=${CPUS} RealMemory=${MEM_MB} Gres=gpu:${FAKE_GPUS} State=UNKNOWN
# Small test jobs share the few cores of a CI machine instead of queueing behind each other.
PartitionName=${PARTITION} Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
)

gres_changed=$(write_if_changed "$CONF_DIR/gres.conf" 0644 root <<EOF
# Written by nemo-recipes .ci/start-slurm.sh: GPUs Slurm counts and hands out, with no GPU behind them. slurmd's gpu
# plugin counts device files, so each is a character device every machine has (task/none constrains nothing).
NodeName=${NODE} Name=gpu File=/dev/null
NodeName=${NODE} Name=gpu File=/dev/zero
EOF
)
conf_changed="${conf_changed}${gres_changed}"

# ---- 5. slurmdbd and the cluster, account and user records ----
if [ -n "$dbd_changed" ] && running /run/slurmdbd.pid; then
    log "slurmdbd.conf changed: restarting slurmdbd"
    kill "$(cat /run/slurmdbd.pid)"; sleep 1
fi
if ! running /run/slurmdbd.pid; then
    log "starting slurmdbd"
    slurmdbd
fi
wait_for 60 slurmdbd sacctmgr -n show cluster
sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null
sacctmgr -n -P show account format=account | grep -qx "$ACCOUNT" \
    || sacctmgr -i -Q add account "$ACCOUNT" Cluster="$CLUSTER" Description="nemo-recipes CI" Organization=ci >/dev/null
for user in $(printf '%s\n' root "$SUBMIT_USER" | sort -u); do
    sacctmgr -n -P show assoc where user="$user" account="$ACCOUNT" cluster="$CLUSTER" format=user | grep -qx "$user" \
        || sacctmgr -i -Q add user "$user" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
done

# ---- 6. slurmctld and slurmd ----
if [ -n "$conf_changed" ]; then
    for daemon in slurmctld slurmd; do
        if running "/run/$daemon.pid"; then
            log "slurm.conf changed: restarting $daemon"
            kill "$(cat "/run/$daemon.pid")"
        fi
    done
    # A stopping slurmctld saves its state first: start the new ones only once the old ones are gone (bounded).
    for _ in $(seq 60); do
        running /run/slurmctld.pid || running /run/slurmd.pid || break
        sleep 0.5
    done
fi
if ! running /run/slurmctld.pid; then
    log "starting slurmctld"
    slurmctld
fi
if ! running /run/slurmd.pid; then
    log "starting slurmd"
    slurmd
fi

# ---- 7. ready: the node accepts jobs and accounting answers ----
wait_for 30 slurmctld scontrol ping
node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n1; }
deadline=$(($(date +%s) + READY_TIMEOUT))
while :; do
    state=$(node_state)
    case "$state" in
        idle|mixed|allocated|completing) break ;;
        down*|drain*|fail*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    [ "$(date +%s)" -lt "$deadline" ] || die "node $NODE is '$state' after ${READY_TIMEOUT}s (see $LOG_DIR)"
    sleep 0.5
done
wait_for 30 "sacct" sacct -n -X -S now-1hour
log "ready: cluster $CLUSTER, node $NODE ($state, $CPUS CPUs, ${MEM_MB} MB), partition $PARTITION," \
    "account $ACCOUNT for user(s) $(printf '%s ' root "$SUBMIT_USER" | tr ' ' '\n' | sort -u | tr '\n' ' ')"
