#!/usr/bin/env bash
# Stop the two-node cluster of .ci/start-two-node-slurm.sh (as root): every process inside its network namespaces
# (slurmd, job steps, slurmctld, slurmdbd, MariaDB) is ended by PID, then the namespaces, the bridge and their hosts
# files are removed. The single-node cluster and munged (shared with it) keep running.
#
#   sudo .ci/stop-two-node-slurm.sh            # keeps the database, configuration and logs under SLURM2_BASE
#   sudo .ci/stop-two-node-slurm.sh --purge    # removes them too: the next start is from scratch
set -uo pipefail

BASE=${SLURM2_BASE:-/tmp/nemo-recipes-slurm2}
BRIDGE=n2br
NAMESPACES=(n2node1 n2node2 n2head)   # nodes first: jobs end before the controller that records them
PURGE=0; [ "${1:-}" = "--purge" ] && PURGE=1
log() { printf '[stop-two-node] %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }

# The PIDs of the processes in network namespace NS (none when it does not exist).
ns_pids() { [ -e "/run/netns/$1" ] && ip netns pids "$1" 2>/dev/null | tr '\n' ' '; }

stop_pids() {  # stop_pids WHAT PID...: TERM, up to 20 s to exit, then KILL
    local what=$1; shift
    [ $# -gt 0 ] || return 0
    log "stopping $what: PIDs $*"
    kill -TERM "$@" 2>/dev/null
    local alive
    for _ in $(seq 40); do
        alive=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        [ ${#alive[@]} -eq 0 ] && return 0
        sleep 0.5
    done
    log "still running after 20 s, killing: ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null
}

for ns in "${NAMESPACES[@]}"; do
    # shellcheck disable=SC2046
    if [ "$ns" = n2head ] && [ -s "$BASE/run/mysqld.pid" ]; then
        # MariaDB last, so that slurmdbd can still write to it while it stops.
        db=$(cat "$BASE/run/mysqld.pid")
        stop_pids "Slurm daemons in $ns" $(for p in $(ns_pids "$ns"); do [ "$p" = "$db" ] || echo "$p"; done)
    fi
    # shellcheck disable=SC2046
    stop_pids "processes in $ns" $(ns_pids "$ns")
done

for ns in "${NAMESPACES[@]}"; do
    [ -e "/run/netns/$ns" ] && { log "removing network namespace $ns"; ip netns del "$ns"; }
    ip link del "v$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
done
ip link show "$BRIDGE" >/dev/null 2>&1 && { log "removing bridge $BRIDGE"; ip link del "$BRIDGE"; }
rm -f "$BASE"/run/*.pid

if [ "$PURGE" = 1 ]; then
    log "removing $BASE"
    rm -rf "${BASE:?}"
fi
log "stopped"
