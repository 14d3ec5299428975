#!/usr/bin/env bash
# Start a two-node Slurm cluster on this one machine, beside the single-node one of .ci/start-slurm.sh (as root).
#
#   sudo .ci/start-two-node-slurm.sh     # then: export SLURM_CONF=/tmp/nemo-recipes-slurm2/etc/slurm.conf; sinfo
#   sudo .ci/stop-two-node-slurm.sh      # ends every process it started, by PID, and removes bridge and namespaces
#
# Each "machine" is a network namespace with its own hostname (UTS namespace) and address on a private bridge that
# this script creates; nothing is routed off the machine:
#   bridge n2br    NET.1   the root namespace: sbatch/sacct of the tests reach slurmctld and slurmdbd through it
#   n2head         NET.10  MariaDB (its own instance, on the namespace's loopback), slurmdbd, slurmctld
#   n2node1        NET.11  slurmd
#   n2node2        NET.12  slurmd
# The cluster has its own name, ports, state, logs and database, so the single-node cluster in /etc/slurm keeps
# running untouched. Clients outside the namespaces find it through SLURM_CONF; inside them the config directory is
# bind-mounted over /etc/slurm, so that srun/scontrol in a job find it with or without SLURM_CONF.
#
# Idempotent: each step checks first; on a running cluster a second run only re-checks (and brings back a node that
# is down, which is how the tests restore a node they killed).
#
# Environment overrides: SLURM2_BASE (/tmp/nemo-recipes-slurm2), SLURM2_CLUSTER (nemo-ci2), SLURM2_ACCOUNT (ci),
# SLURM2_PARTITION (two), SLURM2_NET (10.200.0: a /24 prefix), SLURM2_SUBMIT_USER, SLURM2_READY_TIMEOUT (120).
set -euo pipefail   # no `cmd | grep -q`: grep's early exit fails the pipeline under pipefail

BASE=${SLURM2_BASE:-/tmp/nemo-recipes-slurm2}
CLUSTER=${SLURM2_CLUSTER:-nemo-ci2}
ACCOUNT=${SLURM2_ACCOUNT:-ci}
PARTITION=${SLURM2_PARTITION:-two}
NET=${SLURM2_NET:-10.200.0}
SUBMIT_USER=${SLURM2_SUBMIT_USER:-${SUDO_USER:-$(id -un)}}
READY_TIMEOUT=${SLURM2_READY_TIMEOUT:-120}
BRIDGE=n2br
HEAD=n2head
NODES=(n2node1 n2node2)
declare -A ADDR=([n2head]=$NET.10 [n2node1]=$NET.11 [n2node2]=$NET.12)
# Ports differ from the single-node cluster's defaults (6817-6819, 3306): both clusters listen at once.
CTLD_PORT=6927 SLURMD_PORT=6928 DBD_PORT=6929 DB_PORT=3326
ETC=$BASE/etc RUN=$BASE/run LOG=$BASE/log SPOOL=$BASE/spool DB_DIR=$BASE/mysql
DB_SOCK=$RUN/mysqld.sock
export SLURM_CONF=$ETC/slurm.conf
START=$(date +%s)

log() { printf '[start-two-node %3ss] %s\n' "$(($(date +%s) - START))" "$*"; }
die() { printf '[start-two-node] ERROR: %s\n' "$*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (it creates network namespaces and starts daemons): sudo $0"

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local timeout=$1 what=$2; shift 2
    local deadline=$(($(date +%s) + timeout))
    until "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || die "timed out after ${timeout}s waiting for $what (logs: $LOG)"
        sleep 0.5
    done
}

# ours PIDFILE NS: the process in PIDFILE is alive and lives in network namespace NS, so a recycled PID, or a daemon
# of the single-node cluster, is never taken for one of ours.
ours() {
    [ -s "$1" ] || return 1
    local pid; pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null && [ "$(ip netns identify "$pid" 2>/dev/null)" = "$2" ]
}

# in_ns NS CMD...: CMD inside namespace NS, with hostname NS and its own hosts file and Slurm config directory.
# Not `ip netns exec`: it remounts /sys, which hides /sys/fs/cgroup, and slurmd then refuses to start. The UTS and
# mount namespaces are private to CMD, so the root namespace's hostname, /etc/hosts and /etc/slurm stay as they are.
ENTER='hostname "$1" && mount --bind "/etc/netns/$1/hosts" /etc/hosts &&
    { [ ! -e /etc/resolv.conf ] || mount --bind "/etc/netns/$1/resolv.conf" /etc/resolv.conf; } &&
    mount --bind "$2" /etc/slurm && shift 2 && exec "$@"'
in_ns() {
    local ns=$1; shift
    nsenter --net="/run/netns/$ns" -- unshare --uts --mount --propagation private -- \
        sh -c "$ENTER" in_ns "$ns" "$ETC" "$@"
}

# ---- 1. packages (the same as the single-node cluster's, plus the namespace tools) ----
missing=()
for cmd_pkg in slurmctld:slurm-wlm slurmd:slurm-wlm munged:munge slurmdbd:slurmdbd mariadbd:mariadb-server \
               mysql:mariadb-client ip:iproute2 nsenter:util-linux unshare:util-linux; do
    command -v "${cmd_pkg%%:*}" >/dev/null 2>&1 || missing+=("${cmd_pkg#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
SLURM_USER=slurm; id -u "$SLURM_USER" >/dev/null 2>&1 || SLURM_USER=root
DB_USER=mysql; id -u "$DB_USER" >/dev/null 2>&1 || die "no 'mysql' user: is mariadb-server installed?"
install -d -m 0755 "$BASE" "$ETC" "$RUN" "$SPOOL"
install -d -o "$SLURM_USER" -m 0755 "$LOG" "$SPOOL/slurmctld"
install -d -m 0755 /etc/slurm   # the bind-mount target inside the namespaces

# ---- 2. network: the bridge, one namespace per machine, a veth pair into each ----
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    log "creating bridge $BRIDGE ($NET.1/24)"
    ip link add "$BRIDGE" type bridge
fi
ip -4 addr show dev "$BRIDGE" | grep -F "inet $NET.1/24" >/dev/null || ip addr add "$NET.1/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
hosts=$(printf '127.0.0.1 localhost\n'; for ns in "$HEAD" "${NODES[@]}"; do printf '%s %s\n' "${ADDR[$ns]}" "$ns"; done)
for ns in "$HEAD" "${NODES[@]}"; do
    [ -e "/run/netns/$ns" ] || { log "creating network namespace $ns (${ADDR[$ns]})"; ip netns add "$ns"; }
    if ! ip link show "v$ns" >/dev/null 2>&1; then
        ip -n "$ns" link del eth0 2>/dev/null || true
        ip link add "v$ns" type veth peer name eth0 netns "$ns"
    fi
    ip link set "v$ns" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" -4 addr show dev eth0 | grep -F "inet ${ADDR[$ns]}/24" >/dev/null \
        || ip -n "$ns" addr add "${ADDR[$ns]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    install -d -m 0755 "/etc/netns/$ns"
    printf '%s\n' "$hosts" >"/etc/netns/$ns/hosts"
    # A resolver on the namespace's own loopback where nothing listens: a lookup fails at once, never leaves.
    printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"/etc/netns/$ns/resolv.conf"
done

# ---- 3. munge: the machine's one munged authenticates both clusters ----
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    if [ ! -s /etc/munge/munge.key ]; then
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
    fi
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged
    wait_for 20 munged sh -c 'munge -n | unmunge'
fi

# ---- 4. configuration ----
write_if_changed() {  # write_if_changed FILE MODE OWNER < content: prints "changed" when FILE was rewritten
    local file=$1 mode=$2 owner=$3 tmp
    tmp=$(mktemp)
    cat >"$tmp"
    if [ -f "$file" ] && cmp -s "$tmp" "$file"; then rm -f "$tmp"
    else install -m "$mode" -o "$owner" "$tmp" "$file"; rm -f "$tmp"; echo changed; fi
}
[ -s "$ETC/.dbpass" ] || (umask 077; head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$ETC/.dbpass")
DB_PASS=$(cat "$ETC/.dbpass")
CPUS=$(nproc)
MEM_MB=$(awk '/MemTotal/ {print int($2 / 1024 * 0.35)}' /proc/meminfo)   # two nodes share this machine's memory
dbd_changed=$(write_if_changed "$ETC/slurmdbd.conf" 0600 "$SLURM_USER" <<EOF
# Written by nemo-recipes .ci/start-two-node-slurm.sh
AuthType=auth/munge
DbdHost=${HEAD}
DbdAddr=${ADDR[$HEAD]}
DbdPort=${DBD_PORT}
SlurmUser=${SLURM_USER}
PidFile=${RUN}/slurmdbd.pid
LogFile=${LOG}/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT}
StorageUser=slurm
StoragePass=${DB_PASS}
StorageLoc=slurm2_acct_db
EOF
)
node_lines=$(for n in "${NODES[@]}"; do
    echo "NodeName=$n NodeAddr=${ADDR[$n]} NodeHostname=$n CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"; done)
conf_changed=$(write_if_changed "$SLURM_CONF" 0644 root <<EOF
# Written by nemo-recipes .ci/start-two-node-slurm.sh: two CPU nodes in network namespaces, with accounting.
ClusterName=${CLUSTER}
SlurmctldHost=${HEAD}(${ADDR[$HEAD]})
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=${SLURM_USER}
AuthType=auth/munge
StateSaveLocation=${SPOOL}/slurmctld
SlurmdSpoolDir=${SPOOL}/slurmd-%n
SlurmctldPidFile=${RUN}/slurmctld.pid
SlurmdPidFile=${RUN}/slurmd-%n.pid
SlurmctldLogFile=${LOG}/slurmctld.log
SlurmdLogFile=${LOG}/slurmd-%n.log
PlugStackConfig=${ETC}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# A node that stops answering is DOWN after SlurmdTimeout; its jobs are then requeued (JobRequeue=1 makes batch jobs
# requeueable unless they say --no-requeue) instead of failing. ReturnToService=2: a node comes back when its slurmd
# registers again.
SlurmdTimeout=20
JobRequeue=1
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
MinJobAge=300
KillWait=5
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=${ADDR[$HEAD]}
AccountingStoragePort=${DBD_PORT}
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
${node_lines}
# Test jobs share the machine's few cores instead of queueing behind each other.
PartitionName=${PARTITION} Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
)
[ -f "$ETC/plugstack.conf" ] || : >"$ETC/plugstack.conf"   # else Slurm reads the single-node one from /etc/slurm

# ---- 5. MariaDB: a private instance on the head's loopback, its data under $BASE ----
dbq() { mysql --no-defaults --protocol=socket -S "$DB_SOCK" -u root "$@"; }
if [ ! -d "$DB_DIR/mysql" ]; then
    log "initialising MariaDB in $DB_DIR"
    install -d -o "$DB_USER" -g "$DB_USER" -m 0750 "$DB_DIR"
    mariadb-install-db --no-defaults --user="$DB_USER" --datadir="$DB_DIR" >"$LOG/mariadb-install.log" 2>&1 \
        || die "mariadb-install-db failed (see $LOG/mariadb-install.log)"
fi
chown "$DB_USER" "$RUN"
if ! ours "$RUN/mysqld.pid" "$HEAD"; then
    log "starting MariaDB in $HEAD (127.0.0.1:$DB_PORT)"
    setsid nsenter --net="/run/netns/$HEAD" -- unshare --uts --mount --propagation private -- \
        sh -c "$ENTER" in_ns "$HEAD" "$ETC" mariadbd --no-defaults --user="$DB_USER" --datadir="$DB_DIR" \
        --socket="$DB_SOCK" --pid-file="$RUN/mysqld.pid" --bind-address=127.0.0.1 --port="$DB_PORT" \
        --skip-name-resolve --log-error="$LOG/mariadb.err" </dev/null >/dev/null 2>&1 &
    wait_for 60 MariaDB dbq -e 'SELECT 1'
    wait_for 10 "MariaDB's pid file" ours "$RUN/mysqld.pid" "$HEAD"
fi
# slurmdbd connects over TCP to 127.0.0.1 (unix_socket login is the single-node cluster's way, for its own user).
dbq <<SQL
CREATE DATABASE IF NOT EXISTS slurm2_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
GRANT ALL PRIVILEGES ON slurm2_acct_db.* TO 'slurm'@'127.0.0.1';
SQL

# ---- 6. slurmdbd, then the cluster, account and user records ----
if [ -n "$dbd_changed" ] && ours "$RUN/slurmdbd.pid" "$HEAD"; then
    log "slurmdbd.conf changed: restarting slurmdbd"
    kill "$(cat "$RUN/slurmdbd.pid")"; sleep 1
fi
if ! ours "$RUN/slurmdbd.pid" "$HEAD"; then
    log "starting slurmdbd in $HEAD (${ADDR[$HEAD]}:$DBD_PORT)"
    in_ns "$HEAD" env SLURM_CONF="$SLURM_CONF" slurmdbd
fi
wait_for 60 slurmdbd sacctmgr -n show cluster
sacctmgr -n -P show cluster format=cluster | grep -x "$CLUSTER" >/dev/null \
    || sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null
sacctmgr -n -P show account format=account | grep -x "$ACCOUNT" >/dev/null \
    || sacctmgr -i -Q add account "$ACCOUNT" Cluster="$CLUSTER" Description="nemo-recipes CI, two nodes" \
        Organization=ci >/dev/null
for user in $(printf '%s\n' root "$SUBMIT_USER" | sort -u); do
    sacctmgr -n -P show assoc where user="$user" account="$ACCOUNT" cluster="$CLUSTER" format=user \
        | grep -x "$user" >/dev/null || sacctmgr -i -Q add user "$user" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null
done

# ---- 7. slurmctld on the head, one slurmd per node ----
if [ -n "$conf_changed" ]; then
    for daemon_ns in "slurmctld:$HEAD" $(for n in "${NODES[@]}"; do echo "slurmd-$n:$n"; done); do
        if ours "$RUN/${daemon_ns%%:*}.pid" "${daemon_ns#*:}"; then
            log "slurm.conf changed: restarting ${daemon_ns%%:*}"
            kill "$(cat "$RUN/${daemon_ns%%:*}.pid")"
        fi
    done
    sleep 1
fi
if ! ours "$RUN/slurmctld.pid" "$HEAD"; then
    log "starting slurmctld in $HEAD (${ADDR[$HEAD]}:$CTLD_PORT)"
    in_ns "$HEAD" env SLURM_CONF="$SLURM_CONF" slurmctld
fi
for n in "${NODES[@]}"; do
    install -d -m 0755 "$SPOOL/slurmd-$n"
    if ! ours "$RUN/slurmd-$n.pid" "$n"; then
        log "starting slurmd in $n (${ADDR[$n]})"
        in_ns "$n" env SLURM_CONF="$SLURM_CONF" slurmd -N "$n"
    fi
done

# ---- 8. ready: both nodes take jobs (a node left DOWN or DRAINED by a test is resumed) and accounting answers ----
wait_for 30 slurmctld scontrol ping
deadline=$(($(date +%s) + READY_TIMEOUT))
for n in "${NODES[@]}"; do
    while :; do
        state=$(sinfo -h -n "$n" -o %T 2>/dev/null | head -n1)
        case "$state" in
            idle|mixed|allocated|completing) break ;;
            down*|drain*|fail*) scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        [ "$(date +%s)" -lt "$deadline" ] || die "node $n is '$state' after ${READY_TIMEOUT}s (logs: $LOG)"
        sleep 0.5
    done
done
wait_for 30 sacct sacct -n -X -S now-1hour
log "ready: cluster $CLUSTER, nodes ${NODES[*]} ($CPUS CPUs, $MEM_MB MB each), partition $PARTITION, account" \
    "$ACCOUNT; clients: export SLURM_CONF=$SLURM_CONF"
